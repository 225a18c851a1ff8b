"""``host_reads``' transformation: per-step host reads moved under ``if step % N == 0``.

In the first loop over a DataLoader, each simple statement that reads a tensor back to the host
(``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``float(t)``, ``int(t)``, ``print(...)``)
moves under ``if <counter> % N == 0:``; the counter is ``enumerate``'s index, else a new
``advisor_step`` counted before the loop. A read whose value a statement left behind uses stays.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from advisor.fixes.diff_edits import callee, iterates_loader

_READ_ATTRS = frozenset({"item", "cpu", "tolist", "numpy"})
_READ_FUNCS = frozenset({"float", "int", "print"})


def read_every(module: cst.Module, every: int, loaders: frozenset[str]) -> tuple[cst.Module, list[str]]:
    """Move the first DataLoader loop's host reads under ``if step % every == 0``; say what is left."""
    tr = _ReadEvery(every, loaders)
    new = module.visit(tr)
    notes = []
    if not tr.done:
        notes.append(
            f"host_reads: no per-step read found in a loop over a DataLoader; keep logged values on the "
            f"device (running sums) and read them every {every} steps"
        )
    if tr.reads_left:
        notes.append(
            f"host_reads: {tr.reads_left} per-step read(s) stay in place because later code in the loop "
            "uses their value; keep those values on the device (running sums) and read them less often"
        )
    return new, notes


class _ReadEvery(cst.CSTTransformer):
    def __init__(self, every: int, loaders: frozenset[str]) -> None:
        self.every = every
        self.loaders = loaders
        self.done = False
        self.reads_left = 0

    def leave_For(  # noqa: N802 - libcst's visitor naming
        self, original: cst.For, updated: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        # NOTE: post-order, as the generic pass: the innermost loop over a DataLoader is the one.
        if self.done or not iterates_loader(original, self.loaders):
            return updated
        updated, before = self._read_every(updated)
        return cst.FlattenSentinel([*before, updated]) if before else updated

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
        self.done = True
        counter, before = _loop_counter(loop)
        cond = cst.parse_expression(f"{counter} % {self.every} == 0")
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
        isinstance(it, cst.Call) and callee(it) == "enumerate" and isinstance(target, cst.Tuple)
        and target.elements and isinstance(target.elements[0].value, cst.Name)
    ):
        return target.elements[0].value.value, []
    return "advisor_step", [cst.parse_statement("advisor_step = 0  # advisor: counts steps for the reads below\n")]
