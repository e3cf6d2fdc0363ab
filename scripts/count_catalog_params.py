#!/usr/bin/env python
"""Count exact parameters for every bundled catalog config.

For each ``memdoc/data/catalog/<org>--<name>.json`` this copies the file into a
temporary directory as ``config.json``, loads it with
``AutoConfig.from_pretrained`` (no trust_remote_code), builds the model with
``AutoModelForCausalLM.from_config`` (``AutoModelForMaskedLM`` for BERT,
``AutoModelForImageTextToText`` for a config with a ``vision_config``) under
``torch.device("meta")`` and prints the file, model_type and
``sum(p.numel() for p in model.parameters())`` (tied weights counted once).

Usage: python scripts/count_catalog_params.py [--tsv] [FILE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

CATALOG = Path(__file__).resolve().parent.parent / "memdoc" / "data" / "catalog"
MASKED_LM_TYPES = {"bert"}


def count_file(path: Path) -> tuple[str, int]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForMaskedLM

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, os.path.join(tmp, "config.json"))
        cfg = AutoConfig.from_pretrained(tmp)
    cls = AutoModelForMaskedLM if cfg.model_type in MASKED_LM_TYPES else AutoModelForCausalLM
    if getattr(cfg, "vision_config", None) is not None:
        cls = AutoModelForImageTextToText
    with torch.device("meta"):
        model = cls.from_config(cfg)
    n = sum(p.numel() for p in model.parameters())
    del model
    return cfg.model_type, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="catalog files (default: all)")
    ap.add_argument("--tsv", action="store_true", help="tab-separated output")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()

    files = [Path(f) for f in args.files] or sorted(CATALOG.glob("*.json"))
    files = [f for f in files if f.name != "aliases.json"]
    failed = 0
    for f in files:
        try:
            model_type, n = count_file(f)
        except Exception as exc:  # report and continue
            failed += 1
            print(f"{f.name}\tERROR\t{type(exc).__name__}: {exc}", flush=True)
            continue
        if args.tsv:
            print(f"{f.name}\t{model_type}\t{n}", flush=True)
        else:
            print(f"{f.name:<60} {model_type:<12} {n:>18,}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
