"""A nanoGPT-shaped run: evaluation at iteration 0 and every ``eval_interval`` iterations
(``eval_iters`` batches per split under no_grad), ``max_iters`` optimizer steps in all.

Arguments (optional, in order): max_iters, eval_interval, eval_iters, batch_size. The whole-run
projection is checked against this script's plain wall time (issue 29, docs/projection.md).
At the default batch of 64 a step is mostly Python (AdamW's per-parameter loop, module calls),
which cProfile slows more than the evaluation's; at 1024 the matrix products dominate both."""

import sys
import time

_T0 = time.perf_counter()  # the self-timed share's whole: from here, imports included (as cProfile's <module>)

import torch  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
defaults = [1000, 50, 200, 64]  # max_iters, eval_interval, eval_iters, batch_size
max_iters, eval_interval, eval_iters, batch_size = [int(a) for a in sys.argv[1:5]] + defaults[len(sys.argv[1:5]):]
data = torch.randn(8192, 256)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def get_batch():
    ix = torch.randint(0, len(data), (batch_size,))
    return data[ix]


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = sum(model(get_batch()).pow(2).mean().item() for _ in range(eval_iters)) / eval_iters
    model.train()
    return out


eval_s = 0.0
for it in range(max_iters):
    if it % eval_interval == 0:
        t0 = time.perf_counter()
        losses = estimate_loss()
        eval_s += time.perf_counter() - t0
        print(f"iter {it}: {losses}")
    loss = model(get_batch()).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
# NOTE: read by benchmarks/projection.py: the evaluation's share of this plain run, timed by the
# script itself (no profiler slowing one part more than another).
print(f"self-timed share: {eval_s / (time.perf_counter() - _T0):.4f}")
