"""``script_args``: fixes tried, and handed over, as a new command line of the script's own options."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.capture.model import DataLoaderInfo, RunSpec, ScriptConfig
from advisor.capture.records import ScriptOption
from advisor.capture.vocab import ConfigStyle
from advisor.fixes import catalog
from advisor.fixes.catalog.script_args import with_values
from advisor.fixes.diff import make_diff
from advisor.fixes.fix import FixContext
from advisor.fixes.model import Trial

FIX = catalog.get("script_args")


def argparse_config(batch=8, accum=40, batch_name="micro_batch", accum_name="accum") -> ScriptConfig:
    return ScriptConfig(options=(
        ScriptOption("steps", 50, flag="--steps"),
        ScriptOption(batch_name, batch, flag="--" + batch_name.replace("_", "-"), default=8),
        ScriptOption(accum_name, accum, flag="--" + accum_name.replace("_", "-"), default=40),
    ))


def ctx_for(config: ScriptConfig, accum: int | None = 40, micro: float | None = 8.0, **kw) -> FixContext:
    return FixContext(cpu_count=2, loop_accumulation=accum, micro_batch_samples=micro, script_config=config, **kw)


def test_accumulation_through_the_scripts_own_options():
    spec = RunSpec(script=Path("train.py"), args=("--steps", "50", "--micro-batch", "8", "--accum=40"))
    ctx = ctx_for(argparse_config())
    assert FIX.check(ctx) is None
    (v,) = FIX.plan_variants(ctx, spec)
    # same effective batch: one batch of 8 x 40 and no accumulation, flags replaced where given
    assert v.params["args"] == ["--steps", "50", "--micro-batch", "320", "--accum=1"]
    assert v.params["changes"] == {"micro_batch": 320, "accum": 1}
    assert v.params["command"] == "python train.py --steps 50 --micro-batch 320 --accum=1"
    assert FIX.overrides_for(v.params, spec, ctx) == {"args": ("--steps", "50", "--micro-batch", "320", "--accum=1")}
    assert FIX.rung_name(v.params) == "micro_batch=320 accum=1"


def test_options_left_at_their_defaults_are_appended():
    spec = RunSpec(script=Path("train.py"), module=None)
    assert with_values((), [(argparse_config().get("micro_batch"), 320)]) == ("--micro-batch", "320")
    cfg = ScriptConfig(options=(
        ScriptOption("batch_size", 8, ConfigStyle.CONFIGURATOR, "--batch_size"),
        ScriptOption("gradient_accumulation_steps", 40, ConfigStyle.CONFIGURATOR, "--gradient_accumulation_steps"),
    ))
    (v,) = FIX.plan_variants(ctx_for(cfg), RunSpec(script=spec.script, args=("config/x.py", "--batch_size=8")))
    assert v.params["args"] == ["config/x.py", "--batch_size=320", "--gradient_accumulation_steps=1"]


@pytest.mark.parametrize(
    ("ctx", "reason"),
    [
        (ctx_for(ScriptConfig()), "no command-line configuration"),
        (ctx_for(argparse_config(), accum=None), "no gradient accumulation"),
        (ctx_for(argparse_config(batch_name="width")), "no gradient-accumulation and batch-size options"),
        (ctx_for(argparse_config(accum=10)), "does not match the 40 backward calls"),
        (ctx_for(argparse_config(batch=4)), "does not match the 8 samples per backward"),
        (ctx_for(argparse_config(batch=512), micro=512.0), "passes 4096"),
    ],
)
def test_script_args_says_why_it_cannot_apply(ctx, reason):
    why = FIX.check(ctx)
    assert why is not None and reason in why
    assert FIX.plan_variants(ctx, RunSpec(script=Path("train.py"))) == []


def test_loader_accumulation_is_matched_too_and_batch_fusion_defers_to_it():
    loaders = (DataLoaderInfo(batch_size=8),)
    ctx = FixContext(cpu_count=2, dataloaders=loaders, batches_per_step=40, script_config=argparse_config())
    assert FIX.check(ctx) is None
    why = catalog.get("batch_fusion").check(ctx)
    assert why is not None and "script_args" in why  # the argument is what the user will change
    plain = FixContext(cpu_count=2, dataloaders=loaders, batches_per_step=40)
    assert catalog.get("batch_fusion").check(plain) is None


def test_the_diff_is_the_new_command_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('unchanged')\n")
    params = {"command": "python train.py --micro-batch 320 --accum 1", "changes": {"micro_batch": 320, "accum": 1}}
    diff = make_diff(script, [Trial(fix="script_args", safety=FIX.safety, params=params)])
    assert diff == "# advisor: run with the script's own arguments: python train.py --micro-batch 320 --accum 1\n"
    assert script.read_text() == "print('unchanged')\n"


def test_the_child_records_what_it_ran_with():
    class State:
        notes: dict = {}

        def applied(self, fix, detail):
            self.notes[fix] = detail

    state = State()
    FIX.install(state, {"changes": {"micro_batch": 320, "accum": 1}})
    assert state.notes["script_args"].endswith("micro_batch=320, accum=1")


def test_the_command_names_the_script_as_typed_from_the_working_directory(tmp_path):
    from advisor.fixes.catalog.script_args import command_line

    spec = RunSpec(script=tmp_path / "sub" / "train.py", cwd=tmp_path)
    assert command_line(spec, ("--accum", "1")) == "python sub/train.py --accum 1"
    assert command_line(RunSpec(script=Path("/elsewhere/t.py"), cwd=tmp_path), ()) == "python /elsewhere/t.py"
    assert command_line(RunSpec(script=Path("x"), module="pkg.train", cwd=tmp_path), ("-b", "2")) == "python -m pkg.train -b 2"
