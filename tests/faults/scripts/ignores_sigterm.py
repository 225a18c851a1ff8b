"""A training loop that ignores SIGTERM itself (as some job-scheduler wrappers do), for issue #30.

advisor asks its capture child to save with SIGTERM; before the fix the script's SIG_IGN took
that request away, the child was killed after its grace, and the timed steps were lost.
"""

import itertools
import signal
import time

import torch

signal.signal(signal.SIGTERM, signal.SIG_IGN)
weights = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([weights], lr=0.1)
for step in itertools.count(1):
    opt.zero_grad()
    (weights - torch.randn(4)).square().sum().backward()
    opt.step()
    print(f"step {step}", flush=True)
    time.sleep(0.005)
