"""Typed access to a config document's values: each check fails with a one-line error naming the
file, the line and the key (`SourceDoc.error`). The one set of getters every reader uses (trainer-args,
Axolotl, LLaMA-Factory, DeepSpeed, accelerate).

Text is accepted where the trainers accept it: argparse-based trainers (`HfArgumentParser`,
transformers/hf_argparser.py `string_to_bool`) and pydantic (Axolotl's schema) both take "true"/"false",
"yes"/"no" and "1"/"0" for a boolean, and digits for an integer."""

from __future__ import annotations

from typing import Any

from memdoc.core.model.plan import MAX_PLAN_VALUE
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.errors import ConfigError, quoted


def fail(doc: SourceDoc, key: str, message: str) -> ConfigError:
    """A one-line error for `key` of `doc`; a dotted key (`zero_optimization.stage`) takes the line of its
    top-level key."""
    return ConfigError(f"{doc.where(key.split('.')[0])}: {key}: {message}")


_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def get_bool(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> bool | None:
    """A boolean (or 'true'/'false' text, as argparse-based trainers accept it); None when absent or null."""
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise fail(doc, where or key, f"must be true or false, got {quoted(value)}")


def get_int(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> int | None:
    """A positive integer (digits in text are accepted, as on a command line); None when absent or null."""
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise fail(doc, where or key, f"must be a positive integer, got {quoted(value)}")
    if value > MAX_PLAN_VALUE:
        raise fail(doc, where or key, f"{value} is beyond any real run ({MAX_PLAN_VALUE:,} at most)")
    return value


def get_float(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> float | None:
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise fail(doc, where or key, f"must be a number, got {quoted(value)}")
    try:
        return float(value)
    except ValueError:
        raise fail(doc, where or key, f"must be a number, got {quoted(value)}") from None


def get_str(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> str | None:
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail(doc, where or key, f"must be text, got {quoted(value)}")
    return value


def get_choice(doc: SourceDoc, key: str, choices, data: dict | None = None, *, where: str | None = None) -> str | None:
    """A text value among `choices` (compared case-insensitively, returned lower-case)."""
    value = get_str(doc, key, data, where=where)
    if value is None:
        return None
    if value.lower() not in {c.lower() for c in choices}:
        raise fail(doc, where or key, f"{quoted(value)} is not one of: {', '.join(choices)}")
    return value.lower()


def get_mapping(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> dict | None:
    value: Any = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(doc, where or key, f"must be a mapping, got {quoted(value)}")
    return value


def is_set(value: Any) -> bool:
    """Does a key's value turn its feature on (true, a non-empty list or text, a number above 1)?"""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, (int, float)):
        return value > 1
    return bool(value)


def skip_set_keys(reading: ConfigReading, doc: SourceDoc, reasons: dict[str, str]) -> None:
    """Record every key of `reasons` that the document turns on as not billed, with its reason."""
    for key, reason in reasons.items():
        if is_set(doc.data.get(key)):
            reading.skip(doc, key, reason)


def read_beta(reading: ConfigReading, doc: SourceDoc, key: str, beta: float | None) -> None:
    """Set `beta` from `key` (a negative one is an error); nothing when absent."""
    if beta is None:
        return
    if beta < 0:
        raise fail(doc, key, f"must be 0 or more, got {beta!r}")
    reading.set(doc, key, "beta", beta)
