"""An evaluation loop that builds an autograd graph for every batch it never backpropagates.

Bottleneck (autograd bookkeeping in inference): the loop runs the model with grad mode on, so
every operator records a graph node and keeps its inputs alive for a backward pass that never
comes: more CPU work per operator, and activations held until the output is dropped.

Fix: run the loop under ``torch.inference_mode()`` (see examples/fixed/inference_autograd.py).

Runs on CPU in a few seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_model(features: int, classes: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Linear(features, features), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(features, classes))


class InMemory(TensorDataset):
    """Samples held in memory, fetched a batch at a time.

    ``__getitems__`` (called by torch's DataLoader when a dataset has it) returns a whole batch:
    read in order, a view of the tensor, no copy. Fetched sample by sample and stacked, loading
    took a quarter of this small step, and loading is not what the example shows.
    """

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        start, stop = indices[0], indices[-1] + 1
        if stop - start == len(indices):
            return [t[start:stop] for t in self.tensors]
        idx = torch.as_tensor(indices)
        return [t[idx] for t in self.tensors]


def keep_batch(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The collate function: ``InMemory`` already returns the batch stacked."""
    return batch


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="batches to evaluate")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--num-samples", type=int, default=4096)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    features, classes = 256, 10
    data = InMemory(torch.randn(args.num_samples, features))
    loader = DataLoader(data, batch_size=args.batch_size, drop_last=True, collate_fn=keep_batch)
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = make_model(features, classes).to(device).eval()
    counts = torch.zeros(classes, dtype=torch.long, device=device)

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for (x,) in loader:
            x = x.to(device)
            # The bottleneck: grad mode is on, so this forward records a graph nobody uses.
            pred = model(x).argmax(dim=1)
            counts += torch.bincount(pred, minlength=classes)
            step += 1
            if step == warmup:
                t0, samples = time.perf_counter(), 0
            elif step > warmup:
                samples += x.shape[0]
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"predicted classes: {counts.tolist()}")
    print(f"done: {step} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
