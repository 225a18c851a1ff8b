"""A MONAI 3D UNet trained on random crops whose side is the script's own ``--patch-size``.

Used by the sweep's input-size axis test: ``advisor sweep --sizes 16,24,32`` sets
``--patch-size`` and the crop (MONAI's ``RandSpatialCropd`` roi) follows it, so memory and
throughput change with the patch while the batch stays.
"""

import argparse
import itertools

import torch
from monai.data import DataLoader, Dataset
from monai.losses import DiceLoss
from monai.networks.nets import UNet
from monai.transforms import RandSpatialCropd

parser = argparse.ArgumentParser()
parser.add_argument("--patch-size", type=int, default=16, help="side of the random crops the UNet sees")
parser.add_argument("--batch-size", type=int, default=2)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()

torch.manual_seed(0)
side = 32  # the stored volumes; every patch size swept fits inside
volumes = [
    {"image": torch.rand(1, side, side, side), "label": (torch.rand(1, side, side, side) > 0.5).float()}
    for _ in range(8)
]
crop = RandSpatialCropd(keys=("image", "label"), roi_size=(args.patch_size,) * 3, random_size=False)
loader = DataLoader(Dataset(volumes, transform=crop), batch_size=args.batch_size, shuffle=False)
model = UNet(spatial_dims=3, in_channels=1, out_channels=1, channels=(4, 8), strides=(2,), num_res_units=0)
loss_fn = DiceLoss(sigmoid=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = (b for _ in range(args.steps) for b in loader)  # epochs until the steps are done
for batch in itertools.islice(batches, args.steps):
    opt.zero_grad()
    loss_fn(model(batch["image"]), batch["label"]).backward()
    opt.step()
