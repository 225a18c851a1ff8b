"""Hand-fixed twin of examples/tiny_model.py: batch 256 (lr scaled), foreach Adam.

The original's docstring follows.

A tiny model fed a tiny batch: the step is all per-operation overhead, no arithmetic.

Bottleneck (small_kernels): a 7-layer MLP of width 32 trains on batches of 4 samples. Each
forward/backward/optimizer step launches a few dozen operators that each do a handful of
multiply-adds; the time goes to Python, the dispatcher, autograd bookkeeping and (on a GPU)
kernel launches of a few microseconds each, with the device mostly idle.

Fix: give each operator more work -- a larger batch (here 256, with the learning rate scaled),
and the optimizer's fused/foreach path (see examples/fixed/tiny_model.py). On a GPU, CUDA graphs
or ``torch.compile(mode="reduce-overhead")`` attack the launch cost when the batch cannot grow.

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n: int, features: int, seed: int) -> TensorDataset:
    """A synthetic regression set held in memory."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = torch.sin(x @ torch.randn(features, 1, generator=g))
    return TensorDataset(x, y)


def make_model(features: int) -> nn.Module:
    hidden = [layer for _ in range(5) for layer in (nn.Linear(32, 32), nn.Tanh())]
    return nn.Sequential(nn.Linear(features, 32), nn.Tanh(), *hidden, nn.Linear(32, 1))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-samples", type=int, default=16384)
    p.add_argument("--lr", type=float, default=8e-3, help="scaled with the batch (sqrt rule)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    features = 16
    loader = DataLoader(
        make_data(args.num_samples, features, args.seed),
        batch_size=args.batch_size,  # fixed: 256 samples per step
        shuffle=True,
        drop_last=True,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model(features).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, foreach=True)  # fixed: one multi-tensor update
    loss_fn = nn.MSELoss()

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += x.shape[0]
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"final loss {loss.item():.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
