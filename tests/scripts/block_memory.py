"""A model whose peak memory is one block's activations: a 32x-wide middle block among thin ones."""

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


model = nn.Sequential(Thin(64), Wide(64), Thin(64))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 64)
while True:
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
