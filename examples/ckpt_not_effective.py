"""Gradient checkpointing switched on, but the model is left in eval mode (a quick evaluation before
training, and model.train() forgotten): HF only checkpoints layers in training mode, so nothing is
checkpointed and the activations stay.

    memdoc diagnose examples/ckpt_not_effective.py
"""

import torch
from _tiny_hf import random_batch, tiny_model

BATCH, SEQ = 4, 64


def main() -> None:
    model = tiny_model()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.eval()
    with torch.no_grad():  # "sanity check" before training ...
        print("eval loss", model(**random_batch(1, SEQ)).loss.item())
    # ... and model.train() is never called
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(4):
        loss = model(**random_batch(BATCH, SEQ, seed=step)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
