"""Hand-fixed twin of examples/grad_accumulation.py: one fused batch of 32 per optimizer step.

The original's docstring follows.

Gradient accumulation over tiny micro-batches: many small steps where one large one would do.

Bottleneck (small_kernels): to reach an effective batch of 32 the loop accumulates gradients
over 16 micro-batches of 2 samples. Every micro-batch pays the full per-batch cost -- DataLoader
fetch and collate, a forward and a backward of tiny matrix products, Python and dispatcher
overhead -- while the arithmetic per call is too small to keep the CPU's vector units (or a GPU)
busy. Memory is not the constraint here: a batch of 32 fits easily.

Fix (batch fusion): load the effective batch at once -- ``DataLoader(batch_size=micro_batch *
accum_steps)`` with one optimizer step per batch (see examples/fixed/grad_accumulation.py). The
gradient is the same average over the same samples (up to float rounding), computed in one pass.
Keep accumulation only when the fused batch would not fit in memory.

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n: int, features: int, classes: int, seed: int) -> TensorDataset:
    """A synthetic, learnable classification set held in memory."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, 256),
        nn.LayerNorm(256),
        nn.GELU(),
        nn.Linear(256, 256),
        nn.LayerNorm(256),
        nn.GELU(),
        nn.Linear(256, classes),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=32, help="fused batch size")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--num-samples", type=int, default=8192)
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
    features, classes = 128, 10
    loader = DataLoader(
        make_data(args.num_samples, features, classes, args.seed),
        batch_size=args.batch_size,  # fixed: the whole effective batch in one pass
        shuffle=True,
        drop_last=True,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    accum_steps = args.accum_steps
    model = make_model(features, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    warmup = min(5, args.steps // 4)
    step, micro, samples, t0 = 0, 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y) / accum_steps
            loss.backward()
            micro += 1
            if step >= warmup:
                samples += x.shape[0]
            if micro % accum_steps:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"final loss {loss.item() * accum_steps:.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
