"""A plain loop through accelerate's Accelerator (prepare + accelerator.backward)."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(100_000, 32), torch.randn(100_000, 1)), batch_size=16)
model, opt, loader = accelerator.prepare(model, opt, loader)
for _epoch in range(100):
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
