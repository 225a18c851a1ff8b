"""The case generator: one training script per (model family, batch size, bottleneck kind, severity).

Every script is written from the pieces below, so nothing here was tuned against advisor's
output. A kind injects its work behind ``INJECT["on"]``; the script's own truth mode
(:mod:`benchmarks.accuracy.truth`) flips that switch every few steps and times both, which gives
the share of the step the injection really costs on this machine, and times the whole input path
(``next()`` of the batch iterator) apart from the training step. Under advisor the switch is
always on. The injected lines carry ``# INJECTED`` so the scorer knows where a finding should
point.

The input path is built to cost next to nothing unless a kind injects into it: the dataset
holds batches collated once at start, read by a ``DataLoader(batch_size=None)``, so a step's
input is one list lookup (about 11 us here) instead of a collate of 16 samples (31 us plain, far
more under the profiler, which records every ``torch.stack``). The first run's healthy cases used
the collate, and advisor's DL001 on it was counted as a false alarm while the truth never timed
it. The truth still measures the input path of every case, so a case whose input does cost a
share of the step is labelled by that measurement, not by its kind.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path

FAMILIES = ("mlp", "cnn", "lm", "gru", "unet3d")
KINDS = ("healthy", "cpu_transform", "io_wait", "batch_assembly", "tiny_ops", "oversubscribed", "hand_attention")
SEVERITIES = {"mild": 0.15, "strong": 0.5}
"""Target share of the step the injection should take (the truth run measures what it did take)."""

CATEGORY = {
    "cpu_transform": "data_loading",
    "io_wait": "data_loading",
    "batch_assembly": "data_loading",
    "tiny_ops": "small_kernels",
    "oversubscribed": "compute",
    "hand_attention": "compute",
}
"""The category a kind's injection belongs to (healthy has none)."""

BATCHES = (16, 64)
"""Batch sizes crossed with the rest: the same model does 4x the arithmetic per op at 64, which
moves per-op overhead, input cost and injected work against the step (a second axis that doubles
the cross to 102 cells, so 100 cases are 100 different scripts rather than 51 run twice)."""

SELF_SIZED = ("oversubscribed", "hand_attention")
"""Kinds whose size is their own (eight threads on two cores; attention written by hand): one severity, "on"."""

MODELS = {
    "mlp": (
        "model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))",
        "x = torch.randn(256); y = int(i % 10)",
        "nn.CrossEntropyLoss()",
    ),
    "cnn": (
        "model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),\n"
        "                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))",
        "x = torch.randn(3, 24, 24); y = int(i % 10)",
        "nn.CrossEntropyLoss()",
    ),
    "lm": (
        "model = TinyLM(vocab=256, dim=64, layers=2, heads=4)",
        "x = torch.randint(0, 256, (32,)); y = torch.roll(x, -1)",
        "LMLoss()",
    ),
    "gru": (
        "model = GRUNet(dim=64)",
        "x = torch.randn(16, 64); y = int(i % 10)",
        "nn.CrossEntropyLoss()",
    ),
    "unet3d": (
        "from monai.networks.nets import UNet\n"
        "model = nn.Sequential(UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(4, 8, 16), strides=(2, 2)))",
        "x = torch.randn(1, 16, 16, 16); y = (x[0] > 0).long()",
        "nn.CrossEntropyLoss()",
    ),
}
"""Per family: the model line(s), one sample's tensors (from index ``i``), the loss."""


@dataclass(frozen=True)
class Case:
    """One generated script and what was injected into it."""

    id: str
    family: str
    batch: int
    kind: str
    severity: str  # "none" for healthy cases
    inject_ms: float  # per step; 0 for kinds sized by their own knob (oversubscribed, hand_attention)
    seed: int

    @property
    def category(self) -> str | None:
        """The category of the injected work (None: a healthy case)."""
        return CATEGORY.get(self.kind)

    def to_json(self) -> dict:
        return {**asdict(self), "category": self.category}


def applicable(family: str, kind: str) -> bool:
    """Whether a kind makes sense for a family (hand-written attention needs attention)."""
    return kind != "hand_attention" or family == "lm"


def base_key(family: str, batch: int) -> str:
    """The calibration's key for a family at a batch size (``mlp-b16``)."""
    return f"{family}-b{batch}"


def generate(n: int, seed: int, base_ms: dict[str, float]) -> list[Case]:
    """Draw ``n`` cases from the cross of families, batch sizes, kinds and severities, seeded.

    ``base_ms``: each family's plain step time at each batch size on this machine (the
    calibration run, keyed by :func:`base_key`), which sizes a timed injection so it takes about
    its severity's share of the step.
    """
    rng = random.Random(seed)
    cells = [(f, b, k, s) for f in FAMILIES for b in BATCHES for k in KINDS if applicable(f, k)
             for s in (("none",) if k == "healthy" else ("on",) if k in SELF_SIZED else tuple(SEVERITIES))]
    rng.shuffle(cells)
    picks = [cells[i % len(cells)] for i in range(n)]  # every cell once before any twice: a slice spans the cross
    out = []
    for i, (family, batch, kind, severity) in enumerate(picks):
        share = SEVERITIES.get(severity, 0.0)
        inject = 0.0
        if kind in ("cpu_transform", "io_wait", "batch_assembly", "tiny_ops") and share:
            inject = base_ms[base_key(family, batch)] * share / (1.0 - share) * rng.uniform(0.8, 1.25)
        out.append(Case(f"c{i:03d}-{family}-b{batch}-{kind}-{severity}", family, batch, kind, severity,
                        round(inject, 2), rng.randrange(1 << 30)))
    return out


def write(case: Case, folder: Path) -> Path:
    """Write the case's script into ``folder`` and return its path."""
    path = folder / f"{case.id.replace('-', '_')}.py"
    path.write_text(render(case), encoding="utf-8")
    return path


def render(case: Case) -> str:
    """The case's training script."""
    model, sample, loss = MODELS[case.family]
    k = case.kind
    threads = "torch.set_num_threads(2)"
    if k == "oversubscribed":
        threads = "torch.set_num_threads(8)  # INJECTED"
    item = {
        "cpu_transform": "            x = x + (torch.from_numpy(burn(INJECT_MS)).mean() * 0).to(x.dtype)  # INJECTED",
        "io_wait": "            time.sleep(INJECT_MS / 1000.0)  # INJECTED",
    }.get(k, "")
    assemble = "            batch = default_collate([data.samples[j % len(data.samples)] for j in idx])"
    if k == "batch_assembly":
        assemble += (
            "\n            if INJECT['on']:\n"
            "                batch = [b + py_burn(INJECT_MS) * 0 for b in batch]  # INJECTED"
        )
    tiny = ""
    if k == "tiny_ops":
        tiny = (
            "    if INJECT['on']:\n"
            "        h = out.detach().reshape(-1)[:4]\n"
            "        for _ in range(TINY_N):\n"
            "            h = h * 0.999 + 0.001  # INJECTED\n"
            "        out = out + h.sum() * 0"
        )
    loader = "data = Data()\n"
    if k != "batch_assembly":
        loader += "loader = DataLoader(data, batch_size=None, shuffle=True, num_workers=0)\n"
    return TEMPLATE.format(
        case=case, model=model, sample=sample, loss=loss, threads=threads, item=item or "            pass",
        assemble=assemble, tiny=tiny, loader=loader,
        attention="hand" if k == "hand_attention" else "sdpa",
        att_mark="  # INJECTED" if k == "hand_attention" else "",
        batch_loop="assembled()" if k == "batch_assembly" else "loader", batch=case.batch,
        rethread="torch.set_num_threads(8 if INJECT['on'] else 2)" if k == "oversubscribed" else "pass",
    )


TEMPLATE = '''"""advisor-bench case {case.id}: {case.family} x batch {case.batch} x {case.kind} x {case.severity} (generated, seed {case.seed})."""
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, default_collate

INJECT = {{"on": True}}
INJECT_MS = {case.inject_ms}
BATCH = {batch}
TINY_N = max(1, int(INJECT_MS * 60))
ATTENTION = "{attention}"
torch.manual_seed({case.seed} % 100000)
random.seed({case.seed})
{threads}
if os.environ.get("ADVISOR_BENCH_FIXED") == "off":
    INJECT["on"] = False
    {rethread}


def py_burn(ms):
    end, n = time.perf_counter() + ms / 1000.0, 0
    while time.perf_counter() < end:
        n += sum(range(64))
    return n


def burn(ms):
    end = time.perf_counter() + ms / 1000.0
    x = np.arange(256, dtype=np.float64)
    while time.perf_counter() < end:
        x = np.sqrt(x * x + 1.0)
    return x


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if ATTENTION == "hand" and INJECT["on"]:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]){att_mark}
            att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, layers, heads):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.ModuleDict({{"att": Attention(dim, heads), "mlp": nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)), "n1": nn.LayerNorm(dim),
            "n2": nn.LayerNorm(dim)}}) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        h = self.emb(x)
        for blk in self.blocks:
            h = h + blk["att"](blk["n1"](h))
            h = h + blk["mlp"](blk["n2"](h))
        return self.head(h)


class LMLoss(nn.Module):
    def forward(self, out, y):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


class GRUNet(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gru, self.head = nn.GRU(64, dim, batch_first=True), nn.Linear(dim, 10)

    def forward(self, x):
        return self.head(self.gru(x)[0][:, -1])


def make_sample(i):
    {sample}
    return x, y


class Data(Dataset):
    """Whole batches, collated once: reading one costs a lookup (see the generator's docstring)."""

    def __init__(self):
        self.samples = [make_sample(i) for i in range(256)]
        self.items = [default_collate(self.samples[b * BATCH:(b + 1) * BATCH]) for b in range(256 // BATCH)]

    def __len__(self):
        return 4096 // BATCH

    def __getitem__(self, i):
        x, y = self.items[i % len(self.items)]
        if INJECT["on"]:
{item}
        return x, y


{model}
loss_fn = {loss}
opt = torch.optim.SGD(model.parameters(), lr=0.01)
{loader}

def assembled():
    order = list(range(len(data) * BATCH))
    while True:
        random.shuffle(order)
        for s in range(0, len(order) - BATCH + 1, BATCH):
            idx = order[s:s + BATCH]
{assemble}
            yield batch


def batches():
    while True:
        for batch in {batch_loop}:
            yield batch


def train_step(x, y):
    opt.zero_grad(set_to_none=True)
    out = model(x)
{tiny}
    loss = loss_fn(out, y)
    loss.backward()
    opt.step()
    return loss


def truth(path, rounds=4, per=3):
    """Time the step with the injection on and off, alternating, and write every step's times.

    Each step is timed whole and in its input part (``next()`` of the batch iterator: the
    DataLoader or the script's own assembly, injected work included), per state.
    ADVISOR_BENCH_FIXED=on|off times one state only (for injections set once at start).
    """
    fixed = os.environ.get("ADVISOR_BENCH_FIXED")
    times = {{True: {{"step": [], "input": []}}, False: {{"step": [], "input": []}}}}
    it = batches()
    for _ in range(3):
        train_step(*next(it))
    for r in range(2 * rounds):
        INJECT["on"] = (fixed == "on") if fixed else r % 2 == 0
        {rethread}
        for s in range(per + 1):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            train_step(x, y)
            if s:
                times[INJECT["on"]]["step"].append((time.perf_counter() - t0) * 1000.0)
                times[INJECT["on"]]["input"].append((t1 - t0) * 1000.0)
    with open(path, "w") as f:
        json.dump({{("on" if k else "off"): v for k, v in times.items() if v["step"]}}, f)


if __name__ == "__main__":
    if os.environ.get("ADVISOR_BENCH_TRUTH"):
        truth(os.environ["ADVISOR_BENCH_TRUTH"])
        sys.exit(0)
    for x, y in batches():
        train_step(x, y)
'''
