"""The model's own names for the ``nn.Module: Conv2d_5`` frames torch.profiler records.

torch.profiler's Python tracer names each module frame ``<class>_<n>``: the n-th instance of
that class it saw in the profiled window. ``Conv2d_5`` says nothing a user can find in their
model; ``layers.1.short.0`` does (issue #32). While the profiler records, a global forward
pre-hook sees the modules in the same first-call order, numbers them the same way and, when
the window closes, maps each label to the instance's qualified name inside its outermost
module (``model.named_modules()``). Roots keep their label (a root's own name is empty).
"""

from __future__ import annotations

from typing import Any


class ModuleNamer:
    """Map ``<class>_<n>`` profiler labels to qualified module names over one profiled window."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._seen: dict[int, tuple[str, Any]] = {}  # id -> (label, module); strong refs, this window only
        self._counts: dict[str, int] = {}
        self.names: dict[str, str] = {}

    def enable(self) -> None:
        """Start numbering modules as torch.profiler does (call right after the profiler starts)."""
        try:
            from torch.nn.modules.module import register_module_forward_pre_hook
        except ImportError:  # pragma: no cover - torch without global hooks
            return
        self._seen, self._counts = {}, {}
        self._handle = register_module_forward_pre_hook(self._pre)

    def _pre(self, module: Any, _args: Any) -> None:
        key = id(module)
        if key in self._seen:
            return
        cls = type(module).__name__
        n = self._counts.get(cls, 0)
        self._counts[cls] = n + 1
        self._seen[key] = (f"{cls}_{n}", module)

    def disable(self) -> None:
        """Stop numbering and resolve the labels to qualified names (``names``)."""
        if self._handle is None:
            return
        self._handle.remove()
        self._handle = None
        try:
            self.names.update(self._resolve())
        except Exception:  # noqa: BLE001 - names are a convenience; never fail a capture over them
            pass
        self._seen = {}

    def _resolve(self) -> dict[str, str]:
        qualified: dict[int, str] = {}
        children: set[int] = set()
        for _, module in self._seen.values():
            for sub in module.modules():
                if sub is not module:
                    children.add(id(sub))
        # NOTE: roots first seen first; a module under two roots keeps the first root's name
        for key, (_, module) in self._seen.items():
            if key in children:
                continue
            for name, sub in module.named_modules():
                if name:
                    qualified.setdefault(id(sub), name)
        return {label: qualified[key] for key, (label, _) in self._seen.items() if key in qualified}
