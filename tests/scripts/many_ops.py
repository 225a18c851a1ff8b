"""A training loop whose every step is hundreds of tiny operators (a large trace per step)."""

import torch

OPS_PER_STEP = 100

w = torch.zeros(8, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for _ in range(100):
    x = w
    for _ in range(OPS_PER_STEP):
        x = x * 1.0001 + 0.0001
    x.sum().backward()
    opt.step()
    opt.zero_grad()
