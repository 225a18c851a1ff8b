"""Synthetic GPU traces shaped like torch.profiler / Kineto output, for tests without a GPU.

:class:`TraceBuilder` keeps two clocks, the CPU's and one per CUDA stream, and writes the
events Kineto writes for them: ``ProfilerStep#N`` user annotations, ``cpu_op`` operators with
``External id`` and (optionally) ``Input Dims`` / ``Input type`` / ``Concrete Inputs``,
``python_function`` frames with ``Python id`` / ``Python parent id`` (``nn.Module: X_0`` frames
for ``with_modules``), ``cudaLaunchKernel`` / ``cudaMemcpyAsync`` / sync runtime calls with a
``correlation`` id, and the ``kernel`` / ``gpu_memcpy`` events they launch on a stream, which
start no earlier than their launch ends and the stream is free. Every duration is chosen by the
caller, so a test knows the exact figures the analysis must find (hand calculations).

The real traces in ``../shared/traces`` are the reference for the layout (README there); this
module shares no code with ``advisor``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEVICES: dict[str, dict[str, Any]] = {
    "H100": {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9, "computeMinor": 0},
    "A100": {"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85198045184, "computeMajor": 8, "computeMinor": 0},
    "V100": {"name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34089730048, "computeMajor": 7, "computeMinor": 0},
}


class TraceBuilder:
    """Build one rank's trace event by event, on a CPU clock and per-stream GPU clocks.

    Args:
        device: A key of :data:`DEVICES` (the ``deviceProperties`` entry written).
        rank: ``distributedInfo.rank``; ``world_size`` is written when given.
        start_us: The CPU clock's first value.
        launch_us: Duration of each ``cudaLaunchKernel`` call.
    """

    def __init__(
        self,
        device: str = "H100",
        rank: int | None = None,
        world_size: int | None = None,
        start_us: float = 1_000_000.0,
        launch_us: float = 4.0,
        pid: int = 4242,
        tid: int = 4242,
    ) -> None:
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.now = float(start_us)
        self.launch_us = float(launch_us)
        self.pid = pid
        self.tid = tid
        self.streams: dict[int, float] = {}
        self.events: list[dict[str, Any]] = []
        self._corr = 1000
        self._ext = 1
        self._py_id = 1
        self._py_stack: list[int] = []
        self.with_modules = False

    # --- clocks -----------------------------------------------------------------------------
    def cpu(self, us: float) -> None:
        """Advance the CPU clock: the CPU works ``us`` microseconds outside any recorded event."""
        self.now += float(us)

    def gpu_free_at(self, stream: int = 7) -> float:
        """When ``stream`` finishes its queued work."""
        return self.streams.get(stream, 0.0)

    def _x(self, cat: str, name: str, ts: float, dur: float, args: dict[str, Any] | None = None,
           pid: int | None = None, tid: int | None = None) -> dict[str, Any]:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid,
              "tid": self.tid if tid is None else tid, "ts": round(ts, 3), "dur": round(dur, 3)}
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    # --- CPU ranges ---------------------------------------------------------------------------
    @contextmanager
    def _range(self, cat: str, name: str, args: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        start = self.now
        ev = self._x(cat, name, start, 0.0, args)
        yield ev
        ev["dur"] = round(self.now - start, 3)

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        """A ``ProfilerStep#N`` user annotation around the block."""
        with self._range("user_annotation", f"ProfilerStep#{number}"):
            yield

    @contextmanager
    def dataloader(self) -> Iterator[None]:
        """The single-process DataLoader's ``__next__`` range."""
        with self._range("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
            yield

    @contextmanager
    def python(self, name: str) -> Iterator[None]:
        """A ``python_function`` frame, e.g. ``train.py(12): preprocess`` (nests in the open frame)."""
        pid_ = self._py_id
        self._py_id += 1
        parent = self._py_stack[-1] if self._py_stack else None
        args = {"Python id": pid_, "Python parent id": parent}
        self._py_stack.append(pid_)
        try:
            with self._range("python_function", name, args):
                yield
        finally:
            self._py_stack.pop()

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        """An ``nn.Module: <name>`` frame, as ``with_modules=True`` records it."""
        self.with_modules = True
        with self.python(f"nn.Module: {name}"):
            yield

    @contextmanager
    def op(self, name: str, dims: list[Any] | None = None, types: list[str] | None = None,
           concrete: list[str] | None = None, overhead_us: float = 0.0) -> Iterator[int]:
        """A ``cpu_op`` (aten operator) with its shapes; yields its External id."""
        ext = self._ext
        self._ext += 1
        args: dict[str, Any] = {"External id": ext}
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        if concrete is not None:
            args["Concrete Inputs"] = concrete
        with self._range("cpu_op", name, args):
            self.cpu(overhead_us)
            yield ext

    # --- GPU work -------------------------------------------------------------------------------
    def kernel(self, name: str, dur_us: float, stream: int = 7, ext_id: int | None = None,
               launch_call: str = "cudaLaunchKernel") -> dict[str, Any]:
        """Launch a kernel: a runtime call on the CPU, then the kernel when the stream is free."""
        return self._launch(launch_call, "kernel", name, dur_us, stream, ext_id, {})

    def memcpy(self, kind: str, nbytes: int, dur_us: float, stream: int = 7) -> dict[str, Any]:
        """An async copy; ``kind`` as Kineto names it, e.g. ``HtoD (Pinned -> Device)``."""
        return self._launch("cudaMemcpyAsync", "gpu_memcpy", f"Memcpy {kind}", dur_us, stream, None,
                            {"bytes": nbytes})

    def _launch(self, call: str, cat: str, name: str, dur_us: float, stream: int, ext_id: int | None,
                extra: dict[str, Any]) -> dict[str, Any]:
        corr = self._corr
        self._corr += 1
        rt_args: dict[str, Any] = {"correlation": corr}
        if ext_id is not None:
            rt_args["External id"] = ext_id
        self._x("cuda_runtime", call, self.now, self.launch_us, rt_args)
        self.now += self.launch_us
        start = max(self.now, self.streams.get(stream, 0.0))
        args = {"device": 0, "stream": stream, "correlation": corr, **extra}
        if ext_id is not None:
            args["External id"] = ext_id
        ev = self._x(cat, name, start, dur_us, args, pid=0, tid=stream)
        self.streams[stream] = start + dur_us
        return ev

    def sync(self, call: str = "cudaStreamSynchronize", stream: int = 7, min_us: float = 2.0) -> None:
        """A blocking sync call: the CPU waits until ``stream`` is done (at least ``min_us``)."""
        end = max(self.now + min_us, self.streams.get(stream, 0.0))
        self._x("cuda_runtime", call, self.now, end - self.now, {"correlation": self._corr})
        self._corr += 1
        self.now = end

    # --- composite ops ----------------------------------------------------------------------------
    def linear(self, m: int, k: int, n: int, dtype: str = "c10::BFloat16", kernel_us: float = 20.0,
               overhead_us: float = 6.0, bias: bool = True) -> None:
        """``aten::linear`` -> ``aten::addmm`` (or ``aten::mm``) launching one GEMM kernel."""
        with self.op("aten::linear", [[m, k], [n, k], [n] if bias else []], [dtype, dtype, dtype if bias else ""]):
            self.cpu(overhead_us / 2)
            if bias:
                with self.op("aten::addmm", [[n], [m, k], [k, n], [], []], [dtype, dtype, dtype, "Scalar", "Scalar"],
                             overhead_us=overhead_us / 2) as ext:
                    self.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_us, ext_id=ext)
            else:
                with self.op("aten::mm", [[m, k], [k, n]], [dtype, dtype], overhead_us=overhead_us / 2) as ext:
                    self.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_us, ext_id=ext)

    def elementwise(self, name: str, shape: list[int], dtype: str = "float", kernel_us: float = 3.0,
                    overhead_us: float = 5.0, inputs: int = 1) -> None:
        """An elementwise aten op over ``shape`` launching one kernel."""
        dims = [list(shape)] * inputs
        with self.op(name, dims, [dtype] * inputs, overhead_us=overhead_us) as ext:
            self.kernel(f"void at::native::vectorized_elementwise_kernel<4, {name}>", kernel_us, ext_id=ext)

    # --- output ---------------------------------------------------------------------------------
    def trace(self) -> dict[str, Any]:
        """The Chrome-trace document (``traceEvents`` sorted by start, plus Kineto's metadata)."""
        props = dict(DEVICES[self.device], id=0)
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [props],
            "record_shapes": 1,
            "with_stack": 1,
            "traceEvents": sorted(self.events, key=lambda e: (e["ts"], -e["dur"])),
        }
        if self.with_modules:
            doc["with_modules"] = 1
        if self.rank is not None:
            info: dict[str, Any] = {"backend": "nccl", "rank": self.rank}
            if self.world_size is not None:
                info["world_size"] = self.world_size
            doc["distributedInfo"] = info
        return doc

    def write(self, path: Path) -> Path:
        """Write the trace (gzip when ``path`` ends in ``.gz``), deterministic bytes."""
        text = json.dumps(self.trace(), indent=None, separators=(",", ":"))
        # one event per line, as Kineto writes them (the loader's fast path splits at newlines)
        text = text.replace(',{"ph"', ',\n{"ph"')
        path.parent.mkdir(parents=True, exist_ok=True)
        if str(path).endswith(".gz"):
            with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh:
                fh.write(text.encode("utf-8"))
        else:
            path.write_text(text, encoding="utf-8")
        return path


# --- scenarios -------------------------------------------------------------------------------------

def preprocess_in_main_process(steps: int = 3, preprocess_us: float = 8000.0) -> TraceBuilder:
    """Each step: a video processor in the main process (Python, no ops), then a short model step.

    Per step the GPU idles ``preprocess_us`` while ``processing_video.py(88): __call__`` (inside
    ``train.py(30): main``) resizes frames with PIL, then runs 6 GEMMs of 200 us.
    """
    b = TraceBuilder()
    with b.python("train.py(30): main"):
        for s in range(steps):
            with b.step(s + 1):
                with b.python("transformers/models/llava/processing_video.py(88): __call__"):
                    with b.python("PIL/Image.py(2200): resize"):
                        b.cpu(preprocess_us * 0.75)
                    b.cpu(preprocess_us * 0.25)
                with b.python("train.py(40): train_step"):
                    for _ in range(6):
                        b.linear(1024, 1024, 1024, kernel_us=200.0)
                    b.sync()
    return b


def launch_bound(steps: int = 2, kernels: int = 2000, kernel_us: float = 2.0, overhead_us: float = 6.0) -> TraceBuilder:
    """Each step: ``kernels`` tiny elementwise kernels, each launched after ``overhead_us`` of CPU work."""
    b = TraceBuilder()
    with b.python("train.py(10): main"):
        for s in range(steps):
            with b.step(s + 1):
                with b.python("train.py(20): forward"):
                    for _ in range(kernels):
                        b.elementwise("aten::add", [64], kernel_us=kernel_us, overhead_us=overhead_us, inputs=2)
                b.sync()
    return b


def host_bound_logging(steps: int = 3, log_us: float = 6000.0) -> TraceBuilder:
    """Each step: a compute phase of 8 GEMMs, then ``log_us`` in ``metrics_logger.py: log_metrics``."""
    b = TraceBuilder()
    with b.python("train.py(10): main"):
        for s in range(steps):
            with b.step(s + 1):
                with b.python("train.py(20): train_step"):
                    for _ in range(8):
                        b.linear(2048, 2048, 2048, kernel_us=400.0)
                    b.sync()
                with b.python("utils/metrics_logger.py(55): log_metrics"):
                    with b.python("logging/__init__.py(1100): emit"):
                        b.cpu(log_us)
    return b


def small_model(steps: int = 2) -> TraceBuilder:
    """The committed ``tests/data/gpu_small`` trace: modules, shapes, a loader, a sync, preprocessing.

    Per step: DataLoader ``__next__`` (1500 us, of which ``dataset.py(21): __getitem__`` 1200 us), a
    pinned H2D copy, ``nn.Module: MLP_0`` with two ``Linear`` (bf16 GEMMs 512x1024x4096 and
    512x4096x1001, the second misaligned for tensor cores: 1001 % 8 != 0), a GELU between them,
    a softmax, SDPA flash attention, then a ``.item()``-style sync and 2000 us of
    ``torch/serialization.py(600): save``.
    """
    b = TraceBuilder()
    with b.python("train.py(50): main"):
        for s in range(steps):
            with b.step(s + 1):
                with b.dataloader():
                    with b.python("dataset.py(21): __getitem__"):
                        b.cpu(1200.0)
                    b.cpu(300.0)
                b.memcpy("HtoD (Pinned -> Device)", 512 * 1024 * 2, 40.0)
                with b.module("MLP_0"):
                    with b.module("Linear_0"):
                        b.linear(512, 1024, 4096, kernel_us=30.0)
                    b.elementwise("aten::gelu", [512, 4096], dtype="c10::BFloat16", kernel_us=12.0)
                    with b.module("Linear_1"):
                        b.linear(512, 4096, 1001, kernel_us=35.0)
                    with b.op("aten::_softmax", [[512, 1001], [], []], ["c10::BFloat16", "Scalar", "Scalar"],
                              overhead_us=4.0) as ext:
                        b.kernel("void at::native::cunn_SoftMaxForward<8, c10::BFloat16>", 6.0, ext_id=ext)
                    with b.module("Attention_0"):
                        q = [4, 8, 1024, 64]
                        with b.op("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []],
                                  ["c10::BFloat16"] * 3 + ["Scalar", "Scalar", "", ""],
                                  concrete=["", "", "", "0.0", "False", "False", ""], overhead_us=8.0) as ext:
                            b.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>",
                                     50.0, ext_id=ext)
                b.sync()
                with b.python("torch/serialization.py(600): save"):
                    b.cpu(2000.0)
    return b


def collectives(world_size: int = 4, late_rank: int = 2, late_us: float = 300.0, transfer_us: float = 200.0,
                nelems: int = 1 << 20) -> list[TraceBuilder]:
    """``world_size`` ranks on one clock: 100 us of GEMM, then one all_reduce of ``nelems`` fp32.

    Rank ``late_rank`` reaches the collective ``late_us`` later than the others. The all_reduce
    kernels end together, ``transfer_us`` after the last rank's kernel starts, so each rank's
    kernel lasts ``transfer_us`` plus its wait: ``late_us`` on every rank but ``late_rank``.
    """
    ranks = [TraceBuilder(rank=r, world_size=world_size, pid=5000 + r, tid=5000 + r) for r in range(world_size)]
    starts = []
    for r, b in enumerate(ranks):
        b.linear(1024, 1024, 1024, kernel_us=100.0)
        b.cpu(late_us if r == late_rank else 0.0)
        starts.append(max(b.now + b.launch_us, b.gpu_free_at(7)))
    finish = max(starts) + transfer_us
    for b, start in zip(ranks, starts, strict=True):
        with b._range("user_annotation", "nccl:all_reduce", {"Input Dims": [[nelems]], "Input type": ["float"]}):
            b._launch("cudaLaunchKernel", "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                      finish - start, 7, None, {})
        b.sync(min_us=1.0)
        first = 1_000_000.0
        b._x("user_annotation", "ProfilerStep#1", first, b.now + 1.0 - first)
    return ranks


# --- a DLRM-shaped job (../shared/traces/param/dlrm_kineto: 8 ranks, NCCL, one clock) ----------------

DLRM_EMBEDDINGS = 8
"""Embedding tables per rank (one ``aten::embedding_bag`` and its kernels each, per pass)."""


def _dlrm_compute(b: TraceBuilder, pass_: str, scale: float, small_ops: int) -> None:
    """One pass of a DLRM rank's dense work: MLP layers and many small elementwise kernels.

    The real traces have about 250-300 kernels per step, median 3 us, 90% under 10 us, and about
    1,600 CPU operators (most launch nothing: views, empties, as_strided).
    """
    with b.python(f"dlrm_s_pytorch.py({300 if pass_ == 'fwd' else 900}): {pass_}"):
        for _layer in range(4):
            b.linear(2048, 512, 512, dtype="float", kernel_us=45.0 * scale, overhead_us=8.0)
            for _ in range(3):
                with b.op("aten::view", overhead_us=2.0):
                    pass
            b.elementwise("aten::relu", [2048, 512], kernel_us=3.0 * scale, overhead_us=5.0)
        for i in range(small_ops):
            for name in ("aten::empty", "aten::as_strided", "aten::view", "aten::t"):
                with b.op(name, overhead_us=1.0):
                    pass
            b.elementwise("aten::mul" if i % 2 else "aten::add", [2048, 16], kernel_us=2.0 * scale,
                          overhead_us=4.0, inputs=2)


def _dlrm_collective(ranks: list[TraceBuilder], kind: str, kernel: str, stream: int, nelems: int,
                     transfer_us: float) -> None:
    """One collective on every rank: its kernel ends on all ranks ``transfer_us`` after the last arrives."""
    starts = []
    for b in ranks:
        b.cpu(3.0)
        starts.append(max(b.now + b.launch_us, b.gpu_free_at(stream), b.gpu_free_at(7)))
    finish = max(starts) + transfer_us
    dtype = "float" if "AllReduce" in kernel else "c10::Half"
    for b, start in zip(ranks, starts, strict=True):
        with b._range("user_annotation", f"nccl:{kind}", {"Input Dims": [[nelems]], "Input type": [dtype]}):
            b.streams[stream] = max(b.gpu_free_at(stream), b.gpu_free_at(7))
            b._launch("cudaLaunchKernel", "kernel", kernel, finish - start, stream, None, {})


def dlrm_job(world_size: int = 8, steps: int = 1, straggler: int = 1, slow: float = 1.6,
             small_ops: int = 120, first_step: int = 10) -> Iterator[list[TraceBuilder]]:
    """Build a DLRM-shaped job step by step, every rank on one clock; yields the ranks after each step.

    Per rank and step, as in the 8-rank DLRM traces: a DataLoader ``__next__`` of about 1.2 ms,
    5 pinned and 8 pageable host-to-device copies, 8 embedding lookups, 5 ``all_to_all`` (NCCL
    SendRecv kernels, stream 24), forward and backward MLP passes with many small kernels, 3
    ``all_reduce`` (NCCL AllReduce kernels, stream 84), an optimizer step and 10 stream syncs.
    Every GPU launch has its ``ac2g`` flow events. Rank ``straggler``'s data loading and GPU work
    take ``slow`` times longer, so the others wait for it in every collective (their NCCL kernels
    last longer): it is the rank an analysis must name.

    The caller writes each yielded step's events (``b.events``) and clears them, so a job of many
    ranks never holds more than one step of events.
    """
    ranks = [TraceBuilder(device="V100", rank=r, world_size=world_size, pid=r, tid=4000 + r, launch_us=5.0)
             for r in range(world_size)]
    for s in range(steps):
        for b in ranks:
            b.now = max([b.now, *[o.now for o in ranks]])  # the ranks start each step together
        opened = []
        for r, b in enumerate(ranks):
            scale = slow if r == straggler else 1.0 + 0.02 * (r % 5)
            step = b._range("user_annotation", f"ProfilerStep#{first_step + s}")
            step.__enter__()
            opened.append(step)
            with b.dataloader():
                b.cpu((1150.0 + 10.0 * (r % 7)) * scale)
            for i in range(13):
                kind = "HtoD (Pinned -> Device)" if i < 5 else "HtoD (Pageable -> Device)"
                b.memcpy(kind, 4096 * (i + 1), 2.0)
            with b.python("dlrm_s_pytorch.py(250): apply_emb"):
                for _ in range(DLRM_EMBEDDINGS):
                    b.elementwise("aten::embedding_bag", [2048, 64], kernel_us=6.0 * scale, overhead_us=9.0)
        for _ in range(5):
            _dlrm_collective(ranks, "all_to_all", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 24, 1 << 16, 40.0)
        for r, b in enumerate(ranks):
            scale = slow if r == straggler else 1.0 + 0.02 * (r % 5)
            _dlrm_compute(b, "fwd", scale, small_ops)
            _dlrm_compute(b, "bwd", scale, small_ops)
        for _ in range(3):
            _dlrm_collective(ranks, "all_reduce", "ncclKernel_AllReduce_RING_LL_Sum_float", 84, 1 << 18, 120.0)
        for b, step in zip(ranks, opened, strict=True):
            with b._range("user_annotation", "Optimizer.step#SGD.step"):
                for _ in range(4):
                    b.elementwise("aten::add_", [512, 512], kernel_us=4.0, overhead_us=6.0, inputs=2)
            for i in range(10):
                b.sync(stream=(7, 24, 84)[i % 3], min_us=3.0)
            step.__exit__(None, None, None)
            _flows(b)
        yield ranks


def _flows(b: TraceBuilder) -> None:
    """Add Kineto's ``ac2g`` flow pair (launch -> kernel) for every GPU event of the step."""
    launches = {}
    flows = []
    for ev in b.events:
        if ev["cat"] == "cuda_runtime" and "correlation" in ev.get("args", {}):
            launches[ev["args"]["correlation"]] = ev
        elif ev["cat"] in ("kernel", "gpu_memcpy"):
            corr = ev["args"]["correlation"]
            launch = launches.get(corr)
            if launch is not None:
                flows.append({"ph": "s", "id": corr, "pid": launch["pid"], "tid": launch["tid"], "ts": launch["ts"],
                              "cat": "ac2g", "name": "ac2g", "dur": 0})
            flows.append({"ph": "f", "id": corr, "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"], "cat": "ac2g",
                          "name": "ac2g", "bp": "e", "dur": 0})
    b.events.extend(flows)


def write_dlrm_job(folder: Path, world_size: int = 8, steps: int = 1, straggler: int = 1, slow: float = 1.6,
                   small_ops: int = 120) -> list[Path]:
    """Write :func:`dlrm_job`'s ranks as ``worker<N>.pt.trace.json.gz`` files, streaming step by step."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"worker{r}.pt.trace.json.gz" for r in range(world_size)]
    files = [gzip.open(p, "wt", encoding="utf-8", compresslevel=1) for p in paths]
    heads = [False] * world_size
    try:
        for ranks in dlrm_job(world_size, steps, straggler, slow, small_ops):
            for r, b in enumerate(ranks):
                if not heads[r]:
                    doc = b.trace()
                    doc.pop("traceEvents")
                    files[r].write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
                    heads[r] = True
                else:
                    files[r].write(",\n")
                events = sorted(b.events, key=lambda e: (e["ts"], -e["dur"]))
                files[r].write(",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
                b.events.clear()
        for fh in files:
            fh.write("\n]}\n")
    finally:
        for fh in files:
            fh.close()
    return paths
