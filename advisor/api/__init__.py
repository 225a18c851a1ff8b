"""The library API, and the one door the CLI goes through for every command.

Each command's backend is a module of this package (:mod:`.script` and :mod:`.fixloop` for
``diagnose``, :mod:`.analysis`, :mod:`.report`, :mod:`.compare`, :mod:`.runs`, :mod:`.sweep`,
:mod:`.rules`, :mod:`.fixes`, :mod:`.tensorboard`; live progress in :mod:`.progress`), and every
public function is re-exported here, so ``advisor.cli`` imports no stage package
(tests/test_layers.py). The Python API (``advisor.diagnose``, ``advisor.analyze``,
``advisor.load``) is defined here.

Stage modules are imported inside the functions so that reading traces never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.errors import UsageError

if TYPE_CHECKING:
    from advisor.api.analysis import analyze_report, evaluate
    from advisor.api.compare import compare_paths, load_side, regression, write_comparison
    from advisor.api.fixes import explain_fixes, fixes_reference, list_fixes
    from advisor.api.fixloop import FixOptions, try_fixes
    from advisor.api.progress import live_progress, sweep_progress
    from advisor.api.report import (
        exit_code_for,
        failing_lines,
        load_report,
        report_schema,
        write_report,
    )
    from advisor.api.rules import (
        config_options,
        config_view,
        engine_config,
        fix_vocabulary,
        rule_set,
    )
    from advisor.api.runs import list_runs, render_runs
    from advisor.api.script import (
        DiagnoseResult,
        check_fix_ids,
        check_out_dir,
        diagnose_script,
        find_module_file,
        new_run_dir,
        node_dir_name,
        rendezvous_env,
        validate_script,
    )
    from advisor.api.sweep import (
        load_sweep,
        nothing_ran,
        render_sweep,
        sweep_format,
        sweep_script,
        write_sweep,
    )
    from advisor.api.tensorboard import prepare_tensorboard, serve_tensorboard, tensorboard_check
    from advisor.api.verify import (
        VERIFY_FILE,
        verification_lines,
        verification_pair_line,
        verify_run,
    )
    from advisor.capture.budget import DEFAULT_TRACE_EXPORT_S
    from advisor.capture.model import RunCapture, RunSpec, RunStatus
    from advisor.config import ANY_OPTION, ResolvedConfig, Setting, describe_source
    from advisor.engine.model import EngineConfig
    from advisor.engine.ruleset import Rule, RuleSet
    from advisor.engine.selection import Selection
    from advisor.report.model import Report

# NOTE: every name below loads on first use (PEP 562): `advisor analyze big.json` forks its
# decode workers (advisor.api.early) before pandas and the stages are imported.
_SOURCES: dict[str, tuple[str, ...]] = {
    "advisor.api.analysis": ("analyze_report", "evaluate"),
    "advisor.api.compare": ("compare_paths", "load_side", "regression", "write_comparison"),
    "advisor.api.fixes": ("explain_fixes", "fixes_reference", "list_fixes"),
    "advisor.api.fixloop": ("FixOptions", "try_fixes"),
    "advisor.api.progress": ("live_progress", "sweep_progress"),
    "advisor.api.report": ("exit_code_for", "failing_lines", "load_report", "report_schema", "write_report"),
    "advisor.api.rules": ("config_options", "config_view", "engine_config", "fix_vocabulary", "rule_set"),
    "advisor.api.runs": ("list_runs", "render_runs"),
    "advisor.api.script": ("DiagnoseResult", "check_fix_ids", "check_out_dir", "diagnose_script", "find_module_file", "new_run_dir", "node_dir_name", "rendezvous_env", "validate_script"),
    "advisor.api.sweep": ("load_sweep", "nothing_ran", "render_sweep", "sweep_format", "sweep_script", "write_sweep"),
    "advisor.api.tensorboard": ("prepare_tensorboard", "serve_tensorboard", "tensorboard_check"),
    "advisor.api.verify": ("VERIFY_FILE", "verification_lines", "verification_pair_line", "verify_run"),
    "advisor.capture.budget": ("DEFAULT_TRACE_EXPORT_S",),
    "advisor.capture.model": ("RunCapture", "RunSpec", "RunStatus"),
    "advisor.config": ("ANY_OPTION", "ResolvedConfig", "Setting", "describe_source"),
    "advisor.engine.model": ("EngineConfig",),
    "advisor.engine.ruleset": ("Rule", "RuleSet"),
    "advisor.engine.selection": ("Selection",),
    "advisor.report.model": ("Report",),
}
_LAZY = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def _load(*names: str) -> None:
    """Load the lazy ``names`` a wrapper below calls (a name already set, e.g. replaced by a test, stays)."""
    for name in names:
        if name not in globals():
            __getattr__(name)


__all__ = [
    "DEFAULT_TRACE_EXPORT_S",
    "DiagnoseResult",
    "EngineConfig",
    "FixOptions",
    "Report",
    "ResolvedConfig",
    "Rule",
    "RuleSet",
    "RunCapture",
    "RunSpec",
    "RunStatus",
    "Selection",
    "Setting",
    "VERIFY_FILE",
    "analyze",
    "analyze_report",
    "check_fix_ids",
    "check_out_dir",
    "compare_paths",
    "config_options",
    "config_view",
    "describe_source",
    "diagnose",
    "diagnose_script",
    "engine_config",
    "evaluate",
    "exit_code_for",
    "explain_fixes",
    "failing_lines",
    "find_module_file",
    "fix_vocabulary",
    "fixes_reference",
    "list_fixes",
    "list_runs",
    "live_progress",
    "load",
    "load_report",
    "load_side",
    "load_sweep",
    "nothing_ran",
    "new_run_dir",
    "node_dir_name",
    "prepare_tensorboard",
    "regression",
    "render_runs",
    "render_sweep",
    "rendezvous_env",
    "report_schema",
    "rule_set",
    "serve_tensorboard",
    "sweep_format",
    "sweep_progress",
    "sweep_script",
    "tensorboard_check",
    "try_fixes",
    "validate_script",
    "verification_lines",
    "verification_pair_line",
    "verify_run",
    "write_comparison",
    "write_report",
    "write_sweep",
]


# -- the Python API: advisor.diagnose / advisor.analyze / advisor.load ------------------------------
# NOTE: thin wrappers over the same functions the commands call, with the command line's option
# names as keyword arguments, so what a notebook gets is what `advisor diagnose` reports. They live
# at the door and call its names, so a caller that replaces ``advisor.api.diagnose_script`` (a
# test, a notebook) replaces it for them too.


def diagnose(
    script: str | Path,
    args: Sequence[str] = (),
    *,
    out: str | Path | None = None,
    module: bool = False,
    warmup: int | None = None,
    steps: int | None = None,
    profile_steps: int | None = None,
    trace_budget: int | None = None,
    full: bool = False,
    timeout: float | None = None,
    fixes: bool = True,
    unsafe_fixes: bool = False,
    fix: Sequence[str] = (),
    repeats: int | None = None,
    seed: int = 0,
    write: bool = False,
    nproc_per_node: int = 1,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    inline_ignores: bool = True,
    progress: bool = False,
) -> Report:
    """Run a training script under the profiler, diagnose it, try the fixes; return the report.

    The Python form of ``advisor diagnose``: the keyword arguments are its options (``steps`` is
    ``--steps``, ``fix=["pin_memory"]`` is ``--fix pin_memory``, ``fixes=False`` is
    ``--no-fixes``); an option left out takes the command's default. Rule selection comes from
    ``[tool.advisor]`` as for the command, under ``select``/``ignore``; the file's diagnose
    options are defaults of the command line only, so a call says what it measures.

    Args:
        script: The training script (or a module name with ``module=True``).
        args: Arguments for the script, unchanged.
        out: The run directory (default: ``advisor-runs/<script>-<timestamp>``).
        module: Run ``script`` as a module, as ``python -m`` does.
        warmup: Warm-up steps, not measured (default 5).
        steps: Timed steps without the profiler (default 20).
        profile_steps: Steps under torch.profiler, as many again under cProfile (default 10).
        trace_budget: Bytes the exported trace may take (default 256 MiB); fewer profiled steps,
            then no memory events or Python stacks, keep it under (``--trace-budget``).
        full: Let the script run to its end.
        timeout: Stop a hung script after this many seconds.
        fixes: Try the suggested fixes (False: diagnose only).
        unsafe_fixes: Also try fixes that may change numerics or batch semantics.
        fix: Try only these fix ids.
        repeats: Interleaved baseline/variant repeats per fix (default 3).
        seed: Seed for the loss-parity checks of the fix trials.
        write: Apply the kept fixes' diff to the script, keeping a ``.bak`` copy.
        nproc_per_node: Launch through torchrun with this many processes.
        select: Only these rules (codes or prefixes).
        extend_select: Add these rules to the selection.
        ignore: Skip these rules.
        preview: Also run preview rules.
        inline_ignores: Honour ``# advisor: ignore[CODE]`` comments.
        progress: Show live progress on stderr.

    Returns:
        The report, also saved as ``report.json`` in ``report.run.run_dir``. A script that
        failed does not raise: ``report.run.status`` says ``crashed``/``timeout``/``no_steps``
        and ``report.run.error`` what happened, with whatever was measured.

    Raises:
        UsageError: a missing script, an unknown fix id or rule code, or a bad config file.
    """
    import datetime as _dt

    _load("check_fix_ids", "find_module_file", "validate_script", "engine_config", "ANY_OPTION", "new_run_dir",
          "RunSpec", "FixOptions", "live_progress", "diagnose_script")
    if write and not fixes:
        raise UsageError("write=True applies the fixes' diff; it needs fixes=True")
    check_fix_ids(tuple(fix))
    module_name = None
    path = Path(script)
    if module:
        module_name = str(script)
        path = find_module_file(module_name, [Path.cwd()])
    path = validate_script(path)
    config = engine_config(select, extend_select, ignore, preview, start=path.parent, option_keys=ANY_OPTION)
    if out is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = new_run_dir(Path("advisor-runs") / f"{path.stem}-{stamp}")
    else:
        run_dir = Path(out)
    from advisor.capture.budget import DEFAULT_TRACE_EXPORT_S as export_s  # noqa: PLC0415 - loads on first use

    given = {"warmup_steps": warmup, "timed_steps": steps, "profiled_steps": profile_steps,
             "trace_budget_bytes": trace_budget,
             "trace_export_s": export_s if profile_steps is None else None}
    spec = RunSpec(
        script=path, args=tuple(args), out_dir=run_dir.resolve(), full=full, timeout_s=timeout, seed=seed,
        quiet=not progress, cwd=Path.cwd(), nproc_per_node=nproc_per_node, module=module_name,
        **{k: v for k, v in given.items() if v is not None},
    )
    options = FixOptions(enabled=fixes, unsafe=unsafe_fixes, only=tuple(fix), write=write,
                         **({"repeats": repeats} if repeats is not None else {}))
    on_capture, on_trial, stop = live_progress(path.name) if progress else (None, None, lambda: None)
    try:
        result = diagnose_script(spec, engine_config=config, fix_options=options, progress=on_capture,
                                 trial_progress=on_trial, inline_ignores=inline_ignores)
    finally:
        stop()
    return result.report


def analyze(
    path: str | Path,
    *,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    inline_ignores: bool = True,
) -> Report:
    """Diagnose traces you already have: a trace file (``.json``/``.json.gz``), a folder of them, or a run directory.

    The Python form of ``advisor analyze``; no script runs and nothing is written.

    Raises:
        InputError: the path is missing or holds no readable trace.
        UsageError: an unknown rule code or a bad config file.
    """
    _load("engine_config", "ANY_OPTION", "analyze_report")
    config = engine_config(select, extend_select, ignore, preview, option_keys=ANY_OPTION)
    return analyze_report(path, config, inline_ignores=inline_ignores)


def load(run_dir: str | Path) -> Report:
    """Return the report a diagnose saved (a run directory or its ``report.json``), without re-running anything."""
    _load("load_report")
    return load_report(run_dir)
