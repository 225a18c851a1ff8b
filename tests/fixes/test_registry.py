"""The fix registry: the shared vocabulary, safety labels and applicability checks."""

from __future__ import annotations

import pytest

from advisor.capture.model import DataLoaderInfo
from advisor.fixes import catalog
from advisor.fixes import catalog as registry
from advisor.fixes.catalog.dataloader_workers import worker_ladder
from advisor.fixes.fix import Fix as FixSpec
from advisor.fixes.fix import FixContext

SAFE = {"dataloader_workers", "pin_memory", "persistent_workers", "prefetch_factor",
        "non_blocking_copy", "cpu_threads", "inference_mode", "host_reads"}
SAFE |= {"activation_checkpointing", "malloc_thresholds"}
UNSAFE = {"bf16_autocast", "fp16_amp", "batch_fusion", "torch_compile", "cudnn_benchmark", "tf32",
          "channels_last", "fused_optimizer", "larger_batch", "script_args", "fused_attention"}
UNSAFE |= {"fit_accumulation"}


def test_every_shared_fix_id_is_registered_once_with_its_safety():
    assert set(registry.fix_ids()) == SAFE | UNSAFE
    assert {f.id for f in registry.all_fixes() if f.safety == "safe"} == SAFE
    assert all(f.description for f in registry.all_fixes())
    assert all(f.install is not None or f.advice for f in registry.all_fixes())  # installable, or advice
    with pytest.raises(ValueError, match="already registered"):
        catalog.collect([*registry.all_fixes(), FixSpec("pin_memory", "safe", "again")])


def test_worker_ladder_is_short_and_sized_to_the_cores():
    assert worker_ladder(1) == (1,)
    assert worker_ladder(2) == (1, 2)
    assert worker_ladder(4) == (1, 2, 4)
    assert worker_ladder(16) == (2, 8, 16)
    assert worker_ladder(16, current=8) == (16,)


def loaders(**kw) -> tuple[DataLoaderInfo, ...]:
    return (DataLoaderInfo(batch_size=8, **kw),)


@pytest.mark.parametrize(
    ("fix", "ctx", "reason"),
    [
        ("pin_memory", FixContext(cuda=False, dataloaders=loaders()), "CUDA"),
        ("fp16_amp", FixContext(cuda=False), "CUDA"),
        ("tf32", FixContext(cuda=False), "CUDA"),
        ("cudnn_benchmark", FixContext(cuda=False), "CUDA"),
        ("non_blocking_copy", FixContext(cuda=False), "CUDA"),
        ("dataloader_workers", FixContext(cpu_count=2), "no torch DataLoader"),
        ("dataloader_workers", FixContext(cpu_count=2, dataloaders=loaders(num_workers=2)), "already uses 2"),
        ("batch_fusion", FixContext(dataloaders=loaders(), batches_per_step=1), "no gradient accumulation"),
        ("pin_memory", FixContext(cuda=True, dataloaders=loaders(pin_memory=True)), "already sets"),
    ],
)
def test_fixes_that_cannot_apply_say_why(fix, ctx, reason):
    why = registry.get(fix).check(ctx)
    assert why is not None and reason in why


def test_fixes_that_can_apply_pass_their_checks():
    ctx = FixContext(cuda=True, cpu_count=4, dataloaders=loaders(), batches_per_step=16)
    for fix in ("pin_memory", "dataloader_workers", "batch_fusion", "bf16_autocast", "tf32"):
        assert registry.get(fix).check(ctx) is None
    assert ctx.accumulation == 16
    assert FixContext(dataloaders=loaders(), samples_per_step=64).accumulation == 8
