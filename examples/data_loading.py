"""Image classification whose input pipeline, not the model, sets the pace.

Bottleneck (data_loading): every sample is decoded and augmented in Python/numpy inside
``Dataset.__getitem__`` (random resized crop, flip, colour jitter, blur, noise: about 2 ms per
sample), and the DataLoader runs it in the training process (``num_workers=0``). The small CNN
waits for each batch; the step is mostly ``DataLoader.__next__``.

Fix: load in parallel worker processes -- ``DataLoader(num_workers=2, persistent_workers=True,
prefetch_factor=4)``, and on a small CPU leave the cores to the workers with
``torch.set_num_threads(cores - workers)`` (see examples/fixed/data_loading.py); add
``pin_memory=True`` on a GPU.
The deeper fix is to vectorise the augmentation (batch it on the device), which a loader setting
cannot do.

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIZE = 64  # side of the crops the model sees


class AugmentedImages(Dataset):
    """Synthetic 96x96 RGB images with labels, augmented on every access (the slow part)."""

    def __init__(self, n: int, seed: int):
        self.n = n
        self.seed = seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        rng = np.random.default_rng((self.seed, idx))
        # "Decode": a deterministic image per index, as if read from disk.
        label = int(idx % 10)
        img = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
        img[label * 8 : label * 8 + 16] //= 2  # a faint class-dependent band
        return torch.from_numpy(augment(img, rng)), label


def augment(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random resized crop, flip, colour jitter, 5x5 blur and noise, one sample at a time."""
    h, w, _ = img.shape
    scale = rng.uniform(0.6, 1.0)
    ch, cw = int(h * scale), int(w * scale)
    y0 = rng.integers(0, h - ch + 1)
    x0 = rng.integers(0, w - cw + 1)
    ys = (y0 + np.arange(SIZE) * ch / SIZE).astype(int)
    xs = (x0 + np.arange(SIZE) * cw / SIZE).astype(int)
    out = img[ys][:, xs].astype(np.float32) / 255.0
    if rng.random() < 0.5:
        out = out[:, ::-1]
    for c in range(3):  # per-channel brightness/contrast
        out[..., c] = np.clip(out[..., c] * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1), 0, 1)
    pad = np.pad(out, ((2, 2), (2, 2), (0, 0)), mode="reflect")
    acc = np.zeros_like(out)
    for dy in range(5):  # box blur as 25 shifted adds
        for dx in range(5):
            acc += pad[dy : dy + SIZE, dx : dx + SIZE]
    out = acc / 25.0 + rng.normal(0.0, 0.02, acc.shape).astype(np.float32)
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def make_model() -> nn.Module:
    """A deliberately cheap CNN, so that loading dominates the step."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-samples", type=int, default=2048, help="samples per epoch")
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
        AugmentedImages(args.num_samples, args.seed),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=0,  # <- the bottleneck: augmentation runs in the training process
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
