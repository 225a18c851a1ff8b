"""A character-level GPT in the shape of minGPT's chargpt config, trained the plain way.

Bottleneck (compute): 6 layers, 6 heads, d_model 192, context 128, batch 64, AdamW -- the
config a well-known char-level GPT demo trains -- on synthetic tokens, in fp32, eager, with the
textbook hand-written attention of examples/attention_lm.py (its model, with these sizes) and
the optimizer's per-parameter kernels. On a GPU most of the step is matmul and attention
arithmetic in fp32, none of it on tensor cores.

Fix: the stack one applies by hand on a GPU -- bf16 autocast, TF32 matmuls, ``torch.compile``,
``F.scaled_dot_product_attention`` and fused AdamW -- in examples/fixed/chargpt.py. advisor's
trials try the same fixes one by one and together (bf16_autocast, tf32, torch_compile,
fused_attention, fused_optimizer); the GPU check (docs/gpu.md) times the twin beside advisor's
kept stack. A published peer reports 3.48x on an A100 for that stack on minGPT's chargpt.

Runs on CPU with small arguments (the examples' smoke test); ``--device auto`` picks CUDA.
"""

from __future__ import annotations

import sys

import attention_lm

CHARGPT = ["--layers", "6", "--heads", "6", "--d-model", "192", "--context", "128", "--batch-size", "64"]


def main(argv=None) -> None:
    # NOTE: the config first, the command line after it: a flag given twice keeps its last value.
    attention_lm.main([*CHARGPT, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
