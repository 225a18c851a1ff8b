"""A multi-node job read back from its nodes' run directories, as one job.

``advisor diagnose --nnodes N --node-rank R ...`` writes each node's ranks into ``<out>/node<R>/``
(a run directory of its own, with ``node.json`` saying which node and host it is). On a shared
file system the node folders sit side by side under ``<out>``; otherwise each node keeps its own
and ``advisor analyze DIR1 DIR2 ...`` takes them all. This module finds the trace files of every
rank of every node, merges the ranks' captures into the job's (a failing rank on any node is the
job's cause, named with its node; the job's throughput is the slowest rank's rate times the
rank count), and labels
each rank with its node for the report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from advisor._serde import from_dict, to_jsonable
from advisor.capture.model import RunCapture
from advisor.distributed.merge import RankRun, cause, merge_ranks
from advisor.errors import InputError
from advisor.metrics.compute import locate_input
from advisor.metrics.model import Metrics
from advisor.rundir import CAPTURE_FILE, CHILD_FILE, NODE_FILE, read_child, read_json


@dataclass(frozen=True)
class JobInput:
    """What ``advisor analyze`` reads for one or several paths.

    Attributes:
        files: Every rank's trace file.
        capture: The job's capture (merged over the nodes), None for bare traces.
        pstats: The first node's cProfile output, if any.
        rank_nodes: Rank -> "node R (host)" for multi-node jobs (empty otherwise).
        notes: What the merge of the nodes says (node layout, capture-side caveats).
    """

    files: list[Path]
    capture: RunCapture | None
    pstats: Path | None
    rank_nodes: dict[int, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / CAPTURE_FILE).is_file()


def _expand(paths: Sequence[Path]) -> list[Path]:
    """Each path, or the node run directories a job folder holds (``<out>/node<R>/``)."""
    out: list[Path] = []
    for p in paths:
        nodes = sorted(d for d in p.glob("node*") if _is_run_dir(d) and (d / NODE_FILE).is_file()) if p.is_dir() else []
        out.extend(nodes if nodes and not _is_run_dir(p) else [p])
    return out


def _label(run_dir: Path) -> str:
    info = read_json(run_dir / NODE_FILE) or {}
    node = info.get("node_rank")
    host = info.get("hostname")
    name = f"node {node}" if isinstance(node, int) else run_dir.name
    return f"{name} ({host})" if isinstance(host, str) and host else name


def _rank_runs(run_dir: Path, capture: RunCapture) -> list[RankRun]:
    runs = []
    for name in capture.ranks:
        folder = run_dir / name
        if not (folder / CAPTURE_FILE).is_file():
            continue
        rank_capture = RunCapture.load(folder)
        ended = None
        with contextlib.suppress(OSError):
            ended = (folder / CHILD_FILE).stat().st_mtime
        child = read_child(folder) or {}
        rank = int(name.removeprefix("rank")) if name.removeprefix("rank").isdigit() else len(runs)
        runs.append(RankRun(rank, f"{run_dir.name}/{name}", rank_capture, bool(child.get("finished")), ended))
    return runs


def _merged_capture(dirs: Sequence[Path], captures: Sequence[RunCapture]) -> tuple[RunCapture, int | None]:
    """Merge the nodes' captures into the job's (the first node's, with every rank's figures); name the failing rank."""
    runs = sorted((r for d, c in zip(dirs, captures, strict=True) for r in _rank_runs(d, c)), key=lambda r: r.rank)
    lead = captures[0]
    if not runs:
        return lead, None
    merged = merge_ranks(runs)
    notes = list(merged.pop("notes"))
    data: dict[str, Any] = {
        **to_jsonable(lead),
        **to_jsonable(merged),
        "ranks": [r.name for r in runs],
        "trace_files": [],
        "pstats_file": lead.pstats_file,
        "notes": list(dict.fromkeys([*lead.notes, *notes])),
    }
    data["notes"] = [n for n in data["notes"] if "ran on other nodes" not in n]
    failing = cause(runs)
    return from_dict(RunCapture, data), (failing.rank if failing is not None else None)


def locate_job(paths: Sequence[str | Path]) -> JobInput:
    """Find the traces, the capture and the node of every rank behind ``paths``.

    One path is what it always was (a trace, a folder of traces, a run directory), unless it is
    a job folder holding node run directories. Several paths are the parts of one job: node run
    directories, or trace folders.

    Raises:
        InputError / TraceError: A path is missing or holds no readable trace; two paths hold the
            same rank.
    """
    resolved = [Path(p) for p in paths]
    for p in resolved:
        if not p.exists():
            raise InputError(f"{p} does not exist; pass a .json/.json.gz trace, a folder of traces or a run directory")
    parts = _expand(resolved)
    if len(parts) == 1 and not (parts[0] / NODE_FILE).is_file():
        files, capture, pstats = locate_input(parts[0])
        return JobInput(files, capture, pstats)
    files: list[Path] = []
    dirs: list[Path] = []
    captures: list[RunCapture] = []
    rank_nodes: dict[int, str] = {}
    pstats = None
    for part in parts:
        part_files, capture, part_pstats = locate_input(part)
        files.extend(part_files)
        pstats = pstats or part_pstats
        if capture is not None:
            dirs.append(part)
            captures.append(capture)
            label = _label(part)
            for run in _rank_runs(part, capture):
                if run.rank in rank_nodes:
                    raise InputError(
                        f"rank {run.rank} is in both {rank_nodes[run.rank]} and {label}; pass each node's folder once"
                    )
                rank_nodes[run.rank] = label
    if len(set(files)) != len(files):
        raise InputError("the same trace file was given twice; pass each node's folder once")
    notes: list[str] = []
    capture = None
    if captures:
        capture, failing = _merged_capture(dirs, captures)
        by_node: dict[str, list[int]] = {}
        for rank, label in sorted(rank_nodes.items()):
            by_node.setdefault(label, []).append(rank)
        notes.append(
            f"{len(by_node)} node(s) merged: "
            + "; ".join(f"{label}: rank(s) {', '.join(map(str, ranks))}" for label, ranks in by_node.items())
        )
        if failing is not None and failing in rank_nodes:
            notes.append(f"the job failed: rank {failing} on {rank_nodes[failing]} failed first")
    return JobInput(files, capture, pstats, rank_nodes, tuple(notes))


def with_nodes(metrics: Metrics, job: JobInput) -> Metrics:
    """Label each rank with its node (a ``node`` column in ``ranks``) and name the straggler's node."""
    if not job.rank_nodes:
        return metrics
    ranks = metrics.ranks.assign(node=[job.rank_nodes.get(int(r), "") for r in metrics.ranks["rank"]])
    notes = [*job.notes, *metrics.notes]
    straggler = metrics.summary.get("straggler_rank")
    if straggler is not None and int(straggler) in job.rank_nodes:
        notes.append(f"the straggler, rank {int(straggler)}, ran on {job.rank_nodes[int(straggler)]}")
    return replace(metrics, ranks=ranks, notes=tuple(dict.fromkeys(notes)))
