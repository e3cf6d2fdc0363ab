"""Log text as people paste it: normalised lines, and the traceback frames in it.

`normalise_log(text)` removes what wraps an error in real logs — HTML tags and entities, ANSI
colours, per-line prefixes (timestamps, `[rank0]:`, `ERROR 10-11 12:27:29 engine.py:157]`, vLLM
worker tags, docker-compose `service  |` columns, CI timestamps, glog headers, `> ` quotes) — so
that patterns can match the message itself.

`traceback_frames(text)` lists the frames of every traceback in the log, outermost first, in the
three layouts Python tracebacks are printed in:

* the standard one: `File "path", line N, in func` followed by the source line;
* IPython/Jupyter: `File /path.py:1539, in Trainer.train(self, …)` (IPython ≥ 8) or
  `/path.py in cross_entropy(input, …)` and `<ipython-input-8-…> in <module>()` (older), each
  followed by context lines where `---->`/`->` marks the line that ran;
* Rich (`rich.traceback`, used by accelerate/TRL CLIs): `│ /path.py:123 in train │` followed by
  `│ ❱ 123 │   code │`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

__all__ = ["Frame", "normalise_log", "traceback_frames"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAG = re.compile(
    r"<(?!(?:module|lambda|listcomp|dictcomp|setcomp|genexpr|string|stdin|frozen |ipython-input)\b)"
    r"[A-Za-z/!][^<>\n]{0,400}>"
)
"""HTML tags, but not Python's `<module>`, `<lambda>`, `<ipython-input-…>` pseudo-file and function names."""
_LEVEL = r"(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)"
# Per-line prefixes; applied repeatedly at the start of each line.
_LINE_PREFIX = re.compile(
    r"""^[ \t]*(?:
        >+                                                        # markdown quote
      | \[(?:rank|default|local_rank|worker)?\d+\]:?              # [rank0]: [default0]: [0]:
      | \d{1,4}:(?=[ \t])                                         # srun -l '0: '
      | [\w.-]{1,40}[ \t]+\|(?=[ \t])                             # docker compose 'vllm-1  | '
      | \|(?=[ \t])                                               # markdown table / CI column '  | '
      | \([\w.-]+(?:[ \t]+\w+=\w+)+\)(?=[ \t])                 # (VllmWorker rank=3 pid=1090) (EngineCore pid=316)
      | \([\w.-]+\)(?=[ \t]+(?:"""
    + _LEVEL
    + r"""|\[)\b)
      | """
    + _LEVEL
    + r"""[ \t]+\d{1,2}-\d{1,2}[ \t]+\d{1,2}:\d{2}:\d{2}(?:\.\d+)?[ \t]+\[?[\w./-]+:\d+\]  # vLLM
      | \[?\d{4}-\d{2}-\d{2}[T \t]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?
        (?:[ \t]*[-|][ \t]*[\w.]+(?=[ \t]*[-|][ \t]*\[?"""
    + _LEVEL
    + r"""\b))?(?:[ \t]*[-|:]?[ \t]*\[?"""
    + _LEVEL
    + r"""\]?)?(?:[ \t]*\|[ \t]*(?:stderr|stdout)[ \t]*\|)?[ \t]*[-|:]?  # ISO time [- logger] [LEVEL] [| stderr |]
      | [IWEF]\d{4}[ \t]+\d{2}:\d{2}:\d{2}\.\d+[ \t]+\d+[ \t]+[\w./-]+:\d+\]   # glog
      | \[\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]                       # [12:00:01]
    )""",
    re.X,
)


def _strip_prefixes(line: str) -> str:
    for _ in range(6):
        m = _LINE_PREFIX.match(line)
        if not m or m.end() == 0:
            break
        line = line[m.end() :]
    return line.strip()


def normalise_log(text: str, joiner: str = "\n") -> str:
    """`text` without markup, colours and per-line log prefixes, lines joined by `joiner`."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _ANSI.sub("", text)
    text = _TAG.sub("", text)
    text = html.unescape(text)
    return joiner.join(_strip_prefixes(line) for line in text.split("\n"))


@dataclass(frozen=True)
class Frame:
    """One traceback frame."""

    path: str
    """File path as printed ('<ipython-input-8-…>' and 'Cell In[3]' included)."""
    func: str
    """Function name, without the class ('Trainer.train' → 'train')."""
    code: str
    """The source line that ran, '' when the log does not show it."""
    qualname: str = ""
    """The name as printed ('Trainer.train'), when it differs from `func`."""

    def describe(self) -> str:
        where = self.path.rsplit("/", 1)[-1]
        return f"{self.qualname or self.func} ({where})" + (f": {self.code}" if self.code else "")


_STD = re.compile(r'File "([^"\n]*)", line \d+, in ([<>\w.]+)')
_IPY_NEW = re.compile(r"^(?:File )?(~?/[^\s:]+\.py|[A-Za-z]:\\[^:]+\.py):\d+,? in ([\w.<>]+)\(")
_IPY_CELL = re.compile(r"^(Cell In ?\[\d+\]|<ipython-input-[\w-]+>)(?:, line \d+)?(?: in ([\w.<>]+)\(\))?")
_IPY_OLD = re.compile(r"^(/\S+\.py|[A-Za-z]:\\\S+\.py) in ([\w.<>]+)\(")
_RICH = re.compile(r"^[│|]\s*(\S+\.py):\d+ in ([\w.<>]+)\s*[│|]?$")
_ARROW = re.compile(r"^(?:-+>|❱|[│|]\s*❱)\s*\d+\s*[│|]?\s?(.*?)\s*[│|]?$")
_HEADERS = (_STD, _IPY_NEW, _IPY_CELL, _IPY_OLD, _RICH)


def _frame(path: str, name: str, code: str) -> Frame:
    func = name.rsplit(".", 1)[-1] if "." in name and not name.startswith("<") else name
    return Frame(path=path, func=func, code=code.strip(), qualname=name if func != name else "")


def traceback_frames(text: str) -> list[Frame]:
    """Every traceback frame in `text` (any of the layouts above), in the order printed."""
    lines = normalise_log(text).split("\n")
    frames: list[Frame] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        std = _STD.search(line)
        if std:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            code = "" if (not nxt or _STD.search(nxt) or nxt.startswith(("Traceback", "^"))) else nxt
            frames.append(_frame(std.group(1), std.group(2), code))
            i += 1
            continue
        header = None
        for pattern in _HEADERS[1:]:
            header = pattern.match(line)
            if header:
                break
        if not header:
            i += 1
            continue
        path, name = header.group(1), header.group(2) or "<module>"
        code = ""
        j = i + 1
        while (
            j < len(lines)
            and j <= i + 40
            and not any(p.match(lines[j]) for p in _HEADERS[1:])
            and not _STD.search(lines[j])
        ):
            arrow = _ARROW.match(lines[j])
            if arrow and not code:
                code = arrow.group(1)
            j += 1
        frames.append(_frame(path, name, code))
        i = j
    return frames
