"""The generic libcst pass behind a diff: one pass over the user's script that carries out a :class:`DiffPlan`.

:class:`_Transformer` sets DataLoader keywords, scales the batch size, wraps the model
(compile, channels_last), its forward (autocast) and the data loop, sets ``fused=True`` on the
optimizer and inserts statements after the imports; :class:`_ModelFinder` and
:class:`_LoaderFinder` find the model and the loaders first. :func:`callee` and
:func:`iterates_loader` are shared with the fixes' own edits (:mod:`advisor.fixes.edits`).
What each edit is for is listed in :mod:`advisor.fixes.diff`, which plans the edits and makes
the diff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from advisor.fixes.attention_exprs import dotted
from advisor.fixes.diff_plan import DiffPlan

# DataLoader positional parameters (torch.utils.data.DataLoader.__init__ order).
_LOADER_POSITIONS = {"batch_size": 1, "num_workers": 5, "pin_memory": 7}


def callee(node: cst.Call) -> str:
    """Dotted name of a call's function, e.g. ``torch.optim.SGD`` (empty when not a name)."""
    return dotted(node.func)


def _is_loader(node: cst.Call) -> bool:
    return callee(node).split(".")[-1] == "DataLoader"


def iterates_loader(node: cst.For, loaders: set[str] | frozenset[str]) -> bool:
    """Tell whether a ``for`` iterates a DataLoader (a name in ``loaders`` bound to one, or the call itself)."""
    it = node.iter
    if isinstance(it, cst.Call) and _is_loader(it):
        return True
    if isinstance(it, cst.Call) and callee(it) == "enumerate" and it.args:
        it = it.args[0].value
    return isinstance(it, cst.Name) and it.value in loaders


_FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
"""torch.optim's optimizers whose constructor takes ``fused`` (torch 2.13)."""
_FOREACH_OPTIMIZERS = frozenset({"RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop", "Adafactor"})
"""Those that take only ``foreach``: ``fused=True`` would be a TypeError."""


def _optimizer_flag(node: cst.Call) -> str | None:
    """``fused`` or ``foreach``: the keyword a torch.optim optimizer constructor takes; None for any other call.

    ``torch.optim.AdamW(...)``, ``optim.AdamW(...)`` or a bare ``AdamW(...)``; never a scheduler
    (``torch.optim.lr_scheduler.OneCycleLR(opt, ...)`` got ``fused=True`` once, and the script
    died on it) or anything else under ``torch.optim``.
    """
    parts = callee(node).split(".")
    if len(parts) > 1 and parts[-2] != "optim":
        return None
    if parts[-1] in _FUSED_OPTIMIZERS:
        return "fused"
    return "foreach" if parts[-1] in _FOREACH_OPTIMIZERS else None


def _may_take_parameters(node: cst.Call) -> bool:
    """Any optimizer-like call, torch's or another library's (``bnb.optim.Adam8bit``): the model finder's test."""
    name = callee(node)
    return "optim." in name or _optimizer_flag(node) is not None


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
        if self.model is not None or not _may_take_parameters(node) or not node.args:
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
    def __init__(self, plan: DiffPlan, model: str | None, loaders: set[str] | None = None,
                 mapped: dict[str, set[str]] | None = None) -> None:
        self.plan = plan
        self.mapped = mapped or {}  # ``**`` mappings that hold the loader keys (advisor.fixes.diff_mapping)
        self.model = model
        self.loaders = loaders or set()
        self.done: set[str] = set()
        self.loop_depth = 0
        self.skipped_splat: set[str] = set()
        self.branches: list[bool] = []  # per enclosing ``if``: whether its branches all build or call the model
        self.built: Any = None  # the first statement that builds the model (visit_Module)

    # -- calls ------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:  # noqa: N802
        if _is_loader(original):
            splats = [a.value.value if isinstance(a.value, cst.Name) else "" for a in updated.args if a.star == "**"]
            for key, code in self.plan.loader_kwargs.items():
                value = cst.parse_expression(code)
                if splats and _arg(updated, key) is None:
                    if any(key in self.mapped.get(name, ()) for name in splats):
                        self.done.add("loader")  # set where the mapping is built
                    else:  # NOTE: the key may hide in the **mapping: adding it could pass it twice.
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
        elif (
            self.plan.fused and (flag := _optimizer_flag(original)) is not None
            and _arg(updated, "fused") is None and _arg(updated, "foreach") is None
        ):
            updated = _set_kwarg(updated, flag, cst.Name("True"))
            self.done.add("fused")
        elif (
            self.plan.non_blocking and self.loop_depth
            and isinstance(original.func, cst.Attribute) and original.func.attr.value == "to"
            and len(original.args) == 1 and original.args[0].keyword is None
            and _may_be_a_gpu(original.args[0].value)
        ):
            updated = _set_kwarg(updated, "non_blocking", cst.Name("True"))
            self.done.add("non_blocking")
        return updated

    # -- loops (non_blocking only inside them; the data loop wrapped) ------------------------

    def visit_For(self, node: cst.For) -> None:  # noqa: N802
        self.loop_depth += 1

    def leave_For(  # noqa: N802
        self, original: cst.For, updated: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        self.loop_depth -= 1
        return self._wrap_loop(original, updated)

    def _wrap_loop(self, original: cst.For, updated: cst.For) -> cst.BaseStatement:
        if self.plan.wrap_data_loop and "data_loop" not in self.done and self._over_loader(original):
            self.done.add("data_loop")
            items = [cst.WithItem(item=cst.parse_expression(code)) for code in self.plan.wrap_data_loop]
            return cst.With(
                items=items, body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[])]),
                leading_lines=updated.leading_lines,
            )
        return updated

    def _over_loader(self, node: cst.For) -> bool:
        return iterates_loader(node, self.loaders)

    def visit_While(self, node: cst.While) -> None:  # noqa: N802
        self.loop_depth += 1

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.While:  # noqa: N802
        self.loop_depth -= 1
        return updated

    # -- statements: model assignment, forward pass ------------------------------------------

    # NOTE: ``if args.model == "Transformer": model = A(...) else: model = B(...)`` builds the
    # model in each branch, and one branch runs: edits inside the first branch did nothing for a
    # word language model whose run built B. An ``if`` whose branches all build (or call) the
    # model takes the edit as a whole: compile after it, autocast around it.
    def visit_If(self, node: cst.If) -> None:  # noqa: N802
        self.branches.append(self._every_branch(node, self._assigns_model) or self._every_branch(node, self._calls_model))

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:  # noqa: N802
        self.branches.pop()
        return updated

    def _every_branch(self, node: cst.If, pred: Callable[[Any], bool]) -> bool:
        branch: Any = node
        while isinstance(branch, cst.If):
            if not any(pred(s) for s in branch.body.body):
                return False
            branch = branch.orelse
        return branch is not None and any(pred(s) for s in branch.body.body)

    def leave_IndentedBlock(  # noqa: N802
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if any(self.branches):
            return updated  # a branch of an ``if`` that takes the edit whole (visit_If)
        return updated.with_changes(body=self._rewrite_body(list(original.body), list(updated.body)))

    def visit_Module(self, node: cst.Module) -> None:  # noqa: N802
        first = _FirstSite(self._assigns_model, lambda s: self._every_branch(s, self._assigns_model))
        node.visit(first)
        self.built = first.found  # compile and channels_last go after it

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:  # noqa: N802
        body = self._rewrite_body(list(original.body), list(updated.body))
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

    def _rewrite_body(self, originals: list[Any], body: list[Any]) -> list[Any]:
        # NOTE: every call of the model runs under autocast, as in the trial (its forward
        # patched); the model is compiled once, after the first statement that builds it in
        # the source's order (leave_* run innermost first: a reload at the script's end came
        # before the model's construction at its top).
        out: list[Any] = []
        for original, stmt in zip(originals, body, strict=True):
            whole = isinstance(stmt, cst.If)
            if self.plan.autocast_device and (self._every_branch(stmt, self._calls_model) if whole else self._calls_model(stmt)):
                out.append(self._autocast(stmt))
                self.done.add("autocast")
                continue
            out.append(stmt)
            if self.model and original is self.built:
                if self.plan.channels_last and "channels_last" not in self.done:
                    out.append(cst.parse_statement(
                        f"{self.model} = {self.model}.to(memory_format=torch.channels_last)\n"))
                    self.done.add("channels_last")
                if self.plan.compile and "compile" not in self.done:
                    # NOTE: in place, as the trial compiled it: ``torch.compile(model)`` returns a
                    # wrapper whose state_dict keys gain ``_orig_mod.`` (checkpoints stop loading).
                    out.append(cst.parse_statement(f"{self.model}.compile({self.plan.compile_kwargs})\n"))
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

    def _autocast(self, stmt: cst.SimpleStatementLine | cst.If) -> cst.With:
        device = self.plan.autocast_device
        with_item = cst.parse_expression(f'torch.autocast(device_type="{device}", dtype=torch.bfloat16)')
        return cst.With(
            items=[cst.WithItem(item=with_item)],
            body=cst.IndentedBlock(body=[stmt.with_changes(leading_lines=[])]),
            leading_lines=stmt.leading_lines,
        )


class _FirstSite(cst.CSTVisitor):
    """Find the first statement, in the source's order, that ``simple`` (a line) or ``whole`` (an ``if``) accepts."""

    def __init__(self, simple: Callable[[Any], bool], whole: Callable[[Any], bool]) -> None:
        self.simple, self.whole = simple, whole
        self.found: Any = None

    def visit_If(self, node: cst.If) -> bool:  # noqa: N802
        if self.found is None and self.whole(node):
            self.found = node
        return self.found is None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:  # noqa: N802
        if self.found is None and self.simple(node):
            self.found = node
        return False


_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
    "int32", "int64", "long", "uint8", "bool", "complex64", "complex128",
})


def _may_be_a_gpu(target: cst.BaseExpression) -> bool:
    """Whether ``.to(target)`` may copy to a GPU: not ``"cpu"``, ``torch.device("cpu")`` or a dtype.

    A non-blocking copy to the host returns before the data is there: the values read next can
    be stale, so ``.to("cpu")`` keeps its blocking copy.
    """
    if isinstance(target, cst.Call) and isinstance(target.func, cst.Attribute) and target.func.attr.value == "device":
        target = target.args[0].value if target.args else target
    if isinstance(target, cst.SimpleString):
        return target.evaluated_value.startswith("cuda")
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "torch":
        return target.attr.value not in _DTYPES
    return True
