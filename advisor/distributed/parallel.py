"""Analyse a job's rank traces in parallel processes, each holding one rank's events at a time.

A job of 64-1024 ranks writes one trace per rank; loading them all into one process is where
other tools run out of memory (Holistic Trace Analysis users report 950 GB of RAM for 200 GB of
traces). Here each rank file is loaded and analysed on its own, in a pool of ``jobs`` worker
processes, and reduced to a :class:`~advisor.metrics.digest.RankDigest` (step rows, collective
calls, run values: kilobytes) before the next file is read; only digests travel back, and
:func:`advisor.metrics.compute.merge_digests` merges them. So a worker's memory is bounded by its
largest rank, and the parent's by the digests plus the merge. With ``jobs=1`` the same happens
in-process, one rank after the other.

The lead rank (the lowest; ranks of one job run the same code) also yields the report's tables,
source locations, top kernels and timeline. The first file is guessed to be the lead (torch's
file names put rank 0 first); when another file turns out to hold a lower rank, that file is
analysed once more as the lead.

Workers ignore SIGINT (Ctrl-C reaches the parent, which ends them) and ask the kernel to end
them when the parent dies, so no worker outlives advisor.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from pathlib import Path

from advisor._proc import die_with_parent
from advisor.errors import AdvisorError, UsageError
from advisor.metrics.compute import straggler_focus
from advisor.metrics.digest import RankDigest, digest_trace
from advisor.metrics.userframes import UserPredicate, looks_like_user_file
from advisor.metrics.whole_steps import whole_steps
from advisor.trace.load import load_trace


def default_jobs() -> int:
    """Count the cores this process may run on (the ``--jobs`` default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class _Task:
    index: int
    path: Path
    lead: bool
    is_user: UserPredicate
    steps: int = 0  # the capture's profiled steps: the trace is cut to them (metrics.whole_steps); 0 keeps all


def _analyse(task: _Task, meanwhile: Callable[[], object] | None = None) -> RankDigest:
    """Load one rank's trace, analyse it and keep only its digest (runs in a worker).

    ``meanwhile`` runs while the trace decodes (:func:`advisor.trace.load.load_trace`).
    """
    trace = whole_steps(load_trace(task.path, index=task.index, meanwhile=meanwhile), task.steps)
    return digest_trace(trace, task.is_user, lead=task.lead, timeline=task.lead)


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # NOTE: a forked worker inherits the parent's Python handlers; one that only sets a stop flag
    # would let terminate() be ignored, and the worker outlive the error that ended the pool.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()


def _context() -> multiprocessing.context.BaseContext:
    # NOTE: fork starts a worker in milliseconds with pandas already imported; it is only safe
    # while the parent runs a single thread (a lock held by another thread would stay locked in
    # the child). Otherwise spawn: slower to start, always safe.
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _run_pool(tasks: Sequence[_Task], jobs: int, meanwhile: Callable[[], object]) -> list[RankDigest]:
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_worker_init)
    try:
        futures: list[Future[RankDigest]] = [pool.submit(_analyse, t) for t in tasks]
        meanwhile()
        results = [f.result() for f in futures]
    except BrokenProcessPool as exc:
        _end_pool(pool)
        raise AdvisorError(
            f"a worker process analysing the rank files died ({exc}); it may have run out of memory: "
            "retry with fewer --jobs (each worker holds one rank's trace)"
        ) from exc
    except BaseException:
        # an unreadable rank or Ctrl-C: end the other workers now instead of letting them
        # finish files nobody will read
        _end_pool(pool)
        raise
    pool.shutdown()
    return results


def _end_pool(pool: ProcessPoolExecutor, grace: float = 5.0) -> None:
    # NOTE: the executor has no public way to stop running workers before Python 3.14
    # (terminate_workers); its process table is the only handle on them, and shutdown()
    # drops it, so it is taken first.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        proc.terminate()
    # NOTE: exit is seen on each worker's sentinel, not with join()/is_alive(): the executor's
    # own thread reaps the workers it sees die, and a waitpid() racing with it gets ECHILD, which
    # multiprocessing reads as "still running" (CI saw a worker listed alive right after the
    # error). A worker still running after ``grace`` seconds ignored SIGTERM: it is killed.
    running = _wait_exit(procs, grace)
    for proc in running:
        proc.kill()
    _wait_exit(running, grace)
    # the executor's thread joins every worker before it ends: once it has, none is left unreaped
    pool.shutdown(wait=True, cancel_futures=True)


def _wait_exit(procs: Sequence[BaseProcess], timeout: float) -> list[BaseProcess]:
    """Wait until every process has exited or ``timeout`` passed; return those still running."""
    deadline = time.monotonic() + timeout
    running = {proc.sentinel: proc for proc in procs}
    while running and (left := deadline - time.monotonic()) > 0:
        for sentinel in multiprocessing.connection.wait(list(running), timeout=left):
            running.pop(sentinel)  # type: ignore[call-overload]
    return list(running.values())


def analyze_files(
    files: Sequence[Path],
    jobs: int = 1,
    is_user: UserPredicate = looks_like_user_file,
    meanwhile: Callable[[], object] = lambda: None,
    steps: int = 0,
) -> list[RankDigest]:
    """Analyse rank trace files, ``jobs`` at a time, into digests ordered by rank.

    Ranks: ``distributedInfo.rank``, else the file's position; when several files claim the same
    rank, every file's position is its rank (as :func:`advisor.trace.load.load_traces` does).

    Args:
        files: One trace file per rank.
        jobs: Worker processes (1: in this process, one file after the other).
        is_user: Which source files are the user's (for locations).
        meanwhile: Work of the caller's that needs no digest, done in this process while the
            workers run (with ``jobs=1``, while a large first file decodes in worker processes,
            else before it), so that it does not add to the time after them.
        steps: The capture's profiled steps, when the files are a run's: each trace is cut to
            them (:func:`advisor.metrics.whole_steps.whole_steps`); 0 keeps every step.

    Returns:
        One digest per file, by rank; the first carries the lead extras.

    Raises:
        UsageError: ``jobs`` below 1.
        TraceError: A file cannot be read (its message names the file).
        concurrent.futures.process.BrokenProcessPool: A worker died (e.g. killed out of memory).
    """
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: pass 1 or more worker processes")
    tasks = [_Task(i, Path(f), i == 0, is_user, steps) for i, f in enumerate(files)]
    jobs = min(jobs, len(tasks))
    if jobs > 1:
        digests = _run_pool(tasks, jobs, meanwhile)
    else:
        # NOTE: a large trace decodes on every core, in worker processes: meanwhile runs then
        digests = [_analyse(t, meanwhile if i == 0 else None) for i, t in enumerate(tasks)]
        if not tasks:
            meanwhile()
    ranks = [d.rank for d in digests]
    if len(set(ranks)) != len(ranks):
        digests = [d.relabel(i) for i, d in enumerate(digests)]
    order = sorted(range(len(digests)), key=lambda i: digests[i].rank)
    digests = [digests[i] for i in order]
    if digests and digests[0].lead is None:
        # the first file was not the lowest rank: analyse the lead once more, with its extras
        task = replace(tasks[order[0]], lead=True)
        digests[0] = _analyse(task).relabel(digests[0].rank)
    return digests


def analyze_job(
    files: Sequence[Path],
    jobs: int = 1,
    is_user: UserPredicate = looks_like_user_file,
    meanwhile: Callable[[], object] = lambda: None,
    steps: int = 0,
) -> tuple[list[RankDigest], RankDigest | None]:
    """Analyse a job's rank files (:func:`analyze_files`), and its straggler's once more as a lead.

    Returns:
        The digests by rank, and the straggler's digest with the lead extras (tables, source
        locations, timeline) when :func:`advisor.metrics.compute.straggler_focus` names one:
        the workers computed those for the first rank only, and which rank holds the others
        up is known only once every digest is in. Pass it to ``merge_digests(focus=...)``.
    """
    digests = analyze_files(files, jobs, is_user, meanwhile, steps)
    i = straggler_focus(digests)
    if i is None:
        return digests, None
    rank = digests[i].rank
    return digests, _analyse(_Task(rank, Path(digests[i].path), True, is_user, steps)).relabel(rank)
