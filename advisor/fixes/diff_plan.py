"""What a diff is made of: the generic edits of :class:`DiffPlan`, and the seam a fix's own edit plugs into.

Each kept fix adds to one :class:`DiffPlan` through its ``plan_diff``; :mod:`advisor.fixes.diff`
then carries the plan out. The plan's fields are generic primitives that several fixes share
(DataLoader keywords, a batch factor, statements after the imports, wraps around the model, its
forward pass or the data loop). A change that belongs to one fix alone (rewriting attention,
checkpointing the calls of a block loop, moving host reads) is that fix's own
:class:`SourceEdit`, appended to :attr:`DiffPlan.edits`, so adding such a fix touches its own
files and no field here.

This module imports no parser: values are Python source text, and an edit receives the parsed
module (a ``libcst.Module``) as ``Any``, importing libcst itself when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class EditScope:
    """What the generic pass found in the script, lent to each :class:`SourceEdit`.

    Attributes:
        model: The model's name (the object whose ``.parameters()`` feeds an optimizer), or None.
        loaders: The names bound to ``DataLoader(...)`` calls.
        header_statements: The statements the generic pass inserts after the imports; an edit
            appends what its change needs (``from torch.utils.checkpoint import checkpoint``).
    """

    model: str | None = None
    loaders: frozenset[str] = frozenset()
    header_statements: list[str] = field(default_factory=list)


@runtime_checkable
class SourceEdit(Protocol):
    """One fix's own source transformation, run by :func:`advisor.fixes.diff.transform`.

    Edits run on the script as written, before the generic pass, in catalog order of
    :attr:`name` (one edit per name: a fix kept twice edits once, with its last parameters).
    """

    @property
    def name(self) -> str:
        """The id of the fix this edit carries out (its order, and the prefix of its notes)."""
        ...

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        """Return the edited ``libcst.Module`` and what could not be made mechanical, one line each."""
        ...


Finish = Callable[["DiffPlan"], None]
"""A step run once every kept fix has planned (a change sized by another fix's edit)."""


@dataclass
class DiffPlan:
    """The source edits the kept fixes ask for, gathered before the script is rewritten.

    Attributes:
        loader_kwargs: ``DataLoader(...)`` keyword -> expression to set.
        batch_factor: Multiply the DataLoader's ``batch_size`` by this.
        batch_fixes: The fixes behind ``batch_factor`` (named when it cannot be applied).
        compile: ``model.compile(<compile_kwargs>)`` (in place) after the model is built.
        compile_kwargs: Keyword source for ``Module.compile`` (e.g. ``mode="max-autotune"``).
        channels_last: ``model = model.to(memory_format=torch.channels_last)`` likewise.
        autocast_device: Wrap the statement calling the model in bf16 autocast on this device.
        fused: ``fused=True`` on the optimizer's constructor.
        non_blocking: ``non_blocking=True`` on ``.to(device)`` calls inside loops.
        header_statements: Statements inserted after the imports.
        wrap_data_loop: Context expressions to open around the loop over the DataLoader
            (``torch.inference_mode()``).
        commands: New command lines that make a fix permanent through the script's own
            arguments (no source change).
        manual: What cannot be made mechanical, one line each.
        edits: The kept fixes' own source transformations (:class:`SourceEdit`).
        finish: Steps run after every kept fix has planned, in order, each once: a fix whose
            edit depends on another's (``cpu_threads`` sized by the loader workers) adds one.
    """

    loader_kwargs: dict[str, str] = field(default_factory=dict)
    batch_factor: int = 1
    batch_fixes: list[str] = field(default_factory=list)
    compile: bool = False
    compile_kwargs: str = ""
    channels_last: bool = False
    autocast_device: str | None = None
    fused: bool = False
    non_blocking: bool = False
    header_statements: list[str] = field(default_factory=list)
    wrap_data_loop: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)
    edits: list[SourceEdit] = field(default_factory=list)
    finish: list[Finish] = field(default_factory=list)
