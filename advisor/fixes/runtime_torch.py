"""The patch registry and small helpers over torch objects that the run-time fixes share.

:func:`patch` is how every run-time fix changes torch (remembered for :func:`uninstall`); the
rest read torch objects (a data set's length, whether it shards itself, the device a module
runs on) or map over nested tensors. torch is imported inside the functions, only when a fix
runs in the child.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# (owner, attribute, original) for every patch, so tests (and only tests) can undo them.
_UNDO: list[tuple[Any, str, Any]] = []


def uninstall() -> None:
    """Undo every patch :func:`install` made in this process (for tests; the child never needs it)."""
    while _UNDO:
        owner, attr, original = _UNDO.pop()
        setattr(owner, attr, original)


def patch(owner: Any, attr: str, new: Any) -> None:
    """Set ``owner.attr = new``, remembering the original for :func:`uninstall`."""
    _UNDO.append((owner, attr, owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)))
    setattr(owner, attr, new)



def cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1



def _pristine(fn: Any, depth: int = 0) -> Any:
    """Find the function torch defined under wrappers (``__wrapped__`` or a closure cell)."""
    if getattr(fn, "__module__", "").startswith("torch") or depth > 8:
        return fn
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:
        return _pristine(inner, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and getattr(value, "__name__", "") == getattr(fn, "__name__", None):
            found = _pristine(value, depth + 1)
            if getattr(found, "__module__", "").startswith("torch"):
                return found
    return fn


def dataset_len(dataset: Any) -> int | None:
    """Return the samples in a map-style data set, or None when unknown (no ``__len__``)."""
    from torch.utils.data import IterableDataset

    if dataset is None or isinstance(dataset, IterableDataset):
        return None
    try:
        return int(len(dataset))
    except (TypeError, NotImplementedError):
        return None


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to floating tensors inside tuples, lists and dicts (other objects pass through)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value) if value.is_floating_point() else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def _to_channels_last(t: Any) -> Any:
    import torch

    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def _device_type(module: Any, args: tuple[Any, ...]) -> str:
    import torch

    p = next(iter(module.parameters()), None)
    if p is not None:
        return p.device.type
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def _param_dtype(module: Any) -> Any:
    p = next(iter(module.parameters()), None)
    return None if p is None else p.dtype


def _targets_cuda(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    import torch

    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, torch.Tensor):
        target = target.device
    if isinstance(target, str):
        return target.startswith("cuda")
    return isinstance(target, torch.device) and target.type == "cuda"
