"""Run-time patches, applied in this process (each test undoes them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, get_worker_info

from advisor.capture.model import FixRequest
from advisor.fixes import runtime


class _Lines(Mapping):
    """A live view of the runtime's notes as one-line strings (``applied: ...``)."""

    def __init__(self, notes):
        self.notes = notes

    def __getitem__(self, key):
        return str(self.notes[key])

    def __iter__(self):
        return iter(self.notes)

    def __len__(self):
        return len(self.notes)


@pytest.fixture(autouse=True)
def _undo_patches():
    originals = (DataLoader.__init__, nn.Module.__call__, torch.Tensor.backward, torch.optim.SGD.__init__)
    threads = torch.get_num_threads()
    yield
    runtime.uninstall()
    torch.set_num_threads(threads)
    assert (DataLoader.__init__, nn.Module.__call__, torch.Tensor.backward, torch.optim.SGD.__init__) == originals


def install(*fixes: FixRequest) -> Mapping[str, str]:
    return _Lines(runtime.install(fixes))


def _ds(n: int = 16) -> TensorDataset:
    return TensorDataset(torch.randn(n, 4), torch.randn(n, 1))


class Stream(IterableDataset):
    def __iter__(self):
        yield from range(8)


class ShardedStream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(start, 8, step)


def test_nothing_to_install_imports_nothing_and_returns_empty():
    assert runtime.install(()) == {}


@pytest.mark.e2e
def test_dataloader_created_after_install_gets_the_new_kwargs():
    notes = install(
        FixRequest("dataloader_workers", {"num_workers": 2}),
        FixRequest("persistent_workers"),
        FixRequest("prefetch_factor", {"prefetch_factor": 4}),
    )
    assert notes["dataloader_workers"].startswith("installed: ")
    loader = DataLoader(_ds(), 4, True)  # positional batch_size/shuffle are bound correctly
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 4)
    assert loader.batch_size == 4
    assert notes["dataloader_workers"] == "applied: num_workers 0->2"
    assert runtime.is_applied(notes["persistent_workers"])
    assert runtime.is_applied(notes["prefetch_factor"])
    assert len(list(loader)) == 4  # the workers really run


@pytest.mark.e2e
def test_workers_are_not_added_to_an_iterable_dataset_that_does_not_shard():
    notes = install(FixRequest("dataloader_workers", {"num_workers": 2}), FixRequest("prefetch_factor"))
    loader = DataLoader(Stream(), batch_size=2)
    assert loader.num_workers == 0
    assert "does not shard" in notes["dataloader_workers"]
    assert runtime.is_not_applied(notes["dataloader_workers"])
    assert "needs workers" in notes["prefetch_factor"]
    sharded = DataLoader(ShardedStream(), batch_size=2)
    assert sharded.num_workers == 2
    assert runtime.is_applied(notes["dataloader_workers"])
    assert sorted(int(x) for b in sharded for x in b) == list(range(8))  # no duplicates


def test_existing_workers_are_kept_and_explained():
    notes = install(FixRequest("dataloader_workers", {"num_workers": 2}))
    loader = DataLoader(_ds(), batch_size=4, num_workers=3)
    assert loader.num_workers == 3
    assert notes["dataloader_workers"] == "not applied: the DataLoader already has num_workers=3"


def test_batch_fusion_multiplies_the_batch_size():
    notes = install(FixRequest("batch_fusion", {"factor": 4}))
    loader = DataLoader(_ds(32), batch_size=2)
    assert loader.batch_size == 8
    assert len(next(iter(loader))[0]) == 8
    assert "batch_size 2->8" in notes["batch_fusion"]


def test_cpu_threads_leaves_cores_for_workers():
    if runtime._cores() < 2:
        pytest.skip("needs 2 cores")
    torch.set_num_threads(runtime._cores())
    notes = install(FixRequest("dataloader_workers", {"num_workers": 1}), FixRequest("cpu_threads"))
    DataLoader(_ds(), batch_size=4)
    assert torch.get_num_threads() == runtime._cores() - 1
    assert runtime.is_applied(notes["cpu_threads"])


@pytest.mark.parametrize("fix", ["pin_memory", "non_blocking_copy", "fp16_amp", "tf32", "cudnn_benchmark"])
def test_cuda_only_fixes_say_why_on_cpu(fix):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    notes = install(FixRequest(fix))
    DataLoader(_ds(), batch_size=4)
    assert runtime.is_not_applied(notes[fix])
    assert "CUDA" in notes[fix]


def test_unknown_fix_id_is_reported_not_raised():
    assert install(FixRequest("warp_drive")) == {"warp_drive": "not applied: unknown fix id"}


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def test_bf16_autocast_runs_the_matmuls_in_bf16_and_returns_float32():
    notes = install(FixRequest("bf16_autocast"))
    model = _mlp()
    inner: list[torch.dtype] = []
    model[0].register_forward_hook(lambda m, i, o: inner.append(o.dtype))
    out = model(torch.randn(4, 8))
    assert inner == [torch.bfloat16]
    assert out.dtype == torch.float32  # loss code outside the model stays float32
    loss = nn.functional.mse_loss(out, torch.zeros(4, 2))
    loss.backward()
    assert model[0].weight.grad is not None and model[0].weight.grad.dtype == torch.float32
    assert notes["bf16_autocast"].startswith("applied: torch.autocast('cpu', bfloat16)")


def test_bf16_autocast_refuses_when_the_script_already_autocasts():
    notes = install(FixRequest("bf16_autocast"))
    model = _mlp()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(2, 8))
    assert notes["bf16_autocast"] == "not applied: the script already runs under torch.autocast"


def test_autocast_recasts_weights_after_each_optimizer_step():
    # A stale autocast weight cache would make the second forward ignore the update.
    install(FixRequest("bf16_autocast"))
    model = nn.Linear(4, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x = torch.ones(1, 4)
    first = model(x).item()
    model(x).sum().backward()
    opt.step()
    assert model(x).item() != pytest.approx(first)


def test_channels_last_converts_a_conv_net_and_skips_an_mlp():
    notes = install(FixRequest("channels_last"))
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    seen: list[bool] = []
    net[0].register_forward_pre_hook(
        lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    net(torch.randn(2, 3, 8, 8))
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert seen == [True]
    assert runtime.is_applied(notes["channels_last"])
    runtime.uninstall()
    notes = install(FixRequest("channels_last"))
    _mlp()(torch.randn(2, 8))
    assert notes["channels_last"] == "not applied: Sequential has no 2-D/3-D convolutions"


def test_fused_optimizer_sets_fused_unless_the_script_chose():
    notes = install(FixRequest("fused_optimizer"))
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # a generator: must not be used up
    assert opt.defaults["fused"] is True
    assert len(opt.param_groups[0]["params"]) == 4
    assert notes["fused_optimizer"] == "applied: SGD(fused=True)"
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    assert adam.defaults["fused"] is True
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    assert opt2.defaults["foreach"] is False


def test_fused_refused_at_the_first_step_falls_back_to_foreach(monkeypatch):
    real_step = torch.optim.SGD.step

    def picky_step(self, *a, **k):  # as torch does where fused's needs are checked when it steps
        if self.param_groups[0]["fused"]:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.SGD, "step", picky_step)
    notes = install(FixRequest("fused_optimizer"))
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # it stepped
    assert opt.param_groups[0]["fused"] is False and opt.param_groups[0]["foreach"] is True
    assert "fused refused at the first step" in notes["fused_optimizer"]
    opt.step()  # later steps go straight through


def test_torch_compile_compiles_the_model_in_place():
    notes = install(FixRequest("torch_compile", {"backend": "eager"}))
    model = _mlp()
    loss_fn = nn.MSELoss()
    out = model(torch.randn(4, 8))
    loss_fn(out, torch.zeros(4, 2)).backward()
    assert getattr(model, "_compiled_call_impl", None) is not None
    assert getattr(loss_fn, "_compiled_call_impl", None) is None  # no parameters: not the model
    assert notes["torch_compile"] == "applied: Sequential.compile() on its first call"


def test_grad_scaling_keeps_the_gradients_and_the_recorded_loss_unscaled():
    # fp16_amp only installs on CUDA; its loss-scaling mechanism is checked here with a CPU scaler.
    torch.manual_seed(0)
    ref_model = _mlp()
    model = _mlp()
    model.load_state_dict(ref_model.state_dict())
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    nn.functional.mse_loss(ref_model(x), y).backward()
    ref_opt.step()

    state = runtime._State({})
    state.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    state._patch_grad_scaling()
    seen: list[float] = []
    original = torch.autograd.backward

    def spy(tensors, *a, **k):
        seen.append(float(tensors.detach()) if isinstance(tensors, torch.Tensor) else float("nan"))
        return original(tensors, *a, **k)

    torch.autograd.backward = spy
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        assert model[0].weight.grad.abs().max() > 10 * ref_model[0].weight.grad.abs().max()  # scaled
        opt.step()  # unscales, steps, updates
    finally:
        torch.autograd.backward = original
    assert seen == [pytest.approx(loss.item())]
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_install_writes_no_files(tmp_path: Path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    before = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    monkeypatch.chdir(tmp_path)
    install(FixRequest("dataloader_workers", {"num_workers": 2}), FixRequest("bf16_autocast"),
            FixRequest("fused_optimizer"), FixRequest("channels_last"))
    DataLoader(_ds(), batch_size=4)
    _mlp()(torch.randn(2, 8))
    after = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert before == after
    assert os.listdir(tmp_path) == ["train.py"]


def test_loader_kwargs_are_bound_through_a_foreign_wrapper():
    # The capture's hooks wrap DataLoader.__init__ as (*args, **kwargs) before install() runs.
    real = DataLoader.__init__

    def __init__(self, *args, **kwargs):
        real(self, *args, **kwargs)

    DataLoader.__init__ = __init__
    try:
        notes = install(FixRequest("dataloader_workers", {"num_workers": 2}))
        loader = DataLoader(_ds(), 4)
        assert loader.num_workers == 2 and loader.batch_size == 4
        assert runtime.is_applied(notes["dataloader_workers"])
        runtime.uninstall()
        assert DataLoader.__init__ is __init__
    finally:
        DataLoader.__init__ = real


def test_copy_targets_are_recognised_without_a_gpu():
    assert runtime._targets_cuda(("cuda",), {})
    assert runtime._targets_cuda((), {"device": torch.device("cuda", 0)})
    assert not runtime._targets_cuda((torch.float16,), {})
    assert not runtime._targets_cuda(("cpu",), {})


def test_cpu_threads_standalone_sets_the_threads_before_the_script():
    if runtime._cores() < 2:
        pytest.skip("needs 2 cores")
    torch.set_num_threads(2)
    notes = install(FixRequest("cpu_threads", {"threads": 1, "standalone": True}))
    assert torch.get_num_threads() == 1  # no DataLoader needed
    assert runtime.is_applied(notes["cpu_threads"]) and "set_num_threads(1) (was 2)" in notes["cpu_threads"]
    again = install(FixRequest("cpu_threads", {"threads": 1, "standalone": True}))
    assert runtime.is_not_applied(again["cpu_threads"])  # already one thread: says so


def test_cpu_threads_standalone_holds_the_scripts_own_thread_count():
    # advisor-bench's oversubscribed cases: the script itself calls torch.set_num_threads(8) on two
    # cores, after the fix set its count: the call is held at the fix's target
    original = torch.set_num_threads
    torch.set_num_threads(1)
    notes = install(FixRequest("cpu_threads", {"threads": 1, "standalone": True}))
    torch.set_num_threads(8)
    assert torch.get_num_threads() == 1
    assert runtime.is_applied(notes["cpu_threads"]) and "torch.set_num_threads(8) held at 1" in notes["cpu_threads"]
    runtime.uninstall()
    assert torch.set_num_threads is original


def test_fewer_workers_lowers_num_workers():
    notes = install(FixRequest("dataloader_workers", {"num_workers": 1, "fewer": True}))
    loader = DataLoader(_ds(), batch_size=4, num_workers=3)
    assert loader.num_workers == 1 and "num_workers 3->1" in notes["dataloader_workers"]


@pytest.mark.parametrize("script", ["new_set_then_legacy_read", "new_read", "legacy_set_then_new_read", "cudnn_new"])
def test_tf32_leaves_both_flag_apis_usable_by_the_script(monkeypatch, script):
    # torch >= 2.9 refuses some mixes of allow_tf32 and fp32_precision; after the fix's flags,
    # a script using either API must still run (torch 2.13 here; the GPU check covers 2.11)
    from advisor.fixes.catalog import tf32

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    precision = torch.get_float32_matmul_precision()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    notes: dict = {}
    try:
        tf32.install(runtime._State(notes), {})
        if script == "new_set_then_legacy_read":
            matmul.fp32_precision = "tf32"
            assert matmul.allow_tf32 is True
        elif script == "new_read":
            assert matmul.fp32_precision in ("tf32", "none")
        elif script == "legacy_set_then_new_read":
            matmul.allow_tf32 = True
            assert matmul.fp32_precision == "tf32"
        else:
            cudnn.conv.fp32_precision = "tf32"
            assert cudnn.allow_tf32 is True
    finally:
        runtime.uninstall()
        torch.set_float32_matmul_precision(precision)
    assert "applied" in str(notes["tf32"])
