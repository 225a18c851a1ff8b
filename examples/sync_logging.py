"""Per-step logging that forces the host to wait for the device on every step.

Bottleneck (sync, on a GPU): each step logs ``loss.item()``, the accuracy with ``.item()``, the
gradient norm through ``.cpu()``, and calls ``torch.cuda.synchronize()`` "to time the step".
Each of these blocks the Python thread until the GPU has finished all queued work, so the CPU
cannot run ahead and queue the next step's kernels: the GPU idles between steps.

On a CPU-only run there is no asynchronous device to wait for: ``.item()`` on a CPU tensor is a
cheap read and the synchronize is skipped, so this example is *mostly harmless on CPU* and the
expected diagnosis there is simply compute (only the small cost of the extra logging ops shows).

Fix: keep running sums on the device and read them every ``--log-every`` steps; drop the
per-step synchronize (see examples/fixed/sync_logging.py).

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
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, classes),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-samples", type=int, default=8192)
    p.add_argument("--log-every", type=int, default=1, help="steps between log lines")
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
    features, classes = 256, 10
    loader = DataLoader(
        make_data(args.num_samples, features, classes, args.seed),
        batch_size=args.batch_size, shuffle=True, drop_last=True,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model(features, classes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    history = []

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = loss_fn(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            # The bottleneck: three host reads and an explicit synchronize on every step.
            acc = (logits.argmax(dim=1) == y).float().mean().item()
            history.append((loss.item(), acc, float(grad_norm.cpu())))
            if device.type == "cuda":
                torch.cuda.synchronize()
            step += 1
            if step % args.log_every == 0 and step % 20 == 0:
                print(f"step {step}: loss {history[-1][0]:.4f} acc {acc:.3f}")
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += x.shape[0]
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
