"""The child's hooks into torch: step boundaries, samples, DataLoader settings and losses.

Installed only inside the capture child (never in the CLI's process), before the user's script
runs, and removable again with :meth:`TorchHooks.uninstall`:

* a global optimizer step post-hook (fires for every ``torch.optim.Optimizer`` subclass);
* ``_BaseDataLoaderIter.__next__`` wrapped: batch requests, yielded batches (sample counts) and
  epoch ends, for every DataLoader iterator (single- and multi-process);
* ``DataLoader.__init__`` wrapped: each loader's effective settings and the user's file:line;
* ``torch.autograd.backward`` wrapped (only when losses are asked for): the scalar loss of the
  first steps (``Tensor.backward`` goes through it);
* ``advisor._step_callback``: the ``advisor.step()`` marker.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

import advisor
from advisor.capture.model import DataLoaderInfo
from advisor.capture.recorder import StepRecorder

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


def _library_roots() -> tuple[str, ...]:
    """Return folders whose frames are not the user's code (stdlib, site-packages, torch, advisor)."""
    import torch

    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(torch.__file__))
    roots.add(os.path.dirname(advisor.__file__))
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def user_frame(roots: tuple[str, ...]) -> tuple[str | None, int | None]:
    """Return file and line of the innermost caller outside the library roots (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not os.path.realpath(filename).startswith(roots):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None, None


def describe_dataloader(loader: Any, file: str | None, line: int | None) -> DataLoaderInfo:
    """Describe a constructed DataLoader by its effective settings (read back from it)."""
    from torch.utils.data import IterableDataset

    dataset = getattr(loader, "dataset", None)
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    prefetch = getattr(loader, "prefetch_factor", None)
    return DataLoaderInfo(
        batch_size=int(batch_size) if isinstance(batch_size, int) else None,
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=int(prefetch) if isinstance(prefetch, int) else None,
        dataset_type=(
            f"{type(dataset).__module__}.{type(dataset).__qualname__}" if dataset is not None else ""
        ),
        iterable_dataset=isinstance(dataset, IterableDataset),
        file=file,
        line=line,
    )


class TorchHooks:
    """Installs and removes the child's hooks, feeding a :class:`StepRecorder`."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.recorder = recorder
        self.dataloaders: list[DataLoaderInfo] = []
        self._undo: list[Any] = []

    def install(self) -> None:
        """Install every hook (see the module docstring)."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        rec = self.recorder
        handle = register_optimizer_step_post_hook(
            lambda _opt, _args, _kwargs: rec.optimizer_step()
        )
        self._undo.append(handle.remove)

        original_next = _BaseDataLoaderIter.__next__

        def __next__(it: Any) -> Any:
            rec.batch_requested()
            try:
                batch = original_next(it)
            except StopIteration:
                rec.epoch_ended()
                raise
            rec.batch_yielded(count_samples(batch))
            return batch

        self._patch(_BaseDataLoaderIter, "__next__", __next__)

        original_init = DataLoader.__init__
        roots = _library_roots()
        seen: set[DataLoaderInfo] = set()

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original_init(loader, *args, **kwargs)
            # NOTE: read back after __init__ so the recorded values are the effective ones,
            # including changes a run-time fix made to the arguments.
            try:
                file, line = user_frame(roots)
                info = describe_dataloader(loader, file, line)
            except Exception:  # noqa: BLE001 - describing must never break the user's loader
                return
            if info not in seen:  # loaders re-created each epoch are recorded once
                seen.add(info)
                self.dataloaders.append(info)

        self._patch(DataLoader, "__init__", __init__)

        if rec.record_loss_steps > 0:
            original_backward = torch.autograd.backward

            def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
                if rec.wants_loss():
                    first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
                    if isinstance(first, torch.Tensor) and first.numel() == 1:
                        # NOTE: float() syncs a GPU; done only during the first steps.
                        rec.loss(float(first.detach()))
                return original_backward(tensors, *args, **kwargs)

            self._patch(torch.autograd, "backward", backward)

        advisor._step_callback = rec.marker
        self._undo.append(lambda: setattr(advisor, "_step_callback", None))

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def uninstall(self) -> None:
        """Remove every hook, newest first."""
        while self._undo:
            self._undo.pop()()
