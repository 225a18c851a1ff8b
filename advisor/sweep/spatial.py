"""Child side of the input-size axis for a script with no size option: MONAI crops resized at run time.

A MONAI pipeline fixes the patch the network sees in its crop transform (``RandSpatialCropd(keys,
roi_size=(96, 96, 96))``, ``RandCropByPosNegLabeld(..., spatial_size=...)``). The dictionary
transforms build the array ones, so patching the array classes' ``__init__`` resizes both: each
positive side of ``roi_size`` / ``spatial_size`` becomes the cell's size (a ``-1``, "the whole
axis", stays). The note says which transforms were resized, from what; it stays ``skipped`` when
the script built none, and the cell is then marked not applied.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Sequence
from typing import Any

from advisor.capture.model import FixNote, NoteState

SPATIAL_SIZE = "sweep_spatial_size"
"""Request id: set MONAI crop transforms' size to ``size`` (each positive side)."""
CROPS: dict[str, str] = {
    "RandSpatialCrop": "roi_size",
    "CenterSpatialCrop": "roi_size",
    "RandSpatialCropSamples": "roi_size",
    "RandCropByPosNegLabel": "spatial_size",
    "RandCropByLabelClasses": "spatial_size",
    "RandWeightedCrop": "spatial_size",
}
"""MONAI array crop transforms (``monai.transforms.croppad.array``) -> the argument that is the patch's size."""


def resized(old: Any, size: int) -> Any:
    """Return ``old`` (an int or a sequence of sides) with every positive side set to ``size``."""
    if isinstance(old, int):
        return size if old > 0 else old
    if isinstance(old, Sequence) and not isinstance(old, str):
        return tuple(size if isinstance(d, int) and d > 0 else d for d in old)
    return old


def install(notes: dict[str, FixNote], size: int) -> None:
    """Resize every MONAI crop transform the script builds from now on (see the module doc)."""
    if importlib.util.find_spec("monai") is None:
        notes[SPATIAL_SIZE] = FixNote(NoteState.SKIPPED, "MONAI is not installed: there is no crop transform to resize")
        return
    from monai.transforms.croppad import array

    from advisor.fixes.runtime import patch

    notes[SPATIAL_SIZE] = FixNote(
        NoteState.SKIPPED,
        f"the script built no MONAI crop transform ({', '.join(CROPS)}, or their dictionary forms) whose size "
        "advisor could set, and it has no size option advisor recognises",
    )
    done: list[str] = []
    for name, arg in CROPS.items():
        cls = getattr(array, name, None)
        if cls is not None:
            patch(cls, "__init__", _resizing(cls.__init__, name, arg, size, notes, done))


def _resizing(original: Any, name: str, arg: str, size: int, notes: dict[str, FixNote], done: list[str]) -> Any:
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind_partial(self, *args, **kwargs)
        old = bound.arguments.get(arg)
        if old is not None:
            bound.arguments[arg] = new = resized(old, size)
            text = f"{name} {arg} {tuple(old) if isinstance(old, Sequence) else old} -> {new}"
            if text not in done:
                done.append(text)
            notes[SPATIAL_SIZE] = FixNote(NoteState.APPLIED, "; ".join(done))
        original(*bound.args, **bound.kwargs)

    return __init__
