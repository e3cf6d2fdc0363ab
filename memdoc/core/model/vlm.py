"""Temporary: `memdoc/core/emit/vision.py` imports `VLMS` from here. The VLM records live in
`memdoc.core.model.vision.registry`; the lead repoints that import when `core/emit/` moves and deletes this module."""

from memdoc.core.model.vision.registry import VLMS

__all__ = ["VLMS"]
