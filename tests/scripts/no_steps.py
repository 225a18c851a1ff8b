"""Does some work but never takes a step advisor can see."""

import torch

print(float(torch.ones(3).sum()))
