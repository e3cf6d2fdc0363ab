"""Library chatter kept out of memdoc's report while memdoc itself drives transformers and peft.

transformers and peft warn about their own API changes (`FutureWarning: is_gradient_checkpointing
is deprecated…`) and log generation-config advice when memdoc builds a model from a config for a
dry run: none of it is about the user's plan, and it would land between the report's lines. torch's own
loggers are held to CRITICAL too: a fake-tensor op that fails logs its whole traceback at ERROR
(`torch/_subclasses/fake_tensor.py`) before the exception memdoc turns into one line.
Only memdoc's own calls are quieted — a diagnosed script's warnings are the user's and stay.
"""

from __future__ import annotations

import contextlib
import logging
import warnings


@contextlib.contextmanager
def quiet_libraries():
    """Ignore FutureWarning/DeprecationWarning and transformers' info/warning logs inside the block."""
    with warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.filterwarnings("ignore", category=category, module=r"(transformers|peft|accelerate)(\..*)?$")
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:  # pragma: no cover (transformers is a dependency of the dry run)
            yield
            return
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        torch_logger = logging.getLogger("torch")
        torch_level = torch_logger.level
        torch_logger.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
            torch_logger.setLevel(torch_level)
