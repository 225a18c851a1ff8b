"""The ``advisor`` command group and the one error boundary that maps errors to exit codes.

Subcommands live in their own modules and are imported lazily, so ``advisor analyze`` (which
only reads traces) never pays for importing torch.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import importlib
import signal
import sys
from typing import Any, NoReturn

import click

from advisor import __version__
from advisor._proc import Interrupted, interrupt_once, quick_exit
from advisor._terminal import printable_line, silence_stream
from advisor.errors import EXIT_USAGE, AdvisorError

# command name -> "module:attribute"; modules are imported only when the command runs.
_COMMANDS: dict[str, str] = {
    "diagnose": "advisor.cli.cmd_diagnose:diagnose",
    "analyze": "advisor.cli.cmd_analyze:analyze",
    "report": "advisor.cli.cmd_report:report",
    "compare": "advisor.cli.cmd_compare:compare",
    "tensorboard": "advisor.cli.cmd_tensorboard:tensorboard",
    "rules": "advisor.cli.cmd_rules:rules",
    "rule": "advisor.cli.cmd_rules:rule",
    "fixes": "advisor.cli.cmd_fixes:fixes",
    "fix": "advisor.cli.cmd_fixes:fix",
    "config": "advisor.cli.cmd_config:config",
    "runs": "advisor.cli.cmd_runs:runs",
    "sweep": "advisor.cli.cmd_sweep:sweep",
    "verify": "advisor.cli.cmd_verify:verify",
}

_SHORT_HELP: dict[str, str] = {
    "diagnose": "Run a training script, find its bottleneck, try the fixes, report the speedup.",
    "analyze": "Diagnose torch.profiler traces you already have (file or directory).",
    "report": "Render a saved run again as text, Markdown, HTML or JSON.",
    "compare": "Compare two runs or traces: speedup, per-category deltas, findings.",
    "tensorboard": "Open a run's traces in TensorBoard's PyTorch Profiler plugin.",
    "rules": "List the rules.",
    "rule": "Explain one rule.",
    "fixes": "List the fixes advisor can apply, measure and diff.",
    "fix": "Explain one fix: what it changes, safety, when it applies, its diff.",
    "config": "Show the resolved configuration and where each setting came from.",
    "runs": "List the saved runs, newest first, to pick two for `advisor compare`.",
    "sweep": "Measure the batch size x precision table: samples/s, memory, loss per cell.",
    "verify": "Time a run's script plainly, without and with its fix.diff, beside the claim.",
}


class LazyGroup(click.Group):
    """A Click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """All command names, in declaration order."""
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import and return the command, or None for an unknown name."""
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands from static help text so ``--help`` imports nothing heavy."""
        rows = [(name, _SHORT_HELP.get(name, "")) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="advisor")
def cli() -> None:
    """Profiler-driven performance advisor for PyTorch training.

    \b
    advisor diagnose train.py --epochs 3     profile, classify, try fixes, report
    advisor analyze traces/                  diagnose traces you already have
    advisor report RUN_DIR -o report.html    render a saved run
    advisor compare RUN_BEFORE RUN_AFTER     before/after speedup report
    advisor tensorboard RUN_DIR              open the traces in TensorBoard
    advisor rules / advisor rule DL001       list rules / explain one
    advisor fixes / advisor fix pin_memory   list fixes / explain one
    advisor config                           resolved settings and their sources
    advisor runs                             list the saved runs, newest first
    advisor verify RUN_DIR                   time the kept fixes plainly, beside the claim
    """  # noqa: D301 - \b is Click's keep-lines marker (the \x08 character), so no raw string


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script: run the CLI and map errors to exit codes."""
    atexit.unregister(_skip_final_collections)  # once, however often main() runs in one process
    atexit.register(_skip_final_collections)
    try:
        with interrupt_once(final=True):  # SIGTERM/SIGHUP stop as ^C does; a second one does not cut the save short
            rv: Any = cli.main(args=argv, prog_name="advisor", standalone_mode=False)
    except AdvisorError as exc:
        click.echo(f"advisor: error: {printable_line(exc.message)}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # Click turns ^C (and our SIGTERM) into Abort
            _interrupted(exc.__cause__)
        click.echo("advisor: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except BrokenPipeError:
        # NOTE: stdout closed by the reader (`advisor report RUN | head`): the exit flush would
        # fail again and print "Exception ignored"; point it at /dev/null first
        silence_stream(sys.stdout)
        sys.exit(0)
    except SystemExit as exc:
        # NOTE: Click answers a closed pipe itself: it wraps stdout (``.wrapped``) and exits 1,
        # which means "findings" in advisor; the same closed pipe gets 0 as above (issue #30 campaign)
        if exc.code == 1 and getattr(sys.stdout, "wrapped", None) is not None:
            sys.exit(0)
        raise
    except OSError as exc:
        # NOTE: the file system refused what the user pointed advisor at (a name over 255 bytes,
        # a symlink loop, a folder without permission, a full disk): bad input, not a bug.
        _say(f"advisor: error: {printable_line(os_error_line(exc))}")
        if sys.stdout is not None and exc.errno == errno.ENOSPC:
            silence_stream(sys.stdout)  # stdout on a full disk: the exit flush must not fail again
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # the one boundary: never a stack trace for the user
        if (stop := _interrupt_inside(exc)) is not None:
            _interrupted(stop)
        click.echo(
            f"advisor: internal error: {type(exc).__name__}: {printable_line(str(exc))} "
            "(please report it with the command you ran; set ADVISOR_DEBUG=1 for the traceback)",
            err=True,
        )
        if _debug():
            raise
        sys.exit(EXIT_USAGE)
    sys.exit(rv if isinstance(rv, int) else 0)


def entry() -> NoReturn:
    """Console entry point (``advisor``, ``python -m advisor``): :func:`main`, then a quick end.

    Once the command has returned, the interpreter's teardown only frees objects, and on a large
    trace that is tens of milliseconds of a command that takes about a second
    (:func:`advisor._proc.quick_exit` says what it keeps). :func:`main` itself ends the usual way:
    tests and embedding callers run it inside their own process.
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    atexit.unregister(_skip_final_collections)  # no final collections follow to skip
    quick_exit(code)


def _exit_status(code: object) -> int:
    """Return the status ``sys.exit(code)`` gives the process: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _say(str(code))
    return 1


def os_error_line(exc: OSError) -> str:
    """One line for an OSError the file system raised: what it was about, why, and what to do."""
    why = exc.strerror or type(exc).__name__
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    where = f"{' -> '.join(names)}: " if names else "cannot write or read: "
    if len(where) > 200:  # a name over the file system's limit is the case; keep the line readable
        where = where[:120] + "…" + where[-60:]
    todo = {
        errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes); use a shorter one",
        errno.ELOOP: "the path goes round a loop of symbolic links; fix the link",
        errno.EACCES: "check its permissions",
        errno.EPERM: "check its permissions",
        errno.ENOSPC: "the disk is full; free some space or write elsewhere",
        errno.EDQUOT: "the disk quota is used up; free some space or write elsewhere",
    }.get(exc.errno or 0, "check the path")
    return f"{where}{why}; {todo}"


def _say(line: str) -> None:
    """Write one line to stderr, whatever state stdout and stderr are in."""
    with contextlib.suppress(Exception):
        click.echo(line, err=True)


def _skip_final_collections() -> None:
    """Collect the garbage once, then exempt what is left from the interpreter's exit collections.

    At exit Python runs full garbage collections over every object still alive (pandas and
    numpy loaded: about 0.1 CPU-s, a tenth of ``advisor analyze --jobs 2``'s serial part on a
    64-rank job, paid after all the work is done). One collection here still runs the
    finalizers of unreachable objects; what survives it is alive, and its memory goes back with
    the process.
    """
    gc.collect()
    gc.freeze()


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    """Exit as a process ended by the signal would report it: 128 + its number."""
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    click.echo(f"advisor: interrupted ({signal.Signals(signum).name})", err=True)
    # NOTE: a KeyboardInterrupt raised inside code run by exec() of a string (dataclasses builds
    # __init__ so, while advisor imports) sets CPython's "unhandled KeyboardInterrupt" flag even
    # when it is handled, and the process then ends by SIGINT (-2) instead of 130. Each exec of
    # a string clears the flag as it starts.
    exec("None")  # noqa: S102 - a constant string
    sys.exit(128 + signum)


def _interrupt_inside(exc: BaseException) -> KeyboardInterrupt | None:
    """Find the Ctrl-C (or stop signal) another exception wraps, if any.

    An exception raised in ``__set_name__`` while a class is built comes back wrapped in a
    RuntimeError ("Error calling __set_name__"): a ^C landing while advisor imports read as an
    internal error.
    """
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _debug() -> bool:
    import os

    return os.environ.get("ADVISOR_DEBUG", "") not in ("", "0")
