"""The backend of ``advisor sweep``: the batch x precision x accumulation table, saved as it runs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor._proc import interrupt_once
from advisor.api.process import (
    capture_function,
    interrupt_signal,
    signals_ignored,
)
from advisor.capture.model import RunCapture, RunSpec
from advisor.errors import UsageError


def sweep_script(
    spec: RunSpec, batch_sizes: Sequence[int], precisions: Sequence[str], repeats: int = 2,
    progress: Callable[[Any], None] | None = None, accumulations: Sequence[int] = (1,),
    runner: Callable[..., RunCapture] | None = None, cold_start: bool = False,
    sizes: Sequence[int | None] = (None,), size_option: str | None = None,
) -> Any:
    """Run ``advisor sweep``: every input size x batch size x precision x accumulation cell at run time; return the SweepTable.

    ``sizes`` are values of the script's own input-size option (``size_option``, else the first
    one advisor recognises); ``(None,)`` leaves the size as the script has it.

    Cell runs go to ``<spec.out_dir>/trials/``; the table is saved as ``<spec.out_dir>/sweep.json``
    after every run (status ``running``) and at the end, and the recommended cell's diff as
    ``sweep.diff``. Ctrl-C or SIGTERM stops the run in flight (the capture stage ends its process
    group), saves the table with the cells finished so far and status ``interrupted``, and raises
    :class:`~advisor.errors.Interrupted` (exit 128 + the signal: 130, 143, 129).

    Cell runs are forked from a warm-start server, as the fix loop's trial runs are, unless
    ``cold_start`` (or a ``runner`` of the caller's is given).
    """
    from advisor.capture.set_aside import restored_note, saves_set_aside
    from advisor.capture.warm import warm_runner
    from advisor.errors import Interrupted
    from advisor.fixes.loop import installer_modules
    from advisor.rundir import SWEEP_DIFF_FILE, SWEEP_FILE, TRIALS_DIR, create_unique
    from advisor.sweep.model import CellStatus, SweepStatus, SweepTable
    from advisor.sweep.render import render_json
    from advisor.sweep.run import parse_cells, run_sweep

    cells = parse_cells(batch_sizes, precisions, accumulations, sizes)
    out = create_unique(spec.out_dir)
    last: list[Any] = [SweepTable(script=str(spec.script), args=tuple(spec.args), status=SweepStatus.RUNNING)]
    asked_to_stop: list[Any] = [False]

    def save(table: Any) -> None:
        (out / SWEEP_FILE).write_text(render_json(table), encoding="utf-8")

    def checkpoint(table: Any) -> None:
        last[0] = table
        save(table)
        if asked_to_stop[0]:
            raise KeyboardInterrupt  # a swallowed signal still stops the sweep at the next run's end

    save(last[0])
    cell_spec = replace(spec, out_dir=out, quiet=True)
    # NOTE: a file the script's runs would save over is set aside and put back as the cells end
    with saves_set_aside() as restored:
        warm = warm_runner(
            cell_spec, capture_function(spec), enabled=runner is None and not cold_start, modules=installer_modules(),
            log=out / TRIALS_DIR / "warm-start.log",
        )
        try:
            with interrupt_once(asked_to_stop), warm as (warm_run, started):
                table = run_sweep(
                    cell_spec, cells, repeats=repeats, runner=runner or warm_run,
                    progress=progress, checkpoint=checkpoint, size_name=size_option,
                )
                table = replace(table, notes=(*table.notes, *started.notes("cell runs")))
        except KeyboardInterrupt as exc:
            signum = interrupt_signal(exc, asked_to_stop[0])
            with signals_ignored():  # a second ^C must not cut the final write short
                done = replace(last[0], status=SweepStatus.INTERRUPTED)
                save(done)
            n = sum(1 for x in done.results if x.status != CellStatus.NOT_RUN and not x.unfinished)
            raise Interrupted(
                f"interrupted; {n} finished cell(s) of {len(cells)} are saved in {out / SWEEP_FILE}",
                signum=signum,
            ) from None
    if restored:
        table = replace(table, notes=(*table.notes, restored_note(restored)))
    save(table)
    if table.diff:
        (out / SWEEP_DIFF_FILE).write_text(table.diff, encoding="utf-8")
    return table


def nothing_ran(table: Any) -> str | None:
    """Say why a sweep measured nothing (every cell failed, ran out of memory or could not apply), else None.

    Such a sweep exited 0 as if it had found a recommended cell (issue #30); the caller exits 3,
    the script failed, with the table still written.
    """
    from advisor.sweep.model import CellStatus

    results = tuple(getattr(table, "results", ()))
    if not results or any(r.status == CellStatus.OK for r in results):
        return None
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    how = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"no cell of the sweep could run ({how}); the table says why for each"


def load_sweep(path: Path) -> Any:
    """Read a saved SweepTable from a sweep's run directory or its ``sweep.json``."""
    from advisor.sweep.model import load_table

    return load_table(path)


def sweep_format(fmt: str | None, output: Path | None) -> str:
    """Decide a sweep's output format before it runs: ``fmt``, else ``output``'s extension, else text.

    Raises:
        UsageError: An extension advisor does not know, a format ``advisor sweep`` does not
            write, HTML bound for a terminal, or ``-o`` naming a run directory's own file; all
            before any run is spent.
    """
    from advisor.report.render import resolve_format
    from advisor.rundir import SWEEP_FILE, is_managed_name, refuse_managed_output
    from advisor.sweep.render import RENDERERS

    try:
        chosen = resolve_format(fmt, output)
    except UsageError:
        raise UsageError(
            f"cannot tell the format from {output}; pass --format ({', '.join(RENDERERS)}) or use .txt, .md, .json or .html"
        ) from None
    if chosen not in RENDERERS:
        raise UsageError(f"advisor sweep writes {', '.join(RENDERERS)}, not {chosen!r}")
    if chosen == "html" and (output is None or str(output) == "-") and sys.stdout.isatty():
        raise UsageError("HTML is not written to a terminal; pass -o sweep.html or pipe it")
    if output is not None and str(output) != "-":
        refuse_managed_output(output)
        target = Path(output).absolute()
        if (target.parent / SWEEP_FILE).is_file() and is_managed_name(target.name):
            # NOTE: a sweep's own folder holds no capture, so refuse_managed_output does not know it
            raise UsageError(f"{output} would overwrite {target.name} of the sweep in {target.parent}; choose another -o path")
    return chosen


def write_sweep(table: Any, fmt: str | None, output: Path | None) -> Path | None:
    """Render a SweepTable and write it as diagnose writes reports: to ``output`` (atomically), else stdout.

    The format is ``fmt``, else ``output``'s extension, else text; HTML is refused on a terminal
    and ``-o`` never overwrites a run directory's own files.
    """
    from advisor.report.render import resolve_format, write_output

    chosen = resolve_format(fmt, output)
    return write_output(render_sweep(table, chosen), chosen, output)


def render_sweep(table: Any, fmt: str) -> str:
    """Render a SweepTable as ``text``, ``markdown``, ``json`` or ``html``."""
    from advisor.sweep.render import RENDERERS

    if fmt not in RENDERERS:
        raise UsageError(f"advisor sweep writes {', '.join(RENDERERS)}, not {fmt!r}")
    return RENDERERS[fmt](table)
