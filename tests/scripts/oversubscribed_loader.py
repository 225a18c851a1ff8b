"""A loop written for a GPU server, run on a small CPU machine: 4 loader workers and pinned memory.

``DataLoader(num_workers=4, pin_memory=True)`` with torch's default intra-op threads: on a
2-core machine that is more runnable threads than cores, and pinning does nothing without a GPU.
``--steps N`` optimizer steps (it loops over the data as often as needed).
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--workers", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(0)
data = TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=args.workers, pin_memory=True)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
while step < args.steps:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
