"""An MLP trainer configured nanoGPT-style: module globals overridden by ``--key=value`` arguments.

``gradient_accumulation_steps`` micro-batches of ``batch_size`` rows, sampled from a tensor (no
DataLoader), per optimizer step; the loss divided by the accumulation count. The model is tiny,
so each micro-batch pays per-op overhead: ``--batch_size=32 --gradient_accumulation_steps=1``
does the same work per optimizer step in one pass.
"""

import os

import torch
from torch import nn

batch_size = 4
gradient_accumulation_steps = 8
max_iters = 100_000
learning_rate = 1e-2
width = 32
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "configurator.py")).read())

torch.manual_seed(0)
features = torch.randn(4096, width)
targets = features[:, :1] * 0.5 - features[:, 1:2]
model = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))
opt = torch.optim.SGD(model.parameters(), lr=learning_rate)
for _ in range(max_iters):
    for _micro in range(gradient_accumulation_steps):
        rows = torch.randint(0, len(features), (batch_size,))
        loss = nn.functional.mse_loss(model(features[rows]), targets[rows])
        (loss / gradient_accumulation_steps).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
