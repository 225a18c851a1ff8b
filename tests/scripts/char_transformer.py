"""A tiny character-level transformer trained on generated text, written the way such trainers usually are.

The pattern of issue #26: an infinite DataLoader (a sampler with replacement and 10^10 samples)
with 4 workers and ``pin_memory=True`` at batch 32, a model small enough that torch's intra-op
threads fight anything else on a 2-core machine. Plainly timed it holds one step time with 0, 1
or 4 workers; beside a busy process its two intra-op threads stall each other.

Prints ``done: N steps, R samples/s`` over the steps after the first 10 (benchmarks read it).
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, RandomSampler


class CharDataset(Dataset):
    """Windows of ``block + 1`` characters: the input and its next-character target."""

    def __init__(self, data: torch.Tensor, block: int) -> None:
        self.data, self.block = data, block

    def __len__(self) -> int:
        return len(self.data) - self.block - 1

    def __getitem__(self, i: int):
        chunk = self.data[i : i + self.block + 1]
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    """Pre-norm attention and MLP, causal."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        a = self.ln1(x)
        x = x + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    """Token and position embeddings, a few blocks, a head over the vocabulary."""

    def __init__(self, vocab: int, block: int, d: int = 48, heads: int = 3, layers: int = 3) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
        return self.head(self.blocks(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()

    text = "".join(chr(97 + (i * 7919 + i // 13) % 26) for i in range(200_000))
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    block = 64
    ds = CharDataset(data, block)
    model = CharGPT(len(stoi), block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loader = DataLoader(
        ds, sampler=RandomSampler(ds, replacement=True, num_samples=int(1e10)), shuffle=False,
        pin_memory=True, batch_size=args.batch, num_workers=args.workers,
    )
    it = iter(loader)
    t0, samples = time.perf_counter(), 0
    for step in range(args.iters):
        x, y = next(it)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == 9:
            t0, samples = time.perf_counter(), 0
        elif step > 9:
            samples += x.shape[0]
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"final loss {loss.item():.4f}")
    print(f"done: {args.iters} steps, {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
