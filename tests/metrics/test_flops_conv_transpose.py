"""Transposed convolutions (MONAI's UNet up-sampling path) are sized from a real recorded trace."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from advisor.metrics.flops import op_flops


def test_conv_transpose3d_flops_match_the_layer_arithmetic(tmp_path: Path) -> None:
    layer = torch.nn.ConvTranspose3d(4, 6, kernel_size=3, stride=2, padding=1, output_padding=1)
    x = torch.randn(2, 4, 5, 5, 5)
    with torch.profiler.profile(record_shapes=True) as prof:
        layer(x)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    (conv,) = [e for e in events if e.get("name") == "aten::convolution"]
    args = conv["args"]
    flops = op_flops("aten::convolution", json.dumps(args["Input Dims"]), json.dumps(args.get("Concrete Inputs")))
    # Each of the N*Ci*D*H*W input elements multiplies-and-adds against Co*k^3 weights.
    expected = 2 * (2 * 4 * 5 * 5 * 5) * (6 * 3 * 3 * 3)
    assert flops == expected
