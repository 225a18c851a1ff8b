"""Plan a sweep cell: the fix requests, step overrides and command line that make it at run time.

A cell's batch size goes through the catalog's ``larger_batch``, its precision through
autocast, its accumulation through the script's own option or :mod:`advisor.sweep.child`, and
its input size through the script's own size option (:data:`~advisor.fixes.catalog.script_args.SIZE_NAMES`:
``--patch-size``, ``--roi``, ``--image-size``, ``--seq-len``...), set on a new command line as
the batch axis sets a batch-size option: exactly what the user would change. A script without
one gets its MONAI crop transforms resized at run time (:mod:`advisor.sweep.spatial`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.capture.model import FixRequest, RunSpec
from advisor.capture.records import ScriptOption
from advisor.capture.vocab import MemoryKind
from advisor.fixes import catalog
from advisor.fixes.catalog import script_args
from advisor.fixes.fix import FixContext, ladder_steps
from advisor.sweep import child, spatial
from advisor.sweep.model import PRECISION_FIX, Cell, CellStatus

NO_SIZE_OPTION = "the script has no option called --{name}"
RUNTIME_SIZE = "MONAI crop size (set at run time)"
"""The size axis's name in the table when no option sets it: :mod:`advisor.sweep.spatial` does."""


@dataclass
class Tally:
    """One cell's runs so far (mutable bookkeeping)."""

    cell: Cell
    requests: tuple[FixRequest, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    loss_rtol: float = 0.0
    rates: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    batch: int | None = None
    memory_kind: MemoryKind | None = None
    losses: tuple[float | None, ...] = ()
    status: str = CellStatus.OK
    reason: str = ""
    flops_per_sample: float | None = None
    flops_why: str = ""
    elements_per_sample: float | None = None
    element_unit: str = ""
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # catalog fix id -> params, for the diff

    def runs_left(self, repeats: int) -> int:
        """Return the runs still to make for this cell (none once it stopped)."""
        return max(0, repeats - len(self.rates)) if self.status == CellStatus.OK else 0


def size_option(ctx: FixContext, name: str | None = None) -> ScriptOption | None:
    """Return the script's input-size option: the one called ``name`` when given, else the first of SIZE_NAMES."""
    if name is None:
        return script_args.first_knob(ctx, script_args.SIZE_NAMES)
    return script_args.first_knob(ctx, (script_args.normalise(name),))


def plan_cell(
    cell: Cell, ctx: FixContext, spec: RunSpec, step_ms: float | None, size_name: str | None = None,
) -> Tally:
    """Plan the requests and step overrides that make ``cell`` at run time."""
    t = Tally(cell)
    base = ctx.batch_size
    requests: list[FixRequest] = []
    rtols = [0.0]
    if base is None:
        t.status, t.reason = CellStatus.NOT_APPLIED, "the script's DataLoader has no batch_size to change"
        return t
    k = 1
    if cell.batch_size != base:
        if cell.batch_size < base or cell.batch_size % base:
            t.status = CellStatus.NOT_APPLIED
            t.reason = (f"batch sizes are set at run time by multiplying the script's own ({base}): "
                        f"{cell.batch_size} is not a multiple of it")
            return t
        k = cell.batch_size // base
        params = {"factor": k, "max_batch": cell.batch_size}
        requests.append(FixRequest("larger_batch", params))
        t.params["larger_batch"] = params
        rtols.append(catalog.get("larger_batch").loss_rtol)
    if not _plan_size(t, ctx, spec, size_name, requests):
        return t
    if _plan_accumulation(t, ctx, spec, requests) is None:
        return t
    if "script_args" in t.params:
        requests.append(FixRequest("script_args", t.params["script_args"]))
    if cell.accumulation != own_accumulation(ctx):
        rtols.append(catalog.get("batch_fusion").loss_rtol)  # a step averages over other samples
    if k > 1 or cell.accumulation > 1:
        t.overrides.update(ladder_steps(spec, k * cell.accumulation, cell.accumulation, step_ms))
    fix_id = PRECISION_FIX.get(str(cell.precision))
    if fix_id is not None:
        fix = catalog.get(fix_id)
        params = dict(fix.plan_variants(ctx, spec, step_ms)[0].params)
        requests.append(FixRequest(fix_id, params))
        t.params[fix_id] = params
        rtols.append(fix.loss_rtol)
    t.requests, t.loss_rtol = tuple(requests), max(rtols)
    return t


def _set_option(t: Tally, spec: RunSpec, option: ScriptOption, value: int) -> None:
    """Set one of the script's own options on the cell's command line (on top of what the cell set already)."""
    args = script_args.with_values(tuple(t.overrides.get("args", spec.args)), [(option, value)])
    t.overrides["args"] = args
    changes = {**t.params.get("script_args", {}).get("changes", {}), option.name: value}
    t.params["script_args"] = {"args": list(args), "command": script_args.command_line(spec, args), "changes": changes}


def _plan_size(t: Tally, ctx: FixContext, spec: RunSpec, size_name: str | None, requests: list[FixRequest]) -> bool:
    """Set the cell's input size (its option, else MONAI's crops at run time); False with the cell marked not applied."""
    want = t.cell.size
    if want is None:
        return True
    option = size_option(ctx, size_name)
    if option is None and size_name is not None:
        t.status, t.reason = CellStatus.NOT_APPLIED, NO_SIZE_OPTION.format(name=size_name)
        return False
    if option is None:
        requests.append(FixRequest(spatial.SPATIAL_SIZE, {"size": want}))
        return True
    if want != option.value:
        _set_option(t, spec, option, want)
    return True


def _plan_accumulation(t: Tally, ctx: FixContext, spec: RunSpec, requests: list[FixRequest]) -> int | None:
    """Plan the cell's accumulation; return it, or None with the cell marked not applied.

    The script's own accumulation option is set when it has one (the catalog's ``script_args``
    does so for batch fusion); otherwise a script that does not accumulate gets it at run time.
    """
    want = t.cell.accumulation
    own = own_accumulation(ctx)
    option = script_args.knob(ctx, script_args.ACCUMULATION_NAMES)
    if option is not None and option.value == own:
        if want != own:
            _set_option(t, spec, option, want)
        return want
    if want == own:
        return want
    if own > 1:
        t.status = CellStatus.NOT_APPLIED
        t.reason = (f"the script accumulates {own} micro-batches per step itself, with no option advisor "
                    "recognises to change it")
        return None
    requests.append(FixRequest(child.ACCUMULATE, {"factor": want}))
    return want


def own_accumulation(ctx: FixContext) -> int:
    """Micro-batches per optimizer step in the script as it is (backward calls, else loader batches)."""
    return ctx.loop_accumulation or ctx.accumulation or 1


def elements(shape: list[int], integer: bool) -> tuple[float | None, str]:
    """Return the elements of one sample of a model input of ``shape`` (batch first) and their unit.

    ``(N, C, D, H, W)`` floats are volumes (voxels: ``D*H*W``), ``(N, C, H, W)`` images (pixels),
    ``(N, T)`` integers token ids (tokens); anything else counts its elements per sample.
    """
    if len(shape) < 2:
        return None, ""
    per = 1
    spatial = shape[2:] if len(shape) in (4, 5) and not integer else shape[1:]
    for d in spatial:
        per *= int(d)
    unit = {5: "voxel", 4: "pixel"}.get(len(shape), "element") if not integer else "element"
    if integer and len(shape) == 2:
        unit = "token"
    return float(per), unit
