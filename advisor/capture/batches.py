"""What the capture reads of a batch or a model call's inputs: samples and shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 4


def count_samples(batch: Any, depth: int = 0) -> int | None:
    """Count the samples in a batch: the first dimension of the first tensor found in it (None if none).

    Looks through tuples, lists and mappings (MONAI's dict batches), a few levels deep.
    """
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth >= _MAX_DEPTH:
        return None
    if isinstance(batch, Mapping):
        items = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in items:
        n = count_samples(item, depth + 1)
        if n is not None:
            return n
    return None


def input_shape(args: Any, kwargs: Any, tensor: type) -> tuple[int, ...]:
    """Shape of a model call's first ``tensor`` input, positional or keyword (``input_ids=``); () when none.

    One level only: a grad-disabled call's shape tells generation from evaluation
    (:mod:`advisor.capture.generation`), and a token tensor is passed as itself.
    """
    for value in (*args, *(kwargs.values() if kwargs else ())):
        if isinstance(value, tensor):
            return tuple(value.shape)
    return ()
