"""A healthy, compute-bound training loop: the control example (no false alarms, please).

What it shows (compute): a wide MLP (4 x 1024) on a reasonable batch (256) of data already in
memory. Loading a batch is a cheap gather, there are no per-step host reads or synchronizes, and
every matrix product is large enough to keep the CPU's vector units (or a GPU's tensor cores)
busy. An advisor should report ``compute`` as primary and raise no data-loading, sync or
small-kernel finding.

Fix (remaining advice, not a bug): lower precision. bf16 autocast roughly halves the MLP's time on a
CPU with AVX-512 bf16 and uses tensor cores on a GPU (see examples/fixed/compute_bound.py);
TF32 or ``torch.compile`` are the other levers.

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def make_data(n: int, features: int, classes: int, seed: int) -> TensorDataset:
    """A synthetic, learnable classification set held in memory."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features: int, width: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, classes),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--num-samples", type=int, default=8192)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (the fixed twin's default)")
    p.add_argument("--lr", type=float, default=1e-3)
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
    features, classes = 1024, 100
    data = make_data(args.num_samples, features, classes, args.seed)
    # In-memory tensors: fetch each batch as ONE gather (a BatchSampler hands __getitem__ a list
    # of indices) instead of indexing 256 samples and stacking them -- that per-sample collate
    # measured 6% of the step, enough for a data-loading finding on a "healthy" model.
    loader = DataLoader(
        data,
        sampler=BatchSampler(RandomSampler(data), batch_size=args.batch_size, drop_last=True),
        batch_size=None,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model(features, args.width, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    )

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with autocast:
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
