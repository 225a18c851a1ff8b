"""Apply fixes at run time, inside the child process, before the user's script runs.

:func:`install` patches torch in memory only; it never reads or writes the user's files. The
capture child calls it once, before ``runpy``, and stores the notes it returns in
``RunCapture.fix_notes``.

How each fix is applied:

- DataLoader settings (``dataloader_workers``, ``pin_memory``, ``persistent_workers``,
  ``prefetch_factor``, ``batch_fusion``, ``larger_batch``, ``cpu_threads``):
  ``DataLoader.__init__`` is wrapped; the call's arguments are bound to the real signature,
  merged with the fix's values, and passed on.
  Workers are refused for an ``IterableDataset`` whose class never calls ``get_worker_info``
  (each worker would yield the whole stream: duplicate samples). ``persistent_workers`` and
  ``prefetch_factor`` only apply with workers. ``batch_fusion`` multiplies ``batch_size`` by
  ``params['factor']`` and leaves the training loop alone: the loop still steps the optimizer
  every N loader batches, so each optimizer step sees ``factor`` times the samples (the batch
  semantics change, which is why the fix is unsafe; the diff tells the user to divide the
  accumulation count by the same factor). ``larger_batch`` multiplies ``batch_size`` by
  ``params['factor']`` too, for a loop without accumulation: each optimizer step sees ``factor``
  times the samples (unsafe: the learning rate may need scaling). Its factor is lowered so the
  batch stays within :data:`~advisor.fixes.registry.MAX_BATCH` samples and within the data set
  (a batch larger than the data set yields nothing with ``drop_last``); a ``batch_sampler`` or
  ``batch_size=None`` is left alone with a reason. ``cpu_threads`` lowers ``torch.set_num_threads``
  to ``cores - workers`` when a loader with workers is created.
- Model-level fixes (``bf16_autocast``, ``fp16_amp``, ``torch_compile``, ``channels_last``):
  ``nn.Module.__call__`` is wrapped; only *outermost* module calls (not nested inside another
  module's forward, not inside a compiled region) are touched, so the cost is one Python frame
  per top-level call. Autocast wraps each outermost forward (the model, and a loss module called
  at top level) and casts low-precision outputs back to float32, so loss code outside the model
  and the backward pass run in float32 as they would with autocast around the forward only (the
  PyTorch recipe); the weight-cast cache is cleared on each exit, so updated weights are re-cast.
  Compile and channels_last take the first outermost module that has parameters (the model):
  ``module.compile()`` compiles it in place (the optimizer's parameters stay the same objects);
  ``module.to(memory_format=channels_last)`` converts the parameters in place, and 4-D/5-D tensor
  inputs of that module are converted on every call.
- ``fp16_amp`` (CUDA only) adds a GradScaler: ``Tensor.backward`` on a scalar that requires grad
  scales it, and each optimizer's ``step`` becomes ``scaler.step(opt); scaler.update()``.
- ``non_blocking_copy`` (CUDA only): ``Tensor.to``/``Tensor.cuda`` from a pinned CPU tensor to a
  CUDA device get ``non_blocking=True``; device-to-host copies are never touched (the host could
  read the buffer before the copy lands).
- ``fused_optimizer``: the constructors of torch.optim classes get ``fused=True`` (else
  ``foreach=True``) when the script passed neither.
- ``cudnn_benchmark`` and ``tf32``: backend flags, set once.

Notes are a live dict: fix id -> ``"installed: ..."``, ``"applied: ..."`` or
``"not applied: ..."``. Notes that depend on the script (a DataLoader was built, the model has
convolutions, autocast was already on) are updated as the script runs, so the caller should save
the dict after the script ends; a copy taken right after :func:`install` still holds the
install-time verdicts (no CUDA, unknown id) and ``installed:`` for the rest.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from advisor.capture.model import FixRequest
from advisor.fixes.registry import MAX_BATCH

APPLIED = "applied: "
NOT_APPLIED = "not applied: "
# Installed, waiting for the script to reach the point where the fix acts (a DataLoader, the
# model's first call). A caller that saved the notes right after install() sees this state.
PENDING = "installed: "

_DEFAULT_PREFETCH = 4

# (owner, attribute, original) for every patch, so tests (and only tests) can undo them.
_UNDO: list[tuple[Any, str, Any]] = []


def is_applied(note: str | None) -> bool:
    """Tell whether a note says the fix took effect."""
    return bool(note) and note.startswith(APPLIED)  # type: ignore[union-attr]


def is_not_applied(note: str | None) -> bool:
    """Tell whether a note says the fix could not apply (its reason follows the prefix)."""
    return bool(note) and note.startswith(NOT_APPLIED)  # type: ignore[union-attr]


def install(fixes: Sequence[FixRequest]) -> dict[str, str]:
    """Apply fixes by patching torch in this process; return fix id -> what happened.

    Args:
        fixes: The interventions to apply (ids from :mod:`advisor.fixes.registry`).

    Returns:
        A live dict of notes, one per fix id, starting with ``"installed: "`` (waiting for the
        script to reach the fix), ``"applied: "`` or ``"not applied: "``. Save it after the
        script ends: notes are updated while the script runs.
    """
    notes: dict[str, str] = {}
    if not fixes:
        return notes
    import torch  # noqa: F401  (imported only when there is something to patch)

    state = _State(notes)
    for req in fixes:
        handler = _HANDLERS.get(req.id)
        if handler is None:
            notes[req.id] = NOT_APPLIED + "unknown fix id"
            continue
        try:
            handler(state, dict(req.params))
        except Exception as exc:  # a fix that cannot install must not stop the script
            notes[req.id] = NOT_APPLIED + f"{type(exc).__name__}: {exc}"
    state.patch()
    return notes


def uninstall() -> None:
    """Undo every patch :func:`install` made in this process (for tests; the child never needs it)."""
    while _UNDO:
        owner, attr, original = _UNDO.pop()
        setattr(owner, attr, original)


def _patch(owner: Any, attr: str, new: Any) -> None:
    _UNDO.append((owner, attr, owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)))
    setattr(owner, attr, new)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class _State:
    """The fixes requested in this process and the bookkeeping their patches share."""

    def __init__(self, notes: dict[str, str]) -> None:
        self.notes = notes
        self.loader: dict[str, dict[str, Any]] = {}  # fix id -> params, for DataLoader fixes
        self.autocast_dtype: Any = None
        self.autocast_fix: str | None = None
        self.scaler: Any = None
        self.compile = False
        self.compile_kwargs: dict[str, Any] = {}
        self.channels_last = False
        self.fused = False
        self.non_blocking = False
        self.loader_counts: dict[str, int] = {}
        self.loader_reasons: dict[str, str] = {}
        self.loader_done: dict[str, str] = {}

    # -- installing -------------------------------------------------------------------------

    def patch(self) -> None:
        """Install the patches the requested fixes need (each at most once)."""
        if self.loader:
            self._patch_dataloader()
        if self.autocast_dtype is not None or self.compile or self.channels_last:
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
        """Merge the DataLoader fixes into one constructor call's bound arguments."""
        from torch.utils.data import IterableDataset

        iterable = isinstance(a.get("dataset"), IterableDataset)
        fixes = self.loader

        if "dataloader_workers" in fixes:
            want = int(fixes["dataloader_workers"].get("num_workers", 2))
            have = int(a.get("num_workers") or 0)
            if iterable and not _shards_itself(a["dataset"]):
                self._loader_skip(
                    "dataloader_workers",
                    "the IterableDataset does not shard by worker (no get_worker_info): "
                    "each worker would yield every sample",
                )
            elif have >= want:
                self._loader_skip("dataloader_workers", f"the DataLoader already has num_workers={have}")
            else:
                a["num_workers"] = want
                self._loader_ok("dataloader_workers", f"num_workers {have}->{want}")

        if "batch_fusion" in fixes:
            factor = int(fixes["batch_fusion"].get("factor", 1))
            if factor <= 1:
                self._loader_skip("batch_fusion", "fusion factor 1")
            elif a.get("batch_sampler") is not None or a.get("batch_size") is None:
                self._loader_skip("batch_fusion", "the DataLoader uses a batch_sampler or batch_size=None")
            else:
                old = int(a["batch_size"])
                a["batch_size"] = old * factor
                self._loader_ok(
                    "batch_fusion",
                    f"batch_size {old}->{old * factor} (x{factor}); the loop is unchanged, so each "
                    f"optimizer step sees {factor}x the samples",
                )

        if "larger_batch" in fixes:
            self._larger_batch(a, fixes["larger_batch"])

        if "pin_memory" in fixes:
            import torch

            if not torch.cuda.is_available():
                self._loader_skip("pin_memory", "no CUDA device: pinned memory only speeds host-to-GPU copies")
            elif a.get("pin_memory"):
                self._loader_skip("pin_memory", "pin_memory is already True")
            else:
                a["pin_memory"] = True
                self._loader_ok("pin_memory", "pin_memory=True")

        workers = int(a.get("num_workers") or 0)
        if "persistent_workers" in fixes:
            if workers == 0:
                self._loader_skip("persistent_workers", "num_workers=0: there are no workers to keep")
            elif a.get("persistent_workers"):
                self._loader_skip("persistent_workers", "persistent_workers is already True")
            else:
                a["persistent_workers"] = True
                self._loader_ok("persistent_workers", "persistent_workers=True")

        if "prefetch_factor" in fixes:
            want = int(fixes["prefetch_factor"].get("prefetch_factor", _DEFAULT_PREFETCH))
            have = a.get("prefetch_factor") or 2  # torch's default with workers
            if workers == 0:
                self._loader_skip("prefetch_factor", "num_workers=0: prefetching needs workers")
            elif have >= want:
                self._loader_skip("prefetch_factor", f"prefetch_factor is already {have}")
            else:
                a["prefetch_factor"] = want
                self._loader_ok("prefetch_factor", f"prefetch_factor {have}->{want}")

        if "cpu_threads" in fixes:
            import torch

            cores = _cores()
            target = fixes["cpu_threads"].get("threads")
            target = int(target) if target else max(1, cores - workers)
            before = torch.get_num_threads()
            if workers == 0 and not fixes["cpu_threads"].get("threads"):
                self._loader_skip("cpu_threads", "no loader workers compete with intra-op threads")
            elif before <= target:
                self._loader_skip("cpu_threads", f"already {before} intra-op threads (target {target})")
            else:
                torch.set_num_threads(target)
                self._loader_ok(
                    "cpu_threads", f"torch.set_num_threads({target}) (was {before}) next to {workers} workers"
                )

    def _larger_batch(self, a: dict[str, Any], params: dict[str, Any]) -> None:
        """Multiply one DataLoader call's ``batch_size``, within the cap and the data set."""
        factor = int(params.get("factor", 1))
        cap = int(params.get("max_batch", MAX_BATCH))
        if factor <= 1:
            self._loader_skip("larger_batch", "factor 1")
            return
        if a.get("batch_sampler") is not None or a.get("batch_size") is None:
            self._loader_skip(
                "larger_batch", "the DataLoader uses a batch_sampler or batch_size=None: there is no batch_size to scale"
            )
            return
        old = int(a["batch_size"])
        k = min(factor, cap // max(old, 1))
        size = _dataset_len(a.get("dataset"))
        if size is not None:
            # NOTE: a batch larger than the data set yields no batch at all with drop_last=True.
            k = min(k, size // max(old, 1))
        if k <= 1:
            limit = f"the {cap}-sample cap" if cap // max(old, 1) <= 1 else f"the data set's {size} samples"
            self._loader_skip("larger_batch", f"batch_size {old} cannot grow within {limit}")
            return
        a["batch_size"] = old * k
        capped = f", capped from x{factor}" if k < factor else ""
        self._loader_ok(
            "larger_batch",
            f"batch_size {old}->{old * k} (x{k}{capped}); each optimizer step sees {k}x the samples "
            "(the learning rate may need scaling)",
        )

    def _loader_ok(self, fix: str, what: str) -> None:
        n = self.loader_counts.get(fix, 0) + 1
        self.loader_counts[fix] = n
        self.loader_done[fix] = what
        self.notes[fix] = APPLIED + what + (f" on {n} DataLoaders" if n > 1 else "")

    def _loader_skip(self, fix: str, why: str) -> None:
        self.loader_reasons[fix] = why
        if not self.loader_counts.get(fix):
            self.notes[fix] = NOT_APPLIED + why

    # -- outermost module calls -----------------------------------------------------------------

    def _patch_module_call(self) -> None:
        import torch
        from torch import nn

        original = nn.Module.__call__
        local = threading.local()
        is_compiling = torch.compiler.is_compiling
        state = self
        seen: dict[int, bool] = {}  # id(module) -> it is the model (compile / channels_last target)

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
        import torch

        key = id(module)
        if key not in seen:
            seen[key] = self._first_call(module)
        is_model = seen[key]
        if is_model and self.channels_last and self.notes.get("channels_last", "").startswith(APPLIED):
            args = _map_tensors(args, _to_channels_last)
            kwargs = _map_tensors(kwargs, _to_channels_last)
        if self.autocast_dtype is None:
            return original(module, *args, **kwargs)
        device_type = _device_type(module, args)
        if torch.is_autocast_enabled(device_type):
            if not self.notes.get(self.autocast_fix or "", "").startswith(APPLIED):
                self.notes[self.autocast_fix or ""] = NOT_APPLIED + "the script already runs under torch.autocast"
            return original(module, *args, **kwargs)
        if is_model and _param_dtype(module) in (torch.float16, torch.bfloat16):
            self.notes[self.autocast_fix or ""] = NOT_APPLIED + "the model's weights are already low precision"
            return original(module, *args, **kwargs)
        if is_model and not self.notes.get(self.autocast_fix or "", "").startswith(APPLIED):
            name = "bfloat16" if self.autocast_dtype is torch.bfloat16 else "float16"
            self.notes[self.autocast_fix or ""] = (
                APPLIED + f"torch.autocast({device_type!r}, {name}) around {type(module).__name__}.forward"
            )
        with torch.autocast(device_type, dtype=self.autocast_dtype):
            out = original(module, *args, **kwargs)
        low = self.autocast_dtype
        return _map_tensors(out, lambda t: t.float() if t.dtype is low else t)

    def _first_call(self, module: Any) -> bool:
        """Decide, on a module's first outermost call, whether it is the model; set it up once."""
        has_params = next(iter(module.parameters()), None) is not None
        if not has_params or getattr(self, "_model_id", None) is not None:
            return False
        self._model_id = id(module)
        if self.channels_last:
            self._setup_channels_last(module)
        if self.compile:
            self._setup_compile(module)
        return True

    def _setup_channels_last(self, module: Any) -> None:
        import torch
        from torch import nn

        convs = [m for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
        if not convs:
            self.notes["channels_last"] = NOT_APPLIED + f"{type(module).__name__} has no 2-D/3-D convolutions"
            return
        fmt = torch.channels_last_3d if isinstance(convs[0], nn.Conv3d) else torch.channels_last
        module.to(memory_format=fmt)  # in place: parameter objects (and the optimizer's refs) stay
        self.notes["channels_last"] = APPLIED + f"{type(module).__name__} and its inputs in {fmt}"

    def _setup_compile(self, module: Any) -> None:
        if type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None):
            self.notes["torch_compile"] = NOT_APPLIED + "the model is already compiled"
            return
        module.compile(**self.compile_kwargs)  # in place; the first call pays the compile
        self.notes["torch_compile"] = APPLIED + f"{type(module).__name__}.compile() on its first call"

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
                state.notes["non_blocking_copy"] = APPLIED + "non_blocking=True on pinned host-to-device copies"
            return original_to(self, *args, **kwargs)

        def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_compiling() and "non_blocking" not in kwargs and len(args) < 2 and self.is_pinned():
                kwargs["non_blocking"] = True
                state.notes["non_blocking_copy"] = APPLIED + "non_blocking=True on pinned host-to-device copies"
            return original_cuda(self, *args, **kwargs)

        _patch(torch.Tensor, "to", to)
        _patch(torch.Tensor, "cuda", cuda)


def _fused_init(original: Callable[..., Any], has_fused: bool, state: _State) -> Callable[..., Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        if "fused" in kwargs or "foreach" in kwargs:
            if not is_applied(state.notes.get("fused_optimizer")):
                state.notes["fused_optimizer"] = NOT_APPLIED + "the script chose fused/foreach itself"
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
                state.notes["fused_optimizer"] = APPLIED + f"{name}(fused=True)"
                return
            except (RuntimeError, ValueError, TypeError) as exc:  # fused unsupported here
                reason = str(exc).splitlines()[0][:120]
        else:
            reason = f"{name} has no fused kernel"
        try:
            original(self, *args, foreach=True, **kwargs)
            state.notes["fused_optimizer"] = APPLIED + f"{name}(foreach=True) ({reason})"
        except (RuntimeError, ValueError, TypeError):
            original(self, *args, **kwargs)
            state.notes["fused_optimizer"] = NOT_APPLIED + f"{name}: neither fused nor foreach works ({reason})"

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


# -- handlers: one per fix id ----------------------------------------------------------------------


def _loader_fix(fix: str, pending: str) -> Callable[[_State, dict[str, Any]], None]:
    def handler(state: _State, params: dict[str, Any]) -> None:
        state.loader[fix] = params
        state.notes[fix] = PENDING + pending

    return handler


def _bf16(state: _State, params: dict[str, Any]) -> None:
    import torch

    if state.autocast_dtype is not None:
        state.notes["bf16_autocast"] = NOT_APPLIED + "another autocast fix is already active"
        return
    state.autocast_dtype = torch.bfloat16
    state.autocast_fix = "bf16_autocast"
    state.notes["bf16_autocast"] = PENDING + "waiting for the model's first call"


def _fp16(state: _State, params: dict[str, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        state.notes["fp16_amp"] = NOT_APPLIED + "no CUDA device (fp16 with loss scaling is a GPU fix)"
        return
    if state.autocast_dtype is not None:
        state.notes["fp16_amp"] = NOT_APPLIED + "another autocast fix is already active"
        return
    state.autocast_dtype = torch.float16
    state.autocast_fix = "fp16_amp"
    state.scaler = torch.amp.GradScaler("cuda")
    state.notes["fp16_amp"] = PENDING + "waiting for the model's first call"


def _compile(state: _State, params: dict[str, Any]) -> None:
    state.compile = True
    # NOTE: params may choose torch.compile's backend/mode (tests use the fast "eager" backend).
    state.compile_kwargs = {k: params[k] for k in ("backend", "mode", "dynamic") if k in params}
    state.notes["torch_compile"] = PENDING + "waiting for the model's first call"


def _channels_last(state: _State, params: dict[str, Any]) -> None:
    state.channels_last = True
    state.notes["channels_last"] = PENDING + "waiting for the model's first call"


def _fused(state: _State, params: dict[str, Any]) -> None:
    state.fused = True
    state.notes["fused_optimizer"] = PENDING + "waiting for a torch.optim optimizer"


def _cudnn(state: _State, params: dict[str, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        state.notes["cudnn_benchmark"] = NOT_APPLIED + "no CUDA device"
        return
    _patch(torch.backends.cudnn, "benchmark", True)
    state.notes["cudnn_benchmark"] = APPLIED + "torch.backends.cudnn.benchmark=True"


def _tf32(state: _State, params: dict[str, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        state.notes["tf32"] = NOT_APPLIED + "no CUDA device (TF32 is an Ampere+ GPU format)"
        return
    _patch(torch.backends.cuda.matmul, "allow_tf32", True)
    _patch(torch.backends.cudnn, "allow_tf32", True)
    torch.set_float32_matmul_precision("high")
    state.notes["tf32"] = APPLIED + "TF32 matmuls and convolutions (float32 matmul precision 'high')"


def _non_blocking(state: _State, params: dict[str, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        state.notes["non_blocking_copy"] = NOT_APPLIED + "no CUDA device: there are no host-to-device copies"
        return
    state.non_blocking = True
    state.notes["non_blocking_copy"] = PENDING + "waiting for a copy from pinned memory"


_HANDLERS: dict[str, Callable[[_State, dict[str, Any]], None]] = {
    "dataloader_workers": _loader_fix("dataloader_workers", "waiting for a DataLoader"),
    "pin_memory": _loader_fix("pin_memory", "waiting for a DataLoader"),
    "persistent_workers": _loader_fix("persistent_workers", "waiting for a DataLoader"),
    "prefetch_factor": _loader_fix("prefetch_factor", "waiting for a DataLoader"),
    "batch_fusion": _loader_fix("batch_fusion", "waiting for a DataLoader"),
    "larger_batch": _loader_fix("larger_batch", "waiting for a DataLoader"),
    "cpu_threads": _loader_fix("cpu_threads", "waiting for a DataLoader with workers"),
    "bf16_autocast": _bf16,
    "fp16_amp": _fp16,
    "torch_compile": _compile,
    "channels_last": _channels_last,
    "fused_optimizer": _fused,
    "cudnn_benchmark": _cudnn,
    "tf32": _tf32,
    "non_blocking_copy": _non_blocking,
}


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


def _dataset_len(dataset: Any) -> int | None:
    """Return the samples in a map-style data set, or None when unknown (no ``__len__``)."""
    from torch.utils.data import IterableDataset

    if dataset is None or isinstance(dataset, IterableDataset):
        return None
    try:
        return int(len(dataset))
    except (TypeError, NotImplementedError):
        return None


def _shards_itself(dataset: Any) -> bool:
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


def _map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to floating tensors inside tuples, lists and dicts (other objects pass through)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value) if value.is_floating_point() else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: _map_tensors(v, fn) for k, v in value.items()}
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
