"""Batch-size and volume-size scaling study for a MONAI 3D UNet: memory and samples/s per config.

What it shows: the classic "batch and volume scaling" exercise. Train a 3D
``monai.networks.nets.UNet`` for a few steps at each (batch size, volume side) on synthetic
volumes from ``monai.data.create_test_image_3d`` and tabulate samples/s and peak memory. Activation memory
grows linearly with the batch and with the cube of the side, so the table shows where a
configuration stops fitting and where throughput stops improving.

Each configuration runs in a fresh process (``--mode train``), so its peak memory is its own and
an out-of-memory error ends only its row. Peak memory: ``torch.cuda.max_memory_allocated`` on a
GPU; on CPU the growth of the process's peak resident set (``ru_maxrss``) over its size just
before training (activations, gradients, optimizer state and allocator slack).

Modes:
- ``--mode sweep`` (default): the study; small grids on CPU, bigger on a GPU (override with
  ``--batch-sizes`` and ``--sizes``). Prints a table.
- ``--mode train``: one configuration (``--batch-size``, ``--size``) as an ordinary training
  script with a DataLoader, for ``advisor diagnose examples/monai_scaling.py --mode train``.
  Volumes are pre-generated in memory and not augmented, so the step is the UNet's
  arithmetic (expected diagnosis: compute).

Fix (for speed and memory): bf16 autocast around the forward pass (``--bf16``; the default in
examples/fixed/monai_scaling.py). On a GPU it uses tensor cores and roughly halves activation
memory, so bigger batches and volumes fit; on a CPU the gain depends on bf16 support.

Runs on CPU in about ten seconds in either mode (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
import torch
from monai.data import create_test_image_3d
from monai.losses import DiceLoss
from monai.networks.nets import UNet
from torch.utils.data import DataLoader, TensorDataset

CPU_GRID = {"batch_sizes": (1, 2, 4), "sizes": (32, 48)}
GPU_GRID = {"batch_sizes": (1, 2, 4, 8), "sizes": (64, 96, 128)}


def make_volumes(n: int, size: int, seed: int) -> TensorDataset:
    """n synthetic (image, label) volumes of side ``size``, with a channel axis, in memory."""
    rng = np.random.RandomState(seed)
    images, labels = [], []
    for _ in range(n):
        image, label = create_test_image_3d(
            size, size, size, num_objs=6, rad_max=max(size // 5, 6), noise_max=0.2,
            num_seg_classes=1, channel_dim=0, random_state=rng,
        )
        images.append(image.astype(np.float32))
        labels.append(label.astype(np.float32))
    return TensorDataset(torch.from_numpy(np.stack(images)), torch.from_numpy(np.stack(labels)))


def make_model() -> torch.nn.Module:
    return UNet(
        spatial_dims=3, in_channels=1, out_channels=2, channels=(16, 32, 64, 128),
        strides=(2, 2, 2), num_res_units=1,
    )


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train(model, loader, device, steps, autocast) -> tuple[int, float, object]:
    """Train for ``steps`` optimizer steps; return (steps, samples/s after warm-up, last loss)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = DiceLoss(to_onehot_y=True, softmax=True)
    warmup = min(3, steps // 4)
    step, samples, t0, loss = 0, 0, time.perf_counter(), None
    while step < steps:
        for image, label in loader:
            image, label = image.to(device), label.to(device)
            with autocast():
                out = model(image)
            loss = loss_fn(out.float(), label)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += image.shape[0]
            if step >= steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return step, samples / max(time.perf_counter() - t0, 1e-9), loss


def sweep(args, device) -> None:
    """Run each configuration in a fresh process (clean peak memory, an OOM ends only that row)."""
    grid = GPU_GRID if device.type == "cuda" else CPU_GRID
    batch_sizes = args.batch_sizes or grid["batch_sizes"]
    sizes = args.sizes or grid["sizes"]
    print(f"device {device}, {args.steps_per_config} steps per configuration")
    print(f"{'batch':>5} {'volume':>8} {'samples/s':>10} {'Mvoxels/s':>10} {'peak memory':>12}")
    for size in sizes:
        for bs in batch_sizes:
            cmd = [
                sys.executable, os.path.abspath(__file__), "--mode", "train",
                "--batch-size", str(bs), "--size", str(size), "--steps", str(args.steps_per_config),
                "--device", str(device), "--seed", str(args.seed), *(["--bf16"] if args.bf16 else []),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            done = re.search(r"^done: \d+ steps, ([0-9.]+) samples/s", proc.stdout, re.M)
            mem = re.search(r"^peak memory: (\d+) bytes", proc.stdout, re.M)
            if proc.returncode != 0 or not done or not mem:
                why = "OOM" if "out of memory" in proc.stderr.lower() else "failed"
                print(f"{bs:>5} {size:>5}^3 {why:>10}")
                continue
            rate = float(done.group(1))
            print(f"{bs:>5} {size:>5}^3 {rate:>10.2f} {rate * size**3 / 1e6:>10.2f}"
                  f" {int(mem.group(1)) / 2**20:>8.0f} MiB")
    print("done: sweep")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["sweep", "train"], default="sweep")
    p.add_argument("--batch-sizes", type=lambda s: tuple(int(v) for v in s.split(",")),
                   help="sweep: comma-separated batch sizes")
    p.add_argument("--sizes", type=lambda s: tuple(int(v) for v in s.split(",")),
                   help="sweep: comma-separated volume sides")
    p.add_argument("--steps-per-config", type=int, default=6, help="sweep: steps per config")
    p.add_argument("--steps", type=int, default=50, help="train: optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=2, help="train: batch size")
    p.add_argument("--size", type=int, default=32, help="train: volume side")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast around the forward pass")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def main(argv=None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", module="monai")
    torch.manual_seed(args.seed)
    device = pick_device(args.device)

    def autocast():
        if args.bf16:
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    if args.mode == "sweep":
        sweep(args, device)
        return
    loader = DataLoader(
        make_volumes(16, args.size, args.seed), batch_size=args.batch_size, shuffle=True,
        drop_last=True,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model().to(device)
    base = rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step, rate, loss = train(model, loader, device, args.steps, autocast)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:  # growth of the peak RSS over the resident size before training (fresh process)
        peak = max(peak_rss_bytes() - base, 0)
    print(f"final dice loss {loss.item():.4f}")
    print(f"peak memory: {peak} bytes")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
