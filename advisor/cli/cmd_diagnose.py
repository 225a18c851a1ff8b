"""``advisor diagnose [OPTIONS] SCRIPT [SCRIPT_ARGS]...``: capture, diagnose, try fixes, report.

Options come before SCRIPT; everything after SCRIPT belongs to the script, unchanged (the
torchrun convention), so ``advisor diagnose train.py --lr 0.1 -q`` passes ``-q`` to the script.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable_line
from advisor.api import EngineConfig, RunSpec, RunStatus
from advisor.cli._common import emit_report
from advisor.cli.configured import ConfiguredCommand, given_as, option_keys
from advisor.cli.grouped_help import grouped
from advisor.cli.options import (
    TRACE_BUDGET_DEFAULT,
    ByteSize,
    PositiveSeconds,
    advisor_options_in,
    output_options,
    rule_selection_options,
    split_codes,
    verbosity_options,
)
from advisor.errors import ScriptFailed, UsageError

EPILOG = """\b
Examples:
  advisor diagnose train.py --epochs 3          everything after train.py goes to the script
  advisor diagnose --no-fixes train.py          diagnose only
  advisor diagnose --unsafe-fixes train.py      also try bf16, compile, batch fusion
  advisor diagnose --fix dataloader_workers --diff train.py
  advisor diagnose --budget 120 train.py        spend at most two minutes on the fix trials
  advisor diagnose --format html -o report.html train.py
  advisor diagnose -m mypkg.train --epochs 3    run a module, as python -m does
"""


def default_run_dir(script: Path) -> Path:
    """Create ``advisor-runs/<script-stem>-<timestamp>`` (``-2``, ``-3``... when taken) and return it."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return api.new_run_dir(Path("advisor-runs") / f"{script.stem}-{stamp}")


HELP_GROUPS = (
    ("Everyday", ("as_module", "out_dir", "replace_out", "no_fixes", "unsafe_fixes", "only_fixes", "show_diff", "write", "timeout")),
    ("Fix loop", ("budget_s", "repeats", "exhaustive", "cold_start", "seed", "memory_budget")),
    ("Capture phases", ("warmup", "timed_steps", "profile_steps", "trace_budget", "full")),
    ("Distributed (torchrun, several nodes)",
     ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_backend", "rdzv_id")),
    ("Output", ("fmt", "output", "fail_on", "quiet", "verbose", "help")),
    ("Rule selection", ("select", "extend_select", "ignore", "preview", "no_inline_ignores")),
)
"""``--help``'s sections (issue #32: 33 options in one list, multi-node among the everyday ones)."""


@click.command(
    cls=grouped(ConfiguredCommand, HELP_GROUPS),
    epilog=EPILOG,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": False},
)
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "as_module", is_flag=True,
              help="SCRIPT is a module name (package.module), run as `python -m` runs it, from the current folder.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory (default: advisor-runs/<script>-<timestamp>).")
@click.option("--replace", "replace_out", is_flag=True,
              help="Let --out name a folder that already holds a run: that run (report, traces, trials) is deleted.")
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0), help="Warm-up steps, not measured.")
@click.option("--steps", "timed_steps", default=20, show_default=True, type=click.IntRange(min=1),
              help="Timed steps without the profiler (step times, samples/s).")
@click.option("--profile-steps", default=10, show_default=True, type=click.IntRange(min=0),
              help="Steps under torch.profiler; as many again run under cProfile right after "
              "(the two cannot share Python's profile hook). 0 disables both. Unless given, fewer (down to 3) "
              "when the first one says the trace would take over 2 s to export.")
@click.option("--trace-budget", type=ByteSize(), default=TRACE_BUDGET_DEFAULT, show_default=True, metavar="SIZE",
              help="Keep the exported trace under SIZE (500MB, 2GB): the first profiled step is measured, then fewer "
              "profiled steps (down to 3), then no memory events, then no Python stacks; the report says what was dropped.")
@click.option("--full", is_flag=True, help="Let the script run to its end instead of stopping after profiling.")
@click.option("--timeout", type=PositiveSeconds(), default=None, metavar="SECONDS",
              help="Stop a hung script after SECONDS (exit 3, partial capture kept).")
@click.option("--memory-budget", type=ByteSize(), default=None, metavar="SIZE",
              help="Cap the script's memory (2GB, 512MiB): the CUDA process fraction on a GPU, a watchdog on the memory "
              "its processes hold on CPU (shared pages counted once); a run over it is out of memory, and the memory fixes are tried.")
@click.option("--no-fixes", is_flag=True, help="Diagnose only; do not try fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="Also try fixes that may change numerics or batch semantics (bf16, compile, batch fusion, larger batches...).")
@click.option("--fix", "only_fixes", multiple=True, metavar="ID",
              help="Try only this fix (repeatable); `advisor fixes` lists the ids, `advisor fix ID` explains one.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1, max=20),
              help="Interleaved baseline/variant repeats per fix.")
@click.option("--budget", "budget_s", type=PositiveSeconds(), default=None, metavar="SECONDS",
              help="Time for the whole fix loop: the fixes with the largest possible gain run first, "
              "and the report names those left untried.")
@click.option("--exhaustive", is_flag=True,
              help="Measure every suggested fix for every --repeats round with the full warm-up "
              "(no Amdahl skips, no fix skipped as inert, no early stops): slower, for comparisons.")
@click.option("--cold-start", is_flag=True,
              help="Start every fix trial run in a fresh interpreter instead of forking it from a process "
              "that has imported torch and the script's libraries once (the warm start; it falls back "
              "to cold starts by itself where it cannot be used).")
# NOTE: numpy's seed range; past it the script "failed before its first step" (exit 3) (issue #30 campaign)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1),
              help="Seed for loss-parity checks in fix trials.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff that makes the kept fixes permanent.")
@click.option("--write", is_flag=True, help="Apply that diff to the script, keeping a .bak copy.")
@click.option("--nproc-per-node", default=1, show_default=True, type=click.IntRange(min=1),
              help="Launch through torchrun with this many processes.")
@click.option("--nnodes", default=1, show_default=True, type=click.IntRange(min=1),
              help="Nodes of the job (run advisor on each, with the same options but --node-rank).")
@click.option("--node-rank", type=click.IntRange(min=0), default=None,
              help="This node's rank in a multi-node job (0 hosts the c10d rendezvous).")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
              help="Rendezvous every node joins (torchrun's; the host of node 0 for c10d).")
@click.option("--rdzv-backend", type=click.Choice(["c10d", "static"]), default="c10d", show_default=True,
              help="torchrun rendezvous backend.")
@click.option("--rdzv-id", default="advisor", show_default=True, help="Job id shared by every node's rendezvous.")
@output_options
@rule_selection_options
@verbosity_options
def diagnose(
    script: Path,
    script_args: tuple[str, ...],
    as_module: bool,
    out_dir: Path | None,
    replace_out: bool,
    warmup: int,
    timed_steps: int,
    profile_steps: int,
    trace_budget: int,
    full: bool,
    timeout: float | None,
    memory_budget: int | None,
    no_fixes: bool,
    unsafe_fixes: bool,
    only_fixes: tuple[str, ...],
    repeats: int,
    budget_s: float | None,
    exhaustive: bool,
    cold_start: bool,
    seed: int,
    show_diff: bool,
    write: bool,
    nproc_per_node: int,
    nnodes: int,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    rdzv_backend: str,
    rdzv_id: str,
    fmt: str | None,
    output: Path | None,
    fail_on: str,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    preview: bool,
    no_inline_ignores: bool,
    quiet: int,
    verbose: int,
) -> int:
    """Run SCRIPT under the profiler, find its bottleneck, try the fixes, and report the speedup."""
    from advisor.api import DiagnoseResult, FixOptions, diagnose_script

    if no_fixes and (write or only_fixes):
        ctx = click.get_current_context()
        no_fixes_as = given_as(ctx, "no_fixes", "--no-fixes")
        if write:
            raise UsageError(f"--write applies the fixes' diff; it cannot be combined with {no_fixes_as}; drop one of them")
        fix_as = given_as(ctx, "only_fixes", "--fix")
        raise UsageError(f"{fix_as} chooses the fixes to try; it cannot be combined with {no_fixes_as}; drop one of them")
    api.check_fix_ids(only_fixes)  # a bad --fix ID fails now, not after a whole capture
    module = None
    if as_module:
        module = str(script)
        script = api.find_module_file(module, [Path.cwd()])
    script = api.validate_script(script)  # missing / not Python -> UsageError (exit 2), before any work
    misplaced = advisor_options_in(script_args)
    if misplaced:
        click.echo(
            # NOTE: the script's name is the user's text: through the terminal door (issue #30 campaign)
            printable_line(f"advisor: note: {' '.join(misplaced)} comes after {script.name}, so it goes to the script "
                           "unchanged; advisor's own options go before SCRIPT"),
            err=True,
        )
    config = engine_config(select, extend_select, ignore, preview, start=script.parent)
    rdzv_env = api.rendezvous_env(nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id)
    run_dir = out_dir or default_run_dir(script)
    if nnodes > 1 and node_rank is not None:
        # every node writes its own folder: on a shared file system they sit side by side
        run_dir = run_dir / api.node_dir_name(node_rank)
    if out_dir is not None:
        api.check_out_dir(run_dir, replace_out)  # a refused --out is an error now, before the live progress
    if nnodes > 1 and not no_fixes:
        no_fixes = True
        click.echo(
            "advisor: note: fix trials are not run for multi-node jobs (every trial would need every "
            "node to relaunch in step); diagnosing only",
            err=True,
        )
    spec = RunSpec(
        script=script,
        args=tuple(script_args),
        out_dir=run_dir.resolve(),
        warmup_steps=warmup,
        timed_steps=timed_steps,
        profiled_steps=profile_steps,
        full=full,
        timeout_s=timeout,
        seed=seed,
        record_loss_steps=0,
        quiet=quiet > 0,
        cwd=Path.cwd(),
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        env=rdzv_env,
        module=module,
        memory_budget_bytes=memory_budget,
        trace_budget_bytes=trace_budget,
    )
    if not _given(click.get_current_context(), "profile_steps"):  # the steps the user asked for are kept
        spec = dataclasses.replace(spec, trace_export_s=api.DEFAULT_TRACE_EXPORT_S)
    fix_options = FixOptions(
        enabled=not no_fixes, unsafe=unsafe_fixes, only=tuple(only_fixes), repeats=repeats, write=write,
        budget_s=budget_s, exhaustive=exhaustive, cold_start=cold_start,
    )
    progress, trial_progress, stop = _progress_sinks(quiet > 0, script.name)
    try:
        result: DiagnoseResult = diagnose_script(
            spec,
            engine_config=config,
            fix_options=fix_options,
            progress=progress,
            trial_progress=trial_progress,
            inline_ignores=not no_inline_ignores,
        )
    finally:
        stop()
    code = emit_report(result.report, fmt, output, fail_on)
    if show_diff:
        click.echo(result.report.diff or "# advisor: no kept fix has a mechanical source change\n", nl=False)
    where = printable_line(str(result.run_dir))
    click.echo(f"advisor: run saved in {where}  (advisor report {where} --format html -o report.html)", err=True)
    _raise_for_script(result, misplaced)
    return code


def _raise_for_script(result: object, misplaced: list[str] | tuple[str, ...] = ()) -> None:
    """Turn a failed script run into exit 3 with a one-line message (the report is already saved)."""
    capture = result.capture  # type: ignore[attr-defined]
    run_dir = result.run_dir  # type: ignore[attr-defined]
    log = Path(run_dir) / capture.stderr_log
    err = capture.error
    if capture.status == RunStatus.CRASHED and capture.steps_seen == 0 and err is not None:
        said = err.last_line or f"{err.type}: {err.message}"
        hint = (
            f"; if {' '.join(misplaced)} was meant for advisor, move it before the script"
            if misplaced
            else ""
        )
        raise ScriptFailed(
            f"the script failed before its first step (exit code {capture.exit_code}): {said}"
            f"{hint}; its stderr is in {log}"
        )
    if capture.status == RunStatus.CRASHED:
        err = capture.error
        what = f"{err.type}: {err.message}" if err else f"exit code {capture.exit_code}"
        at = f" at step {err.step}" if err and err.step is not None else ""
        raise ScriptFailed(f"the script failed{at} with {what}; see {log} (partial capture kept in {run_dir})")
    if capture.status == RunStatus.TIMEOUT:
        raise ScriptFailed(
            f"the script was stopped by --timeout after {capture.steps_seen} steps; "
            f"partial capture kept in {run_dir} (see {log})"
        )
    if capture.status == RunStatus.NO_STEPS:
        raise ScriptFailed(
            "the script ran to its end but no training step was seen: advisor finds steps from "
            "optimizer.step(), else backward() calls, else model calls, else DataLoader batches; "
            "in a loop with none of these call advisor.step() once per step "
            f"(`import advisor; advisor.step()`, a no-op outside advisor); logs in {run_dir}"
        )


def _progress_sinks(quiet: bool, title: str):  # type: ignore[no-untyped-def]
    """Live progress on stderr: a rich bar for the capture, then one line per fix-trial run."""
    if quiet:
        return None, None, (lambda: None)
    return api.live_progress(title)


def engine_config(
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    preview: bool,
    start: Path | None = None,
) -> EngineConfig:
    """Layer ``[tool.advisor]`` from the closest pyproject.toml under the CLI's selection flags."""
    return api.engine_config(
        split_codes(select), split_codes(extend_select), split_codes(ignore), preview, start,
        option_keys=diagnose_option_keys(),
    )


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was set by the user (typed, in the environment or in the config file), not defaulted."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


def diagnose_option_keys() -> frozenset[str]:
    """Return the ``advisor diagnose`` options a config file may set (every command accepts them)."""
    return frozenset(option_keys(diagnose))
