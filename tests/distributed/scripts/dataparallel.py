"""A tiny training loop wrapped in torch.nn.DataParallel (what DDP should replace)."""

import torch
from torch import nn

model = nn.DataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(40):
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
