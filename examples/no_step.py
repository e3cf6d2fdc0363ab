"""A script that never calls optimizer.step(): forward + backward to inspect gradient norms, then exits.

memdoc measures what ran and reports that no optimizer step happened.

    memdoc diagnose examples/no_step.py
"""

import torch
from plain_loop import CLASSES, WIDTH, TinyMLP
from torch import nn

BATCH = 128


def main() -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    x = torch.randn(BATCH, WIDTH)
    y = torch.randint(0, CLASSES, (BATCH,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters()))
    print(f"loss {loss.item():.4f} grad-norm {norm.item():.4f}")


if __name__ == "__main__":
    main()
