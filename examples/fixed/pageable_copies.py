"""Hand-fixed twin of examples/pageable_copies.py: pinned batches, non-blocking copies.

On a GPU the DataLoader's pin-memory thread pins each batch and the copy overlaps with the
host's work; on CPU the settings are no-ops (pinning is only enabled with a device), so the
twin runs at the original's speed there.

The original's docstring follows.

Large input batches copied to the GPU from pageable memory, blocking the host each time.

Bottleneck (host_to_device, on a GPU): each batch is 128 images of 3x128x128 float32 (25 MB),
and the model on top is light. The DataLoader returns ordinary (pageable) CPU tensors and the
loop calls ``.to(device)`` without ``non_blocking``: the driver first stages each batch through a
pinned bounce buffer, then the host waits for the copy to finish before it can queue the forward
pass. Copy time is paid in full, step after step, with the GPU idle.

On a CPU-only run there is no device and no copy at all (``.to("cpu")`` is a no-op): the example
is then an ordinary small-CNN training loop whose time goes to the convolutions (expected
diagnosis on CPU: compute, never host_to_device).

Fix: ``DataLoader(pin_memory=True)`` and ``.to(device, non_blocking=True)`` (see
examples/fixed/pageable_copies.py); ship uint8 and convert on the device to move 4x fewer bytes.

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class ImageShards(Dataset):
    """Pre-batched images already decoded in memory (float32), one contiguous shard per item.

    Returning a contiguous slice (a view, no copy) keeps host-side loading nearly free, so what
    remains between the data and the model is the host-to-device copy itself.
    """

    def __init__(self, n: int, batch_size: int, size: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.batch_size = batch_size
        self.x = torch.rand(n // batch_size * batch_size, 3, size, size, generator=g)
        self.y = torch.randint(0, 10, (len(self.x),), generator=g)

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def __getitem__(self, idx: int):
        sl = slice(idx * self.batch_size, (idx + 1) * self.batch_size)
        return self.x[sl], self.y[sl]


def make_model() -> nn.Module:
    """A light CNN: cheap on a GPU next to the 25 MB it receives each step."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 5, stride=4, padding=2),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--size", type=int, default=128, help="image side")
    p.add_argument("--num-samples", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.05)
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
    loader = DataLoader(
        ImageShards(args.num_samples, args.batch_size, args.size, args.seed),
        batch_size=None,  # items are already batches
        shuffle=True,
        num_workers=0,
        pin_memory=device.type == "cuda",  # fixed: page-locked batches
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            # fixed: asynchronous copies from pinned memory
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
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
