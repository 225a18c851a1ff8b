"""``activation_checkpointing``' transformation: block calls in loops checkpointed.

In every loop that is not over a DataLoader and whose target is a name (``for layer in
self.layers:``), an assignment calling that name with positional arguments only,
``h = layer(h, mask)``, becomes ``h = checkpoint(layer, h, mask, use_reentrant=False)``, and
``from torch.utils.checkpoint import checkpoint`` joins the statements after the imports.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from advisor.fixes.diff_edits import iterates_loader

IMPORT = "from torch.utils.checkpoint import checkpoint"


def checkpoint_loops(module: cst.Module, loaders: frozenset[str]) -> tuple[cst.Module, bool]:
    """Checkpoint the block calls of loops over blocks; tell whether any call was rewritten."""
    tr = _CheckpointLoops(loaders)
    return module.visit(tr), tr.done


class _CheckpointLoops(cst.CSTTransformer):
    def __init__(self, loaders: frozenset[str]) -> None:
        self.loaders = loaders
        self.done = False

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:  # noqa: N802 - libcst's visitor naming
        if iterates_loader(original, self.loaders):
            return updated
        return self._checkpoint_calls(updated)

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
                self.done = True
            out.append(st)
        return loop.with_changes(body=loop.body.with_changes(body=out))
