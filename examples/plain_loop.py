"""A plain PyTorch training loop with a custom nn.Module (random data, CPU or CUDA).

memdoc diagnose examples/plain_loop.py -- --batch 256
"""

import argparse

import torch
from torch import nn

WIDTH = 256
HIDDEN = 1024
CLASSES = 10


class TinyMLP(nn.Module):
    """Two residual MLP blocks and a classifier head."""

    def __init__(self, width: int = WIDTH, hidden: int = HIDDEN, classes: int = CLASSES):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))
            for _ in range(2)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--foreach", action="store_true", help="AdamW(foreach=True), CUDA's default implementation")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = TinyMLP().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True if args.foreach else None)
    for step in range(args.steps):
        x = torch.randn(args.batch, WIDTH, device=device)
        y = torch.randint(0, CLASSES, (args.batch,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
