"""Batch-size and volume-size scaling study for a MONAI 3D UNet: memory and samples/s per config.

What it shows: the classic "batch and volume scaling" exercise. Train a 3D
``monai.networks.nets.UNet`` for a few steps at each (batch size, volume side) on synthetic
volumes from ``monai.data.create_test_image_3d`` and tabulate samples/s and peak memory. Activation memory
grows linearly with the batch and with the cube of the side, so the table shows where a
configuration stops fitting and where throughput stops improving.

Peak memory: ``torch.cuda.max_memory_allocated`` on a GPU; on CPU the growth of the process's
resident set (RSS) over the configuration, sampled after the forward and backward passes (a lower
bound on the true peak; the allocator may keep freed memory, so read CPU numbers as rough).

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
    """Resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def train(model, loader, device, steps, autocast, on_step=None) -> tuple[int, float, object]:
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
            if on_step:
                on_step()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if on_step:
                on_step()
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


def sweep(args, device, autocast) -> None:
    grid = GPU_GRID if device.type == "cuda" else CPU_GRID
    batch_sizes = args.batch_sizes or grid["batch_sizes"]
    sizes = args.sizes or grid["sizes"]
    print(f"device {device}, {args.steps_per_config} steps per configuration")
    print(f"{'batch':>5} {'volume':>8} {'samples/s':>10} {'voxels/s':>10} {'peak memory':>12}")
    for size in sizes:
        data = make_volumes(max(batch_sizes) * 2, size, args.seed)
        for bs in batch_sizes:
            torch.manual_seed(args.seed)
            model = make_model().to(device)
            loader = DataLoader(data, batch_size=bs, shuffle=True, drop_last=True)
            peak = [0]
            base = rss_bytes()

            def sample_rss(base=base, peak=peak):
                peak[0] = max(peak[0], rss_bytes() - base)

            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                _, rate, _ = train(
                    model, loader, device, args.steps_per_config, autocast,
                    on_step=None if device.type == "cuda" else sample_rss,
                )
            except torch.OutOfMemoryError:
                print(f"{bs:>5} {size:>5}^3 {'OOM':>10}")
                continue
            mem = torch.cuda.max_memory_allocated() if device.type == "cuda" else peak[0]
            print(f"{bs:>5} {size:>5}^3 {rate:>10.1f} {rate * size**3 / 1e6:>9.1f}M"
                  f" {mem / 2**20:>9.0f} MiB")
            del model, loader
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
        sweep(args, device, autocast)
        return
    loader = DataLoader(
        make_volumes(16, args.size, args.seed), batch_size=args.batch_size, shuffle=True,
        drop_last=True,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    step, rate, loss = train(make_model().to(device), loader, device, args.steps, autocast)
    print(f"final dice loss {loss.item():.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
