"""Data-parallel training with DistributedDataParallel on CPU (gloo): the balanced twin.

The hand-fixed version of examples/ddp_gloo.py: every rank loads and computes the same amount
per step, so no rank waits for another inside the gradient all-reduce. ``--slow-rank`` and
``--slow-ms`` are still accepted (so both scripts take the same command line) but slow no rank.

    torchrun --standalone --nproc-per-node 2 examples/fixed/ddp_gloo.py
    advisor diagnose --nproc-per-node 2 examples/fixed/ddp_gloo.py
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per rank")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    p.add_argument("--width", type=int, default=512, help="hidden width of the MLP")
    p.add_argument("--slow-rank", type=int, default=-1, help="ignored: no rank is slowed here")
    p.add_argument("--slow-ms", type=float, default=0.0, help="ignored: no rank is slowed here")
    p.add_argument("--fail-rank", type=int, default=-1, help="rank that raises (-1: none)")
    p.add_argument("--fail-step", type=int, default=3, help="step at which --fail-rank raises")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per rank")
    return p.parse_args()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed() -> tuple[int, int]:
    """Join the process group torchrun set up (or a world of one); return (rank, world size)."""
    if "RANK" not in os.environ:  # plain `python ddp_gloo.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size()


def main() -> None:
    """Train an MLP on synthetic data with DDP for ``--steps`` steps."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    rank, world = init_distributed()
    torch.manual_seed(0)
    n = args.batch_size * world * args.steps
    features = torch.randn(n, 256)
    labels = (features[:, :10].argmax(dim=1)).long()
    dataset = TensorDataset(features, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)  # the same on every rank
    model = nn.Sequential(
        nn.Linear(256, args.width), nn.ReLU(),
        nn.Linear(args.width, args.width), nn.ReLU(),
        nn.Linear(args.width, 10),
    )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(10**6):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if rank == args.fail_rank and step + 1 == args.fail_step:
                raise RuntimeError(f"rank {rank} failed on purpose at step {step + 1}")
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if rank == 0:
        print(f"trained {step} steps on {world} rank(s); last loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
