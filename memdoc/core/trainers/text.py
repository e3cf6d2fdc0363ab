"""The text of emitted files: YAML and JSON through their serializers, comments on lines of their own, launch
commands shell-quoted, and the fill-in values a trainer can take.

PyYAML (`yaml/emitter.py` `Emitter.analyze_scalar`, 6.0) folds a plain scalar with spaces at `width`; a comment
appended to the key's first line then lands inside the value. Here nothing is ever appended to a line the dumper
wrote: every comment is a line of its own before its key, values are never folded (`width=inf`), and a string the
reader would refuse or read back differently (control characters, NEL, the line and paragraph separators) is written
double-quoted with escapes. PyYAML's reader refuses any file with a non-printable character, comments included
(`yaml/reader.py` `Reader.check_printable`), and ends a comment at any of its line breaks
(`yaml/scanner.py` `Scanner.scan_to_next_token`): comment text is escaped the same way.
"""

from __future__ import annotations

import json
import shlex
import unicodedata

import yaml

from memdoc.errors import PlanError

_BREAKS_OR_CONTROLS = {"Cc", "Cs", "Zl", "Zp"}
"""Unicode categories no config value or comment may carry raw: controls (C0, DEL, C1, NEL), surrogates (bytes of
a non-UTF-8 argument, `os.fsdecode`'s surrogateescape), the line and the paragraph separator."""
_NONCHARACTERS = {"\ufffe", "\uffff"}
"""Code points PyYAML's reader refuses although Python calls them unassigned, not control."""


def bad_char(text: str) -> str | None:
    """The first character of `text` that a YAML file cannot hold raw on one line, or None."""
    return next((ch for ch in text if unicodedata.category(ch) in _BREAKS_OR_CONTROLS or ch in _NONCHARACTERS), None)


def char_name(ch: str) -> str:
    """`a newline (U+000A)`: how an error names a character the user cannot see."""
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\0": "a NUL"}
    if ch in names:
        name = names[ch]
    elif unicodedata.category(ch) == "Cs":
        name = "a byte that is not UTF-8"
    else:
        name = f"a control character ({unicodedata.name(ch, 'unnamed').lower()})"
    return f"{name} (U+{ord(ch):04X})"


def check_fill_in(flag: str, value: str | None, *, if_left_out: str = "a placeholder to fill in later") -> None:
    """Refuse a value of `flag` (`--dataset`, `--output-dir`, `-o`) that a trainer cannot take from its config or
    its command line: empty or blank (leaving the flag out gives `if_left_out`), or holding a line break, a control
    character or bytes that are not UTF-8 (PlanError, one line, the value not echoed)."""
    if value is None:
        return
    if not value.strip():
        raise PlanError(f"{flag} is empty", hint=f"give a value, or leave {flag} out for {if_left_out}")
    ch = bad_char(value)
    if ch is not None:
        raise PlanError(
            f"{flag} contains {char_name(ch)} at character {value.index(ch) + 1}: a config or a command line cannot "
            "carry it to the trainer",
            hint=f"give {flag} without control characters",
        )


def comment(text: str, prefix: str = "# ") -> str:
    """One YAML comment line: `text` after `prefix`, with anything that would end the comment or make the reader
    refuse the file written as a `\\uXXXX` escape (never a second line)."""
    return prefix + "".join(f"\\u{ord(ch):04X}" if bad_char(ch) else ch for ch in text)


def shell_join(argv: list[str]) -> str:
    """A command line a POSIX shell reads back as `argv` (`shlex.join`); `shlex.split` gives `argv` again."""
    return shlex.join(argv)


def _represent_str(dumper, data):
    style = '"' if data == "" or bad_char(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _represent_str)


def dump_yaml(data: dict) -> str:
    """YAML that round-trips through `yaml.safe_load`: floats keep a dot and an exponent sign (`1.0e-04`), key
    order kept, no value folded over lines, odd characters escaped in double quotes."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=float("inf"), allow_unicode=True
    )


def yaml_document(head: list[str], data: dict, key_comments: dict[str, list[str]] | None = None) -> str:
    """A YAML file: `head` as comment lines, then each top-level key of `data` with its comments on the lines
    before it. Dumping key by key gives the text of the whole mapping (block style, one top-level key each)."""
    lines = [comment(line) for line in head]
    for key, value in data.items():
        lines += [comment(line) for line in (key_comments or {}).get(key, [])]
        lines.append(dump_yaml({key: value}).rstrip("\n"))
    return "\n".join(lines) + "\n"


def dump_json(data: dict) -> str:
    """JSON text (`json.dumps`, ASCII-escaped, so that any value round-trips)."""
    return json.dumps(data, indent=2) + "\n"


__all__ = ["bad_char", "check_fill_in", "comment", "dump_json", "dump_yaml", "shell_join", "yaml_document"]
