"""A small training script for the diff tests (never run)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUM = 4


def main():
    device = torch.device("cpu")
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(
        data,
        batch_size=8,
        shuffle=True,
        num_workers=0,  # loads in the training process
    )
    val = DataLoader(data, 64)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad()
    print(len(val))


if __name__ == "__main__":
    main()
