"""Load the user's own training configs (`--config FILE`, repeatable): parse each YAML/JSON file, detect
its format, read it (`memdoc.core.trainers.detect`), follow the files it references (a trainer
YAML's `deepspeed:` path, relative to that YAML), and merge the readings in order: later files
override earlier ones, and a referenced file overrides the file that names it.

    reading = read_user_configs([Path("sft.yaml"), Path("fsdp.yaml")], stack)
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.detect import read_document
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.errors import ConfigError
from memdoc.resolve.inputs import read_text

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A training config is a few KiB; anything over 4 MiB is not one (and is not parsed)."""

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_source(path: Path | str) -> SourceDoc:
    """Parse one config file into a `SourceDoc` (top-level key -> line); a one-line ConfigError naming the
    file when it is missing, not a regular file, unreadable, over MAX_CONFIG_BYTES, malformed, or not a mapping."""
    path = Path(path)
    text = read_text(path, what="config", limit=MAX_CONFIG_BYTES, error=ConfigError)
    data, lines = _parse(path, text)
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of keys to values, got {type(data).__name__}")
    bad = next((k for k in data if not isinstance(k, str)), None)
    if bad is not None:
        raise ConfigError(f"config {path}: key {bad!r} is not a name")
    return SourceDoc(str(path), data, lines)


def _parse(path: Path, text: str) -> tuple[object, dict[str, int]]:
    """(the document, top-level key -> 1-based line). JSON is YAML too, but a JSON file's errors read
    better from the JSON parser."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config {path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        return data, _json_lines(text, data)
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"config {path}:{event.start_mark.line + 1}: YAML aliases are not allowed")
        node = yaml.compose(text, Loader=_LOADER)
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config {where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"config {path} is nested too deeply to be a training config") from None
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return data, lines


def _json_lines(text: str, data: object) -> dict[str, int]:
    """Top-level key -> line of a JSON object: the first line where `"key":` appears at the top level's indent."""
    if not isinstance(data, dict):
        return {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        for key in data:
            if key not in lines and stripped.startswith(json.dumps(key) + ":"):
                lines[key] = number
    return lines


def read_user_configs(paths: list[Path], stack: Stack) -> ConfigReading:
    """Read every file in order, following references; later readings override earlier ones."""
    reading = ConfigReading()
    for path in paths:
        reading = reading.merge(_read_with_references(Path(path), stack, chain=()))
    return reading


def _read_with_references(
    path: Path, stack: Stack, chain: tuple[Path, ...], named_by: str | None = None
) -> ConfigReading:
    """One file and, after it, the files it references (relative to it); a cycle or a missing referenced
    file is an error naming both files (`named_by`: the referencing 'file:line: key')."""
    resolved = path.resolve()
    if resolved in chain:
        raise ConfigError(f"{named_by}: {path} references it back (a cycle)")
    if named_by is not None and not path.exists():
        raise ConfigError(f"{named_by}: {path} does not exist")
    doc = load_source(path)
    reading = read_document(doc, stack)
    referenced, reading.referenced = list(reading.referenced), []
    for ref in referenced:
        here = _referencing_key(doc, ref)
        target = _existing(Path(ref), path)
        reading = reading.merge(_read_with_references(target, stack, chain + (resolved,), named_by=here))
    return reading


def _referencing_key(doc: SourceDoc, ref: str) -> str:
    """'file:line: key' of the top-level key of `doc` whose value (or nested value) names `ref`."""
    for key, value in doc.data.items():
        values = value.values() if isinstance(value, dict) else [value]
        if any(isinstance(v, str) and v and ref.endswith(v) for v in values):
            return f"{doc.where(key)}: {key}"
    return doc.path


def _existing(ref: Path, referencing: Path) -> Path:
    """`ref` (resolved relative to the referencing file); when no file is there, the path as written relative
    to the working directory, which is where the HF Trainer and accelerate open it (and where `memdoc emit -o
    DIR/sft.yaml` writes `deepspeed: DIR/ds_config.json`)."""
    if ref.exists() or referencing.parent == Path("."):
        return ref
    try:
        as_written = ref.relative_to(referencing.parent)
    except ValueError:
        return ref
    return as_written if as_written.exists() else ref
