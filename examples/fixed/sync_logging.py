"""Hand-fixed twin of examples/sync_logging.py: device-side running sums, read every N steps.

The host reads the device only every ``--log-every`` steps (default 20) and never calls
``torch.cuda.synchronize()`` inside the loop, so on a GPU the CPU queues steps ahead of the
device. On CPU the gain is small (there was little to wait for); the speedup shows on a GPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n: int, features: int, classes: int, seed: int) -> TensorDataset:
    """A synthetic, learnable classification set held in memory."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(features: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, classes),
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-samples", type=int, default=8192)
    p.add_argument("--log-every", type=int, default=20, help="steps between log lines")
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
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    features, classes = 256, 10
    loader = DataLoader(
        make_data(args.num_samples, features, classes, args.seed),
        batch_size=args.batch_size, shuffle=True, drop_last=True,
        pin_memory=device.type == "cuda",
    )
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model(features, classes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    # Running sums stay on the device; nothing here forces a host-device sync.
    sums = torch.zeros(3, device=device)
    since_log = 0

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            with torch.no_grad():
                acc = (logits.argmax(dim=1) == y).float().mean()
                sums += torch.stack([loss.detach(), acc, grad_norm])
            since_log += 1
            step += 1
            if step % args.log_every == 0:
                loss_avg, acc_avg, _ = (sums / since_log).tolist()  # one read per log line
                print(f"step {step}: loss {loss_avg:.4f} acc {acc_avg:.3f}")
                sums.zero_()
                since_log = 0
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += x.shape[0]
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
