"""One Perfetto-ready timeline per run directory: every rank and profiled run as its own process.

Perfetto (ui.perfetto.dev) and chrome://tracing open a Chrome-trace JSON file, ``.gz`` or not,
but one file at a time. A run with one trace needs nothing more: that trace is the file. A run
with several (torchrun ranks, a profiled trial run beside the capture) gets ``perfetto.json.gz``,
their events merged with each source's process ids renumbered so that no two sources share a
process, and each process named ``<label> · <its own name>`` (``rank1 · python 4242``,
``kept · python 77``), so the tracks group by rank and variant, in order.

The merge reads the traces as JSON (never pickles) and writes once; it is made again only when a
trace is newer than it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.errors import InputError
from advisor.report.tensorboard_logdir import read_trace_json
from advisor.rundir import RANK_DIR_RE, TRIALS_DIR

MERGED_FILE = "perfetto.json.gz"
"""The merged timeline's name inside a run directory."""

PERFETTO_HOWTO = "open https://ui.perfetto.dev, choose 'Open trace file' and pick {path}"
"""How to open a timeline, for notes and messages (``{path}`` is the file)."""


def label_of(trace: Path, run_dir: Path) -> str:
    """Name a trace's source: ``rank<N>`` for a torchrun rank, the trial's folder for a trial run, joined."""
    parts = []
    for parent in reversed(trace.relative_to(run_dir).parents):
        if parent.parent.name == TRIALS_DIR:
            parts.append(parent.name)
        elif RANK_DIR_RE.match(parent.name):
            parts.append(parent.name)
    return " ".join(parts) or "baseline"


def merge(sources: Sequence[tuple[str, Path]], out: Path) -> Path:
    """Merge ``(label, trace)`` sources into one gzip Chrome trace at ``out``; return ``out``.

    Each source's process ids are renumbered (1000 per source, in order) so sources never share
    a track; ``process_name`` metadata is rewritten to ``<label> · <name>`` (added where a
    process has none) and ``process_sort_index`` keeps the sources in the given order.

    Raises:
        InputError: A trace cannot be read.
    """
    events: list[dict[str, Any]] = []
    head: dict[str, Any] = {}
    for i, (label, path) in enumerate(sources):
        data = read_trace_json(path)
        if not isinstance(data.get("traceEvents"), list):
            raise InputError(f"{path} does not hold a Chrome trace's event list")
        if not head:
            head = {k: v for k, v in data.items() if k not in ("traceEvents", "distributedInfo")}
        pids: dict[Any, int] = {}
        named: set[int] = set()
        for ev in data["traceEvents"]:
            if not isinstance(ev, dict) or "pid" not in ev:
                continue
            pid = pids.setdefault(ev["pid"], 1000 * (i + 1) + len(pids))
            ev = {**ev, "pid": pid}
            if ev.get("ph") == "M" and ev.get("name") == "process_name":
                own = (ev.get("args") or {}).get("name", "")
                ev["args"] = {**(ev.get("args") or {}), "name": f"{label} · {own}".rstrip(" ·")}
                named.add(pid)
            elif ev.get("ph") == "M" and ev.get("name") == "process_sort_index":
                continue  # NOTE: replaced below, so sources keep their order
            events.append(ev)
        for original, pid in pids.items():
            if pid not in named:
                events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                               "args": {"name": f"{label} · {original}"}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as fh:
        json.dump({**head, "traceEvents": events}, fh)
    tmp.replace(out)
    return out


def run_traces(run_dir: Path) -> list[Path]:
    """Return a run directory's traces: the capture's (every rank), then each profiled trial run's."""
    pattern = ("*.pt.trace.json", "*.pt.trace.json.gz")
    found = [p for pat in pattern for p in run_dir.glob(f"**/traces/{pat}")]
    return sorted(p for p in found if "tensorboard" not in p.relative_to(run_dir).parts)


def timeline_file(run_dir: Path) -> Path | None:
    """Return the one file to open in Perfetto for a run: its trace, or the merge of its traces.

    None when the run has no trace (it failed before its profiled steps, or profiling was off).
    """
    run_dir = Path(run_dir)
    traces = run_traces(run_dir)
    if not traces:
        return None
    if len(traces) == 1:
        return traces[0]
    out = run_dir / MERGED_FILE
    if out.is_file() and out.stat().st_mtime >= max(t.stat().st_mtime for t in traces):
        return out
    return merge([(label_of(t, run_dir), t) for t in traces], out)
