"""Inference only: a DataLoader and a model under no_grad, no optimizer anywhere."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

batches = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
data = TensorDataset(torch.randn(4096, 16))
loader = DataLoader(data, batch_size=4)
model = torch.nn.Linear(16, 4).eval()
done = 0
with torch.no_grad():
    while done < batches:
        for (x,) in loader:
            model(x)
            done += 1
            if done >= batches:
                break
print(f"inferred {done} batches")
