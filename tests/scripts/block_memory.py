"""A model whose peak memory is one block's activations: a 32x-wide middle block among thin ones.

With ``--deep`` the middle block is a deep one instead: four 512-wide layers after a widening one,
each keeping its activations for backward, over a batch of 4096. Those activations outweigh the
gradients and everything else, so the peak (as backward begins) is mostly that block's forward.
"""

import argparse

import torch
from torch import nn


class Thin(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Wide(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up, self.down = nn.Linear(width, 32 * width), nn.Linear(32 * width, width)

    def forward(self, x):
        hidden = torch.relu(self.up(x))  # the activations that hold the peak
        return self.down(hidden)


class Deep(nn.Module):
    def __init__(self, width, wide=512, depth=4):
        super().__init__()
        self.up = nn.Linear(width, wide)
        self.mid = nn.ModuleList(nn.Linear(wide, wide, bias=False) for _ in range(depth))
        self.down = nn.Linear(wide, width)

    def forward(self, x):
        h = torch.relu(self.up(x))
        for layer in self.mid:  # each layer's input and output are kept for backward
            h = torch.tanh(layer(h))
        return self.down(h)


parser = argparse.ArgumentParser()
parser.add_argument("--deep", action="store_true", help="a deep middle block over a larger batch")
args = parser.parse_args()
model = nn.Sequential(Thin(64), Deep(64) if args.deep else Wide(64), Thin(64))
opt = torch.optim.SGD(model.parameters(), lr=0.001 if args.deep else 0.01)
x = torch.randn(4096 if args.deep else 512, 64)
while True:
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
