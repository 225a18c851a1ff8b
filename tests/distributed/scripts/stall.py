"""Ranks that do not stop together: rank 1 hangs after its second step (no collective needed).

Stands in for a rank stuck in a collective its peers never join; rank 0 trains on and is
stopped by advisor after the profiled steps.
"""

import os
import time

import torch

rank = int(os.environ.get("RANK", "0"))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 1000):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if rank == 1 and step == 2:
        time.sleep(600)
