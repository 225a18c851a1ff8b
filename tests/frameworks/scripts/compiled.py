"""A torch.compile'd model in a plain loop over a DataLoader."""

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.compile(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(100_000, 32), torch.randn(100_000, 1)), batch_size=16)
for x, y in loader:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
