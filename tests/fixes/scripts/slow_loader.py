"""A data-loading-bound training loop: each sample takes ~4 ms to "load" (a sleep).

Workers win clearly even on 2 busy cores, because the loading time is waiting, not computing.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, idx):
        time.sleep(0.004)
        g = torch.Generator().manual_seed(idx)
        return torch.randn(16, generator=g), torch.tensor([float(idx % 2)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(SlowDataset(), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
    print(f"done {step} steps, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
