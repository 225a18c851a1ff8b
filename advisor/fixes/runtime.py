"""Apply fixes at run time, inside the child process, before the user's script runs.

:func:`install` patches torch in memory only; it never reads or writes the user's files. The
capture child imports this module by name (``RunSpec.fix_installers``; capture itself imports
nothing of the fix stage), calls :func:`install` once, before ``runpy``, and stores the notes it
returns in ``RunCapture.fix_notes``.

This module holds the *mechanisms* fixes plug into, each patched at most once; what each fix
does lives in its own module of :mod:`advisor.fixes.catalog` (its ``install``, and its
``adjust_loader`` / ``on_model`` hooks):

- ``DataLoader.__init__`` is wrapped; the call's arguments are bound to the real signature and
  every requested loader fix adjusts them in catalog order (workers first, so the fixes that
  need workers see the new count), then they are passed on.
- ``nn.Module.__call__`` is wrapped; only *outermost* module calls (not nested inside another
  module's forward, not inside a compiled region) are touched, so the cost is one Python frame
  per top-level call. On the first outermost module with parameters (the model) every
  ``on_model`` hook runs once (channels_last, compile, ...). Autocast wraps each outermost
  forward (the model, and a loss module called at top level) and casts low-precision outputs back
  to float32, so loss code outside the model and the backward pass run in float32 as they would
  with autocast around the forward only (the PyTorch recipe); the weight-cast cache is cleared
  on each exit, so updated weights are re-cast.
- A GradScaler (fp16): ``Tensor.backward`` on a scalar that requires grad scales it, and each
  optimizer's ``step`` becomes ``scaler.step(opt); scaler.update()``.
- Optimizer constructors (fused kernels) and ``Tensor.to``/``Tensor.cuda`` (non-blocking copies).

Notes are a live dict: fix id -> :class:`~advisor.capture.model.FixNote` (state ``applied``,
``skipped`` or ``pending``, and a detail). Notes that depend on the script (a DataLoader was
built, the model has convolutions, autocast was already on) are updated as the script runs, so
the caller should save the dict after the script ends; a copy taken right after :func:`install`
still holds the install-time verdicts (no CUDA, unknown id) and ``pending`` for the rest.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from advisor.capture.model import FixNote, FixRequest, NoteState
from advisor.fixes import catalog

# (owner, attribute, original) for every patch, so tests (and only tests) can undo them.
_UNDO: list[tuple[Any, str, Any]] = []


def _state_of(note: FixNote | str | None) -> NoteState | None:
    note = FixNote.of(note)
    return None if note is None else note.state


def is_applied(note: FixNote | str | None) -> bool:
    """Tell whether a note says the fix took effect."""
    return _state_of(note) is NoteState.APPLIED


def is_not_applied(note: FixNote | str | None) -> bool:
    """Tell whether a note says the fix could not apply (its detail says why)."""
    return _state_of(note) is NoteState.SKIPPED


def install(fixes: Sequence[FixRequest]) -> dict[str, FixNote]:
    """Apply fixes by patching torch in this process; return fix id -> what happened.

    Args:
        fixes: The interventions to apply (ids from :mod:`advisor.fixes.catalog`).

    Returns:
        A live dict of notes, one per fix id: pending (waiting for the script to reach the
        fix), applied or skipped. Save it after the script ends: notes are updated while the
        script runs.
    """
    notes: dict[str, FixNote] = {}
    if not fixes:
        return notes
    import torch  # noqa: F401  (imported only when there is something to patch)

    known = catalog.get_fixes()
    state = State(notes)
    for req in fixes:
        fix = known.get(req.id)
        if fix is None or fix.install is None:
            state.skipped(req.id, "unknown fix id" if fix is None else "no run-time install")
            continue
        try:
            fix.install(state, dict(req.params))
        except Exception as exc:  # a fix that cannot install must not stop the script
            state.skipped(req.id, f"{type(exc).__name__}: {exc}")
    state.patch()
    return notes


def uninstall() -> None:
    """Undo every patch :func:`install` made in this process (for tests; the child never needs it)."""
    while _UNDO:
        owner, attr, original = _UNDO.pop()
        setattr(owner, attr, original)


def patch(owner: Any, attr: str, new: Any) -> None:
    """Set ``owner.attr = new``, remembering the original for :func:`uninstall`."""
    _UNDO.append((owner, attr, owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)))
    setattr(owner, attr, new)


_patch = patch


def accumulate_steps(
    k: int, *, active: Callable[[], bool] = lambda: True, on_real_step: Callable[[Any], None] | None = None,
) -> None:
    """Make every optimizer step real only on each ``k``-th call, so gradients accumulate between.

    Optimizers created from now on get a ``step`` that returns without stepping on all but each
    ``k``-th call (``on_real_step(optimizer)`` runs just before the real one) and a ``zero_grad``
    skipped while that optimizer is between real steps; ``nn.Module.zero_grad`` is skipped while
    any optimizer is. An LR scheduler of such an optimizer steps at most once per real step: a
    loop that steps its scheduler every iteration would otherwise run the schedule k times too
    fast, while one that steps it every epoch is left alone. Nothing changes while ``active()``
    is False. Used by ``fit_accumulation`` (micro-batches of a split batch) and the sweep's
    accumulation axis (k whole batches).
    """
    import types

    import torch

    counts: list[list[int]] = []  # one [micro-steps since the last real step] per optimizer
    original_init = torch.optim.Optimizer.__init__
    original_module_zero = torch.nn.Module.zero_grad
    original_sched_step = torch.optim.lr_scheduler.LRScheduler.step

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original_init(self, *args, **kwargs)
        inner_step, inner_zero = self.step, self.zero_grad
        count = [0]
        counts.append(count)
        real = self._advisor_real_steps = [0]  # real steps taken while accumulating (for schedulers)

        def step(opt: Any, *a: Any, **kw: Any) -> Any:
            if not active():
                return inner_step(*a, **kw)
            count[0] += 1
            if count[0] < k:
                return None  # NOTE: the gradients keep accumulating until the k-th call
            count[0] = 0
            real[0] += 1
            if on_real_step is not None:
                on_real_step(opt)
            return inner_step(*a, **kw)

        def zero_grad(opt: Any, *a: Any, **kw: Any) -> Any:
            return None if active() and count[0] else inner_zero(*a, **kw)

        # NOTE: bound methods, as torch's own: an LR scheduler re-wraps ``opt.step.__func__``
        # (a plain function there made StepLR(opt) raise AttributeError).
        self.step, self.zero_grad = types.MethodType(step, self), types.MethodType(zero_grad, self)

    def module_zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if active() and any(c[0] for c in counts):
            return None
        return original_module_zero(self, *args, **kwargs)

    def sched_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        real = getattr(getattr(self, "optimizer", None), "_advisor_real_steps", None)
        # NOTE: torch counts the scheduler's steps in _step_count, its constructor's own first
        # step included (always let through). After it, a scheduler may step once per real
        # optimizer step: a per-iteration scheduler then moves right after each real step and
        # never between, and a per-epoch one (fewer steps than real ones) is never held back.
        if active() and real is not None and getattr(self, "_step_count", 0) >= 1 and self._step_count - 1 >= real[0]:
            return None
        return original_sched_step(self, *args, **kwargs)

    patch(torch.optim.Optimizer, "__init__", __init__)
    patch(torch.nn.Module, "zero_grad", module_zero_grad)
    patch(torch.optim.lr_scheduler.LRScheduler, "step", sched_step)


def cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


_cores = cores


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
        _patch(DataLoader, "__init__", __init__)

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

        _patch(nn.Module, "__call__", __call__)

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
        import torch

        scaler = self.scaler
        original_backward = torch.Tensor.backward
        local = threading.local()

        def backward(self: Any, gradient: Any = None, *args: Any, **kwargs: Any) -> Any:
            if gradient is None and self.dim() == 0 and self.requires_grad and scaler.is_enabled():
                # NOTE: scaling the incoming gradient equals scaling the loss, and keeps the
                # loss tensor itself (what the capture records for loss parity) unscaled.
                scaled = scaler.scale(torch.ones_like(self, dtype=torch.float32))
                return original_backward(self, scaled.to(self.dtype), *args, **kwargs)
            return original_backward(self, gradient, *args, **kwargs)

        _patch(torch.Tensor, "backward", backward)

        original_init = torch.optim.Optimizer.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            original_init(self, *args, **kwargs)
            inner = self.step

            def step(*a: Any, **k: Any) -> Any:
                # NOTE: GradScaler.step calls optimizer.step again; the flag breaks the loop.
                if getattr(local, "inside", False):
                    return inner(*a, **k)
                local.inside = True
                try:
                    out = scaler.step(self, *a, **k)
                    scaler.update()
                    return out
                finally:
                    local.inside = False

            self.step = step

        _patch(torch.optim.Optimizer, "__init__", __init__)

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
            _patch(cls, "__init__", _fused_init(cls.__init__, "fused" in params, state))

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

        _patch(torch.Tensor, "to", to)
        _patch(torch.Tensor, "cuda", cuda)




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


_State = State


# -- helpers ---------------------------------------------------------------------------------------


def _pristine(fn: Any, depth: int = 0) -> Any:
    """Find the function torch defined under wrappers (``__wrapped__`` or a closure cell)."""
    if getattr(fn, "__module__", "").startswith("torch") or depth > 8:
        return fn
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:
        return _pristine(inner, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and getattr(value, "__name__", "") == getattr(fn, "__name__", None):
            found = _pristine(value, depth + 1)
            if getattr(found, "__module__", "").startswith("torch"):
                return found
    return fn


def dataset_len(dataset: Any) -> int | None:
    """Return the samples in a map-style data set, or None when unknown (no ``__len__``)."""
    from torch.utils.data import IterableDataset

    if dataset is None or isinstance(dataset, IterableDataset):
        return None
    try:
        return int(len(dataset))
    except (TypeError, NotImplementedError):
        return None


def shards_itself(dataset: Any) -> bool:
    """Tell whether an IterableDataset's class calls ``get_worker_info`` (it splits by worker)."""
    for cls in type(dataset).__mro__:
        if cls.__module__.startswith("torch."):
            break
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        if "get_worker_info" in source:
            return True
    return False


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to floating tensors inside tuples, lists and dicts (other objects pass through)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value) if value.is_floating_point() else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def _to_channels_last(t: Any) -> Any:
    import torch

    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def _device_type(module: Any, args: tuple[Any, ...]) -> str:
    import torch

    p = next(iter(module.parameters()), None)
    if p is not None:
        return p.device.type
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def _param_dtype(module: Any) -> Any:
    p = next(iter(module.parameters()), None)
    return None if p is None else p.dtype


def _targets_cuda(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    import torch

    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, torch.Tensor):
        target = target.device
    if isinstance(target, str):
        return target.startswith("cuda")
    return isinstance(target, torch.device) and target.type == "cuda"
