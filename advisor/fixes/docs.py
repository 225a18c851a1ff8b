"""The fix reference: ``advisor fixes``, ``advisor fix ID`` and ``docs/fixes.md``, from the catalog.

Every page is generated from the same :class:`~advisor.fixes.fix.Fix` objects the trials run,
so the documentation cannot drift from the behaviour. The diff shown for a fix is the one its
``plan_diff`` really makes on :data:`SAMPLE_SCRIPT` (with the parameters of its first variant
on :data:`SAMPLE_CONTEXT`), not a hand-written illustration.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.capture.model import DataLoaderInfo, RunSpec, ScriptConfig
from advisor.capture.records import ScriptOption
from advisor.fixes import catalog
from advisor.fixes.fix import Fix, FixContext
from advisor.fixes.model import Trial

SAMPLE_SCRIPT = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=8, shuffle=True)
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
"""
"""The script every fix's sample diff is made on."""

SAMPLE_CONTEXT = FixContext(
    cuda=True, cpu_count=4, dataloaders=(DataLoaderInfo(batch_size=8),), batches_per_step=4,
    script_config=ScriptConfig(options=(
        ScriptOption("batch_size", 8, flag="--batch-size", default=8),
        ScriptOption("grad_accum_steps", 4, flag="--grad-accum-steps", default=4),
    )),
)
"""The baseline the sample parameters are planned for (a CUDA run, 4 cores, 4 micro-batches,
``--batch-size`` and ``--grad-accum-steps`` arguments)."""

DOCS_HEADER = """\
<!-- Generated from advisor/fixes/catalog/*.py by `advisor fixes --format markdown`.
     Do not edit: change the fix modules and run `make docs`. -->

# Fix reference

Every fix advisor can apply at run time, measure, and make permanent with a diff. A rule
suggests fixes (`advisor rule CODE`); `advisor diagnose` tries the suggested ones against
interleaved baseline runs and keeps what helps. Fix safety: *safe* fixes keep the numerical
result; *unsafe* ones may change numerics, memory behaviour or batch semantics and run only
with `--unsafe-fixes` (or when named with `--fix ID`).
"""


def sample_params(fix: Fix) -> dict[str, Any]:
    """Return the parameters of the fix's first variant on :data:`SAMPLE_CONTEXT`."""
    variants = fix.plan_variants(SAMPLE_CONTEXT, RunSpec(script=Path("train.py")))
    return dict(variants[0].params) if variants else {}


def sample_diff(fix: Fix) -> str:
    """Return the diff the fix makes on :data:`SAMPLE_SCRIPT`, led by its ``# advisor:`` notes."""
    from advisor.fixes.diff import notes_header, transform

    kept = [Trial(fix=fix.id, safety=fix.safety, params=sample_params(fix))]
    if fix.requires:
        # NOTE: a fix measured on top of another is kept with it, and its edit may be sized by it
        # (cpu_threads gives a core to each loader worker): alone it can change nothing at all.
        base = catalog.get(fix.requires)
        kept.insert(0, Trial(fix=base.id, safety=base.safety, params=sample_params(base)))
    new, manual = transform(SAMPLE_SCRIPT, kept)
    notes = notes_header(kept, manual)
    body = difflib.unified_diff(
        SAMPLE_SCRIPT.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile="a/train.py", tofile="b/train.py",
    )
    return notes + "".join(body)


def suggested_by(fix_id: str) -> tuple[str, ...]:
    """Return the codes of the rules that suggest this fix."""
    from advisor.engine.rules import default_rules

    return tuple(r.code for r in default_rules() if any(f.id == fix_id for f in r.fixes))


def doc(fix: Fix) -> dict[str, Any]:
    """Return the fix's documentation as a JSON-able dict."""
    return {
        "id": fix.id,
        "safety": fix.safety.value,
        "changes": fix.description,
        "applies_when": fix.applies_when,
        "measured": fix.measured,
        "objective": fix.objective.value,
        "loss_tolerance": fix.loss_rtol,
        "requires": fix.requires,
        "conflicts": list(fix.conflicts),
        "suggested_by": list(suggested_by(fix.id)),
        "manual": fix.manual or None,
        "sample_diff": sample_diff(fix),
    }


def _relations(fix: Fix) -> list[str]:
    out = []
    if fix.requires:
        out.append(f"Requires `{fix.requires}` (measured on top of it when the baseline lacks it).")
    if fix.inert is not None and fix.inert.__doc__:
        # NOTE: the condition is the inert function's own first docstring line, so it cannot drift
        out.append(f"Skipped unrun: {fix.inert.__doc__.strip().splitlines()[0]}")
    if fix.conflicts:
        out.append("Conflicts with " + ", ".join(f"`{c}`" for c in fix.conflicts) + " (the faster one is kept).")
    return out


def explain(fix: Fix) -> str:
    """Render one fix's documentation as plain text (Markdown-friendly)."""
    safety = "keeps numerics" if fix.safety.value == "safe" else "may change numerics, memory or batch semantics"
    rules = suggested_by(fix.id)
    diff = sample_diff(fix)
    changed = "\n--- a/" in "\n" + diff or "# advisor: run with" in diff
    return "\n".join([
        f"# {fix.id}",
        "",
        f"Safety: {fix.safety.value} ({safety})",
        *([f"Objective: {fix.objective.value} (its verdict is decided on peak memory; the speed it costs is "
           "reported beside it)"] if fix.objective.value != "speed" else []),
        "",
        "## What it changes",
        fix.description,
        "",
        "## When it applies",
        fix.applies_when,
        *_relations(fix),
        "",
        "## How it is measured",
        f"{fix.measured}. Loss parity: the first losses may differ from the reference's by at most "
        f"{fix.loss_rtol:.0%}.",
        "",
        "## Suggested by",
        ", ".join(rules) if rules else "no rule (try it with `--fix " + fix.id + "`)",
        "",
        "## Diff",
        *(["What to change by hand: " + fix.manual] if fix.manual else []),
        *([f"On a sample script{f', with `{fix.requires}` it is measured on top of' if fix.requires else ''}:",
           "```diff", diff.rstrip(), "```"] if changed else []),
        *([] if changed or fix.manual else ["No mechanical change on the sample script."]),
    ])


def fixes_markdown(fixes: Mapping[str, Fix] | None = None) -> str:
    """Render the whole fix reference (``docs/fixes.md``): an index, then one section per fix.

    The output has no date or version, so it only changes when a fix does.
    """
    fixes = catalog.get_fixes() if fixes is None else fixes
    out = [DOCS_HEADER, "| fix | safety | what it changes | suggested by |", "| --- | --- | --- | --- |"]
    for fix in fixes.values():
        rules = ", ".join(suggested_by(fix.id)) or "—"
        out.append(f"| [`{fix.id}`](#{fix.id}) | {fix.safety.value} | {_cell(fix.description)} | {rules} |")
    for fix in fixes.values():
        section = "#" + explain(fix).replace("\n## ", "\n### ")
        out += ["", section]
    return "\n".join(out) + "\n"


def table_rows(fixes: Iterable[Fix]) -> Sequence[tuple[str, str, str]]:
    """Rows for ``advisor fixes``: id, safety, what it changes."""
    return [(f.id, f.safety.value, f.description) for f in fixes]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
