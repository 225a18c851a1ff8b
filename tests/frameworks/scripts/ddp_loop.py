"""DistributedDataParallel on CPU (gloo); a single process group of one when run alone."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
dist.init_process_group("gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)))
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
data = TensorDataset(torch.randn(100_000, 32), torch.randn(100_000, 1))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for x, y in loader:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
