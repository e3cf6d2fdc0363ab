"""A script with a syntax error: memdoc refuses it in one line (exit 2) without running anything."""

import torch

def main(:
    print(torch.zeros(1))
