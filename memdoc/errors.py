"""One error hierarchy for everything the user can get wrong.

Every `MemdocError` is shown as a one-line `Error: …` on stderr and exits with `exit_code`
(2 for bad input). Anything else is a bug in memdoc and keeps its traceback only under
`MEMDOC_DEBUG=1`.
"""


class MemdocError(Exception):
    """An error caused by the user's input or environment, shown without a traceback."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class UnknownModelError(MemdocError):
    """MODEL is not a local path, not in the HF cache, not in the catalog, and the Hub is unreachable."""


class ConfigError(MemdocError):
    """A config.json or recipe file exists but cannot be read or lacks a required key."""


class PlanError(MemdocError):
    """A training plan that cannot run (batch 0, LoRA rank ≥ hidden, QLoRA with full method, …)."""


class UnknownGpuError(MemdocError):
    """`--gpu` names no GPU in the table and is not a memory size."""


class NoGpuDetectedError(MemdocError):
    """No `--gpu` given and no local NVIDIA GPU found."""


class ScriptError(MemdocError):
    """The user's training script cannot be read or compiled."""


class OutputExistsError(MemdocError):
    """A file memdoc would write already exists and `--force` was not given."""


class OutputError(MemdocError):
    """A file memdoc would write cannot be written (a parent is a file, no permission, read-only filesystem)."""


class UnknownSymptomError(MemdocError):
    """`--symptom` names no entry of the symptom knowledge base."""


class KnowledgeBaseError(MemdocError):
    """A bundled data file (symptoms.yaml) is malformed; the message names the entry."""


class DatasetError(MemdocError):
    """`--dataset` cannot be read, has no text field, or its tokenizer cannot be loaded."""


def quoted(value, limit: int = 40) -> str:
    """A user's value as an error message shows it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(value: str, choices, *, cutoff: float = 0.6) -> str:
    """ " (did you mean X?)" with the closest of `choices` to `value`, or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]}?)" if close else ""


ECHO_LIMIT = 200
"""The most characters of one input an error line echoes (issue 27: a 10,000-character value stays one line)."""


def clip_inputs(line: str, limit: int = ECHO_LIMIT) -> str:
    """`line` with every run of over `limit` non-space characters (an echoed input: a path, a number of
    thousands of digits) cut to its first `limit - 1` characters and '…'."""
    import re

    return re.sub(r"\S{" + str(limit + 1) + ",}", lambda m: m.group(0)[: limit - 1] + "…", line)
