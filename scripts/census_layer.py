"""What one decoder layer saves for backward, counted by autograd under the INSTALLED transformers: the census of
tests/fidelity/test_activations_census.py, printed, so that a fixture can record an older release's figures.

    .venv/bin/python scripts/census_layer.py tiiuae--falcon-7b --method lora --targets query_key_value
    # an older release, unpacked from its wheel into DIR (pure Python; torch stays the locked one):
    PYTHONPATH=DIR .venv/bin/python scripts/census_layer.py tiiuae--falcon-7b

Prints the transformers version, the bytes one layer saves (3 layers minus 2, bf16, batch 1) and, per distinct
(bytes, shape, dtype) storage, how many more the 3-layer model saved.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

CATALOG = Path(__file__).resolve().parents[1] / "memdoc" / "data" / "catalog"


def saved(config: dict, layers: int, *, seq: int, targets: list[str] | None, attention: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    hf_config = AutoConfig.for_model(**dict(config, num_hidden_layers=layers))
    hf_config._attn_implementation = attention
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(hf_config).to(torch.bfloat16)
    if targets:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, target_modules=targets, lora_dropout=0.05))
    model.train()
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, seq))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, tuple] = {}
    kept: list = []

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), (storage.nbytes(), tuple(tensor.shape), str(tensor.dtype)))
        kept.append(tensor)
        return len(kept) - 1

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids, labels=ids)
    kept.clear()
    return seen


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a catalog file name without .json (tiiuae--falcon-7b)")
    parser.add_argument("--method", choices=("full", "lora"), default="full")
    parser.add_argument("--targets", nargs="*", default=None, help="LoRA target modules")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--attention", default="sdpa")
    args = parser.parse_args()
    config = json.loads((CATALOG / f"{args.model}.json").read_text())
    targets = args.targets if args.method == "lora" else None
    two, three = (saved(config, n, seq=args.seq, targets=targets, attention=args.attention) for n in (2, 3))
    layer = sum(v[0] for v in three.values()) - sum(v[0] for v in two.values())
    print(f"transformers {transformers.__version__}: {layer}")
    fewer, more = Counter(two.values()), Counter(three.values())
    for key in sorted(set(more) | set(fewer)):
        if more[key] != fewer[key]:
            print(f"  {key}: {more[key] - fewer[key]:+d}")


if __name__ == "__main__":
    main()
