"""A tiny character transformer trained for ``max_iters`` steps that, every ``sample_interval``
steps (and at iteration 0), does grad-disabled work between its steps (issue 29 item 3).

Arguments (optional, in order): mode, max_iters, sample_interval, max_new_tokens. The modes:

* ``nocache``: lecture-style sampling, the whole (cropped) prefix re-run for each new token;
* ``cache``: the same sampling with a KV cache: the prompt once, then one position per token;
* ``eval``: a loss over ``max_new_tokens`` fixed-length batches, no sampling;
* ``one_sample``: a per-window loss, one window (batch size 1) per call.

The line of each model call ends in a ``# <mode>-call`` marker, which the tests look up.
"""

import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

torch.manual_seed(0)
torch.set_num_threads(1)
mode = sys.argv[1] if len(sys.argv) > 1 else "nocache"
defaults = [200, 20, 60]  # max_iters, sample_interval, max_new_tokens
max_iters, sample_interval, max_new_tokens = [int(a) for a in sys.argv[2:5]] + defaults[len(sys.argv[2:5]):]
eval_interval = sample_interval  # the period advisor reads for an evaluation function (sample_interval: sampling)
text = "the quick brown fox jumps over the lazy dog, and then it sleeps. " * 50
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
block_size, n_embd, batch_size, max_positions = 16, 32, 16, 512


class Block(nn.Module):
    """One pre-norm transformer block, one attention head, with an optional KV cache."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, cache=None):
        q, k, v = self.qkv(self.ln1(x)).split(n_embd, dim=2)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=1), torch.cat((cache[1], v), dim=1)
        # with a cache the query is the one new position: it attends to every cached one
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x)), (k, v)


class CharModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(len(chars), n_embd), nn.Embedding(max_positions, n_embd)
        self.block, self.ln, self.head = Block(), nn.LayerNorm(n_embd), nn.Linear(n_embd, len(chars))

    def forward(self, idx, cache=None):
        past = 0 if cache is None else cache[0].shape[1]
        x = self.tok(idx) + self.pos(torch.arange(past, past + idx.shape[1]))
        x, cache = self.block(x, cache)
        return self.head(self.ln(x)), cache


model = CharModel()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def get_batch(n=batch_size):
    ix = torch.randint(0, len(data) - block_size - 1, (n,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
    return x, y


@torch.no_grad()
def generate(idx, max_new_tokens):
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -block_size:])  # nocache-call
        probs = F.softmax(logits[:, -1, :], dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return idx


@torch.no_grad()
def generate_cached(idx, max_new_tokens):
    logits, cache = model(idx)
    for _ in range(max_new_tokens):
        idx_next = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
        logits, cache = model(idx_next, cache)  # cache-call
    return idx


@torch.no_grad()
def estimate_loss():
    losses = []
    for _ in range(max_new_tokens):
        x, y = get_batch()
        logits, _ = model(x)  # eval-call
        losses.append(F.cross_entropy(logits.flatten(0, 1), y.flatten()).item())
    return sum(losses) / len(losses)


@torch.no_grad()
def per_window_loss():
    x, y = get_batch(max_new_tokens)
    losses = []
    for i in range(max_new_tokens):
        logits, _ = model(x[i:i + 1])  # one_sample-call
        losses.append(F.cross_entropy(logits[0], y[i]).item())
    return sum(losses) / len(losses)


for it in range(max_iters):
    if it % sample_interval == 0:
        if mode == "nocache":
            out = generate(torch.zeros((1, 1), dtype=torch.long), max_new_tokens)
        elif mode == "cache":
            out = generate_cached(torch.zeros((1, 4), dtype=torch.long), max_new_tokens)
        else:
            out = estimate_loss() if mode == "eval" else per_window_loss()
        print(it, "".join(chars[i] for i in out[0].tolist()) if isinstance(out, torch.Tensor) else out)
    xb, yb = get_batch()
    logits, _ = model(xb)
    loss = F.cross_entropy(logits.flatten(0, 1), yb.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
