"""LoRA with peft on a tiny Qwen2.5 built from the catalog config (random weights), plain loop.

memdoc diagnose examples/lora_peft.py
"""

import torch
from _tiny_hf import random_batch, tiny_model
from peft import LoraConfig, get_peft_model

RANK = 8
TARGETS = ["q_proj", "v_proj"]
BATCH, SEQ = 4, 64


def build():
    model = tiny_model()
    return get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0))


def main() -> None:
    model = build()
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    for step in range(4):
        batch = random_batch(BATCH, SEQ, seed=step)
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
