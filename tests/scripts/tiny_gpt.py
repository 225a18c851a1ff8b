"""A tiny GPT-style trainer with no DataLoader: batches are sampled from a token tensor.

Made to be overhead-bound, as small transformer trainers are on a CPU: a few hundred operators
per step (embeddings, layer norms, attention, GELU, AdamW), each with a little arithmetic, so
the step runs its matmuls at a small share of what the CPU can do. ``--steps N`` optimizer steps.

``--accum K`` accumulates K micro-batches of ``--batch-size`` sequences per optimizer step, the
loss divided by K, as nanoGPT's ``gradient_accumulation_steps`` loop does (no DataLoader: each
micro-batch is sampled from the token tensor). ``--batch-size 8 --accum 40`` and
``--batch-size 320 --accum 1`` see the same tokens per optimizer step. At the end it prints its
steady throughput (``done: N steps, R samples/s``, after the first step), for timing by hand.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100_000)
parser.add_argument("--batch-size", type=int, default=4, help="sequences per (micro-)batch")
parser.add_argument("--accum", type=int, default=1, help="gradient accumulation steps")
parser.add_argument("--context", type=int, default=16)
parser.add_argument("--d-model", type=int, default=32)
parser.add_argument("--layers", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
VOCAB = 64
tokens = torch.randint(0, VOCAB, (4096,))


class Block(nn.Module):
    """Pre-norm attention + MLP block."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj(att @ v)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, a few blocks, a head."""

    def __init__(self, d: int, layers: int, context: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d) for _ in range(layers)))
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.blocks(x))


model = TinyGPT(args.d_model, args.layers, args.context)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
started = None
for step in range(args.steps):
    if step == 1:
        started = time.perf_counter()  # NOTE: the first step pays one-off set-up; not steady
    for _micro in range(args.accum):
        starts = torch.randint(0, len(tokens) - args.context - 1, (args.batch_size,))
        x = torch.stack([tokens[s : s + args.context] for s in starts])
        y = torch.stack([tokens[s + 1 : s + 1 + args.context] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        (loss / args.accum).backward()
    opt.step()
    opt.zero_grad()
if started is not None and args.steps > 1:
    rate = (args.steps - 1) * args.batch_size * args.accum / (time.perf_counter() - started)
    print(f"done: {args.steps} steps, {rate:.1f} samples/s")
