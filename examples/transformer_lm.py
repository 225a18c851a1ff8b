"""A small GPT-style language model with hand-written attention in fp32.

Bottleneck (compute, with precision and attention advice): a 2-layer decoder (d_model 128,
4 heads, context 256) trains on synthetic tokens. Attention is written out by hand --
``q @ k.T / sqrt(d)``, a ``masked_fill`` with a causal mask, ``softmax``, dropout, ``@ v`` --
materialising the full (batch, heads, T, T) score matrix several times, and every matrix product
runs in fp32. The step is busy with arithmetic, but more of it, at higher precision, than needed.

Fix: ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)`` (fused
flash/memory-efficient kernels on a GPU, a fused kernel on CPU) and bf16 autocast around the
forward pass (tensor cores on a GPU; AVX-512 bf16 on a recent CPU) -- see
examples/fixed/transformer_lm.py. ``--attention`` and ``--bf16`` select each part.

On this repo's 2-core CPU (AVX-512 bf16, torch 2.13) the gain comes from bf16; SDPA runs about
as fast as the hand-written attention at this size, and SDPA with ``--dropout`` > 0 or in bf16
was *slower* in isolation on CPU (its fused CPU kernel covers fp32 without dropout best). On a
GPU, SDPA's flash kernels avoid the T x T matrix and win on both speed and memory.

Runs on CPU in about ten seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticTokens(Dataset):
    """Token windows from a fixed random Markov chain, so there is something to learn."""

    def __init__(self, n: int, context: int, vocab: int, seed: int):
        rng = np.random.default_rng(seed)
        nxt = rng.integers(0, vocab, (vocab, 4))  # 4 possible successors per token
        choice = rng.integers(0, 4, n * context + 1)
        tokens = np.zeros(n * context + 1, dtype=np.int64)
        for i in range(1, len(tokens)):  # built once at start-up, not per step
            tokens[i] = nxt[tokens[i - 1], choice[i]]
        self.tokens, self.context = torch.from_numpy(tokens), context

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.context

    def __getitem__(self, idx: int):
        s = idx * self.context
        return self.tokens[s : s + self.context], self.tokens[s + 1 : s + self.context + 1]


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, fused: bool):
        super().__init__()
        self.heads, self.dropout, self.fused = heads, dropout, fused
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
            )
        else:  # hand-written attention: the full score matrix, in the model's dtype
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            att = F.dropout(att, self.dropout, self.training)
            y = att @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, fused: bool):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, dropout, fused)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, context, d_model, heads, layers, dropout=0.1, fused=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, heads, dropout, fused) for _ in range(layers)))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--dropout", type=float, default=0.0, help="residual/attention dropout")
    p.add_argument("--attention", choices=["manual", "sdpa"], default="manual")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast around the forward pass")
    p.add_argument("--lr", type=float, default=3e-4)
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
    data = SyntheticTokens(32 * args.batch_size, args.context, args.vocab, args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = TinyGPT(
        args.vocab, args.context, args.d_model, args.heads, args.layers, dropout=args.dropout,
        fused=args.attention == "sdpa",
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    )

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with autocast:
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
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
    print(f"final loss {loss.item():.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s ({rate * args.context:.0f} tokens/s)")


if __name__ == "__main__":
    main()
