"""Words the capture records about a run: how it ended, started and went, what it counted.

How the run ended and its child started, the phases it went through, what its steps were counted
from, what its memory peak counts, how the script takes its configuration.

Apart from :mod:`advisor.capture.model` so that the child-side recorder, the fix catalog and the
reports can name them without the boundary types.
"""

from __future__ import annotations

from advisor._vocab import Vocab


class StepSource(Vocab):
    """What a run's steps were counted from (``RunCapture.step_source``), in rising precedence.

    A better source seen later takes over (see :mod:`advisor.capture.phases`).
    """

    DATALOADER = "dataloader"  # batches the DataLoader yields
    MODULE = "module"  # calls of the outermost nn.Module (inference)
    BACKWARD = "backward"  # backward() calls (hand-written parameter updates)
    OPTIMIZER = "optimizer"  # torch.optim optimizer steps
    MARKER = "marker"  # advisor.step() in the script


class MemoryKind(Vocab):
    """What a peak memory figure counts (``RunCapture.memory_kind``, ``Trial.memory_kind``)."""

    CUDA = "cuda"  # torch.cuda.max_memory_allocated on the device
    RSS = "rss"  # the script process's peak resident memory on the host


class RunStatus(Vocab):
    """How the script's run ended, as recorded in ``RunCapture.status`` (``capture.json``)."""

    COMPLETED = "completed"  # the script ran to its end (--full, or it had few steps)
    STOPPED = "stopped"  # advisor stopped it after the profiled steps (the normal case)
    CRASHED = "crashed"  # the script raised or its process died
    TIMEOUT = "timeout"  # --timeout ended it
    NO_STEPS = "no_steps"  # it ended without a single step being seen
    INTERRUPTED = "interrupted"  # advisor was interrupted (Ctrl-C, SIGTERM, SIGHUP) while it ran


class StartKind(Vocab):
    """How a run's child process started, as recorded in ``RunCapture.start``."""

    COLD = "cold"  # a fresh interpreter: ``python -m advisor.capture.child``, imports and all
    WARM = "warm"  # forked from the warm-start server, torch already imported (advisor.capture.warm)


class Phase(Vocab):
    """Phases a capture goes through, in order, as reported in ``ProgressEvent.phase``."""

    STARTING = "starting"  # child launched, script importing / setting up (no step yet)
    WARMUP = "warmup"
    TIMED = "timed"
    PROFILED = "profiled"  # torch.profiler on
    CPROFILE = "cprofile"  # cProfile on
    FINISHING = "finishing"  # measurements done: exporting, or the script runs on (--full)
    DONE = "done"  # the child has exited


class ConfigStyle(Vocab):
    """How a script takes its configuration on the command line."""

    ARGPARSE = "argparse"  # argparse (HfArgumentParser too): ``--batch-size 8``
    CONFIGURATOR = "configurator"  # nanoGPT's configurator: ``--batch_size=8`` overrides a global
