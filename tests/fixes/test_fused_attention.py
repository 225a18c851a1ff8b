"""fused_attention: the one libcst transformation, its refusals, the run-time binding and the diff.

Every accepted rewrite is checked numerically: the rewritten class computes the same outputs as
the hand-written one (fp32, dropout off), so "mapped with certainty" is tested, not assumed.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from advisor.capture.model import FixRequest
from advisor.fixes import catalog, runtime
from advisor.fixes.attention import SDPA, rewrite_source
from advisor.fixes.catalog import fused_attention
from advisor.fixes.diff import transform
from advisor.fixes.model import Trial

REPO = Path(__file__).resolve().parents[2]

HEADER = """\
import math
import torch
import torch.nn.functional as F
from torch import nn

"""

# name -> (class body, what the rewrite must contain)
ACCEPTED = {
    "causal_triu_local_mask": (
        """
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = 0.0

    def forward(self, q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        att = F.dropout(att, self.p, self.training)
        y = att @ v
        return y * 2
""",
        ["F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)"],
    ),
    "mingpt_tril_buffer_and_dropout_module": (
        """
class Attn(nn.Module):
    def __init__(self, n=16):
        super().__init__()
        self.attn_drop = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        return att @ v
""",
        ["dropout_p=self.attn_drop.p if self.attn_drop.training else 0.0, is_causal=True)"],
    ),
    "padding_mask_explicit_scale": (
        """
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = 4

    def forward(self, q, k, v, pad):
        scores = torch.matmul(q, k.mT) / math.sqrt(self.head_dim * 2)
        w = scores.masked_fill(pad == 0, -math.inf).softmax(-1)
        return torch.matmul(w, v)
""",
        ["attn_mask=~(pad == 0), scale=1.0 / (math.sqrt(self.head_dim * 2)))"],
    ),
    "unscaled_scores_get_scale_one": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
""",
        ["F.scaled_dot_product_attention(q, k, v, scale=1.0)"],
    ),
}

REFUSED = {
    "additive_mask": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v, mask):
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        s = s + mask
        return s.softmax(dim=-1) @ v
""",
        "additive mask",
    ),
    "tensor_scale": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1)) * self.scale
        return s.softmax(dim=-1) @ v
""",
        "may be a tensor",
    ),
    "finite_fill": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v, m):
        s = (q @ k.transpose(-2, -1)).masked_fill(m, -1e9)
        return s.softmax(dim=-1) @ v
""",
        "not -inf",
    ),
    "weights_returned": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        w = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        return w @ v, w
""",
        "used elsewhere",
    ),
    "softmax_in_another_dtype": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        return F.softmax(q @ k.transpose(-2, -1), dim=-1, dtype=torch.float32) @ v
""",
        "another dtype",
    ),
    "softmax_over_another_dim": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        return (q @ k.transpose(-2, -1)).softmax(dim=1) @ v
""",
        "dim=-1",
    ),
    "key_rebound_before_the_output": (
        """
class Attn(nn.Module):
    def forward(self, q, k, v):
        w = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        k = k * 2
        return w @ v
""",
        "reassigned",
    ),
}

NOT_ATTENTION = """
class Mlp(nn.Module):
    def forward(self, x, w1, w2):
        h = (x @ w1).relu()
        return h @ w2
"""


def _load(tmp_path: Path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect.getsource finds the file through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _undo():
    before = set(sys.modules)
    yield
    runtime.uninstall()
    for name in set(sys.modules) - before:
        if name.startswith("attn_case_"):
            del sys.modules[name]


def _inputs(name: str):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    args = [q, k, v]
    if name == "padding_mask_explicit_scale":
        pad = torch.ones(2, 1, 1, 16)
        pad[0, ..., 10:] = 0
        args.append(pad)
    return args


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_rewrites_compute_the_same_attention(tmp_path: Path, name: str) -> None:
    body, fragments = ACCEPTED[name]
    source = HEADER + textwrap.dedent(body)
    result = rewrite_source(source)
    assert result.changed == ("Attn.forward",) and not result.refused
    for fragment in fragments:
        assert fragment in result.source
    assert "softmax" not in result.source.split("def forward")[1]
    original = _load(tmp_path, f"attn_case_{name}_a", source).Attn().eval()
    rewritten = _load(tmp_path, f"attn_case_{name}_b", result.source).Attn().eval()
    args = _inputs(name)
    torch.testing.assert_close(rewritten(*args), original(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_uncertain_mappings_are_refused_with_a_reason(name: str) -> None:
    body, reason = REFUSED[name]
    source = HEADER + textwrap.dedent(body)
    result = rewrite_source(source)
    assert result.source == source and not result.changed
    assert len(result.refused) == 1 and result.refused[0].startswith("Attn.forward: ")
    assert reason in result.refused[0]


def test_code_that_is_not_attention_is_left_alone_without_a_note() -> None:
    source = HEADER + NOT_ATTENTION
    assert rewrite_source(source).source == source
    assert rewrite_source(source).refused == ()


def test_the_callee_follows_the_script_imports() -> None:
    body = textwrap.dedent(ACCEPTED["unscaled_scores_get_scale_one"][0])
    assert f"{SDPA}(q, k, v, scale=1.0)" in rewrite_source("import torch\nfrom torch import nn\n" + body).source
    assert "functional.scaled_dot_product_attention(" in rewrite_source(
        "import torch\nfrom torch import nn\nfrom torch.nn import functional\n" + body
    ).source


# -- run time ----------------------------------------------------------------------------------------


def test_run_time_install_binds_the_diffs_forward_and_keeps_the_outputs(tmp_path: Path) -> None:
    body, _ = ACCEPTED["mingpt_tril_buffer_and_dropout_module"]
    source = HEADER + textwrap.dedent(body) + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)
                self.attn = Attn()

            def forward(self, x):
                q = self.proj(x)
                return self.attn(q, q, q)
    """)
    mod = _load(tmp_path, "attn_case_runtime", source)
    model = mod.Model().eval()
    x = torch.randn(2, 3, 16, 8)
    expected = model(x)
    original_forward = mod.Attn.forward
    notes = runtime.install([FixRequest("fused_attention")])
    out = model(x)
    assert runtime.is_applied(notes["fused_attention"]), notes
    assert "Attn.forward rewritten to scaled_dot_product_attention" in str(notes["fused_attention"])
    assert mod.Attn.forward is not original_forward
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    runtime.uninstall()
    assert mod.Attn.forward is original_forward


def test_run_time_forward_is_the_diffs_forward_on_the_zoo_example(tmp_path: Path) -> None:
    """The bound forward is compiled from the same text the diff writes (the measured change)."""
    from advisor.fixes.attention import forward_source

    script = REPO / "examples" / "attention_lm.py"
    diff_src, manual = transform(script.read_text(), [Trial("fused_attention", "unsafe")])
    assert manual == []
    mod = _load(tmp_path, "attn_case_zoo", script.read_text())
    done, why = fused_attention.rewrite_class(mod.CausalSelfAttention)
    assert done and why is None
    assert "F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p" in forward_source(
        diff_src, "CausalSelfAttention"
    )
    torch.manual_seed(0)
    model = mod.CharGPT(32, 16, 16, 2, 2, 0.0)
    idx = torch.randint(0, 32, (2, 16))
    with_sdpa = model(idx)
    runtime.uninstall()
    torch.testing.assert_close(with_sdpa, model(idx), rtol=1e-5, atol=1e-5)


def test_a_refused_forward_is_skipped_with_its_reason(tmp_path: Path) -> None:
    body, _ = REFUSED["additive_mask"]
    mod = _load(tmp_path, "attn_case_refused", HEADER + textwrap.dedent(body))
    notes = runtime.install([FixRequest("fused_attention")])

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.attn = mod.Attn()

        def forward(self, x):
            return self.attn(x, x, x, torch.zeros(1))

    Wrap()(torch.randn(1, 2, 4))
    assert runtime.is_not_applied(notes["fused_attention"])
    assert "additive mask" in str(notes["fused_attention"])


class _Config:
    def __init__(self, impl):
        self._attn_implementation = impl


class _HFModel(torch.nn.Module):
    """Duck-types a transformers model: attention picked from the config at forward time."""

    def __init__(self, impl="eager", setter=False):
        super().__init__()
        self.config = _Config(impl)
        self.lin = torch.nn.Linear(4, 4)
        if setter:
            self.set_attn_implementation = self._set

    def _set(self, impl):
        self.config._attn_implementation = impl
        self.set_via = impl

    def forward(self, x):
        self.seen = self.config._attn_implementation
        return self.lin(x)


@pytest.mark.parametrize("setter", [False, True])
def test_hugging_face_models_switch_to_sdpa(setter: bool) -> None:
    model = _HFModel(setter=setter)
    notes = runtime.install([FixRequest("fused_attention")])
    model(torch.randn(1, 4))
    assert model.seen == "sdpa" and runtime.is_applied(notes["fused_attention"])
    assert ("set_attn_implementation" in str(notes["fused_attention"])) is setter
    assert getattr(model, "set_via", None) == ("sdpa" if setter else None)


def test_a_hugging_face_model_already_on_sdpa_is_left_alone() -> None:
    model = _HFModel(impl="sdpa")
    notes = runtime.install([FixRequest("fused_attention")])
    model(torch.randn(1, 4))
    assert runtime.is_not_applied(notes["fused_attention"])
    assert "already uses attn_implementation='sdpa'" in str(notes["fused_attention"])


# -- diff -------------------------------------------------------------------------------------------------


def test_the_diff_rewrites_classes_and_from_pretrained_and_says_what_it_left() -> None:
    trial = [Trial("fused_attention", "unsafe")]
    refused = HEADER + textwrap.dedent(REFUSED["tensor_scale"][0])
    new, manual = transform(refused, trial)
    assert new == refused
    assert any("Attn.forward: the scores are multiplied by `self.scale`" in m for m in manual)
    hf = 'from transformers import AutoModel, AutoTokenizer\ntok = AutoTokenizer.from_pretrained("b")\nm = AutoModel.from_pretrained("b")\n'
    new, manual = transform(hf, trial)
    assert 'AutoModel.from_pretrained("b", attn_implementation="sdpa")' in new
    assert 'AutoTokenizer.from_pretrained("b")\n' in new and manual == []
    _, manual = transform("import torch\nx = 1\n", trial)
    assert any("no class forward with q @ k.transpose" in m for m in manual)


def test_the_fix_is_in_the_catalog_before_compile() -> None:
    ids = list(catalog.get_fixes())
    assert ids.index("fused_attention") < ids.index("torch_compile")
    assert catalog.get("fused_attention").loss_rtol == fused_attention.LOSS_RTOL_ATTENTION
