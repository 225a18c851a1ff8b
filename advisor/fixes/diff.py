"""Source diffs that make kept fixes permanent, and the explicit ``--write`` that applies them.

:func:`make_diff` parses the user's script with libcst (which keeps comments and formatting)
and makes the mechanical changes the kept fixes stand for. Each kept fix fills one
:class:`~advisor.fixes.diff_plan.DiffPlan` through its ``plan_diff``; :func:`transform` then

1. runs the fixes' own :class:`~advisor.fixes.diff_plan.SourceEdit` objects on the script as
   written, in catalog order, once per fix (``fused_attention`` rewrites hand-written attention
   with :mod:`advisor.fixes.attention`, ``host_reads`` and ``activation_checkpointing`` bring
   theirs from :mod:`advisor.fixes.edits`);
2. makes the plan's generic edits in one pass (:mod:`advisor.fixes.diff_edits`):

   - DataLoader keywords (``num_workers``, ``pin_memory``, ``persistent_workers``,
     ``prefetch_factor``) set on every ``DataLoader(...)`` call (an existing keyword or
     positional argument is replaced in place, keeping its comment);
   - its ``batch_size`` multiplied by a factor (``batch_fusion`` / ``larger_batch``:
     ``batch_size=<expr> * k``; an integer literal is multiplied out);
   - ``model.compile()`` (in place, as the trial ran it) / ``model = model.to(memory_format=torch.channels_last)``
     after the model's first assignment in the source's order, where the model is the object
     whose ``.parameters()`` feeds a ``torch.optim`` optimizer (after the whole ``if`` when each
     of its branches builds the model);
   - every statement that calls the model wrapped in bf16 ``torch.autocast`` (the whole ``if``
     when each of its branches calls it), as the trial ran every forward under it;
   - ``fused=True`` on the optimizer's constructor; ``non_blocking=True`` on ``.to(device)``
     calls inside loops;
   - statements after the imports (``cpu_threads``, ``cudnn_benchmark``, ``tf32``, an edit's
     import); context managers around the loop over the DataLoader (``inference_mode``).

What cannot be made mechanical (e.g. the gradient-accumulation count after batch fusion, the
learning rate after a larger batch, fp16 loss scaling, input layout for channels_last) is said
in ``# advisor:`` lines at the top of the diff; ``patch`` and ``git apply`` ignore lines before
the first ``---``.

:func:`write_diff` is only called for ``--write``: it keeps a ``<script>.bak`` copy first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import libcst as cst

from advisor.errors import InputError
from advisor.fixes import catalog
from advisor.fixes.diff_edits import _LoaderFinder, _ModelFinder, _Transformer
from advisor.fixes.diff_mapping import set_in_mappings
from advisor.fixes.diff_plan import DiffPlan, EditScope, SourceEdit
from advisor.fixes.model import Trial


def _plan(kept: Sequence[Trial]) -> DiffPlan:
    """Gather the kept fixes' edits: each fix adds its own through its ``plan_diff``."""
    plan = DiffPlan()
    fixes = catalog.get_fixes()
    for t in kept:
        for fix_id in t.fixes:
            # NOTE: a combined trial's params are per fix; a single trial's are its own.
            p: dict[str, Any] = dict(t.params.get(fix_id, {})) if len(t.fixes) > 1 else dict(t.params)
            fix = fixes.get(fix_id)
            if fix is not None and fix.plan_diff is not None:
                fix.plan_diff(plan, p)
            elif fix is not None and fix.manual:
                if fix.manual not in plan.manual:
                    plan.manual.append(fix.manual)
            else:
                plan.manual.append(f"{fix_id}: no mechanical change is known for this fix")
    for finish in dict.fromkeys(plan.finish):
        finish(plan)
    plan.batch_fixes[:] = list(dict.fromkeys(plan.batch_fixes))
    plan.header_statements[:] = list(dict.fromkeys(plan.header_statements))
    plan.manual[:] = list(dict.fromkeys(plan.manual))
    return plan


def transform(source: str, kept: Sequence[Trial]) -> tuple[str, list[str]]:
    """Apply the kept fixes' mechanical changes to ``source``.

    Args:
        source: The script's text.
        kept: The kept trials (their ``params`` carry worker counts, factors, devices).

    Returns:
        The new source and the list of things that could not be made mechanical.
    """
    plan = _plan(kept)
    module = cst.parse_module(source)
    finder = _ModelFinder()
    module.visit(finder)
    loaders = _LoaderFinder()
    module.visit(loaders)
    manual = list(plan.manual)
    # NOTE: the fixes' own edits see the script as written (their notes lead, in catalog order);
    # what they add after the imports joins the generic pass's header statements.
    scope = EditScope(finder.model, frozenset(loaders.names), plan.header_statements)
    for edit in _ordered(plan.edits):
        module, notes = edit.apply(module, scope)
        manual += notes
    module, mapped = set_in_mappings(module, plan.loader_kwargs)
    tr = _Transformer(plan, finder.model, loaders.names, mapped)
    new = module.visit(tr)
    if plan.loader_kwargs and "loader" not in tr.done:
        manual.append("DataLoader settings: no DataLoader(...) call found; set " + ", ".join(
            f"{k}={v}" for k, v in plan.loader_kwargs.items()))
    if tr.skipped_splat:
        manual.append(
            "DataLoader settings: a DataLoader(...) call takes **kwargs; set "
            + ", ".join(
                f"{k}={plan.loader_kwargs[k]}" for k in sorted(tr.skipped_splat)
            )
            + " in that mapping"
        )
    if plan.batch_factor > 1 and "batch" not in tr.done:
        manual.append(
            f"{'/'.join(plan.batch_fixes)}: no DataLoader(...) call found; multiply its batch_size "
            f"by {plan.batch_factor}"
        )
    if (plan.compile or plan.channels_last or plan.autocast_device) and finder.model is None:
        manual.append("no model found (an object whose .parameters() feeds a torch.optim optimizer)")
    elif plan.compile and "compile" not in tr.done:
        manual.append(f"torch_compile: add {finder.model}.compile() after the model is built")
    if plan.autocast_device and "autocast" not in tr.done and finder.model:
        manual.append(f"bf16_autocast: wrap the forward pass in torch.autocast(device_type={plan.autocast_device!r}, dtype=torch.bfloat16)")
    if plan.wrap_data_loop and "data_loop" not in tr.done:
        manual.append(
            "no loop over a DataLoader found; open "
            + ", ".join(f"`with {c}:`" for c in plan.wrap_data_loop)
            + " around the loop that calls the model"
        )
    if plan.fused and "fused" not in tr.done:
        manual.append("fused_optimizer: pass fused=True to the optimizer")
    if plan.header_statements and not re.search(r"^import torch\b|^from torch\b", source, re.M):
        new = _with_torch_import(new)
    return new.code, manual


def _with_torch_import(module: cst.Module) -> cst.Module:
    """Return ``module`` with ``import torch`` after its docstring and ``from __future__`` imports (which must come first)."""
    body = list(module.body)
    k = 0
    while k < len(body) and _leads(body[k], first=k == 0):
        k += 1
    return module.with_changes(body=[*body[:k], cst.parse_statement("import torch\n"), *body[k:]])


def _leads(stmt: cst.CSTNode, *, first: bool) -> bool:
    """Whether ``stmt`` must stay ahead of an added import: the docstring, or a ``from __future__`` import."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.ImportFrom):
        return isinstance(small.module, cst.Name) and small.module.value == "__future__"
    return first and isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))


def _ordered(edits: Sequence[SourceEdit]) -> list[SourceEdit]:
    """Return the kept fixes' own edits in catalog order, one per fix (the last planned wins)."""
    order = {fix_id: i for i, fix_id in enumerate(catalog.fix_ids())}
    last = {e.name: e for e in edits}
    return sorted(last.values(), key=lambda e: order.get(e.name, len(order)))


def diff_root(script: Path) -> Path:
    """Return the folder a diff's paths are relative to, so ``git apply`` works where the user runs it.

    That is the top of the git work tree holding the script; without one (no git, or the script
    is not in a repository) it is the working directory, where ``advisor diagnose`` was run. A
    script outside the working directory falls back to its own folder (``patch -p1`` there).
    """
    import os
    import subprocess

    folder = Path(script).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, timeout=5, check=False,
        )
        top = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        top = ""
    if top:
        return Path(top).resolve()
    cwd = Path(os.getcwd()).resolve()
    return cwd if folder.is_relative_to(cwd) else folder


def notes_header(kept: Sequence[Trial], manual: Sequence[str]) -> str:
    """Return the ``# advisor:`` lines that lead a diff: new command lines, then what is left to do by hand."""
    commands = dict.fromkeys(_plan(kept).commands)
    lines = [f"# advisor: run with the script's own arguments: {c}\n" for c in commands]
    return "".join(lines + [f"# advisor: not made mechanical: {m}\n" for m in manual])


def make_diff(script: Path, kept: Sequence[Trial], *, root: Path | None = None) -> str:
    """Return a unified diff of ``script`` that makes the kept fixes permanent.

    Args:
        script: The user's script (read, never written).
        kept: The kept trials (``FixOutcome.kept_trials`` or a combined trial).
        root: The folder the diff's ``a/``/``b/`` paths are relative to; by default
            :func:`diff_root` (the git work tree's top, else the working directory), so
            ``git apply`` works from there.

    Returns:
        The diff, led by ``# advisor:`` comment lines for the new command line of a fix made
        through the script's arguments and for what could not be made mechanical;
        empty when nothing changes and nothing is left to say.

    Raises:
        InputError: The script cannot be read or parsed.
    """
    from advisor.fixes.diff_home import training_file

    path = training_file(Path(script))
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path} for the diff ({exc})") from exc
    try:
        new, manual = transform(source, kept)
    except cst.ParserSyntaxError as exc:
        raise InputError(f"cannot parse {path} for the diff: {exc.message} (line {exc.raw_line})") from exc
    header = notes_header(kept, manual)
    if path != Path(script) and new != source:
        header += f"# advisor: the training code is in {path.name}, which {Path(script).name} imports: the diff changes that file\n"
    if new == source:
        return header
    base = (root or diff_root(path)).resolve()
    # NOTE: as_posix: git apply and patch read "/" on every platform.
    name = path.resolve().relative_to(base).as_posix() if path.resolve().is_relative_to(base) else path.name
    body = difflib.unified_diff(
        source.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{name}", tofile=f"b/{name}",
    )
    return header + "".join(body)


def write_diff(script: Path, diff_or_kept: str | Sequence[Trial]) -> Path:
    """Apply a diff from :func:`make_diff` (or the kept trials) to ``script``, keeping a backup.

    The file written is the one the diff was made for: the script, or the local module that holds
    its training code (:func:`advisor.fixes.diff_home.training_file`). Only for the explicit ``--write`` flag. The original is first copied to the first free ``<script>.bak``, ``.bak.1``, ...;
    a read-only script is refused.

    Args:
        script: The user's script.
        diff_or_kept: A unified diff made by :func:`make_diff` for this script, or the kept
            trials (the change is then made directly).

    Returns:
        The backup's path.

    Raises:
        InputError: The script cannot be read, or the diff does not apply to it.
    """
    from advisor.fixes.diff_home import training_file

    path = training_file(Path(script))
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc})") from exc
    if isinstance(diff_or_kept, str):
        new = apply_unified_diff(source, diff_or_kept)
    else:
        new, _ = transform(source, diff_or_kept)
    from advisor._files import rewrite_script

    return rewrite_script(path, new)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_unified_diff(source: str, diff: str) -> str:
    """Apply a single-file unified diff to ``source``, checking every context and removed line.

    Raises:
        InputError: The diff does not match the source (the file changed since the diff).
    """
    old = source.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            i += 1
            continue
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        out.extend(old[pos:start])
        pos = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            line = lines[i]
            tag, text = line[:1], line[1:]
            if tag in (" ", "-"):
                if pos >= len(old) or old[pos].rstrip("\r\n") != text.rstrip("\r\n"):
                    raise InputError(
                        f"the diff does not apply at line {pos + 1}: the script changed since it was made"
                    )
                if tag == " ":
                    out.append(old[pos])
                pos += 1
            elif tag == "+":
                out.append(text)
            elif line.startswith("\\"):
                pass  # "\ No newline at end of file"
            i += 1
    out.extend(old[pos:])
    return "".join(out)
