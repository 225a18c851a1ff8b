"""Hand-tuned twin of examples/chargpt.py: bf16 autocast, TF32, torch.compile, SDPA, fused AdamW.

The model is examples/fixed/attention_lm.py's (attention through
``F.scaled_dot_product_attention``) at chargpt's sizes; on a GPU the step runs under bf16
autocast with TF32 matmuls, the model is compiled and AdamW is fused. On a CPU compile and the
fused optimizer stay off unless asked (``--compile on``): they cost more than they save in a
smoke test. The original's docstring follows.

A character-level GPT in the shape of minGPT's chargpt config, trained the plain way.

Bottleneck (compute): 6 layers, 6 heads, d_model 192, context 128, batch 64, AdamW.
Fix: the stack above.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from attention_lm import CharGPT, SyntheticText
from torch.utils.data import DataLoader


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--d-model", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto", help="auto: on a GPU only")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch.manual_seed(args.seed)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    gpu = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    data = SyntheticText(16 * args.batch_size, args.context, args.vocab, args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True, pin_memory=gpu)
    model = CharGPT(args.vocab, args.context, args.d_model, args.heads, args.layers, args.dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=gpu)
    if args.compile == "on" or (args.compile == "auto" and gpu):
        model = torch.compile(model)
    warmup = min(5, args.steps // 4)
    step, samples, t0 = 0, 0, time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.view(-1))
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
    if gpu:
        torch.cuda.synchronize()
    rate = samples / max(time.perf_counter() - t0, 1e-9)
    print(f"final loss {loss.item():.4f}")
    print(f"done: {step} steps, {rate:.1f} samples/s ({rate * args.context:.0f} tokens/s)")


if __name__ == "__main__":
    main()
