"""hand_attention_count: hand-written attention found in real CPU traces, and not where it is absent."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from advisor.metrics.compute import analyze_path, compute_metrics  # noqa: E402
from advisor.trace.load import load_traces  # noqa: E402


class HandAttention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2, sdpa: bool = False, sdpa_mask: bool = False) -> None:
        super().__init__()
        self.qkv, self.heads, self.sdpa, self.sdpa_mask = nn.Linear(d, 3 * d), heads, sdpa, sdpa_mask

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa_mask:
            # NOTE: an explicit mask with dropout sends the CPU to SDPA's math fallback, whose own
            # matmul -> softmax -> matmul sits inside aten::_scaled_dot_product_attention_math
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
        elif self.sdpa:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            att = nn.functional.dropout(att.masked_fill(mask, float("-inf")).softmax(dim=-1), 0.1)
            y = att @ v
        return y.transpose(1, 2).reshape(b, t, c)


class Classifier(nn.Module):
    """linear -> softmax -> linear: a softmax between linear layers is not attention."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(self.a(x).softmax(dim=-1))


def _trace(tmp_path: Path, model: nn.Module, steps: int = 2) -> Path:
    x = torch.randn(2, 8, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            model(x).sum().backward()
            prof.step()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return path


def _counts(path: Path) -> list[float]:
    metrics = compute_metrics(load_traces(path))
    return [float(v) for v in metrics.steps["hand_attention_count"]]


def test_two_hand_written_layers_count_once_per_layer_and_pass(tmp_path: Path) -> None:
    # NOTE: without a schedule the profiler may mark fewer ProfilerStep windows than steps (the
    # trace is then one window): the total over the windows is what is exact.
    model = nn.Sequential(HandAttention(), HandAttention())
    counts = _counts(_trace(tmp_path, model, steps=2))
    assert sum(counts) == 4, counts


def test_sdpa_and_a_classifier_softmax_count_zero(tmp_path: Path) -> None:
    assert set(_counts(_trace(tmp_path, nn.Sequential(HandAttention(sdpa=True), HandAttention(sdpa=True))))) == {0.0}
    (tmp_path / "math").mkdir()  # nn.TransformerEncoderLayer's attention on a CPU, with its mask
    assert set(_counts(_trace(tmp_path / "math", nn.Sequential(HandAttention(sdpa_mask=True))))) == {0.0}
    (tmp_path / "b").mkdir()
    assert set(_counts(_trace(tmp_path / "b", nn.Sequential(nn.Linear(16, 16), Classifier())))) == {0.0}


class AffineThenLoss(nn.Module):
    """4x4 affine products (a data transform's), a softmax of another shape (a loss's), 4x4 again."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        m = torch.eye(4) @ torch.eye(4)
        p = (x * self.w).softmax(dim=1)
        return p.sum() + (m @ m).sum()


def test_a_softmax_of_another_shape_between_two_small_matmuls_is_not_attention(tmp_path: Path) -> None:
    # seen in a MONAI segmentation script of ours: the transforms' affine products around the
    # loss's softmax read as one attention block a step
    assert set(_counts(_trace(tmp_path, AffineThenLoss()))) == {0.0}


REAL = [
    "kineto/resnet50_num_workers_0",
    "param/dlrm_kineto",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/cuda_event_sync",
]


@pytest.mark.parametrize("rel", REAL)
def test_real_gpu_traces_have_no_hand_written_attention(shared_traces: Path, rel: str) -> None:
    # NOTE: the BERT trace runs BertSdpaSelfAttention (aten::scaled_dot_product_attention, four
    # layers): its attention is already fused, and nothing else there is matmul -> softmax -> matmul.
    summary = analyze_path(shared_traces / rel).summary
    assert summary["hand_attention_count"] == 0
