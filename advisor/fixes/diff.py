"""Source diffs that make kept fixes permanent, and the explicit ``--write`` that applies them.

:func:`make_diff` parses the user's script with libcst (which keeps comments and formatting)
and makes the mechanical changes a kept fix stands for:

- DataLoader settings: ``num_workers``, ``pin_memory``, ``persistent_workers``,
  ``prefetch_factor`` set as keyword arguments of every ``DataLoader(...)`` call (an existing
  keyword or positional argument is replaced in place, keeping its comment);
- ``batch_fusion`` / ``larger_batch``: the DataLoader's ``batch_size`` multiplied by the factor
  (``batch_size=<expr> * k``; an integer literal is multiplied out), with an ``# advisor:`` line
  saying what that changes (accumulation count, learning rate);
- ``torch_compile`` / ``channels_last``: ``model = torch.compile(model)`` /
  ``model = model.to(memory_format=torch.channels_last)`` after the model's assignment, where the
  model is the object whose ``.parameters()`` feeds a ``torch.optim`` optimizer;
- ``bf16_autocast``: the statement that calls the model wrapped in
  ``with torch.autocast(device_type=..., dtype=torch.bfloat16):``;
- ``fused_optimizer``: ``fused=True`` on the optimizer's constructor;
- ``cpu_threads`` / ``cudnn_benchmark`` / ``tf32``: one statement after the imports;
- ``non_blocking_copy``: ``non_blocking=True`` on ``.to(device)`` calls inside loops;
- ``fused_attention``: hand-written attention in a class's ``forward`` rewritten into
  ``scaled_dot_product_attention`` by :mod:`advisor.fixes.attention` (what the run-time install
  binds too), ``attn_implementation="sdpa"`` on ``from_pretrained(...)`` calls;
- ``activation_checkpointing``: in a loop over a list of blocks, ``x = layer(x)`` becomes
  ``x = checkpoint(layer, x, use_reentrant=False)`` (and ``checkpoint`` is imported).

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
from advisor.fixes.attention_exprs import dotted
from advisor.fixes.fix import DiffPlan
from advisor.fixes.model import Trial

# DataLoader positional parameters (torch.utils.data.DataLoader.__init__ order).
_LOADER_POSITIONS = {"batch_size": 1, "num_workers": 5, "pin_memory": 7}


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
    if plan.threads_for_workers:
        # NOTE: what the runtime did: leave one core per loader worker (cores - workers, >= 1).
        workers = plan.loader_kwargs.get("num_workers", "")
        n = int(workers) if workers.isdigit() else 0
        if n:
            plan.header_statements.append(
                f"torch.set_num_threads(max(1, torch.get_num_threads() - {n}))"
                "  # advisor: a core per loader worker"
            )
        else:
            plan.manual.append("cpu_threads: call torch.set_num_threads(cores - num_workers) at start-up")
        plan.threads_for_workers = False
    plan.batch_fixes[:] = list(dict.fromkeys(plan.batch_fixes))
    plan.header_statements[:] = list(dict.fromkeys(plan.header_statements))
    plan.manual[:] = list(dict.fromkeys(plan.manual))
    return plan


def _callee(node: cst.Call) -> str:
    """Dotted name of a call's function, e.g. ``torch.optim.SGD`` (empty when not a name)."""
    return dotted(node.func)


def _is_loader(node: cst.Call) -> bool:
    return _callee(node).split(".")[-1] == "DataLoader"


def _is_optimizer(node: cst.Call) -> bool:
    name = _callee(node)
    return "optim." in name or name in {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad"}


def _set_kwarg(call: cst.Call, key: str, value: cst.BaseExpression) -> cst.Call:
    """Set ``key=value`` on a call, replacing a keyword or a known positional slot in place."""
    args = list(call.args)
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == key:
            args[i] = a.with_changes(value=value)
            return call.with_changes(args=args)
    pos = _LOADER_POSITIONS.get(key)
    positional = [i for i, a in enumerate(args) if a.keyword is None and a.star == ""]
    if pos is not None and _is_loader(call) and pos < len(positional):
        i = positional[pos]
        args[i] = args[i].with_changes(value=value)
        return call.with_changes(args=args)
    new = cst.Arg(keyword=cst.Name(key), value=value, equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    if args:
        last = args[-1]
        trailing = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else None
        if isinstance(trailing, cst.ParenthesizedWhitespace):
            # One argument per line: the old last argument keeps its comment and takes the
            # indentation of the arguments; the new one takes the line that closes the call.
            between = next(
                (a.comma.whitespace_after for a in reversed(args[:-1])
                 if isinstance(a.comma, cst.Comma)
                 and isinstance(a.comma.whitespace_after, cst.ParenthesizedWhitespace)),
                None,
            )
            indent = between.last_line if between is not None else cst.SimpleWhitespace("    ")
            args[-1] = last.with_changes(comma=last.comma.with_changes(
                whitespace_after=trailing.with_changes(last_line=indent)))
            closing = trailing.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
            args.append(new.with_changes(comma=cst.Comma(whitespace_after=closing)))
        else:
            if last.comma is cst.MaybeSentinel.DEFAULT or not isinstance(last.comma, cst.Comma):
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(new)
    else:
        args.append(new)
    return call.with_changes(args=args)


def _arg(call: cst.Call, key: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == key:
            return a
    pos = _LOADER_POSITIONS.get(key)
    positional = [a for a in call.args if a.keyword is None and a.star == ""]
    if pos is not None and pos < len(positional):
        return positional[pos]
    return None


class _ModelFinder(cst.CSTVisitor):
    """Find the model's name: the object whose ``.parameters()`` feeds an optimizer."""

    def __init__(self) -> None:
        self.model: str | None = None

    def visit_Call(self, node: cst.Call) -> None:  # noqa: N802 - libcst's visitor naming
        if self.model is not None or not _is_optimizer(node) or not node.args:
            return
        first = node.args[0].value
        if (
            isinstance(first, cst.Call)
            and isinstance(first.func, cst.Attribute)
            and first.func.attr.value == "parameters"
            and isinstance(first.func.value, cst.Name)
        ):
            self.model = first.func.value.value


class _LoaderFinder(cst.CSTVisitor):
    """Find the names bound to a ``DataLoader(...)`` call (``loader = DataLoader(...)``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802 - libcst's visitor naming
        if isinstance(node.value, cst.Call) and _is_loader(node.value):
            self.names.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))


class _Transformer(cst.CSTTransformer):
    def __init__(self, plan: DiffPlan, model: str | None, loaders: set[str] | None = None) -> None:
        self.plan = plan
        self.model = model
        self.loaders = loaders or set()
        self.done: set[str] = set()
        self.loop_depth = 0
        self.skipped_splat: set[str] = set()
        self.reads_left = 0

    # -- calls ------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:  # noqa: N802
        if _is_loader(original):
            splat = any(a.star == "**" for a in updated.args)
            for key, code in self.plan.loader_kwargs.items():
                value = cst.parse_expression(code)
                if splat and _arg(updated, key) is None:
                    # NOTE: the key may hide in the **mapping: adding it could pass it twice.
                    self.skipped_splat.add(key)
                    continue
                updated = _set_kwarg(updated, key, value)
                self.done.add("loader")
            if self.plan.batch_factor > 1:
                arg = _arg(updated, "batch_size")
                factor = cst.Integer(str(self.plan.batch_factor))
                if arg is not None:
                    value = arg.value
                    if not isinstance(value, (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)):
                        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    if isinstance(value, cst.Integer):
                        new: cst.BaseExpression = cst.Integer(str(int(value.value) * self.plan.batch_factor))
                    else:
                        new = cst.BinaryOperation(value, cst.Multiply(
                            whitespace_before=cst.SimpleWhitespace(" "),
                            whitespace_after=cst.SimpleWhitespace(" ")), factor)
                    updated = _set_kwarg(updated, "batch_size", new)
                else:
                    updated = _set_kwarg(updated, "batch_size", factor)
                self.done.add("batch")
        elif self.plan.fused and _is_optimizer(original) and _arg(updated, "fused") is None:
            updated = _set_kwarg(updated, "fused", cst.Name("True"))
            self.done.add("fused")
        elif (
            self.plan.non_blocking and self.loop_depth
            and isinstance(original.func, cst.Attribute) and original.func.attr.value == "to"
            and len(original.args) == 1 and original.args[0].keyword is None
        ):
            updated = _set_kwarg(updated, "non_blocking", cst.Name("True"))
            self.done.add("non_blocking")
        return updated

    # -- loops (non_blocking only inside them) ------------------------------------------------

    def visit_For(self, node: cst.For) -> None:  # noqa: N802
        self.loop_depth += 1

    def leave_For(  # noqa: N802
        self, original: cst.For, updated: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        self.loop_depth -= 1
        if self.plan.checkpoint_loops and not self._over_loader(original):
            updated = self._checkpoint_calls(updated)
        before: list[cst.BaseStatement] = []
        if self.plan.read_every and "host_reads" not in self.done and self._over_loader(original):
            updated, before = self._read_every(updated)
        if before:
            return cst.FlattenSentinel([*before, self._wrap_loop(original, updated)])
        return self._wrap_loop(original, updated)

    def _read_every(self, loop: cst.For) -> tuple[cst.For, list[cst.BaseStatement]]:
        """Move the loop body's host-read statements under ``if step % N == 0``."""
        body = list(loop.body.body) if isinstance(loop.body, cst.IndentedBlock) else []
        reads = [i for i, st in enumerate(body) if _host_read_statement(st)]
        # NOTE: an assignment moves only when no statement left behind reads its target.
        kept = set(reads)
        for i in reads:
            names = _assigned(body[i])
            if names is None or any(
                _uses(body[j], names) for j in range(i + 1, len(body)) if j not in kept
            ):
                kept.discard(i)
        self.reads_left = len(reads) - len(kept)
        if not kept:
            return loop, []
        self.done.add("host_reads")
        counter, before = _loop_counter(loop)
        cond = cst.parse_expression(f"{counter} % {self.plan.read_every} == 0")
        out: list[cst.BaseStatement] = []
        if before:
            out.append(cst.parse_statement(f"{counter} += 1\n"))
        for i, st in enumerate(body):
            if i in kept:
                out.append(cst.If(test=cond, body=cst.IndentedBlock(body=[st.with_changes(leading_lines=[])]),
                                  leading_lines=st.leading_lines))
            else:
                out.append(st)
        return loop.with_changes(body=loop.body.with_changes(body=out)), before

    def _checkpoint_calls(self, loop: cst.For) -> cst.For:
        """``h = layer(h, ...)`` -> ``h = checkpoint(layer, h, ..., use_reentrant=False)`` in a loop over blocks."""
        if not isinstance(loop.target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
            return loop
        layer = loop.target.value
        out: list[Any] = []
        for st in loop.body.body:
            small = st.body[0] if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 else None
            call = small.value if isinstance(small, cst.Assign) else None
            if (
                isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == layer
                and call.args and all(a.keyword is None and a.star == "" for a in call.args)
            ):
                args = [cst.Arg(cst.Name(layer)), *call.args]
                args = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in args]
                args.append(cst.Arg(keyword=cst.Name("use_reentrant"), value=cst.Name("False"),
                                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                          whitespace_after=cst.SimpleWhitespace(""))))
                new = small.with_changes(value=call.with_changes(func=cst.Name("checkpoint"), args=args))
                st = st.with_changes(body=[new])
                self.done.add("checkpoint")
            out.append(st)
        imp = "from torch.utils.checkpoint import checkpoint"
        if "checkpoint" in self.done and imp not in self.plan.header_statements:
            self.plan.header_statements.append(imp)
        return loop.with_changes(body=loop.body.with_changes(body=out))

    def _wrap_loop(self, original: cst.For, updated: cst.For) -> cst.BaseStatement:
        if self.plan.wrap_data_loop and "data_loop" not in self.done and self._over_loader(original):
            self.done.add("data_loop")
            items = [cst.WithItem(item=cst.parse_expression(code)) for code in self.plan.wrap_data_loop]
            return cst.With(
                items=items, body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[])]),
                leading_lines=updated.leading_lines,
            )
        return updated

    def _over_loader(self, node: cst.For) -> bool:  # noqa: D401
        """Tell whether a ``for`` iterates a DataLoader (a name bound to one, or the call itself)."""
        it = node.iter
        if isinstance(it, cst.Call) and _is_loader(it):
            return True
        if isinstance(it, cst.Call) and _callee(it) == "enumerate" and it.args:
            it = it.args[0].value
        return isinstance(it, cst.Name) and it.value in self.loaders

    def visit_While(self, node: cst.While) -> None:  # noqa: N802
        self.loop_depth += 1

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.While:  # noqa: N802
        self.loop_depth -= 1
        return updated

    # -- statements: model assignment, forward pass ------------------------------------------

    def leave_IndentedBlock(  # noqa: N802
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated.with_changes(body=self._rewrite_body(list(updated.body)))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:  # noqa: N802
        body = self._rewrite_body(list(updated.body))
        if self.plan.header_statements:
            last_import = max(
                (i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                 and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)),
                default=-1,
            )
            new = [cst.parse_statement(code + "\n") for code in self.plan.header_statements]
            body[last_import + 1 : last_import + 1] = new
            self.done.add("header")
        return updated.with_changes(body=body)

    def _rewrite_body(self, body: list[Any]) -> list[Any]:
        out: list[Any] = []
        for stmt in body:
            if self.plan.autocast_device and self._calls_model(stmt) and "autocast" not in self.done:
                out.append(self._autocast(stmt))
                self.done.add("autocast")
                continue
            out.append(stmt)
            if self.model and self._assigns_model(stmt):
                if self.plan.channels_last and "channels_last" not in self.done:
                    out.append(cst.parse_statement(
                        f"{self.model} = {self.model}.to(memory_format=torch.channels_last)\n"))
                    self.done.add("channels_last")
                if self.plan.compile and "compile" not in self.done:
                    kwargs = f", {self.plan.compile_kwargs}" if self.plan.compile_kwargs else ""
                    out.append(cst.parse_statement(f"{self.model} = torch.compile({self.model}{kwargs})\n"))
                    self.done.add("compile")
        return out

    def _assigns_model(self, stmt: Any) -> bool:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return False
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name) and target.target.value == self.model:
                        return True
        return False

    def _calls_model(self, stmt: Any) -> bool:
        if not self.model or not isinstance(stmt, cst.SimpleStatementLine):
            return False
        found = False
        model = self.model

        class V(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:  # noqa: N802
                nonlocal found
                if isinstance(node.func, cst.Name) and node.func.value == model:
                    found = True

        stmt.visit(V())
        return found

    def _autocast(self, stmt: cst.SimpleStatementLine) -> cst.With:
        device = self.plan.autocast_device
        with_item = cst.parse_expression(f'torch.autocast(device_type="{device}", dtype=torch.bfloat16)')
        return cst.With(
            items=[cst.WithItem(item=with_item)],
            body=cst.IndentedBlock(body=[stmt.with_changes(leading_lines=[])]),
            leading_lines=stmt.leading_lines,
        )


_READ_ATTRS = frozenset({"item", "cpu", "tolist", "numpy"})
_READ_FUNCS = frozenset({"float", "int", "print"})


def _host_read_statement(stmt: Any) -> bool:
    """Tell whether a simple statement reads a tensor back to the host (``.item()``, ``print``...)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    found = False

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:  # noqa: N802
            nonlocal found
            f = node.func
            if isinstance(f, cst.Attribute) and f.attr.value in _READ_ATTRS:
                found = True
            elif isinstance(f, cst.Name) and f.value in _READ_FUNCS and node.args and not all(
                isinstance(a.value, (cst.SimpleString, cst.Integer, cst.Float)) for a in node.args
            ):
                found = True

    stmt.visit(V())
    return found


def _assigned(stmt: Any) -> set[str] | None:
    """Names a simple statement binds (empty for a bare call); None when it does more."""
    names: set[str] = set()
    for small in stmt.body:
        if isinstance(small, cst.Expr):
            continue
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else (
            [small.target] if isinstance(small, (cst.AugAssign, cst.AnnAssign)) else None)
        if targets is None:
            return None
        for t in targets:
            if not isinstance(t, cst.Name):
                return None
            names.add(t.value)
    return names


def _uses(stmt: Any, names: set[str]) -> bool:
    """Tell whether a statement mentions any of ``names``."""
    found = False

    class V(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:  # noqa: N802
            nonlocal found
            found = found or node.value in names

    stmt.visit(V())
    return found


def _loop_counter(loop: cst.For) -> tuple[str, list[cst.BaseStatement]]:
    """Return the loop's step counter: ``enumerate``'s index, else a new one set to 0 before the loop."""
    it, target = loop.iter, loop.target
    if (
        isinstance(it, cst.Call) and _callee(it) == "enumerate" and isinstance(target, cst.Tuple)
        and target.elements and isinstance(target.elements[0].value, cst.Name)
    ):
        return target.elements[0].value.value, []
    return "advisor_step", [cst.parse_statement("advisor_step = 0  # advisor: counts steps for the reads below\n")]


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
    tr = _Transformer(plan, finder.model, loaders.names)
    new = module.visit(tr)
    manual = list(plan.manual)
    if plan.fused_attention:
        new, notes = fused_attention(new)
        manual += notes
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
        manual.append(f"torch_compile: add {finder.model} = torch.compile({finder.model}) after the model is built")
    if plan.autocast_device and "autocast" not in tr.done and finder.model:
        manual.append(f"bf16_autocast: wrap the forward pass in torch.autocast(device_type={plan.autocast_device!r}, dtype=torch.bfloat16)")
    if plan.read_every and "host_reads" not in tr.done:
        manual.append(
            f"host_reads: no per-step read found in a loop over a DataLoader; keep logged values on the "
            f"device (running sums) and read them every {plan.read_every} steps"
        )
    if tr.reads_left:
        manual.append(
            f"host_reads: {tr.reads_left} per-step read(s) stay in place because later code in the loop "
            "uses their value; keep those values on the device (running sums) and read them less often"
        )
    if plan.wrap_data_loop and "data_loop" not in tr.done:
        manual.append(
            "no loop over a DataLoader found; open "
            + ", ".join(f"`with {c}:`" for c in plan.wrap_data_loop)
            + " around the loop that calls the model"
        )
    if plan.fused and "fused" not in tr.done:
        manual.append("fused_optimizer: pass fused=True to the optimizer")
    if plan.checkpoint_loops and "checkpoint" not in tr.done:
        manual.append(catalog.get("activation_checkpointing").manual)
    code = new.code
    if plan.header_statements and not re.search(r"^import torch\b|^from torch\b", source, re.M):
        code = "import torch\n" + code
    return code, manual


def fused_attention(module: cst.Module) -> tuple[cst.Module, list[str]]:
    """Rewrite hand-written attention (the run-time install's own transformation); say what is left."""
    from advisor.fixes.attention import rewrite_module

    new, rw = rewrite_module(module)
    notes = [f"fused_attention: {why}; left as written" for why in rw.refused]
    if not rw.changed and not rw.loads:
        notes.append(
            "fused_attention: no class forward with q @ k.transpose(-2, -1) -> softmax -> @ v found in this "
            "script; call torch.nn.functional.scaled_dot_product_attention(q, k, v, ...) where attention is "
            "computed (Hugging Face: from_pretrained(..., attn_implementation=\"sdpa\"))"
        )
    return new, notes


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
    path = Path(script)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path} for the diff ({exc})") from exc
    try:
        new, manual = transform(source, kept)
    except cst.ParserSyntaxError as exc:
        raise InputError(f"cannot parse {path} for the diff: {exc.message} (line {exc.raw_line})") from exc
    header = notes_header(kept, manual)
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

    Only for the explicit ``--write`` flag. The original is first copied to the first free ``<script>.bak``, ``.bak.1``, ...;
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
    path = Path(script)
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
