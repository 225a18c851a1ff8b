"""Words the capture records about a run: what its steps were counted from, what its memory peak counts.

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
