"""``host_reads``: read logged values from the device every N steps instead of every step.

``loss.item()``, ``float(loss)``, ``.cpu()`` and ``print(loss)`` inside the training loop each
wait for the device to finish all queued work, so the CPU cannot run ahead. No run-time change
is safe (what the script logs, and when, is the script's business), so this fix is *advice*:
it is never run or measured, and its diff moves the statements that only read values for the
host under ``if step % N == 0:`` (a counter is added when the loop has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.fixes.diff_plan import DiffPlan, EditScope
from advisor.fixes.fix import SAFE, Fix

READ_EVERY = 20
"""Steps between host reads in the diff."""


@dataclass(frozen=True)
class ReadEvery:
    """The diff's edit (:class:`~advisor.fixes.diff_plan.SourceEdit`): :mod:`advisor.fixes.edits.host_reads`."""

    every: int = READ_EVERY
    name = "host_reads"

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        """Move the reads of the first loop over a DataLoader; say what is left."""
        from advisor.fixes.edits.host_reads import read_every

        return read_every(module, self.every, scope.loaders)


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Move per-step host reads under ``if step % N == 0`` in the loop over the DataLoader."""
    plan.edits.append(ReadEvery(int(params.get("every", READ_EVERY))))


FIX = Fix(
    id="host_reads",
    safety=SAFE,
    description="read logged values (.item(), float(), .cpu(), print) every N steps instead of every step",
    applies_when="the loop reads tensors back to the host every step, each read waiting for the device",
    measured="not measured: advice only (no safe run-time change exists); the diff is offered as is",
    plan_diff=plan_diff,
    advice="what the script logs, and when, is its own business: no run-time change is safe",
)
