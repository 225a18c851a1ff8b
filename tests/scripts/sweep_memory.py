"""A training loop whose memory grows with the batch: 1 MiB of scratch per sample, held per step.

Used by the sweep tests: batch 8 holds ~8 MiB more than torch itself, batch 512 ~512 MiB more,
so a memory budget between the two stops the large cells only.
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=8, shuffle=False)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for x, y in loader:
        scratch = torch.ones(x.shape[0], 2**18)  # 1 MiB per sample, touched so it is resident
        loss = torch.nn.functional.mse_loss(model(x), y) + 0.0 * scratch.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
