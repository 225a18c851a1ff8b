"""The child's hooks into torch: step boundaries, samples, DataLoader settings and losses.

Installed only inside the capture child (never in the CLI's process), before the user's script
runs, and removable again with :meth:`TorchHooks.uninstall`:

* global optimizer step pre- and post-hooks (they fire for every ``torch.optim.Optimizer``
  subclass): an optimizer step ends, told apart by optimizer (a GAN's two per iteration), and
  nested steps (a wrapper optimizer around another, an LBFGS closure's backward calls) are seen
  as inside one step;
* ``torch.autograd.backward`` wrapped (``Tensor.backward`` goes through it): each call outside an
  optimizer step, and the scalar loss of the first steps when losses are asked for;
* global module forward hooks: the end of each outermost module call (the model's forward,
  not its submodules') and the samples in its first batch tensor; once the recorder knows which
  modules matter (the cycle of modules per iteration, or the model whose inputs count samples
  under a better source) they give way to hooks on those modules alone;
* ``_BaseDataLoaderIter.__next__`` wrapped: batch requests, yielded batches (sample counts) and
  epoch ends, for every DataLoader iterator (single- and multi-process);
* ``DataLoader.__init__`` wrapped: each loader's effective settings and the user's file:line;
* ``DataLoader.__iter__`` wrapped: when an evaluation loader's iterator (and its workers) started;
* ``torch.optim.Optimizer.__init__`` wrapped: an optimizer exists, so its steps are awaited
  before backward calls count as steps (gradient accumulation, see the recorder);
* ``torch.save`` wrapped: each save after the first step timed as work between steps
  (:mod:`advisor.capture.checkpoints`);
* ``advisor._step_callback``: the ``advisor.step()`` marker;
* while torch.profiler records (:class:`CallSites`), the tensor methods that read back, copy or
  wait are wrapped in a ``record_function`` range named after the user's line that called them,
  so findings point at that line rather than at the enclosing function's ``def``.

Step and module events count on the thread that installed the hooks (the script's) only.
Wrappers step aside while torch.compile traces (``torch.compiler.is_compiling()``), so they
never cause graph breaks.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import advisor
from advisor.capture.batches import count_samples, input_shape
from advisor.capture.checkpoints import timed_save
from advisor.capture.compiled_calls import watch_inplace_compile
from advisor.capture.model import DataLoaderInfo
from advisor.capture.recorder import StepRecorder
from advisor.capture.sharding import worker_split
from advisor.capture.usercode import CALL_PREFIX, UserCode, library_roots

# Tensor methods that read a value back to the host, copy between devices or wait for the
# device: the calls a sync / copy finding must point at.
_MAX_OUTERMOST = 64  # outermost modules remembered (a model, a loss, an EMA copy...)
_CALL_METHODS = ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "cuda", "to", "numpy")

class UserFrames:
    """Find the user's innermost frame from inside a hook, cheaply (one decision per code object)."""

    def __init__(self, policy: UserCode) -> None:
        self.policy = policy
        self._user: dict[Any, bool] = {}
        self._last_key: tuple[Any, ...] | None = None
        self._last_stack: tuple[Any, ...] = ()

    def find(self, depth: int = 2) -> tuple[str, int, str] | None:
        """Return (file, current line, function) of the innermost user frame above the caller's caller."""
        try:
            frame: Any = sys._getframe(depth)
        except ValueError:
            return None
        while frame is not None:
            code = frame.f_code
            if self._is_user(code):
                return code.co_filename, frame.f_lineno, code.co_name
            frame = frame.f_back
        return None

    def _is_user(self, code: Any) -> bool:
        known = self._user.get(code)
        if known is None:
            name = code.co_filename
            known = self._user[code] = not name.startswith("<") and self.policy.is_user_file(os.path.abspath(name))
        return known


    def stack(self, depth: int = 2, limit: int = 16) -> tuple[tuple[Any, ...], list[Any]]:
        """Return the user's frames above the caller's caller, outermost first, and the frame objects.

        Each as (file, function, first line, current line); at most ``limit`` of the innermost.
        """
        try:
            frame: Any = sys._getframe(depth)
        except ValueError:
            return (), []
        found = self._user_frames(frame, limit)
        return _described(found), found

    def _user_frames(self, frame: Any, limit: int) -> list[Any]:
        """Return the user's frames from ``frame`` outwards, outermost first (at most ``limit`` of the innermost)."""
        found: list[Any] = []
        while frame is not None and len(found) < limit:
            if self._is_user(frame.f_code):
                found.append(frame)
            frame = frame.f_back
        found.reverse()
        return found

    def stack_tuple(self, depth: int = 2, limit: int = 16) -> tuple[Any, ...]:
        """Return :meth:`stack`'s frames alone, remembered while the calls come from one frame and line.

        An evaluation loop calls the model hundreds of times from one generator frame at one line;
        walking and copying the whole stack each time cost the evaluation about 8% of its time
        (measured in a 3-layer MLP's 400-call eval loop, 11-20 ms in 145). The innermost user frame
        is found first; while it is the same frame (by id, code and line, its caller likewise),
        its callers' frames and lines cannot have changed, and the last answer stands. No frame
        object is kept: a kept frame would keep its locals (a batch) alive.
        """
        try:
            frame: Any = sys._getframe(depth)
        except ValueError:
            return ()
        while frame is not None and not self._is_user(frame.f_code):
            frame = frame.f_back
        if frame is None:
            return ()
        back = frame.f_back
        key = (id(frame), frame.f_code, frame.f_lineno, id(back), back.f_lineno if back is not None else -1)
        if key != self._last_key:
            self._last_stack = _described(self._user_frames(frame, limit))
            self._last_key = key
        return self._last_stack


def _described(frames: list[Any]) -> tuple[tuple[str, str, int, int], ...]:
    """Each frame as (file, function, first line, current line)."""
    return tuple((f.f_code.co_filename, f.f_code.co_name, f.f_code.co_firstlineno, f.f_lineno) for f in frames)


def user_frame(frames: UserFrames) -> tuple[str | None, int | None]:
    """Return file and line of the innermost caller outside the library roots (the user's code)."""
    found = frames.find(depth=3)
    return (found[0], found[1]) if found else (None, None)


def describe_dataloader(loader: Any, file: str | None, line: int | None) -> DataLoaderInfo:
    """Describe a constructed DataLoader by its effective settings (read back from it)."""
    from torch.utils.data import IterableDataset

    dataset = getattr(loader, "dataset", None)
    iterable = isinstance(dataset, IterableDataset)
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    prefetch = getattr(loader, "prefetch_factor", None)
    return DataLoaderInfo(
        batch_size=int(batch_size) if isinstance(batch_size, int) else None,
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=int(prefetch) if isinstance(prefetch, int) else None,
        dataset_type=(
            f"{type(dataset).__module__}.{type(dataset).__qualname__}" if dataset is not None else ""
        ),
        iterable_dataset=iterable,
        file=file,
        line=line,
        batches=None if iterable else _batches(loader),
        worker_split=worker_split(dataset, getattr(loader, "worker_init_fn", None)) if iterable else None,
    )


def _batches(loader: Any) -> int | None:
    """Return ``len(loader)`` (a DataLoader or its iterator), the batches of one epoch; None when the data set has no length."""
    try:
        n = len(loader)
    except Exception:  # noqa: BLE001 - a data set whose __len__ fails has no known epoch
        return None
    return n if isinstance(n, int) and n > 0 else None


class TorchHooks:
    """Installs and removes the child's hooks, feeding a :class:`StepRecorder`."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.recorder = recorder
        self.dataloaders: list[DataLoaderInfo] = []
        self.frames = UserFrames(UserCode(library_roots=library_roots()))
        self.call_sites = CallSites(self.frames)
        self._undo: list[Any] = []
        self._narrow_module_hooks: Callable[[], None] = lambda: None

    def install(self) -> None:
        """Install every hook (see the module docstring)."""
        import torch
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        rec = self.recorder
        main = threading.get_ident()
        is_compiling = torch.compiler.is_compiling
        in_step = [0]  # optimizer steps in progress (a wrapper optimizer nests its inner one)

        def pre_step(_opt: Any, _args: Any, _kwargs: Any) -> None:
            in_step[0] += 1

        def post_step(opt: Any, _args: Any, _kwargs: Any) -> None:
            in_step[0] = max(0, in_step[0] - 1)
            if in_step[0] == 0 and threading.get_ident() == main:
                if rec.between.loop is None:
                    self._note_loop()
                self._narrow_module_hooks()
                rec.optimizer_step(id(opt))

        self._undo.append(register_optimizer_step_pre_hook(pre_step).remove)
        self._undo.append(register_optimizer_step_post_hook(post_step).remove)

        original_optimizer_init = torch.optim.Optimizer.__init__

        def optimizer_init(opt: Any, *args: Any, **kwargs: Any) -> None:
            original_optimizer_init(opt, *args, **kwargs)
            rec.optimizer_created()  # NOTE: subclasses reach it through super().__init__

        self._patch(torch.optim.Optimizer, "__init__", optimizer_init)

        original_backward = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if rec.wants_loss():
                first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
                if isinstance(first, torch.Tensor) and first.numel() == 1:
                    # NOTE: float() syncs a GPU; done only during the first steps.
                    rec.loss(float(first.detach()))
            result = original_backward(tensors, *args, **kwargs)
            if in_step[0] == 0 and threading.get_ident() == main:
                self._narrow_module_hooks()
                rec.backward()
            return result

        self._patch(torch.autograd, "backward", backward)

        # NOTE: global module hooks, not a wrapper around nn.Module.__call__: torch.profiler's
        # Python tracer recognises module calls by that method's code object (a replaced
        # __call__ crashes it). Global hooks send every module call down _call_impl's slower
        # path (about +80% on a stack of tiny layers), so they only run until the recorder
        # knows which modules matter; then hooks on those modules alone replace them.
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        depth = [0]
        quiet = [0]  # inside a call compiled in place: its hooks are the watcher's (compiled_calls)
        started = [0.0]  # the clock at the start of the outermost module call in progress
        outermost: dict[int, Any] = {}  # id -> weakref of the outermost modules seen
        clock = rec.clock

        def user_stack() -> tuple[Any, ...]:
            return self.frames.stack_tuple(depth=1)

        def samples_of(args: Any, kwargs: Any) -> int | None:
            samples = count_samples(args) if args else None
            if samples is None and kwargs:
                samples = count_samples(kwargs)
            return samples

        def pre_forward(_module: Any, _args: Any) -> None:
            if not is_compiling() and not quiet[0] and threading.get_ident() == main:
                if depth[0] == 0:
                    started[0] = clock()
                depth[0] += 1

        def on_module_start(_module: Any, _args: Any) -> None:
            if not quiet[0]:
                started[0] = clock()

        def outermost_call(module: Any, args: Any, kwargs: Any) -> None:
            """Hand the end of an outermost model call to the recorder; work between steps is timed without this hook."""
            t0, seen = clock(), rec.between.calls_seen
            grad = torch.is_grad_enabled()
            rec.between.shape = None if grad else input_shape(args, kwargs, torch.Tensor)
            rec.module_call(id(module), samples_of(args, kwargs), in_optimizer_step=in_step[0] > 0,
                            grad=grad, started=started[0], stack=user_stack)
            if rec.between.calls_seen != seen:
                rec.between.own(clock() - t0)

        def post_forward(module: Any, args: Any, kwargs: Any, _out: Any) -> None:
            if is_compiling() or quiet[0] or threading.get_ident() != main:
                return
            depth[0] = max(0, depth[0] - 1)
            if depth[0] == 0:
                if len(outermost) < _MAX_OUTERMOST:
                    outermost.setdefault(id(module), weakref.ref(module))
                outermost_call(module, args, kwargs)
                narrow_module_hooks()

        def on_module(module: Any, args: Any, kwargs: Any, _out: Any) -> None:
            if not is_compiling() and not quiet[0] and threading.get_ident() == main:
                outermost_call(module, args, kwargs)

        module_handles = [
            register_module_forward_pre_hook(pre_forward),
            register_module_forward_hook(post_forward, with_kwargs=True, always_call=True),
        ]
        watch_inplace_compile(torch, pre_forward, post_forward, quiet, self._patch, is_compiling)
        instance_handles: list[Any] = []
        narrowed: list[Any] = []  # weakrefs of the modules the narrowed hooks are on

        def narrow_module_hooks() -> None:
            """Swap the global hooks for hooks on the modules the recorder still needs."""
            if not module_handles:
                return
            keys = rec.module_keys_needed()
            if keys is None:
                return
            while module_handles:
                module_handles.pop().remove()
            narrowed.extend(ref for key in keys if (ref := outermost.get(key)) is not None)
            attach()

        def attach() -> None:
            for module in (ref() for ref in narrowed):
                if module is not None:
                    instance_handles.append(
                        module.register_forward_hook(on_module, with_kwargs=True, always_call=True)
                    )
                    instance_handles.append(module.register_forward_pre_hook(on_module_start))

        def unhooked(save: Callable[[], Any]) -> Any:
            """Run ``save`` without the per-module hooks: ``torch.save(model)`` would pickle these closures."""
            if not instance_handles or threading.get_ident() != main:
                return save()  # NOTE: another thread's save must not change hooks a forward may be reading
            while instance_handles:
                instance_handles.pop().remove()
            try:
                return save()
            finally:
                attach()

        self._narrow_module_hooks = narrow_module_hooks

        def remove_module_hooks() -> None:
            for handle in (*module_handles, *instance_handles):
                handle.remove()

        self._undo.append(remove_module_hooks)

        original_next = _BaseDataLoaderIter.__next__

        def __next__(it: Any) -> Any:
            grad = torch.is_grad_enabled()
            if grad and rec.between.train_batches is None:
                rec.between.train_batches = _batches(it) or 0  # the training loader's epoch, asked once
            rec.batch_requested(grad)
            try:
                batch = original_next(it)
            except StopIteration:
                rec.epoch_ended(grad)
                raise
            rec.batch_yielded(count_samples(batch), grad)
            return batch

        self._patch(_BaseDataLoaderIter, "__next__", __next__)

        original_iter = DataLoader.__iter__

        def __iter__(loader: Any) -> Any:
            if not torch.is_grad_enabled():  # an evaluation loader: its workers start here
                rec.between.loader_started(rec.clock())
            return original_iter(loader)

        self._patch(DataLoader, "__iter__", __iter__)

        original_init = DataLoader.__init__
        seen: set[DataLoaderInfo] = set()
        frames = self.frames

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original_init(loader, *args, **kwargs)
            # NOTE: read back after __init__ so the recorded values are the effective ones,
            # including changes a run-time fix made to the arguments.
            try:
                file, line = user_frame(frames)
                info = describe_dataloader(loader, file, line)
            except Exception:  # noqa: BLE001 - describing must never break the user's loader
                return
            if info not in seen:  # loaders re-created each epoch are recorded once
                seen.add(info)
                self.dataloaders.append(info)
                if len(self.dataloaders) == 2:  # an evaluation loader: work at the training epoch's end
                    self.recorder.between.eval_loader = True

        self._patch(DataLoader, "__init__", __init__)
        self._patch(torch, "save", timed_save(torch.save, rec, lambda: self.frames.stack_tuple(depth=1), unhooked))

        advisor._step_callback = rec.marker
        self._undo.append(lambda: setattr(advisor, "_step_callback", None))

    def _note_loop(self) -> None:
        """Record the training loop's frames and the run's length and periods it names (first optimizer step)."""
        from advisor.capture.between import run_hints

        try:
            stack, frames = self.frames.stack(depth=1)
            self.recorder.between.loop = tuple(f[:3] for f in stack)
            # NOTE: inner frames first (a function's own max_steps over a module global).
            self.recorder.between.hints = run_hints([f.f_locals for f in reversed(frames)])
        except Exception:  # noqa: BLE001 - naming the loop must never break the user's step
            self.recorder.between.loop = ()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def uninstall(self) -> None:
        """Remove every hook, newest first."""
        self.call_sites.disable()
        while self._undo:
            self._undo.pop()()


class CallSites:
    """While enabled, name the user's line of each read-back, copy and sync call in the trace.

    Enabled only for the torch.profiler window: outside it the tensor methods stay untouched.
    """

    def __init__(self, frames: UserFrames) -> None:
        self.frames = frames
        self._undo: list[Callable[[], None]] = []

    def enable(self) -> None:
        """Wrap the tensor methods and ``torch.cuda.synchronize``."""
        if self._undo:
            return
        import torch

        for name in _CALL_METHODS:
            if hasattr(torch.Tensor, name):
                self._wrap(torch.Tensor, name)
        self._wrap(torch.cuda, "synchronize")

    def disable(self) -> None:
        """Restore what :meth:`enable` wrapped."""
        while self._undo:
            self._undo.pop()()

    def _wrap(self, owner: Any, name: str) -> None:
        import torch

        had_own = name in owner.__dict__
        original = getattr(owner, name)
        is_compiling = torch.compiler.is_compiling
        record_function = torch.profiler.record_function
        find = self.frames.find

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if is_compiling():
                return original(*args, **kwargs)
            site = find()
            if site is None:
                return original(*args, **kwargs)
            file, line, func = site
            with record_function(f"{CALL_PREFIX}{line}@{func}@{file}"):
                return original(*args, **kwargs)

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        setattr(owner, name, wrapper)
        if had_own:
            self._undo.append(lambda: setattr(owner, name, original))
        else:
            self._undo.append(lambda: delattr(owner, name))
