"""LBFGS with a closure: several forward/backward passes inside each optimizer step, no DataLoader."""

import torch

x, y = torch.randn(64, 4), torch.randn(64, 1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=5)


def closure():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for _ in range(100_000):
    opt.step(closure)
