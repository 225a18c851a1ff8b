"""``cpu_threads``' transformation: the script's own ``torch.set_num_threads(n)`` calls take the kept count.

A line added after the imports is undone by a later call of the script's own (advisor-bench's
oversubscribed cases set eight threads on two cores), so every ``torch.set_num_threads(...)``
call gets the count the trial measured; a script without one gets the line after the imports.
"""

from __future__ import annotations

import libcst as cst


def set_thread_calls(module: cst.Module, threads: int) -> tuple[cst.Module, bool]:
    """Give every ``torch.set_num_threads(...)`` call ``threads``; tell whether there was one."""
    tr = _ThreadCount(threads)
    return module.visit(tr), tr.done


class _ThreadCount(cst.CSTTransformer):
    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.done = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:  # noqa: N802 - libcst's visitor naming
        func = updated.func
        if (
            isinstance(func, cst.Attribute) and func.attr.value == "set_num_threads"
            and isinstance(func.value, cst.Name) and func.value.value == "torch" and len(updated.args) == 1
        ):
            self.done = True
            return updated.with_changes(args=[updated.args[0].with_changes(value=cst.Integer(str(self.threads)))])
        return updated
