"""A custom loop: no torch.optim, no DataLoader; steps marked with advisor.step()."""

import torch

import advisor

w = torch.randn(16, 1, requires_grad=True)
for _ in range(100_000):
    x = torch.randn(6, 16)
    loss = (x @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
    advisor.step()
