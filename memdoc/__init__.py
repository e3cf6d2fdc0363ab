"""memdoc: a VRAM doctor for LLM training — bill, diagnose, prescribe, emit."""

__version__ = "0.1.0"
