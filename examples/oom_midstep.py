"""A training step that dies of an out-of-memory error in the middle of the second step's forward.

There is no GPU in CI, so the OOM is raised by hand, with the text CUDA prints — exactly the
exception type (torch.OutOfMemoryError) a real CUDA OOM raises.

    memdoc diagnose examples/oom_midstep.py
"""

import torch
from plain_loop import CLASSES, WIDTH, TinyMLP
from torch import nn

BATCH = 256


class Exploding(nn.Module):
    """Wraps the model; the second training forward 'runs out of memory' half-way."""

    def __init__(self):
        super().__init__()
        self.inner = TinyMLP()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.inner.blocks[0](x) + x
        if self.calls == 2:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which "
                "1.12 GiB is free. Including non-PyTorch memory, this process has 22.51 GiB memory in use. Of the "
                "allocated memory 20.10 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated."
            )
        h = h + self.inner.blocks[1](h)
        return self.inner.head(h)


def main() -> None:
    torch.manual_seed(0)
    model = Exploding()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        x = torch.randn(BATCH, WIDTH)
        y = torch.randint(0, CLASSES, (BATCH,))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} ok", flush=True)


if __name__ == "__main__":
    main()
