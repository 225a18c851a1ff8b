"""Turn traces (and optionally a capture and a pstats file) into :class:`Metrics`.

Pipeline: :func:`advisor.trace.load.load_traces` -> :func:`advisor.metrics.steps.analyze_trace`
per rank -> this module merges ranks, adds capture-side and cross-rank metrics and source
locations, and fills every metric declared in :mod:`advisor.metrics.registry` that the input
allows (``None`` otherwise).

Step-time breakdown (details in :mod:`advisor.metrics.breakdown`): each instant of a
``ProfilerStep`` goes to exactly one part, by priority, so the parts add up to the step's wall
time. On GPU traces device activity wins (torch-tb-profiler's Kernel > Memcpy > Memset >
Communication > Runtime > DataLoader > CPU Exec > Other is the baseline): ``gpu_compute`` >
``communication`` (collective kernels) > ``h2d_copy`` > ``d2h_copy``; only GPU-idle time is
explained by the CPU: ``sync_wait`` > ``communication`` (CPU collectives) > ``data_loading`` >
``optimizer`` > ``cpu_ops`` > ``gpu_idle``. So data loading on the CPU while kernels run counts as
GPU-busy time; ``dataloader_wait_ms`` keeps the full time in ``__next__``. On CPU-only traces the
parts are CPU-side: ``sync_wait`` > ``communication`` > ``data_loading`` > ``optimizer`` >
``cpu_ops`` > ``other``.

Summary values: ``step``-scope metrics are medians over all steps of all ranks, except the breakdown,
whose ``<part>_frac`` are time-weighted over steps (sum of the part / sum of step time) and whose
``<part>_ms`` those fractions times the median step time: the parts add up to ``step_time_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor._num import finite
from advisor._serde import to_jsonable
from advisor.capture.model import RunCapture
from advisor.capture.vocab import MemoryKind
from advisor.errors import InputError, TraceError
from advisor.metrics.balance import rank_balance
from advisor.metrics.contention import contention_metrics
from advisor.metrics.digest import LeadExtras, RankDigest, digest_trace
from advisor.metrics.gpuview import merge_views
from advisor.metrics.kernel_use import kernel_use_metrics
from advisor.metrics.loader import loader_metrics
from advisor.metrics.memory_lines import peak_locations
from advisor.metrics.model import Metrics
from advisor.metrics.modules import with_model_names
from advisor.metrics.peak_share import peak_share, peak_share_metrics
from advisor.metrics.periodic import periodic_locations, periodic_metrics, periodic_notes
from advisor.metrics.registry import BREAKDOWN_PARTS, METRICS
from advisor.metrics.sources import finish_locations, tidy_locations
from advisor.metrics.userframes import user_predicate
from advisor.metrics.whole_steps import whole_steps
from advisor.rundir import CAPTURE_FILE, PSTATS_FILE, TRACES_DIR
from advisor.trace.load import Trace, find_trace_files, load_trace, load_traces

_RANK_COLUMNS = (
    "step_time_ms",
    *(f"{p}_ms" for p in BREAKDOWN_PARTS),
    "comm_time_ms",
    "dataloader_wait_ms",
    "kernel_count",
    "cpu_op_count",
    "sync_count",
)


def _step_summary(steps: pd.DataFrame) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    step_scope = [name for name, spec in METRICS.items() if spec.scope == "step" and name in steps.columns]
    # NOTE: one median over the columns, not one per column: per-call pandas overhead, in the
    # merge that runs after the rank workers. NaN (no value, or none numeric) becomes None.
    medians = steps[step_scope].apply(pd.to_numeric, errors="coerce").astype(float).median()
    out.update((name, finite(medians[name])) for name in step_scope)
    total = float(steps["step_time_ms"].sum())
    median_step = out.get("step_time_ms")
    if total > 0 and median_step is not None:
        for part in BREAKDOWN_PARTS:
            frac = float(steps[f"{part}_ms"].sum()) / total
            out[f"{part}_frac"] = frac
            out[f"{part}_ms"] = frac * median_step
    return out


def _ranks_frame(digests: Sequence[RankDigest]) -> pd.DataFrame:
    # NOTE: one groupby over all ranks' steps instead of a Series median per rank and column:
    # at 64 ranks the per-call pandas overhead (17 x 64 medians) made this the merge's main
    # cost, and the merge runs after the workers, in series. A rank without the column, or
    # with no finite value in it, gets None, as one median per rank gave.
    medians = _rank_medians(digests)
    rows = []
    for i, d in enumerate(digests):
        row: dict[str, Any] = {"rank": d.rank, "step_count": len(d.steps)}
        for col in _RANK_COLUMNS:
            row[col] = finite(medians[col][i]) if col in medians else None
        row["file"] = d.path.name
        rows.append(row)
    return pd.DataFrame(rows)


def _rank_medians(digests: Sequence[RankDigest]) -> dict[str, np.ndarray]:
    """Median of each ``_RANK_COLUMNS`` column per digest (NaN where a digest has none)."""
    present = {c for d in digests for c in d.steps.columns}
    columns = [c for c in _RANK_COLUMNS if c in present]
    if not columns:
        return {}
    owner = np.repeat(np.arange(len(digests)), [len(d.steps) for d in digests])
    values = pd.concat([d.steps for d in digests], ignore_index=True).reindex(columns=columns)
    values = values.apply(pd.to_numeric, errors="coerce").astype(float)
    grouped = values.groupby(owner).median().reindex(range(len(digests)))
    return {c: grouped[c].to_numpy() for c in columns}


def _imbalance(ranks: pd.DataFrame, col: str) -> tuple[float | None, int | None, int | None]:
    """max/min of a per-rank column, with the ranks holding the max and the min."""
    values = pd.to_numeric(ranks[col], errors="coerce")
    ok = values.notna()
    if ok.sum() < 2:
        return None, None, None
    v = values[ok]
    hi, lo = v.idxmax(), v.idxmin()
    ratio = float(v[hi] / v[lo]) if v[lo] > 0 else None
    return ratio, int(ranks.loc[hi, "rank"]), int(ranks.loc[lo, "rank"])


def _rank_metrics(ranks: pd.DataFrame, has_gpu: bool) -> dict[str, float | None]:
    out: dict[str, float | None] = {"rank_count": float(len(ranks))}
    if len(ranks) < 2:
        return out
    balance = rank_balance(ranks)
    out.update(
        straggler_ratio=finite(balance.busy_ratio),
        straggler_rank=finite(balance.straggler_rank),
        fastest_rank=finite(balance.fastest_rank),
        straggler_wait_frac=finite(balance.wait_frac),
    )
    ratio, hi, lo = _imbalance(ranks, "comm_time_ms")
    out.update(comm_imbalance_ratio=ratio, comm_max_rank=finite(hi), comm_min_rank=finite(lo))
    out["data_loading_imbalance_ratio"] = _imbalance(ranks, "dataloader_wait_ms")[0]
    out["compute_imbalance_ratio"] = _imbalance(ranks, "gpu_compute_ms" if has_gpu else "cpu_ops_ms")[0]
    return out


def _capture_metrics(capture: RunCapture, summary: dict[str, float | None]) -> dict[str, float | None]:
    """Metrics that come from capture.json rather than from the trace."""
    out: dict[str, float | None] = {}
    timed = capture.timed
    out["samples_per_s"] = finite(timed.samples_per_s)
    samples = [s for s in timed.samples if s is not None]
    out["samples_per_step"] = finite(np.median(samples)) if samples else None
    raw_batches = tuple(getattr(timed, "batches", ()) or ())
    batches = [b for b in raw_batches if b]  # 0/None: no DataLoader batch seen in that step
    out["batches_per_step"] = finite(np.median(batches)) if batches else None
    sizes = [s / b for s, b in zip(timed.samples, raw_batches, strict=False) if s and b]
    out["micro_batch_size"] = finite(np.median(sizes)) if sizes else None
    accum = getattr(timed, "accumulation", None)
    if accum is not None and (out["batches_per_step"] or 1) <= 1:
        # NOTE: no DataLoader accumulation seen (none, or one loader batch sliced in the loop):
        # the loop's own backward() calls per optimizer step are the micro-batches, and the
        # samples the model consumed per backward call their size (nanoGPT-style loops).
        out["batches_per_step"] = float(accum)
        out["micro_batch_size"] = finite(timed.micro_batch_samples) or out["micro_batch_size"]
    loader = capture.dataloaders[0] if capture.dataloaders else None
    if out.get("micro_batch_size") is None and loader is not None:
        out["micro_batch_size"] = finite(loader.batch_size)
    if loader is not None:
        out.update(loader_metrics(loader))
    out["cpu_count"] = finite(capture.environment.cpu_count) or None
    out["gpu_util_frac"] = finite(capture.gpu.mean_util_frac)
    out["cpu_util_frac"] = finite(capture.cpu.mean_util_frac)
    out["time_to_first_step_s"] = finite(capture.time_to_first_step_s)
    out.update(contention_metrics(capture), **periodic_metrics(capture), **kernel_use_metrics(capture))
    if summary.get("peak_memory_bytes") is None:
        out["peak_memory_bytes"] = finite(capture.peak_memory_bytes)
    if summary.get("device_memory_bytes") is None:
        total = capture.gpu.total_memory_bytes if capture.memory_kind == MemoryKind.CUDA else capture.cpu.total_memory_bytes
        out["device_memory_bytes"] = finite(total)
    budget = getattr(capture, "memory_budget_bytes", None)
    if budget:
        # NOTE: --memory-budget is the memory the user says the run has: the limit the memory
        # rules measure the peak against, on CPU (the watchdog) and on a GPU (its fraction).
        known = out.get("device_memory_bytes") or summary.get("device_memory_bytes")
        out["device_memory_bytes"] = float(min(budget, known) if known else budget)
        if capture.peak_memory_bytes:  # the watchdog holds the process's peak to the budget
            out["peak_memory_bytes"] = float(max(capture.peak_memory_bytes, summary.get("peak_memory_bytes") or 0))
    return out


def _unique_ranks(traces: Sequence[Trace]) -> list[Trace]:
    """Traces loaded one by one may all claim rank 0 (no distributedInfo): number them in order."""
    ranks = [t.rank for t in traces]
    if len(set(ranks)) == len(ranks):
        return list(traces)
    return [Trace(path=t.path, rank=i, events=t.events, metadata=t.metadata) for i, t in enumerate(traces)]


def _capture_only(capture: RunCapture, source: str) -> Metrics:
    """Metrics from capture.json alone (a run captured without the profiler)."""
    summary: dict[str, float | None] = dict.fromkeys(METRICS)
    summary.update(_capture_metrics(capture, summary))
    if summary.get("device_memory_bytes") is None and capture.memory_kind != MemoryKind.CUDA:
        summary["device_memory_bytes"] = _host_memory_bytes()
    times = [t for t in capture.timed.step_times_ms if t is not None]
    if times:
        summary["step_time_ms"] = float(np.median(times))
        mean = float(np.mean(times))
        summary["step_time_cv_frac"] = float(np.std(times) / mean) if len(times) >= 2 and mean > 0 else None
    peak, total = summary.get("peak_memory_bytes"), summary.get("device_memory_bytes")
    summary["memory_used_frac"] = float(peak / total) if peak is not None and total else None
    summary = {name: finite(summary.get(name)) for name in METRICS}
    return Metrics(
        source=source or capture.run_dir,
        summary=summary,
        steps=pd.DataFrame(columns=["rank", "step", "start_us", "end_us"]),
        ranks=pd.DataFrame(columns=["rank", "step_count", "step_time_ms"]),
        locations=tuple(periodic_locations(capture)),
        notes=("no profiler trace in this run: only the capture's timings and settings were analysed",
               *periodic_notes(capture)),
    )


def _host_memory_bytes() -> float | None:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    return float(psutil.virtual_memory().total)


def compute_metrics(
    traces: Sequence[Trace],
    capture: RunCapture | None = None,
    pstats_path: Path | None = None,
    source: str = "",
) -> Metrics:
    """Compute every declared metric the input allows.

    Args:
        traces: One trace per rank (from :func:`advisor.trace.load.load_traces`).
        capture: The run's capture, for throughput, DataLoader settings and utilisation.
        pstats_path: The run's cProfile output, for data-loading hot spots.
        source: What was analysed (path), for reports.

    Returns:
        The :class:`Metrics`: summary (every registry name, None where unknown), per-step and
        per-rank tables, source locations and notes.

    Raises:
        TraceError: When ``traces`` is empty and there is no capture either (with a capture
            alone, the capture-side metrics are returned).
    """
    if not traces:
        if capture is None:
            raise TraceError("no traces to analyse; pass a torch.profiler trace file or folder")
        return _capture_only(capture, source)
    is_user = user_predicate(capture)
    ranked = _unique_ranks(traces)
    digests = [digest_trace(t, is_user, lead=i == 0) for i, t in enumerate(ranked)]
    i = straggler_focus(digests)
    focus = digest_trace(ranked[i], is_user, lead=True) if i is not None else None
    return merge_digests(digests, capture=capture, pstats_path=pstats_path, source=source, focus=focus)


# NOTE: rules/communication/CM002.yaml's thresholds, so the report shows the tables of the rank
# its straggler finding names.
FOCUS_RATIO = 1.2
"""A straggler is the job's focus when it is busy at least this many times as long as the least busy rank..."""
FOCUS_WAIT = 0.1
"""...which waits for it at least this share of its step."""


def straggler_focus(digests: Sequence[RankDigest]) -> int | None:
    """Return the index of the straggler's digest when it is not the first, else None.

    The job runs at the straggler's pace, so where *its* time goes is what the report should
    show: a 2-rank DDP job whose rank 1 slept 40 ms per batch in its loader listed rank 0's
    loader line at 0.21 ms per step.
    """
    if len(digests) < 2:
        return None
    balance = rank_balance(_ranks_frame(digests))
    if (balance.straggler_rank is None or (balance.busy_ratio or 0.0) < FOCUS_RATIO
            or (balance.wait_frac or 0.0) < FOCUS_WAIT):
        return None
    index = next((i for i, d in enumerate(digests) if d.rank == balance.straggler_rank), None)
    return index if index else None


def merge_digests(
    digests: Sequence[RankDigest],
    capture: RunCapture | None = None,
    pstats_path: Path | None = None,
    source: str = "",
    focus: RankDigest | None = None,
) -> Metrics:
    """Merge the ranks' digests (in rank order, the first with its lead extras) into :class:`Metrics`.

    :func:`compute_metrics` is this over digests it computes in-process; ranks analysed in
    other processes (:mod:`advisor.distributed.parallel`) send their digests here. ``focus``,
    the straggler's digest with lead extras (:func:`straggler_focus`), gives the source
    locations, the time tables and the top kernels instead of the first rank.

    Raises:
        TraceError: No digest and no capture.
    """
    if not digests:
        if capture is None:
            raise TraceError("no traces to analyse; pass a torch.profiler trace file or folder")
        return _capture_only(capture, source)
    shown = focus if focus is not None and focus.lead is not None else digests[0]
    lead = shown.lead or LeadExtras()
    views = merge_views([d.view for d in digests], [d.collectives for d in digests], max(d.windows for d in digests),
                        lead_view=shown.view)
    steps = pd.concat([d.steps for d in digests], ignore_index=True)
    steps = pd.concat([steps, views.steps.drop(columns=[c for c in views.steps.columns if c in steps.columns])], axis=1)
    has_gpu = any(d.has_gpu for d in digests)
    notes: list[str] = [n for d in digests for n in d.notes]
    repaired = sum(d.repaired for d in digests)
    if repaired:
        notes.append(f"{repaired} trace event name(s) written unescaped by torch were re-escaped to read the trace")

    summary: dict[str, float | None] = dict.fromkeys(METRICS)
    summary.update(_step_summary(steps))
    summary["step_count"] = float(max(len(d.steps) for d in digests)) if any(d.real_steps for d in digests) else 0.0
    cvs = []
    for d in digests:
        st = d.steps["step_time_ms"]
        if len(st) >= 2 and st.mean() > 0:
            cvs.append(float(st.std(ddof=0) / st.mean()))
    summary["step_time_cv_frac"] = float(np.median(cvs)) if cvs else None

    # run-level values: first rank that has them (ranks of one job share the hardware)
    for key in ("has_gpu_flag", "device_memory_bytes", "tensor_cores_flag", "fp32_matmul_frac",
                "conv_flag", "autocast_flag", "mfu_frac", "dataparallel_flag"):
        values = [d.run.get(key) for d in digests if d.run.get(key) is not None]
        summary[key] = finite(values[0]) if values else None
    summary["conv_flag"] = max(finite(d.run.get("conv_flag")) or 0.0 for d in digests)
    peaks = [d.run["peak_memory_bytes"] for d in digests if d.run.get("peak_memory_bytes") is not None]
    summary["peak_memory_bytes"] = float(max(peaks)) if peaks else None
    mfus = [d.run["mfu_frac"] for d in digests if d.run.get("mfu_frac") is not None]
    summary["mfu_frac"] = float(np.median(mfus)) if mfus else None

    ranks = _ranks_frame(digests)
    summary.update(_rank_metrics(ranks, has_gpu))

    if capture is not None:
        summary.update(_capture_metrics(capture, summary))
    if summary.get("device_memory_bytes") is None and not has_gpu and capture is not None:
        summary["device_memory_bytes"] = _host_memory_bytes()
    peak, total = summary.get("peak_memory_bytes"), summary.get("device_memory_bytes")
    summary["memory_used_frac"] = float(peak / total) if peak is not None and total else None

    found = (list(lead.locations), lead.has_stacks) if shown.lead is not None else None
    # NOTE: cProfile runs in the first rank only: its hot spots would be another rank's
    profile = pstats_path if shown is digests[0] else None
    locations, loc_notes = finish_locations(found, len(shown.steps), profile, capture)
    if shown is not digests[0]:
        notes.append(
            f"source locations, time tables and top kernels are rank {shown.rank}'s, the straggler: "
            f"the job runs at its pace (rank {digests[0].rank}'s are in its own trace)"
        )
    locations = [*locations, *views.locations, *periodic_locations(capture)]
    notes.extend([*loc_notes, *views.notes, *periodic_notes(capture)])
    for key, value in views.run.items():
        if summary.get(key) is None:
            summary[key] = value
    if lead.old_format:
        notes.append("old Kineto trace format (Operator/Runtime/Kernel categories, 'Call stack' args)")

    devices = tuple(sorted({d.run["device_name"] for d in digests if d.run.get("device_name")}))
    extra: dict[str, Any] = {
        "dominant_dtype": next((d.run["dominant_dtype"] for d in digests if d.run.get("dominant_dtype")), None),
        "peak_tflops": next((d.run["peak_tflops"] for d in digests if d.run.get("peak_tflops")), None),
        "top_kernels": list(lead.top_kernels),
        "breakdown_mode": "gpu" if has_gpu else "cpu",
        **views.tables,
    }
    if capture is not None and capture.module_names and extra.get("modules"):
        # NOTE: one map per process; a job's module table is the lead rank's, as its other tables
        extra["modules"] = with_model_names(extra["modules"], capture.module_names)
    if extra.get("memory_lines"):  # NOTE: the findings name the blocks by the model's own names
        extra["memory_lines"] = with_model_names(extra["memory_lines"], capture.module_names if capture else {})
        locations.extend(peak_locations(extra["memory_lines"]))
    share = peak_share(summary, capture, extra["dominant_dtype"], extra["peak_tflops"])
    summary.update(peak_share_metrics(share))
    extra["peak_share"] = to_jsonable(share)
    # Only declared names, all present (None where unknown).
    summary = {name: finite(summary.get(name)) for name in METRICS}
    return Metrics(
        source=source or str(digests[0].path),
        summary=summary,
        steps=steps,
        ranks=ranks,
        locations=tuple(tidy_locations(locations, capture.script if capture else None)),
        notes=tuple(dict.fromkeys(notes)),
        device=devices,
        extra=extra,
        focus_rank=shown.rank if shown is not digests[0] else None,
    )


def analyze_path(path: str | Path) -> Metrics:
    """Load and analyse a trace file, a folder of traces, or an advisor run directory.

    An advisor run directory (one holding ``capture.json``) is analysed with its capture,
    its ``traces/`` and its ``profile.pstats`` (or the capture's ``pstats_file``).

    Raises:
        TraceError / InputError: With a one-line message when the input cannot be read.
    """
    traces, capture, pstats_path = load_input(path)
    return compute_metrics(traces, capture=capture, pstats_path=pstats_path, source=str(path))


def load_input(path: str | Path) -> tuple[tuple[Trace, ...], RunCapture | None, Path | None]:
    """Load what :func:`analyze_path` analyses: the traces, and for a run directory its capture and pstats.

    Raises:
        TraceError / InputError: With a one-line message when the input cannot be read.
    """
    files, capture, pstats = locate_input(path)
    if capture is None:
        return load_traces(path), None, None
    traces = tuple(sorted((whole_steps(load_trace(f, index=i), capture.profiled_steps) for i, f in enumerate(files)), key=lambda t: t.rank))
    return traces, capture, pstats


def locate_input(path: str | Path) -> tuple[list[Path], RunCapture | None, Path | None]:
    """Find what :func:`load_input` would load, without loading it: trace files, capture, pstats.

    Raises:
        TraceError / InputError: With a one-line message when the input cannot be read.
    """
    path = Path(path)
    if not (path.is_dir() and (path / CAPTURE_FILE).is_file()):
        return find_trace_files(path), None, None
    capture = RunCapture.load(path)
    listed = run_trace_files(path, capture)
    if listed:
        files = [f for f in listed if f.is_file()]
        if not files:
            raise InputError(f"{path}: the traces listed in {CAPTURE_FILE} are missing; re-run `advisor diagnose`")
        for f in files:
            find_trace_files(f)  # same checks and messages as a folder
    elif (path / TRACES_DIR).is_dir():
        files = find_trace_files(path / TRACES_DIR)
    else:
        files = []  # captured without the profiler: the capture alone is analysed
    candidate = _inside(path, capture.pstats_file or PSTATS_FILE)
    return files, capture, (candidate if candidate.is_file() else None)


def run_trace_files(run_dir: Path, capture: RunCapture) -> list[Path]:
    """Trace files a run's capture lists: its own, then each rank's (torchrun), each file once."""
    listed = [_inside(run_dir, f) for f in capture.trace_files]
    for rank_dir in capture.ranks:  # torchrun launches: one run directory per rank
        sub = _inside(run_dir, rank_dir)
        if (sub / CAPTURE_FILE).is_file():
            listed += [_inside(sub, f) for f in RunCapture.load(sub).trace_files]
    # NOTE: a merged capture may also list rank traces; loading one twice would double a rank.
    return list(dict.fromkeys(_resolved(p) for p in listed))


def _inside(run_dir: Path, name: Any) -> Path:
    """``run_dir / name`` for a path ``capture.json`` lists; InputError when it leads out of the run directory.

    advisor writes these paths relative to the run directory; an absolute one or one through
    ``..`` (a hand-edited or crafted capture) mixed a foreign trace into the run's report.
    """
    rel = Path(str(name))
    # NOTE: a symbolic link inside the run (traces/x.json -> another run's trace) led out of it
    # as surely as an absolute path did (issue #30 campaign): where it exists, the real path counts
    if rel.is_absolute() or ".." in rel.parts or (
        (run_dir / rel).exists() and not _resolved(run_dir / rel).is_relative_to(_resolved(run_dir))
    ):
        raise InputError(
            f"{run_dir / CAPTURE_FILE} lists {name}, outside the run directory; "
            "advisor reads only the run's own files (re-run `advisor diagnose`, or `advisor analyze` that trace)"
        )
    return run_dir / rel


def _resolved(path: Path) -> Path:
    """``path.resolve()``, with a symlink loop (RuntimeError before Python 3.13) as an InputError."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise InputError(f"cannot follow {path} ({exc}); fix the link or re-run `advisor diagnose`") from exc


def load_run_traces(run_dir: Path, capture: RunCapture) -> tuple[Trace, ...]:
    """Load the listed traces that exist (a crashed run may have none), ordered by rank, cut to the counted steps (:mod:`~advisor.metrics.whole_steps`)."""
    files = [f for f in run_trace_files(run_dir, capture) if f.is_file()]
    return tuple(sorted((whole_steps(_load_one(f, i), capture.profiled_steps) for i, f in enumerate(files)), key=lambda t: t.rank))


def _load_one(path: Path, index: int) -> Trace:
    find_trace_files(path)  # same checks and messages as a folder
    return load_trace(path, index=index)
