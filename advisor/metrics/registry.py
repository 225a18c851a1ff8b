"""Every metric name advisor knows, declared once, with its unit and meaning.

Rule conditions may reference only these names (checked when rules load), reports label them
from here, and the analysis code writes exactly these keys. Units live in the suffix:
``_ms``, ``_us``, ``_s``, ``_bytes``, ``_frac`` (0..1), ``_count``, ``_per_s``, ``_gbps``,
``_tflops``; flags end in ``_flag`` (0 or 1).

Scopes:
  * ``step``: computed per ``ProfilerStep`` (a column of ``Metrics.steps``) and summarised in
    ``Metrics.summary`` as the median over steps;
  * ``run``: one value per run (from the capture or the whole trace);
  * ``ranks``: across ranks of a distributed job (absent for one rank).

The per-step columns :func:`advisor.metrics.steps.analyze_trace` writes come in families
(:data:`FAMILIES`), each computed by one function there; tests/metrics/test_metric_registry.py checks
that every column and summary key written is declared here.

A metric that cannot be computed for an input (no GPU, no shapes, one rank) is ``None`` in the
summary; rule conditions treat a comparison with ``None`` as false.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    """A declared metric: its name (with unit suffix), unit, scope and meaning."""

    name: str
    unit: str
    scope: str
    description: str


# The step-time breakdown: parts of each step's wall time that add up to 1.0 (see
# advisor.metrics.breakdown for how overlapping time is assigned). Order = display order.
BREAKDOWN_PARTS: tuple[str, ...] = (
    "data_loading",
    "h2d_copy",
    "d2h_copy",
    "sync_wait",
    "communication",
    "gpu_compute",
    "optimizer",
    "cpu_ops",
    "gpu_idle",
    "other",
)

_SPECS: tuple[MetricSpec, ...] = (
    # --- steps -------------------------------------------------------------------------------
    MetricSpec("step_count", "count", "run", "Profiler steps analysed"),
    MetricSpec("step_time_ms", "ms", "step", "Wall time of a step (ProfilerStep span)"),
    MetricSpec("step_time_cv_frac", "frac", "run", "Coefficient of variation of step time across steps"),
    # --- breakdown (fractions of step wall time; sum to 1) ------------------------------------
    *(
        MetricSpec(f"{part}_frac", "frac", "step", f"Share of step time attributed to {part.replace('_', ' ')}")
        for part in BREAKDOWN_PARTS
    ),
    *(
        MetricSpec(f"{part}_ms", "ms", "step", f"Step time attributed to {part.replace('_', ' ')}")
        for part in BREAKDOWN_PARTS
    ),
    # --- GPU kernels ----------------------------------------------------------------------------
    MetricSpec("has_gpu_flag", "flag", "run", "1 when the trace has GPU kernels or memcpys"),
    MetricSpec("kernel_count", "count", "step", "GPU kernels per step"),
    MetricSpec("small_kernel_count", "count", "step", "GPU kernels under 10 us per step"),
    MetricSpec("small_kernel_frac", "frac", "step", "Share of the step's kernels that run under 10 us"),
    MetricSpec("small_kernel_time_frac", "frac", "step", "Share of GPU kernel time spent in kernels under 10 us"),
    MetricSpec("kernel_median_us", "us", "step", "Median GPU kernel duration"),
    MetricSpec("gpu_busy_frac", "frac", "step", "Share of the step during which any GPU kernel/memcpy/memset runs"),
    MetricSpec("gpu_max_gap_ms", "ms", "step", "Longest gap with no GPU activity inside the step"),
    MetricSpec("launch_count", "count", "step", "Kernel launches (cudaLaunchKernel and friends) per step"),
    MetricSpec("launch_overhead_frac", "frac", "step", "Share of the step the CPU spends in launch calls"),
    # --- syncs ------------------------------------------------------------------------------------
    MetricSpec("sync_count", "count", "step", "CPU-GPU sync calls per step (stream/device/event synchronize)"),
    MetricSpec("item_count", "count", "step", "aten::item / _local_scalar_dense calls per step"),
    MetricSpec("sync_ms", "ms", "step", "Time the CPU waits in sync calls per step"),
    # --- copies -----------------------------------------------------------------------------------
    MetricSpec("memcpy_count", "count", "step", "GPU memcpy operations per step"),
    MetricSpec("h2d_count", "count", "step", "Host-to-device copies per step"),
    MetricSpec("h2d_bytes", "bytes", "step", "Bytes copied host-to-device per step"),
    MetricSpec("h2d_pageable_bytes", "bytes", "step", "Bytes copied host-to-device from pageable memory per step"),
    MetricSpec("h2d_pinned_bytes", "bytes", "step", "Bytes copied host-to-device from pinned memory per step"),
    MetricSpec("h2d_pageable_frac", "frac", "step", "Share of host-to-device bytes that came from pageable memory"),
    MetricSpec("h2d_bandwidth_gbps", "GB/s", "step", "Achieved host-to-device bandwidth"),
    MetricSpec("h2d_blocking_count", "count", "step", "Host-to-device copies followed by a CPU wait (blocking copies)"),
    MetricSpec("d2h_count", "count", "step", "Device-to-host copies per step"),
    MetricSpec("d2h_bytes", "bytes", "step", "Bytes copied device-to-host per step"),
    # --- CPU ops ----------------------------------------------------------------------------------
    MetricSpec("cpu_op_count", "count", "step", "Top-level CPU operators (aten) per step"),
    MetricSpec("cpu_op_median_us", "us", "step", "Median duration of a top-level CPU operator (per-op overhead signal)"),
    MetricSpec("autograd_op_count", "count", "step", "CPU operators per step run with grad mode on (the trace gives them an autograd sequence number)"),
    MetricSpec("backward_op_count", "count", "step", "Autograd backward functions run per step (0: no backward pass)"),
    MetricSpec("cpu_op_small_frac", "frac", "step", "Share of top-level CPU operators shorter than 20 us"),
    MetricSpec(
        "tiny_op_run_frac", "frac", "step",
        "Share of the step in runs of 8 or more back-to-back forward operators each under 20 us, the Python "
        "between them included (advisor.metrics.tiny_ops)",
    ),
    MetricSpec(
        "hand_attention_count", "count", "step",
        "Hand-written attention blocks per step: matmul -> softmax -> matmul in a row on one thread (advisor.metrics.attention)",
    ),
    MetricSpec(
        "optimizer_op_count", "count", "step",
        "Top-level operators per step inside torch.optim's Optimizer.step ranges (advisor.metrics.optimizer_ops)",
    ),
    MetricSpec(
        "optimizer_multi_tensor_flag", "flag", "step",
        "1 when the optimizer step runs foreach or fused (multi-tensor) operators, 0 when it runs one "
        "operator per parameter tensor; unknown without an Optimizer.step range",
    ),
    # --- data loading -----------------------------------------------------------------------------
    MetricSpec("dataloader_wait_ms", "ms", "step", "Time in DataLoader __next__ per step"),
    MetricSpec(
        "input_assembly_ms", "ms", "step",
        "Time per step in the user's own functions that assemble batches in the training process "
        "(indexing, slicing, stacking; no model call inside; advisor.metrics.input_work)",
    ),
    # --- memory -----------------------------------------------------------------------------------
    MetricSpec("peak_memory_bytes", "bytes", "run", "Peak memory: CUDA max allocated on GPU, peak RSS on CPU"),
    MetricSpec("device_memory_bytes", "bytes", "run", "Total memory of the device (GPU memory, or system RAM on CPU)"),
    MetricSpec("memory_used_frac", "frac", "run", "peak_memory_bytes / device_memory_bytes"),
    MetricSpec(
        "peak_activation_frac", "frac", "run",
        "Share of the memory live at the profiled peak allocated inside a module's forward (activations kept for "
        "backward: what activation checkpointing frees), from the profiler's memory events (advisor.metrics.memory_lines)",
    ),
    # --- compute ----------------------------------------------------------------------------------
    MetricSpec("flops_per_step", "flops", "step", "Floating-point operations per step, from op shapes (matmul/conv/linear)"),
    MetricSpec("achieved_tflops", "TFLOP/s", "step", "flops_per_step / step time"),
    MetricSpec("mfu_frac", "frac", "run", "achieved_tflops / peak TFLOP/s of the device for the dominant dtype"),
    MetricSpec("fp32_matmul_frac", "frac", "run", "Share of matmul/conv FLOPs (or time) run in float32"),
    MetricSpec("tensor_cores_flag", "flag", "run", "1 when the device has tensor cores (compute capability >= 7.0)"),
    MetricSpec("conv_flag", "flag", "run", "1 when the model runs convolutions"),
    MetricSpec("autocast_flag", "flag", "run", "1 when autocast / reduced precision is already in use"),
    # achieved rate against the device's peak (advisor.metrics.peak_share): the compute-bound gate
    MetricSpec("matmul_peak_tflops", "TFLOP/s", "run", "Peak matmul TFLOP/s for the dominant dtype: measured on a CPU run's machine, the datasheet's for a GPU"),
    MetricSpec("achieved_run_tflops", "TFLOP/s", "run", "Matmul/conv FLOPs per step / median timed step time (profiled steps' time without timed steps)"),
    MetricSpec("peak_share_frac", "frac", "run", "achieved_run_tflops / matmul_peak_tflops: how fast the arithmetic ran against the device's peak"),
    # --- capture-side (from capture.json; None for a bare trace) ------------------------------------
    MetricSpec("samples_per_s", "samples/s", "run", "Steady throughput over the timed steps"),
    MetricSpec("samples_per_step", "count", "run", "Median samples per optimizer step (from DataLoader batches)"),
    MetricSpec(
        "batches_per_step", "count", "run",
        "Median micro-batches per optimizer step (>1 = gradient accumulation): DataLoader batches, "
        "else the loop's backward() calls per optimizer step",
    ),
    MetricSpec(
        "micro_batch_size", "count", "run",
        "Median micro-batch size: samples per DataLoader batch, else per backward() call",
    ),
    MetricSpec("gpu_util_frac", "frac", "run", "Mean GPU utilisation sampled by NVML in the timed steps (the whole run when no sample fell in them)"),
    MetricSpec("cpu_util_frac", "frac", "run", "Mean CPU utilisation of the machine sampled by psutil (all cores)"),
    MetricSpec("cpu_count", "count", "run", "Logical CPU cores on the machine"),
    MetricSpec("dataloader_num_workers", "count", "run", "num_workers of the main DataLoader"),
    MetricSpec("dataloader_pin_memory_flag", "flag", "run", "pin_memory of the main DataLoader"),
    MetricSpec("dataloader_persistent_workers_flag", "flag", "run", "persistent_workers of the main DataLoader"),
    MetricSpec("iterable_dataset_flag", "flag", "run", "1 when the main DataLoader wraps an IterableDataset"),
    MetricSpec("iterable_copies", "count", "run", "Copies of each sample an epoch of the main DataLoader yields: its workers, when an IterableDataset's stream is not split by worker; else 1"),
    MetricSpec("time_to_first_step_s", "s", "run", "Script start to the end of its first step"),
    # the whole run: start-up, work between steps, projection (advisor.metrics.periodic)
    MetricSpec("startup_s", "s", "run", "Start-up before the first step: interpreter, imports, data and model set-up (not the evaluation before it)"),
    MetricSpec("run_end_s", "s", "run", "The interpreter's exit after the last step (freeing what the script imported), timed by the warm-start server; absent when no server ran"),
    MetricSpec("projected_run_s", "s", "run", "Projected wall time of the whole run: start-up + steps x steady step + periodic work + the exit"),
    MetricSpec("projected_steps_count", "count", "run", "Steps of the whole run (the script's max_iters-like variable, or the steps of a run to its end)"),
    MetricSpec("periodic_work_frac", "frac", "run", "Share of the projected run spent in work between steps (evaluation, sampling); of the steady training when the run's length is unknown"),
    MetricSpec("periodic_work_s", "s", "run", "One occurrence of the costliest periodic work between steps"),
    MetricSpec("periodic_period_steps", "count", "run", "Steps between two occurrences of the costliest periodic work"),
    MetricSpec("periodic_occurrences_count", "count", "run", "Occurrences of the costliest periodic work over the projected run"),
    MetricSpec("epoch_change_s", "s", "run", "Each change of the training loader's epoch beyond one step: work at the epoch's end, the loaders' workers started again, the first batch's wait; absent under two steps"),
    MetricSpec("epoch_change_frac", "frac", "run", "Share of the projected run in the epoch changes between epochs; of the steady training when the run's length is unknown"),
    MetricSpec("epoch_changes_count", "count", "run", "Changes between two epochs over the projected run"),
    # lines of periodic work that generate without a KV cache, or infer one sample at a time (advisor.metrics.generation)
    MetricSpec("generation_frac", "frac", "run", "Share of the projected run in autoregressive generation without a KV cache (the input grows by one position per call), the costliest line; of the steady training when the run's length is unknown"),
    MetricSpec("generation_s", "s", "run", "One occurrence of that generation: its first model call's start to its last's end"),
    MetricSpec("generation_calls_count", "count", "run", "Model calls in one occurrence of that generation, each over the whole prefix"),
    MetricSpec("generation_tokens_count", "count", "run", "Tokens generated in one occurrence of that generation (calls x batch)"),
    MetricSpec("generation_positions_count", "count", "run", "Mean positions each of those calls ran over (a KV cache runs one)"),
    MetricSpec("generation_period_steps", "count", "run", "Steps between two occurrences of that generation"),
    MetricSpec("generation_occurrences_count", "count", "run", "Occurrences of that generation over the projected run"),
    MetricSpec("one_sample_frac", "frac", "run", "Share of the projected run in grad-disabled model calls of batch size 1 repeated from one line between steps, the costliest line; of the steady training when the run's length is unknown"),
    MetricSpec("one_sample_s", "s", "run", "One occurrence of those one-sample calls: the first call's start to the last's end"),
    MetricSpec("one_sample_calls_count", "count", "run", "One-sample model calls in one occurrence"),
    MetricSpec("one_sample_period_steps", "count", "run", "Steps between two occurrences of those one-sample calls"),
    # threads against cores, and other work on the machine (advisor.metrics.contention)
    MetricSpec("load_avg", "load", "run", "Mean 1-minute load average of the machine during the capture"),
    MetricSpec("other_cpu_util_frac", "frac", "run", "Share of the machine's CPU time used by processes outside the run during the capture"),
    MetricSpec("intra_op_threads_count", "count", "run", "torch intra-op threads (torch.get_num_threads() when the script ended)"),
    MetricSpec("runnable_threads_count", "count", "run", "Threads the run asks cores for: intra-op threads + the main DataLoader's workers"),
    MetricSpec("cpu_demand_ratio", "ratio", "run", "(runnable_threads_count + cores' worth of other work) / cpu_count; above 1 threads wait for cores"),
    MetricSpec("contention_flag", "flag", "run", "1 when other work held at least a quarter of the cores during the capture (timings unreliable)"),
    # the kernel's work for the main process over the timed steps (advisor.metrics.kernel_use)
    MetricSpec("kernel_cpu_frac", "frac", "run", "Share of the main process's CPU time (all its threads) spent in the kernel over the timed steps"),
    MetricSpec("kernel_time_frac", "frac", "run", "Kernel CPU seconds of the main process over the timed steps / their wall time (at most 1)"),
    MetricSpec("page_faults_per_step_count", "count", "run", "Minor page faults of the main process per timed step (fresh pages mapped and zero-filled)"),
    MetricSpec("page_faults_per_s", "faults/s", "run", "Minor page faults of the main process per second of the timed steps"),
    MetricSpec("page_faults_after_work_count", "count", "run", "Minor page faults of the main process in the first whole step after the last work between steps (evaluation, a checkpoint)"),
    MetricSpec("page_faults_stopped_after_steps", "count", "run", "Training steps before the work between steps after which the page faults stopped (under a tenth of the timed steps'); None when they went on"),
    # --- distributed ----------------------------------------------------------------------------------
    MetricSpec("rank_count", "count", "ranks", "Ranks (trace files) analysed together"),
    MetricSpec("dataparallel_flag", "flag", "run", "1 when torch.nn.DataParallel is used"),
    MetricSpec("comm_overlap_frac", "frac", "step", "Share of communication time that overlaps compute (kernels on GPU, top-level operators on CPU)"),
    MetricSpec("comm_time_ms", "ms", "step", "Communication time per step, overlapped or not: collective kernels on GPU, gloo/nccl/c10d ranges on CPU"),
    # NOTE: stragglers are judged by busy time (step minus exposed communication), not wall
    # time: in synchronous training every rank's step lasts as long as the slowest one's, the
    # fast ranks waiting inside the collective (see advisor.metrics.balance).
    MetricSpec("straggler_ratio", "ratio", "ranks", "Busiest rank's busy time (step minus exposed communication) / least busy rank's"),
    MetricSpec("straggler_rank", "rank", "ranks", "Rank with the most busy time: the one the others wait for"),
    MetricSpec("fastest_rank", "rank", "ranks", "Rank with the least busy time"),
    MetricSpec("straggler_wait_frac", "frac", "ranks", "Time the fastest rank waits for the straggler per step, as a share of the step"),
    MetricSpec("comm_imbalance_ratio", "ratio", "ranks", "Largest rank communication time / smallest"),
    MetricSpec("comm_max_rank", "rank", "ranks", "Rank with the most communication time"),
    MetricSpec("comm_min_rank", "rank", "ranks", "Rank with the least communication time"),
    MetricSpec("data_loading_imbalance_ratio", "ratio", "ranks", "Largest rank data-loading time / smallest"),
    MetricSpec("compute_imbalance_ratio", "ratio", "ranks", "Largest rank GPU/CPU compute time / smallest"),
    # --- GPU idle attribution (advisor.metrics.idle; shares of step time, first match wins) ---------
    MetricSpec("idle_frac", "frac", "step", "Share of the step with no GPU kernel, memcpy or memset running"),
    MetricSpec("idle_sync_frac", "frac", "step", "GPU idle while the CPU waits in a sync call"),
    MetricSpec("idle_data_loading_frac", "frac", "step", "GPU idle while the CPU is in DataLoader.__next__ or preprocesses inputs in the main process"),
    MetricSpec("idle_preprocess_frac", "frac", "step", "GPU idle while the main process preprocesses inputs outside DataLoader.__next__"),
    MetricSpec("idle_launch_frac", "frac", "step", "GPU idle in gaps under 1 ms while the CPU queues the next kernel (launch-bound)"),
    MetricSpec("idle_host_frac", "frac", "step", "GPU idle in gaps of 1 ms or more while the CPU runs other Python or ops (host-bound)"),
    MetricSpec("idle_unattributed_frac", "frac", "step", "GPU idle in gaps of 1 ms or more with nothing recorded on the CPU"),
    MetricSpec("idle_gap_count", "count", "step", "Gaps in GPU activity per step"),
    MetricSpec("idle_gap_median_us", "us", "step", "Median length of a gap in GPU activity"),
    MetricSpec("idle_long_gap_frac", "frac", "step", "Share of GPU idle time that sits in gaps of 1 ms or more"),
    # --- roofline per operator (advisor.metrics.roofline) -------------------------------------------
    MetricSpec("step_mfu_frac", "frac", "step", "Model FLOPs utilisation: GEMM/conv/attention FLOPs of the step at the device's peak for their dtype, over the step time"),
    MetricSpec("sized_gpu_time_frac", "frac", "step", "Share of the step's operator GPU time in ops whose FLOPs and bytes are known from recorded shapes"),
    # --- tensor-core shapes (advisor.metrics.tensorcore) ----------------------------------------------
    MetricSpec("tc_misaligned_op_count", "count", "step", "fp16/bf16 (int8) GEMM/convolution calls per step with a dimension not a multiple of 8 (16)"),
    MetricSpec("tc_misaligned_time_frac", "frac", "step", "Share of the step's GEMM/convolution GPU time in those calls"),
    # --- collectives across ranks (advisor.metrics.collectives) ----------------------------------------
    MetricSpec("collective_wait_frac", "frac", "ranks", "Share of collective kernel time spent waiting for the last rank to arrive (skew), not moving data"),
    MetricSpec("collective_busbw_gbps", "GB/s", "ranks", "Effective bus bandwidth of the sized collectives (nccl-tests convention), over their transfer time"),
)

SCOPES: tuple[str, ...] = ("step", "run", "ranks")
"""Where a metric lives (see the module docstring)."""

STEP_KEYS: tuple[str, ...] = ("rank", "step", "start_us", "end_us")
"""Columns of ``Metrics.steps`` that say which step a row is, not metrics."""

FAMILIES: dict[str, tuple[str, ...]] = {
    # kernels and copies are GPU-only (NaN on a CPU trace).
    "kernels": (
        "kernel_count", "small_kernel_count", "small_kernel_frac", "small_kernel_time_frac",
        "kernel_median_us", "gpu_busy_frac", "gpu_max_gap_ms", "launch_count", "launch_overhead_frac",
    ),
    "syncs": ("sync_count", "item_count", "sync_ms"),
    "copies": (
        "memcpy_count", "h2d_count", "h2d_bytes", "h2d_pageable_bytes", "h2d_pinned_bytes",
        "h2d_pageable_frac", "h2d_bandwidth_gbps", "h2d_blocking_count", "d2h_count", "d2h_bytes",
    ),
    "cpu_ops": ("cpu_op_count", "cpu_op_median_us", "cpu_op_small_frac", "autograd_op_count", "backward_op_count"),
    "data_loading": ("dataloader_wait_ms", "input_assembly_ms"),
    "attention": ("hand_attention_count",),
    "tiny_ops": ("tiny_op_run_frac",),
    "optimizer": ("optimizer_op_count", "optimizer_multi_tensor_flag"),
    "communication": ("comm_overlap_frac", "comm_time_ms"),
    "flops": ("flops_per_step", "achieved_tflops"),
    # NOTE: computed after metrics.steps, by advisor.metrics.gpuview (idle, roofline, tensorcore)
    "gpu_time": (
        "idle_frac", "idle_sync_frac", "idle_data_loading_frac", "idle_launch_frac", "idle_host_frac",
        "idle_unattributed_frac", "idle_preprocess_frac", "idle_gap_count", "idle_gap_median_us",
        "idle_long_gap_frac", "step_mfu_frac", "sized_gpu_time_frac", "tc_misaligned_op_count",
        "tc_misaligned_time_frac",
    ),
}
"""The per-step metric families of one trace, in column order (one function each in metrics.steps;
``gpu_time`` in metrics.gpuview)."""

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}
if len(METRICS) != len(_SPECS):  # pragma: no cover - guards edits to this table
    raise RuntimeError("duplicate metric name in advisor.metrics.registry")

def is_declared(name: str) -> bool:
    """Tell whether ``name`` is a declared metric."""
    return name in METRICS


def spec(name: str) -> MetricSpec:
    """Return the declared spec for ``name``; KeyError when it is not declared."""
    return METRICS[name]
