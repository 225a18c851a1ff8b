"""``persistent_workers``: keep loader workers alive across epochs."""

from __future__ import annotations

from typing import Any

from advisor.capture.phases import SOURCE_DATALOADER
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, FixContext, RungRuns, needs_loader


def check(ctx: FixContext) -> str | None:
    """Refuse without a DataLoader, or when every loader already keeps its workers."""
    if (reason := needs_loader(ctx)) is not None:
        return reason
    if ctx.dataloaders and all(d.persistent_workers for d in ctx.dataloaders):
        return "every DataLoader already sets persistent_workers=True"
    return None


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("persistent_workers", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Set ``persistent_workers=True`` where the loader has workers."""
    if int(a.get("num_workers") or 0) == 0:
        state.loader_skip("persistent_workers", "num_workers=0: there are no workers to keep")
    elif a.get("persistent_workers"):
        state.loader_skip("persistent_workers", "persistent_workers is already True")
    else:
        a["persistent_workers"] = True
        state.loader_ok("persistent_workers", "persistent_workers=True")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``persistent_workers=True`` on every ``DataLoader(...)``."""
    plan.loader_kwargs["persistent_workers"] = "True"


def inert(rung: RungRuns) -> str | None:
    """Inert when the rung's runs saw no epoch end in their timed steps, or count steps from loader batches."""
    # NOTE: persistent workers change one thing, the worker start-up when the next epoch's
    # iterator is made; timed steps inside one epoch never contain it (data_loading.py's trial
    # runs time 8-17 steps of a 64-batch epoch: three interleaved pairs measured only noise).
    if rung.step_source == SOURCE_DATALOADER:
        # NOTE: with steps counted from DataLoader batches, the gap between two epochs (where the
        # next iterator starts its workers) belongs to no step (advisor.capture.recorder).
        return (
            f"not run: the {rung.label} runs count their steps from DataLoader batches, so the gap "
            "between epochs, where workers start again, is in no timed step; persistent workers "
            "only save that start (in a full run, once per epoch)"
        )
    if not rung.epoch_ends or any(rung.epoch_ends):
        return None
    runs = len(rung.epoch_ends)
    return (
        f"not run: none of the {runs} {rung.label} run{'s' if runs != 1 else ''} it would be measured "
        "against reached the end of an epoch during its timed steps, and persistent workers only "
        "save the workers' start at a new epoch (in a full run, once per epoch)"
    )


FIX = Fix(
    id="persistent_workers",
    safety=SAFE,
    description="keep loader workers alive across epochs (persistent_workers=True)",
    applies_when="loader workers are started again at every epoch",
    measured="one run; on top of the best dataloader_workers rung when the script has no workers",
    check=check,
    requires="dataloader_workers",
    changes_loader=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
    shrinks=("data_loading",),
    inert=inert,
)
