"""A deep stack of wide residual MLP blocks whose activations do not fit in the memory it is given.

Bottleneck (memory): every block keeps its 4x-wide hidden activations alive from the forward pass
until the backward pass uses them, so the peak grows with depth x batch x width. Run under
``advisor diagnose --memory-budget 600MB`` (a stand-in for a GPU that is too small) the step
does not fit: the baseline runs out of memory, or sits at the limit.

Fix (what examples/fixed/memory_bound.py does): checkpoint each block, which keeps only the
block's input and recomputes its inside during backward (``torch.utils.checkpoint``,
``use_reentrant=False``: same numerics, about one more forward pass of time), and split each
batch into micro-batches with gradient accumulation that keeps the effective batch (by hand here:
``--accum K``).

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one); it prints its peak
resident memory, so a plain run shows the memory a fix saves.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    """A pre-norm residual MLP block (a transformer's feed-forward half)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class DeepMLP(nn.Module):
    """Embedding, ``depth`` identical blocks in a ModuleList, a classifier head."""

    def __init__(self, features: int, width: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)  # <- the bottleneck: every block's activations stay alive until backward
        return self.head(h)


class Samples(TensorDataset):
    """A synthetic, learnable classification set held in memory, fetched a batch at a time.

    ``__getitems__`` indexes the tensors once per batch (torch's DataLoader calls it when a
    dataset has it): per-sample fetching would make a batch of 160k rows a Python loop. The
    data is synthetic and already random, so it is read in order, as views: loading is not
    this example's bottleneck.
    """

    def __init__(self, n: int, features: int, classes: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, features, generator=g)
        w = torch.randn(features, classes, generator=g)
        super().__init__(x, (x @ w).argmax(dim=1))

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        start, stop = indices[0], indices[-1] + 1
        if stop - start == len(indices):  # in order (shuffle=False): a view, no copy
            return [t[start:stop] for t in self.tensors]
        idx = torch.as_tensor(indices)
        return [t[idx] for t in self.tensors]


def keep_batch(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The collate function: the batch is already stacked by ``__getitems__``."""
    return batch


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    # NOTE: narrow and tall: activations grow with batch x width, arithmetic with batch x width^2,
    # so a wide hidden tensor is 40 MiB while a step stays short. Tensors over glibc's 32 MiB
    # mmap limit go back to the system when freed, so the process's peak RSS follows the live
    # activations (smaller ones stay in the heap and hide what a fix saves).
    p.add_argument("--batch-size", type=int, default=163840, help="samples per optimizer step")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--num-samples", type=int, default=327680)
    p.add_argument("--accum", type=int, default=1, help="by hand: micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    features, classes = 64, 10
    if args.batch_size % args.accum:
        raise SystemExit(f"--batch-size {args.batch_size} is not a multiple of --accum {args.accum}")
    loader = DataLoader(Samples(args.num_samples, features, classes, args.seed), batch_size=args.batch_size // args.accum,
                        shuffle=False, drop_last=True, collate_fn=keep_batch)
    model = DeepMLP(features, args.width, args.depth, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    warmup = min(5, args.steps // 4)
    step, micro, samples, t0 = 0, 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y) / args.accum
            loss.backward()
            micro += 1
            if step >= warmup:
                samples += x.shape[0]
            if micro % args.accum:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"final loss {loss.item() * args.accum:.4f}")
    print(f"peak rss {peak:.0f} MiB")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
