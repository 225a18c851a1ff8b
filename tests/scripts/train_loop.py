"""A tiny training loop: DataLoader + SGD, with knobs the capture tests need.

--steps N: optimizer steps to run (default: many); --accum K: micro-batches per optimizer step;
--workers W: DataLoader workers; --pin-memory: pin_memory=True; --crash-at N: raise ValueError in step N;
--exit-at N: sys.exit(--exit-code) after step N; --hang-at N: sleep forever after step N;
--kill-at N: SIGKILL its own process after step N (as the kernel's OOM killer would).
"""

import argparse
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--accum", type=int, default=1)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--pin-memory", action="store_true")
parser.add_argument("--crash-at", type=int, default=0)
parser.add_argument("--exit-at", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--hang-at", type=int, default=0)
parser.add_argument("--kill-at", type=int, default=0)
args = parser.parse_args()

data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = DataLoader(
    data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, pin_memory=args.pin_memory
)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

step = 0
micro = 0
while step < args.steps:
    for x, y in loader:
        if args.crash_at and step + 1 == args.crash_at:
            raise ValueError(f"boom in step {step + 1}")
        loss = torch.nn.functional.mse_loss(model(x), y) / args.accum
        loss.backward()
        micro += 1
        if micro % args.accum:
            continue
        opt.step()
        opt.zero_grad()
        step += 1
        print(f"step {step} loss {loss.item():.4f}")
        if step == args.exit_at:
            sys.exit(args.exit_code)
        if step == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == args.hang_at:
            while True:
                time.sleep(0.05)
        if step >= args.steps:
            break
print(f"trained {step} steps")
