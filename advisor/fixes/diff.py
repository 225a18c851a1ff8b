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
- ``non_blocking_copy``: ``non_blocking=True`` on ``.to(device)`` calls inside loops.

What cannot be made mechanical (e.g. the gradient-accumulation count after batch fusion, the
learning rate after a larger batch, fp16 loss scaling, input layout for channels_last) is said
in ``# advisor:`` lines at the top of the diff; ``patch`` and ``git apply`` ignore lines before
the first ``---``.

:func:`write_diff` is only called for ``--write``: it keeps a ``<script>.bak`` copy first.
"""

from __future__ import annotations

import difflib
import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from advisor.errors import InputError
from advisor.fixes.model import Trial

# DataLoader positional parameters (torch.utils.data.DataLoader.__init__ order).
_LOADER_POSITIONS = {"batch_size": 1, "num_workers": 5, "pin_memory": 7}


@dataclass
class _Plan:
    """The edits to make, gathered from the kept trials."""

    loader_kwargs: dict[str, cst.BaseExpression] = field(default_factory=dict)
    batch_factor: int = 1
    batch_fixes: list[str] = field(default_factory=list)
    compile: bool = False
    channels_last: bool = False
    autocast_device: str | None = None
    fused: bool = False
    non_blocking: bool = False
    threads_for_workers: bool = False
    header_statements: list[str] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)


def _plan(kept: Sequence[Trial]) -> _Plan:
    plan = _Plan()
    for t in kept:
        p: dict[str, Any] = dict(t.params)
        if "+" in t.fix:  # a combined trial: its params are per fix
            plan_parts = [Trial(fix=f, safety=t.safety, params=dict(p.get(f, {}))) for f in t.fix.split("+")]
            sub = _plan(plan_parts)
            _merge(plan, sub)
            continue
        if t.fix == "dataloader_workers":
            plan.loader_kwargs["num_workers"] = cst.Integer(str(int(p.get("num_workers", 2))))
        elif t.fix == "pin_memory":
            plan.loader_kwargs["pin_memory"] = cst.Name("True")
        elif t.fix == "persistent_workers":
            plan.loader_kwargs["persistent_workers"] = cst.Name("True")
        elif t.fix == "prefetch_factor":
            plan.loader_kwargs["prefetch_factor"] = cst.Integer(str(int(p.get("prefetch_factor", 4))))
        elif t.fix == "batch_fusion":
            factor = int(p.get("factor", 1))
            plan.batch_factor *= factor
            plan.batch_fixes.append(t.fix)
            plan.manual.append(
                f"batch_fusion: the DataLoader batch is now {factor}x larger; divide your "
                f"gradient-accumulation count by {factor} to keep the same effective batch "
                "(and scale the learning rate if you change it)"
            )
        elif t.fix == "larger_batch":
            factor = int(p.get("factor", 1))
            plan.batch_factor *= factor
            plan.batch_fixes.append(t.fix)
            plan.manual.append(
                f"larger_batch: each optimizer step now sees {factor}x the samples and an epoch has "
                f"{factor}x fewer steps; scale the learning rate (linear rule x{factor}, or sqrt rule "
                f"x{math.sqrt(factor):.3g}, with a warm-up) and check the loss curve; cap the batch "
                "by memory on your device"
            )
        elif t.fix == "torch_compile":
            plan.compile = True
        elif t.fix == "channels_last":
            plan.channels_last = True
            plan.manual.append(
                "channels_last: also convert the 4-D inputs, "
                "x = x.to(memory_format=torch.channels_last), before the forward pass"
            )
        elif t.fix == "bf16_autocast":
            plan.autocast_device = str(p.get("device_type", "cpu"))
        elif t.fix == "fused_optimizer":
            plan.fused = True
        elif t.fix == "non_blocking_copy":
            plan.non_blocking = True
        elif t.fix == "cpu_threads":
            threads = p.get("threads")
            if threads:
                plan.header_statements.append(f"torch.set_num_threads({int(threads)})")
            else:
                plan.threads_for_workers = True
        elif t.fix == "cudnn_benchmark":
            plan.header_statements.append("torch.backends.cudnn.benchmark = True")
        elif t.fix == "tf32":
            plan.header_statements.append('torch.set_float32_matmul_precision("high")')
        elif t.fix == "fp16_amp":
            plan.manual.append(
                "fp16_amp: wrap the forward pass in torch.autocast('cuda', dtype=torch.float16) and "
                "use torch.amp.GradScaler: scaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
            )
        else:
            plan.manual.append(f"{t.fix}: no mechanical change is known for this fix")
    if plan.threads_for_workers:
        # NOTE: what the runtime did: leave one core per loader worker (cores - workers, >= 1).
        workers = plan.loader_kwargs.get("num_workers")
        n = int(workers.value) if isinstance(workers, cst.Integer) else 0
        if n:
            plan.header_statements.append(
                f"torch.set_num_threads(max(1, torch.get_num_threads() - {n}))"
                "  # advisor: a core per loader worker"
            )
        else:
            plan.manual.append("cpu_threads: call torch.set_num_threads(cores - num_workers) at start-up")
        plan.threads_for_workers = False
    return plan


def _merge(into: _Plan, sub: _Plan) -> None:
    into.loader_kwargs.update(sub.loader_kwargs)
    into.batch_factor = max(into.batch_factor, sub.batch_factor)
    into.batch_fixes += [f for f in sub.batch_fixes if f not in into.batch_fixes]
    into.compile |= sub.compile
    into.channels_last |= sub.channels_last
    into.autocast_device = into.autocast_device or sub.autocast_device
    into.fused |= sub.fused
    into.non_blocking |= sub.non_blocking
    into.header_statements += [s for s in sub.header_statements if s not in into.header_statements]
    into.manual += [m for m in sub.manual if m not in into.manual]


def _callee(node: cst.Call) -> str:
    """Dotted name of a call's function, e.g. ``torch.optim.SGD`` (empty when not a name)."""

    def name(n: cst.BaseExpression) -> str:
        if isinstance(n, cst.Name):
            return n.value
        if isinstance(n, cst.Attribute):
            base = name(n.value)
            return f"{base}.{n.attr.value}" if base else ""
        return ""

    return name(node.func)


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


class _Transformer(cst.CSTTransformer):
    def __init__(self, plan: _Plan, model: str | None) -> None:
        self.plan = plan
        self.model = model
        self.done: set[str] = set()
        self.loop_depth = 0
        self.skipped_splat: set[str] = set()

    # -- calls ------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:  # noqa: N802
        if _is_loader(original):
            splat = any(a.star == "**" for a in updated.args)
            for key, value in self.plan.loader_kwargs.items():
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

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:  # noqa: N802
        self.loop_depth -= 1
        return updated

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
                    out.append(cst.parse_statement(f"{self.model} = torch.compile({self.model})\n"))
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
    tr = _Transformer(plan, finder.model)
    new = module.visit(tr)
    manual = list(plan.manual)
    if plan.loader_kwargs and "loader" not in tr.done:
        manual.append("DataLoader settings: no DataLoader(...) call found; set " + ", ".join(
            f"{k}={cst.Module([]).code_for_node(v)}" for k, v in plan.loader_kwargs.items()))
    if tr.skipped_splat:
        manual.append(
            "DataLoader settings: a DataLoader(...) call takes **kwargs; set "
            + ", ".join(
                f"{k}={cst.Module([]).code_for_node(plan.loader_kwargs[k])}" for k in sorted(tr.skipped_splat)
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
    if plan.fused and "fused" not in tr.done:
        manual.append("fused_optimizer: pass fused=True to the optimizer")
    code = new.code
    if plan.header_statements and not re.search(r"^import torch\b|^from torch\b", source, re.M):
        code = "import torch\n" + code
    return code, manual


def make_diff(script: Path, kept: Sequence[Trial]) -> str:
    """Return a unified diff of ``script`` that makes the kept fixes permanent.

    Args:
        script: The user's script (read, never written).
        kept: The kept trials (``FixOutcome.kept_trials`` or a combined trial).

    Returns:
        The diff, led by ``# advisor:`` comment lines for what could not be made mechanical;
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
    lines = [f"# advisor: not made mechanical: {m}\n" for m in manual]
    body = difflib.unified_diff(
        source.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{path.name}", tofile=f"b/{path.name}",
    )
    return "".join(lines) + "".join(body)


def write_diff(script: Path, diff_or_kept: str | Sequence[Trial]) -> Path:
    """Apply a diff from :func:`make_diff` (or the kept trials) to ``script``, keeping a backup.

    Only for the explicit ``--write`` flag. The original is first copied to ``<script>.bak``.

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
    backup = path.with_name(path.name + ".bak")
    shutil.copy2(path, backup)
    tmp = path.with_name(path.name + ".advisor-tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return backup


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
