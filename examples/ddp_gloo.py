"""Data-parallel training with DistributedDataParallel on CPU (gloo), one rank made slow.

Launch with torchrun (it sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)::

    torchrun --standalone --nproc-per-node 2 examples/ddp_gloo.py --slow-rank 1 --slow-ms 40
    advisor diagnose --nproc-per-node 2 examples/ddp_gloo.py --slow-rank 1 --slow-ms 40

Bottleneck (communication / straggler): rank ``--slow-rank`` sleeps ``--slow-ms`` in its
DataLoader's collate function for every batch (standing in for a slow disk, a noisy neighbour or
an uneven shard). DDP's gradient all-reduce is a barrier, so every other rank waits for it inside
the collective each step: the job runs at the pace of its slowest rank, and the fast ranks' time
shows up as communication.

Fix: balance the ranks (see examples/fixed/ddp_gloo.py, which has no slow rank): even shards,
the same loader settings everywhere, no per-rank extra work.

Without torchrun it runs as a single process (world size 1). ``--fail-rank R`` makes rank R raise
at step ``--fail-step`` (to test how a failing rank is reported).
"""

from __future__ import annotations

import argparse
import os
import socket
import time

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
    p.add_argument("--slow-rank", type=int, default=-1, help="rank made slower on purpose (-1: none)")
    p.add_argument("--slow-ms", type=float, default=0.0, help="extra milliseconds per batch on --slow-rank")
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


class SlowCollate:
    """Default collation plus a fixed delay (the slow rank's slow input pipeline)."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def __call__(self, batch):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        return torch.utils.data.default_collate(batch)


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
    delay = args.slow_ms / 1000.0 if rank == args.slow_rank else 0.0
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, collate_fn=SlowCollate(delay))
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
