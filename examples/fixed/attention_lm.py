"""Hand-fixed twin of examples/attention_lm.py: attention through F.scaled_dot_product_attention.

The causal mask buffer is gone (``is_causal=True`` masks the same positions) and the weights'
dropout is SDPA's ``dropout_p``. The original's docstring follows.

A long-context character-level language model whose attention is written out by hand.

Bottleneck (compute, attention): a 2-layer decoder (d_model 64, 4 heads, context 256) trains
on synthetic tokens. Its attention is the textbook one, as in minGPT: ``q @ k.transpose(-2, -1)``
scaled by ``1/sqrt(d)``, a causal mask from a registered ``tril`` buffer filled with ``-inf``,
``F.softmax``, an ``nn.Dropout`` on the weights, ``@ v``. Each layer writes and reads the
(batch, heads, 256, 256) score matrix several times per step, forward and backward, while the
rest of the model is small: attention is most of the step's work.

Fix: ``F.scaled_dot_product_attention(q, k, v, dropout_p=..., is_causal=True)``, one fused
kernel that never writes the score matrix out (flash attention on a GPU, a fused kernel on
CPU) -- see examples/fixed/attention_lm.py. advisor's ``fused_attention`` fix makes exactly
that change at run time (rule CO007) and offers it as a diff. On this repo's 2-core CPU (torch
2.13, one thread, CPU time per step measured in-process, 2026-11-24) a step took 52-55 ms
hand-written and 30 ms with SDPA.

Runs on CPU in about ten seconds (``--device auto`` picks CUDA when there is one).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticText(Dataset):
    """Windows of a token stream drawn from a fixed random bigram table (something to learn)."""

    def __init__(self, n: int, context: int, vocab: int, seed: int):
        rng = np.random.default_rng(seed)
        table = rng.dirichlet(np.full(vocab, 0.1), size=vocab)
        tokens = np.zeros(n * context + 1, dtype=np.int64)
        draws = rng.random(len(tokens))
        cdf = table.cumsum(axis=1)
        for i in range(1, len(tokens)):  # built once at start-up, not per step
            tokens[i] = min(int(np.searchsorted(cdf[tokens[i - 1]], draws[i])), vocab - 1)
        self.tokens, self.context = torch.from_numpy(tokens), context

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.context

    def __getitem__(self, idx: int):
        s = idx * self.context
        return self.tokens[s : s + self.context], self.tokens[s + 1 : s + self.context + 1]


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, context: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, context: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, context, dropout)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab: int, context: int, d_model: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, heads, context, dropout) for _ in range(layers)))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--dropout", type=float, default=0.0, help="dropout on the attention weights")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    data = SyntheticText(16 * args.batch_size, args.context, args.vocab, args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    if len(loader) == 0:
        raise SystemExit("the data set is smaller than one batch; raise the sample count")
    model = CharGPT(args.vocab, args.context, args.d_model, args.heads, args.layers, args.dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
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
