"""An epoch loop as the public examples write it: a training DataLoader, a test pass after each
epoch over a second DataLoader under no_grad, and a checkpoint every ``--save-every`` steps.

Arguments: --epochs (default 2), --save-every (default 8). 48 batches an epoch, so a capture
that stops mid-epoch runs on to its end (issue 29: the whole run)."""

import argparse
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--save-every", type=int, default=8)
args = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
x, y = torch.randn(480, 16), torch.randint(0, 4, (480,))
train_loader = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=8, shuffle=True)
test_loader = DataLoader(TensorDataset(x[384:], y[384:]), batch_size=8)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
folder = tempfile.mkdtemp()


def test():
    model.eval()
    with torch.no_grad():
        correct = sum((model(a).argmax(1) == b).sum().item() for a, b in test_loader)
    model.train()
    return correct


step = 0
for epoch in range(args.epochs):
    for a, b in train_loader:
        loss = nn.functional.cross_entropy(model(a), b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % args.save_every == 0:
            torch.save(model.state_dict(), os.path.join(folder, "last.pt"))
    print(f"epoch {epoch}: {test()} right")
