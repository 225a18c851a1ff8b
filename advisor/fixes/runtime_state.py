"""The run-time state the catalog's fixes configure, and the torch patches it installs.

:class:`State` keeps the live notes (fix id -> :class:`~advisor.capture.model.FixNote`) and
what each requested fix asked for; :meth:`State.patch` then wraps ``DataLoader.__init__``,
outermost ``nn.Module`` calls, ``Tensor.backward`` (fp16 loss scaling), optimizer constructors
and ``Tensor.to``/``.cuda``, each at most once (see :mod:`advisor.fixes.runtime`).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from advisor.capture.model import FixNote, NoteState
from advisor.fixes import catalog
from advisor.fixes.runtime_torch import (
    _device_type,
    _param_dtype,
    _pristine,
    _targets_cuda,
    _to_channels_last,
    map_tensors,
    patch,
)


def _state_of(note: FixNote | str | None) -> NoteState | None:
    note = FixNote.of(note)
    return None if note is None else note.state


def is_applied(note: FixNote | str | None) -> bool:
    """Tell whether a note says the fix took effect."""
    return _state_of(note) is NoteState.APPLIED


def is_not_applied(note: FixNote | str | None) -> bool:
    """Tell whether a note says the fix could not apply (its detail says why)."""
    return _state_of(note) is NoteState.SKIPPED


class State:
    """The fixes requested in this process and the bookkeeping their patches share.

    Catalog fixes configure it in their ``install``: ``want_loader`` for DataLoader fixes,
    ``want_model`` for fixes set up on the model's first call, ``autocast_dtype``/``scaler``,
    ``fused``, ``non_blocking``.
    """

    def __init__(self, notes: dict[str, FixNote]) -> None:
        self.notes = notes
        self.loader: dict[str, dict[str, Any]] = {}  # fix id -> params, for DataLoader fixes
        self.model_fixes: dict[str, dict[str, Any]] = {}  # fix id -> params, set up on the model
        # fix id -> (state, model) -> a context manager to run each model call in, or None
        self.around_model: dict[str, Callable[[State, Any], Any]] = {}
        self.autocast_dtype: Any = None
        self.autocast_fix: str | None = None
        self.scaler: Any = None
        self._scaling_patched = False
        self.fused = False
        self.non_blocking = False
        self.loader_counts: dict[str, int] = {}
        self.loader_reasons: dict[str, str] = {}
        self.loader_done: dict[str, str] = {}
        self._model_id: int | None = None

    # -- notes ------------------------------------------------------------------------------

    def applied(self, fix: str, detail: str) -> None:
        """Record that ``fix`` took effect."""
        self.notes[fix] = FixNote(NoteState.APPLIED, detail)

    def skipped(self, fix: str, detail: str) -> None:
        """Record that ``fix`` could not apply, and why."""
        self.notes[fix] = FixNote(NoteState.SKIPPED, detail)

    def pending(self, fix: str, detail: str) -> None:
        """Record that ``fix`` is installed and waits for the script to reach it."""
        self.notes[fix] = FixNote(NoteState.PENDING, detail)

    def is_applied(self, fix: str | None) -> bool:
        """Tell whether ``fix``'s note already says it took effect."""
        return is_applied(self.notes.get(fix or ""))

    # -- requests from the fixes' install -----------------------------------------------------

    def want_loader(self, fix: str, params: dict[str, Any], waiting: str = "waiting for a DataLoader") -> None:
        """Ask for ``fix``'s ``adjust_loader`` on every DataLoader the script builds."""
        self.loader[fix] = params
        self.pending(fix, waiting)

    def want_model(self, fix: str, params: dict[str, Any]) -> None:
        """Ask for ``fix``'s ``on_model`` on the model's first outermost call."""
        self.model_fixes[fix] = params
        self.pending(fix, "waiting for the model's first call")

    # -- installing -------------------------------------------------------------------------

    def patch(self) -> None:
        """Install the patches the requested fixes need (each at most once)."""
        if self.loader:
            self._patch_dataloader()
        if self.autocast_dtype is not None or self.model_fixes or self.around_model:
            self._patch_module_call()
        if self.scaler is not None:
            self._patch_grad_scaling()
        if self.fused:
            self._patch_optimizers()
        if self.non_blocking:
            self._patch_copies()

    # -- DataLoader ---------------------------------------------------------------------------

    def _patch_dataloader(self) -> None:
        from torch.utils.data import DataLoader

        original = DataLoader.__init__
        # NOTE: bind against torch's own signature, not that of a wrapper installed before us
        # (the capture's hooks wrap __init__ as (*args, **kwargs)).
        signature = inspect.signature(_pristine(original))
        state = self

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            try:
                bound = signature.bind(self, *args, **kwargs)
                bound.apply_defaults()
            except TypeError:  # let the real constructor raise the user's own error
                return original(self, *args, **kwargs)
            state._adjust_loader(bound.arguments)
            original(*bound.args, **bound.kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        patch(DataLoader, "__init__", __init__)

    def _adjust_loader(self, a: dict[str, Any]) -> None:
        """Let every requested loader fix adjust one constructor call, in catalog order."""
        for fix in catalog.get_fixes().values():
            if fix.id in self.loader and fix.adjust_loader is not None:
                fix.adjust_loader(self, a, self.loader[fix.id])

    def loader_ok(self, fix: str, what: str) -> None:
        """Record that a loader fix changed one DataLoader (counted: ``on 2 DataLoaders``)."""
        n = self.loader_counts.get(fix, 0) + 1
        self.loader_counts[fix] = n
        self.loader_done[fix] = what
        self.applied(fix, what + (f" on {n} DataLoaders" if n > 1 else ""))

    def loader_skip(self, fix: str, why: str) -> None:
        """Record that a loader fix left one DataLoader alone (noted only if it changed none so far)."""
        self.loader_reasons[fix] = why
        if not self.loader_counts.get(fix):
            self.skipped(fix, why)

    # -- outermost module calls -----------------------------------------------------------------

    def _patch_module_call(self) -> None:
        import torch
        from torch import nn

        original = nn.Module.__call__
        local = threading.local()
        is_compiling = torch.compiler.is_compiling
        state = self
        seen: dict[int, bool] = {}  # id(module) -> it is the model (the on_model target)

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
            # NOTE: inside a compiled region dynamo inlines this wrapper; is_compiling() is a
            # constant there, so the compiled graph never sees the bookkeeping below.
            if is_compiling() or getattr(local, "depth", 0):
                return original(self, *args, **kwargs)
            local.depth = 1
            try:
                return state._outermost_call(original, self, args, kwargs, seen)
            finally:
                local.depth = 0

        patch(nn.Module, "__call__", __call__)

    def _outermost_call(
        self, original: Callable[..., Any], module: Any, args: tuple[Any, ...],
        kwargs: dict[str, Any], seen: dict[int, bool],
    ) -> Any:
        key = id(module)
        if key not in seen:
            seen[key] = self._first_call(module)
        is_model = seen[key]
        if is_model and self.is_applied("channels_last"):
            args = map_tensors(args, _to_channels_last)
            kwargs = map_tensors(kwargs, _to_channels_last)
        if is_model and self.around_model:
            with contextlib.ExitStack() as stack:
                for enter in self.around_model.values():
                    cm = enter(self, module)
                    if cm is not None:
                        stack.enter_context(cm)
                return self._autocast_call(original, module, args, kwargs, is_model)
        return self._autocast_call(original, module, args, kwargs, is_model)

    def _autocast_call(
        self, original: Callable[..., Any], module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
        is_model: bool,
    ) -> Any:
        import torch

        if self.autocast_dtype is None:
            return original(module, *args, **kwargs)
        fix = self.autocast_fix or ""
        device_type = _device_type(module, args)
        if torch.is_autocast_enabled(device_type):
            if not self.is_applied(fix):
                self.skipped(fix, "the script already runs under torch.autocast")
            return original(module, *args, **kwargs)
        if is_model and _param_dtype(module) in (torch.float16, torch.bfloat16):
            self.skipped(fix, "the model's weights are already low precision")
            return original(module, *args, **kwargs)
        if is_model and not self.is_applied(fix):
            name = "bfloat16" if self.autocast_dtype is torch.bfloat16 else "float16"
            self.applied(fix, f"torch.autocast({device_type!r}, {name}) around {type(module).__name__}.forward")
        with torch.autocast(device_type, dtype=self.autocast_dtype):
            out = original(module, *args, **kwargs)
        low = self.autocast_dtype
        return map_tensors(out, lambda t: t.float() if t.dtype is low else t)

    def _first_call(self, module: Any) -> bool:
        """Decide, on a module's first outermost call, whether it is the model; set it up once."""
        has_params = next(iter(module.parameters()), None) is not None
        if not has_params or self._model_id is not None:
            return False
        self._model_id = id(module)
        for fix in catalog.get_fixes().values():
            if fix.id in self.model_fixes and fix.on_model is not None:
                try:
                    fix.on_model(self, module)
                except Exception as exc:  # noqa: BLE001 - a fix must not stop the script
                    self.skipped(fix.id, f"{type(exc).__name__}: {exc}")
        return True

    # -- fp16 loss scaling ------------------------------------------------------------------------

    def _patch_grad_scaling(self) -> None:
        """Install the GradScaler once (fp16_amp installs it early: :mod:`advisor.fixes.runtime_scaling`)."""
        if self._scaling_patched:
            return
        self._scaling_patched = True
        from advisor.fixes.runtime_scaling import patch_grad_scaling

        patch_grad_scaling(self)

    # -- optimizers -----------------------------------------------------------------------------

    def _patch_optimizers(self) -> None:
        import torch

        classes = [
            c for c in vars(torch.optim).values()
            if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer
        ]
        state = self
        for cls in classes:
            params = inspect.signature(cls.__init__).parameters
            if "fused" not in params and "foreach" not in params:
                continue
            patch(cls, "__init__", _fused_init(cls.__init__, "fused" in params, state))

    # -- copies ---------------------------------------------------------------------------------

    def _patch_copies(self) -> None:
        import torch

        original_to = torch.Tensor.to
        original_cuda = torch.Tensor.cuda
        is_compiling = torch.compiler.is_compiling
        state = self

        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            if (
                not is_compiling()
                and "non_blocking" not in kwargs and len(args) < 3 and self.device.type == "cpu"
                and _targets_cuda(args, kwargs) and self.is_pinned()
            ):
                kwargs["non_blocking"] = True
                state.applied("non_blocking_copy", "non_blocking=True on pinned host-to-device copies")
            return original_to(self, *args, **kwargs)

        def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_compiling() and "non_blocking" not in kwargs and len(args) < 2 and self.is_pinned():
                kwargs["non_blocking"] = True
                state.applied("non_blocking_copy", "non_blocking=True on pinned host-to-device copies")
            return original_cuda(self, *args, **kwargs)

        patch(torch.Tensor, "to", to)
        patch(torch.Tensor, "cuda", cuda)




def _fused_init(original: Callable[..., Any], has_fused: bool, state: State) -> Callable[..., Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        if "fused" in kwargs or "foreach" in kwargs:
            if not state.is_applied("fused_optimizer"):
                state.skipped("fused_optimizer", "the script chose fused/foreach itself")
            return original(self, *args, **kwargs)
        # NOTE: params may be a generator (model.parameters()); a failed first try would use it up.
        if args:
            args = (list(args[0]), *args[1:])
        elif "params" in kwargs:
            kwargs["params"] = list(kwargs["params"])
        name = type(self).__name__
        if has_fused:
            try:
                original(self, *args, fused=True, **kwargs)
                state.applied("fused_optimizer", f"{name}(fused=True)")
                _foreach_if_first_step_refuses(self, name, state)
                return
            except (RuntimeError, ValueError, TypeError) as exc:  # fused unsupported here
                reason = str(exc).splitlines()[0][:120]
        else:
            reason = f"{name} has no fused kernel"
        try:
            original(self, *args, foreach=True, **kwargs)
            state.applied("fused_optimizer", f"{name}(foreach=True) ({reason})")
        except (RuntimeError, ValueError, TypeError):
            original(self, *args, **kwargs)
            state.skipped("fused_optimizer", f"{name}: neither fused nor foreach works ({reason})")

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def _foreach_if_first_step_refuses(opt: Any, name: str, state: State) -> None:
    """Fall back to foreach kernels when torch refuses the fused ones at the first ``step()``.

    torch checks some of fused's needs (the parameters' devices and dtypes, in some versions)
    only when it steps, after the constructor accepted ``fused=True``.
    """
    import types

    inner = opt.step
    checked = [False]

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if checked[0]:
            return inner(*args, **kwargs)
        checked[0] = True
        try:
            return inner(*args, **kwargs)
        except RuntimeError as exc:
            if "fused" not in str(exc):
                raise
            for group in self.param_groups:
                group["fused"], group["foreach"] = False, True
            self.defaults["fused"], self.defaults["foreach"] = False, True
            first = str(exc).splitlines()[0][:120]
            state.applied("fused_optimizer", f"{name}(foreach=True) (fused refused at the first step: {first})")
            return inner(*args, **kwargs)

    opt.step = types.MethodType(step, opt)
