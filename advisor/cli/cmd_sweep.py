"""``advisor sweep [OPTIONS] SCRIPT [SCRIPT_ARGS]...``: the batch size x precision table, measured."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable_line
from advisor.api import RunSpec
from advisor.cli.options import ByteSize, PositiveSeconds, advisor_options_in
from advisor.errors import ScriptFailed, UsageError

EPILOG = """\b
Examples:
  advisor sweep --batch-sizes 8,16,32 --precisions fp32,bf16 train.py --epochs 1
  advisor sweep --batch-sizes 32,128 --memory-budget 3GB --format markdown -o sweep.md train.py
  advisor sweep --batch-sizes 8,32 --accumulation 1,4 --format html -o sweep.html train.py
  advisor sweep --batch-sizes 2 --sizes 64,96,128 --precisions fp32 train_unet.py --patch-size 64
  advisor sweep --load advisor-runs/train-sweep-20261124-101500 -o sweep.html
"""


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} takes whole numbers separated by commas, not {text!r}") from None


@click.command(epilog=EPILOG, context_settings={"allow_interspersed_args": False})
@click.argument("script", type=click.Path(path_type=Path), required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--batch-sizes", default=None, metavar="B1,B2,...",
              help="DataLoader batch sizes, multiples of the script's own (set at run time). Required to run a sweep.")
@click.option("--load", "load", type=click.Path(path_type=Path), default=None, metavar="RUN_DIR",
              help="Render a saved sweep (its RUN_DIR or sweep.json, finished or interrupted) instead of running one.")
@click.option("--precisions", default="fp32,bf16", show_default=True, metavar="P1,P2",
              help="Precisions among fp32, bf16, fp16 (autocast at run time).")
@click.option("--accumulation", "accumulation", default="1", show_default=True, metavar="A1,A2",
              help="Micro-batches per optimizer step: the script's own accumulation option when it has one, "
              "else applied at run time (optimizer steps every A-th batch, gradients averaged).")
@click.option("--sizes", default=None, metavar="S1,S2",
              help="Input sizes, set through the script's own size option (--patch-size, --roi, --image-size, "
              "--seq-len, ...; --size-option names another), else by resizing its MONAI crop transforms at run "
              "time: memory, samples/s and voxels/s (pixels/s, tokens/s) per size.")
@click.option("--size-option", default=None, metavar="NAME",
              help="The script's option that --sizes sets (default: the first recognised size option it has).")
@click.option("--memory-budget", type=ByteSize(), default=None, metavar="SIZE",
              help="Cap each run's memory (2GB, 512MiB): on CPU a watchdog on the memory the "
              "script's processes hold (shared pages counted once) stops a cell that goes over and marks it out_of_memory.")
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(min=1, max=20),
              help="Interleaved runs per cell.")
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0), help="Warm-up steps per run.")
@click.option("--steps", "timed_steps", default=20, show_default=True, type=click.IntRange(min=1), help="Timed steps per run.")
@click.option("--timeout", type=PositiveSeconds(), default=None, metavar="SECONDS", help="Stop a hung run after SECONDS.")
@click.option("--cold-start", is_flag=True,
              help="Start every cell run in a fresh interpreter instead of forking it from a process that has "
              "imported torch and the script's libraries once (the warm start; it falls back to cold starts "
              "by itself where it cannot be used).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory (default: advisor-runs/<script>-sweep-<timestamp>).")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "html"]), default=None,
              help="Output format (default: from the -o extension, else text). HTML is never written to a terminal.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the table here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def sweep(
    script: Path | None, script_args: tuple[str, ...], batch_sizes: str | None, load: Path | None, precisions: str,
    accumulation: str, sizes: str | None, size_option: str | None,
    memory_budget: int | None, repeats: int, warmup: int, timed_steps: int, timeout: float | None, cold_start: bool,
    out_dir: Path | None,
    fmt: str | None,
    output: Path | None, quiet: bool,
) -> int:
    """Run SCRIPT at every input size x batch size x precision x accumulation; print throughput, memory and loss per cell."""
    fmt = api.sweep_format(fmt, output)  # a bad -o or format fails before any run
    if load is not None:
        if script is not None:
            raise UsageError("--load renders a saved sweep; it takes no SCRIPT")
        _emit(api.load_sweep(load), fmt, output)
        return 0
    if script is None or not batch_sizes:
        late = list(dict.fromkeys(a.split("=", 1)[0] for a in advisor_options_in(script_args)))
        if script is not None and late:
            # NOTE: `advisor sweep train.py --batch-sizes 2` handed --batch-sizes to the script
            # and then asked for it, as if it had not been given.
            raise UsageError(
                f"{', '.join(late)} came after SCRIPT, so {'it was' if len(late) == 1 else 'they were'} passed "
                "to the script: advisor's options go "
                "before it (advisor sweep --batch-sizes B1,B2 [OPTIONS] SCRIPT [SCRIPT_ARGS])"
            )
        raise UsageError("give --batch-sizes and SCRIPT to run a sweep (or --load RUN_DIR to render a saved one)")
    script = api.validate_script(script)
    batches = _ints(batch_sizes, "--batch-sizes")
    accumulations = _ints(accumulation, "--accumulation")
    if size_option is not None and sizes is None:
        raise UsageError("--size-option names the option --sizes sets; give --sizes too")
    inputs: list[int | None] = list(_ints(sizes, "--sizes")) if sizes is not None else [None]
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    spec = RunSpec(
        script=script, args=tuple(script_args),
        out_dir=(out_dir or Path("advisor-runs") / f"{script.stem}-sweep-{stamp}").absolute(),
        warmup_steps=warmup, timed_steps=timed_steps, profiled_steps=0, timeout_s=timeout, seed=0,
        cwd=Path.cwd(), memory_budget_bytes=memory_budget,
    )
    on_event, stop = (None, lambda: None) if quiet else api.sweep_progress()
    try:
        table = api.sweep_script(spec, batches, [p.strip() for p in precisions.split(",") if p.strip()], repeats,
                                 on_event, accumulations, cold_start=cold_start, sizes=inputs, size_option=size_option)
    finally:
        stop()
    _emit(table, fmt, output)
    failed = api.nothing_ran(table)
    if failed is not None:
        raise ScriptFailed(f"{failed}; each run's logs are in the sweep's run directory ({TRIALS_HINT})")
    return 0


TRIALS_HINT = "trials/*/stderr.log"


def _emit(table: object, fmt: str, output: Path | None) -> None:
    """Write the sweep to ``-o`` (saying so on stderr), else to stdout."""
    written = api.write_sweep(table, fmt, output)
    if written is not None:
        click.echo(f"advisor: wrote {printable_line(str(written))}", err=True)


