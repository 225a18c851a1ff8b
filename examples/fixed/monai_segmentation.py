"""Hand-fixed twin of examples/monai_segmentation.py: transforms run in loader workers.

The original's docstring follows.

3D segmentation with MONAI whose random spatial transforms starve the network.

Bottleneck (data_loading): a small ``monai.networks.nets.UNet`` trains on synthetic 40^3 volumes
(``monai.data.create_test_image_3d``), and every access runs random spatial transforms
(``RandAffined`` on the whole volume, ``RandSpatialCropd`` to 32^3, ``RandFlipd``,
``RandRotate90d``, intensity jitter) in the training process (``num_workers=0``). Resampling a
3D volume costs more than the UNet's step on it, so the step waits on ``DataLoader.__next__``.

Fix: run the transforms in worker processes -- ``num_workers=2, persistent_workers=True``, with
``pin_memory=True`` on a GPU and, on a small CPU, ``torch.set_num_threads(cores - workers)``
(see examples/fixed/monai_segmentation.py). ``worker_init_fn``
reseeds each worker's transforms, so workers do not repeat each other's augmentations. Caching the
deterministic part (``monai.data.CacheDataset``) helps when that part is expensive; here it is
not.

Runs on CPU in about ten seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import torch
from monai.data import Dataset, create_test_image_3d
from monai.losses import DiceLoss
from monai.networks.nets import UNet
from monai.transforms import (
    Compose,
    EnsureTyped,
    RandAdjustContrastd,
    RandAffined,
    RandFlipd,
    RandGaussianNoised,
    RandRotate90d,
    RandSpatialCropd,
    ScaleIntensityd,
)
from torch.utils.data import DataLoader, get_worker_info

KEYS = ["image", "label"]


def make_volumes(n: int, size: int, seed: int) -> list[dict]:
    """Synthetic (image, label) volumes with a channel axis, as a loader would read from disk."""
    rng = np.random.RandomState(seed)
    items = []
    for _ in range(n):
        image, label = create_test_image_3d(
            size, size, size, num_objs=6, rad_max=size // 5, noise_max=0.2,
            num_seg_classes=1, channel_dim=0, random_state=rng,
        )
        items.append({"image": image.astype(np.float32), "label": label.astype(np.float32)})
    return items


def make_transforms(roi: int) -> Compose:
    """Random spatial and intensity augmentation, recomputed on every access."""
    return Compose([
        ScaleIntensityd(keys="image"),
        RandAffined(
            keys=KEYS, prob=1.0, rotate_range=(0.3, 0.3, 0.3), scale_range=(0.1, 0.1, 0.1),
            mode=("bilinear", "nearest"), padding_mode="border",
        ),
        RandSpatialCropd(keys=KEYS, roi_size=(roi, roi, roi), random_size=False),
        RandFlipd(keys=KEYS, prob=0.5, spatial_axis=0),
        RandRotate90d(keys=KEYS, prob=0.5, spatial_axes=(0, 1)),
        RandAdjustContrastd(keys="image", prob=0.5),
        RandGaussianNoised(keys="image", prob=0.5, std=0.05),
        EnsureTyped(keys=KEYS, track_meta=False),
    ])


def seed_worker(worker_id: int) -> None:
    """Give each loader worker its own transform random state (workers start as copies)."""
    info = get_worker_info()
    info.dataset.transform.set_random_state(seed=info.seed % (2**32))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--volumes", type=int, default=32, help="synthetic volumes in the data set")
    p.add_argument("--size", type=int, default=40, help="side of the stored volumes")
    p.add_argument("--roi", type=int, default=32, help="side of the random crops")
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
    warnings.filterwarnings("ignore", module="monai")
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    transforms = make_transforms(args.roi)
    transforms.set_random_state(seed=args.seed)
    dataset = Dataset(make_volumes(args.volumes, args.size, args.seed), transform=transforms)
    workers = 2
    # fixed: leave the cores to the loader workers (intra-op threads = cores - workers, >= 1);
    # two OpenMP threads fighting two workers for two cores made every op wait.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=workers,  # fixed: transforms run in two worker processes
        persistent_workers=True,  # keep workers (and their random states) across epochs
        prefetch_factor=4,
        pin_memory=device.type == "cuda",
        worker_init_fn=seed_worker,
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = UNet(
        spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32), strides=(2, 2),
        num_res_units=1,
    ).to(device)
    loss_fn = DiceLoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for batch in loader:
            image, label = batch["image"].to(device), batch["label"].to(device)
            loss = loss_fn(model(image), label)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += image.shape[0]
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"final dice loss {loss.item():.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
