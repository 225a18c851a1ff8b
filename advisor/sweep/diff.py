"""The source diff of a sweep's recommended cell: its batch size, precision and accumulation made the script's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.capture.model import FixRequest, RunSpec
from advisor.errors import InputError
from advisor.fixes import catalog
from advisor.fixes.catalog import script_args
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import FixContext
from advisor.fixes.model import Trial, set_name
from advisor.sweep import child
from advisor.sweep.model import Cell


def cell_diff(
    spec: RunSpec, cell: Cell, requests: Sequence[FixRequest], params: Mapping[str, dict[str, Any]], ctx: FixContext,
) -> str:
    """Return the source diff (with ``# advisor:`` lines) that makes the recommended cell the script's own setting.

    Where the script takes its batch size as an argument (``--batch-size 1``), the change is that
    argument on a new command line, as the catalog's ``script_args`` hands over its fixes, rather
    than a multiplied ``batch_size`` in the source.
    """
    from advisor.fixes.diff import make_diff

    extra = ""
    if any(r.id == child.ACCUMULATE for r in requests):
        k = cell.accumulation
        extra = (
            f"# advisor: not made mechanical: gradient accumulation over {k} micro-batches: call "
            f"optimizer.step() and optimizer.zero_grad() once every {k} batches and divide the loss by {k} "
            "(an LR scheduler then steps once per optimizer step)\n"
        )
    params_of = _by_command_line(spec, cell, params, ctx)
    if "larger_batch" in params and "larger_batch" not in params_of:
        # NOTE: the batch is now set on the command line; what larger_batch says about the
        # learning rate still holds.
        plan = DiffPlan()
        catalog.get("larger_batch").plan_diff(plan, params["larger_batch"])  # type: ignore[misc]
        extra += "".join(f"# advisor: not made mechanical: {m}\n" for m in plan.manual)
    if not params_of:
        return extra
    ids = tuple(params_of)
    merged: dict[str, Any] = dict(params_of) if len(ids) > 1 else dict(params_of[ids[0]])
    trial = Trial(fix=set_name(ids), safety=catalog.get(ids[0]).safety, fixes=ids, params=merged)
    try:
        diff = make_diff(Path(spec.script), [trial])
    except InputError as exc:
        return extra + f"# advisor: no diff: {exc}\n"
    # NOTE: a new command line leads, as in the fix loop's diffs; the notes follow it.
    lines = diff.splitlines(keepends=True)
    lead = 0
    while lead < len(lines) and lines[lead].startswith("# advisor: run with"):
        lead += 1
    return "".join(lines[:lead]) + extra + "".join(lines[lead:])


def _by_command_line(
    spec: RunSpec, cell: Cell, params: Mapping[str, dict[str, Any]], ctx: FixContext,
) -> dict[str, dict[str, Any]]:
    """Return the cell's fix params, with a batch factor moved onto the script's own batch-size option when it has one."""
    out = dict(params)
    option = script_args.knob(ctx, script_args.BATCH_NAMES)
    if "larger_batch" not in out or option is None or option.value != ctx.batch_size:
        return out
    del out["larger_batch"]
    args = tuple(out.get("script_args", {}).get("args", spec.args))
    args = script_args.with_values(args, [(option, cell.batch_size)])
    changes = {**out.get("script_args", {}).get("changes", {}), option.name: cell.batch_size}
    out["script_args"] = {"args": list(args), "command": script_args.command_line(spec, args), "changes": changes}
    return out
