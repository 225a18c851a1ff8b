"""Merge the per-rank captures of one torchrun job into the job's :class:`RunCapture`.

Under torchrun every rank's capture child writes into ``<run>/rank<N>/`` (``child.json``,
``traces/``, ``profile.pstats``, ``events.jsonl``). This module, pure apart from reading those
files, turns each rank's ``child.json`` into a normal per-rank ``capture.json`` (paths relative
to the rank folder, so a rank folder is a run directory of its own) and merges the ranks into the
job's top-level capture:

* status: a failing rank fails the job (``crashed``) and the error names that rank; when several
  ranks failed, the first to fail is the cause (the others usually fail *because* of it, e.g.
  gloo's "Connection closed by peer"), judged by when each rank saved its results;
* timed figures: step time is the slowest rank's, step by step (a synchronous data-parallel job
  runs at its slowest rank's pace); samples/s is the slowest rank's rate times the rank count
  (every rank waits for the slowest at each collective, so that is what the job sustains, and a
  fix trial is judged by the slowest rank, not by an average a fast rank could lift); samples and
  batches per step stay rank 0's, per rank;
* ``ranks`` lists the rank folders; the traces are listed in each rank's capture (the job's own
  ``trace_files`` is empty, so no reader loads a rank twice); ``pstats_file`` is rank 0's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor._serde import from_dict, to_jsonable
from advisor.capture.model import (
    RunCapture,
    RunStatus,
    ScriptError,
    TimedPhase,
)
from advisor.rundir import CHILD_FILE, read_json

# Error texts of a rank whose collective failed because a peer went away (gloo, NCCL, TCPStore).
PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "process group watchdog",
)


@dataclass(frozen=True)
class RankRun:
    """One rank's result, as read back from its folder.

    Attributes:
        rank: The global rank.
        name: The rank's folder, relative to the job's run directory (``rank<N>``).
        capture: The rank's own capture (paths relative to its folder).
        finished: The child saved its final results (False: it was killed or died first).
        ended_at: When the rank last saved results (file mtime, seconds since the epoch).
    """

    rank: int
    name: str
    capture: RunCapture
    finished: bool
    ended_at: float | None


def _strip(path: str | None, prefix: str) -> str | None:
    if path is None:
        return None
    return path[len(prefix):] if path.startswith(prefix) else path


def read_rank(
    rank: int,
    folder: Path,
    base: dict[str, Any],
    logs: tuple[str, str] = ("stdout.log", "stderr.log"),
) -> RankRun:
    """Read one rank's ``child.json`` and build its capture.

    Args:
        rank: The global rank.
        folder: The rank's folder (``<run>/rank<N>``).
        base: Fields the parent knows for every rank (script, args, fixes, environment).
        logs: The rank's stdout/stderr logs, relative to its folder.

    Returns:
        The rank's result. A rank whose process died before saving anything is ``crashed``
        with a ``ProcessDied`` error.
    """
    path = folder / CHILD_FILE
    child = read_json(path) or {}
    finished = bool(child.get("finished"))
    prefix = folder.name + "/"
    data: dict[str, Any] = {
        **base,
        **{k: v for k, v in child.items() if k not in ("phase", "finished", "pid")},
        "run_dir": str(folder),
        "stdout_log": logs[0],
        "stderr_log": logs[1],
        "events_file": "events.jsonl",
        "trace_files": [_strip(f, prefix) for f in child.get("trace_files") or []],
        "pstats_file": _strip(child.get("pstats_file"), prefix),
    }
    if not finished:
        steps = int(child.get("steps_seen") or 0)
        data["status"] = RunStatus.CRASHED
        data["error"] = to_jsonable(
            ScriptError(
                type="ProcessDied",
                message="its process ended before saving its results (killed, e.g. out of "
                "memory, or it died in native code)",
                step=steps + 1,
            )
        )
    if "environment" not in child and "environment" in base:
        data["environment"] = base["environment"]
    try:
        ended_at = path.stat().st_mtime
    except OSError:
        ended_at = None
    return RankRun(rank, folder.name, from_dict(RunCapture, data), finished, ended_at)


def merge_timed(timed: Sequence[TimedPhase]) -> TimedPhase:
    """Merge the ranks' timed figures into the job's (see the module docstring).

    Steps are matched by position: every rank of a data-parallel job runs the same steps.
    """
    usable = [t for t in timed if t.step_times_ms]
    if not usable:
        return timed[0] if timed else TimedPhase()
    n = min(len(t.step_times_ms) for t in usable)
    step_times = tuple(max(t.step_times_ms[i] for t in usable) for i in range(n))
    rates = [t.samples_per_s for t in usable]
    steps = [t.steps_per_s for t in usable if t.steps_per_s is not None]
    ttfs = [t.time_to_first_step_s for t in usable if t.time_to_first_step_s is not None]
    first = usable[0]
    return TimedPhase(
        step_times_ms=step_times,
        samples=tuple(first.samples[:n]),
        # NOTE: the slowest rank decides (issue #18): n x min, not the sum, which a fast rank inflates.
        samples_per_s=len(rates) * min(r for r in rates if r is not None) if all(r is not None for r in rates) else None,
        steps_per_s=min(steps) if steps else None,
        time_to_first_step_s=max(ttfs) if ttfs else None,
        batches=tuple(first.batches[:n]),
        backwards=tuple(first.backwards[:n]),
        epoch_ends=max(t.epoch_ends for t in usable),
    )


def merge_phases(phases: Sequence[dict[str, float]]) -> dict[str, float]:
    """Return the job's phases: each the longest rank's, since the ranks run them side by side.

    The parent adds ``process`` (torchrun and the interpreters starting and ending) from its
    own wall time; without the phases a job's diagnose read as 100% overhead.
    """
    out: dict[str, float] = {}
    for ph in phases:
        for name, seconds in (ph or {}).items():
            if name != "process":
                out[name] = max(out.get(name, 0.0), float(seconds))
    return out


def _failed(r: RankRun) -> bool:
    c = r.capture
    if c.status == RunStatus.CRASHED:
        return True
    return c.status == RunStatus.COMPLETED and c.exit_code not in (None, 0)


def _peer_lost(r: RankRun) -> bool:
    err = r.capture.error
    return err is not None and any(p in err.message.lower() for p in PEER_LOST)


def _priority(r: RankRun) -> int:
    if r.finished and r.capture.error is not None and not _peer_lost(r):
        return 0  # the script raised on its own
    if not r.finished:
        return 1  # died without saving (killed: out of memory, a signal, a native crash)
    if not _peer_lost(r):
        return 2  # sys.exit(n) with n != 0
    return 3  # failed only because a peer went away


def cause(ranks: Sequence[RankRun]) -> RankRun | None:
    """Find the rank whose failure ended the job (None when no rank failed).

    When one rank fails, its peers usually fail next, in a collective, with "Connection closed
    by peer": those are consequences. So a rank whose script raised on its own comes first,
    then one that died without saving, then a non-zero exit, then the peers' collective errors;
    within each, the rank that saved its results first.
    """
    failed = [r for r in ranks if _failed(r)]
    if not failed:
        return None
    return min(
        failed,
        key=lambda r: (_priority(r), r.ended_at if r.ended_at is not None else float("inf"), r.rank),
    )


def _rank_error(r: RankRun) -> ScriptError:
    err = r.capture.error
    log = f"{r.name}/{r.capture.stderr_log}"
    if err is None:  # sys.exit(n) with n != 0
        return ScriptError(type="SystemExit", message=f"rank {r.rank} exited with code {r.capture.exit_code}", log=log)
    return ScriptError(type=err.type, message=f"rank {r.rank}: {err.message}", log=log, step=err.step)


def _notes(ranks: Sequence[RankRun]) -> list[str]:
    """Keep notes every rank shares once; prefix the others with their rank."""
    sets = [set(r.capture.notes) for r in ranks]
    common = set.intersection(*sets) if sets else set()
    out: list[str] = []
    for r in ranks:
        for note in r.capture.notes:
            out.append(note if note in common else f"rank {r.rank}: {note}")
    return list(dict.fromkeys(out))


def merge_ranks(
    ranks: Sequence[RankRun],
    *,
    timed_out: bool = False,
    timeout_s: float | None = None,
    stalled: Sequence[int] = (),
    stall_s: float | None = None,
) -> dict[str, Any]:
    """Merge the ranks into the job-level RunCapture fields (the parent adds the rest).

    Args:
        ranks: Every rank found, ordered by rank.
        timed_out: The parent's ``timeout_s`` ended the job.
        timeout_s: That timeout, for the message.
        stalled: Ranks the parent ended because they had not stopped ``stall_s`` seconds after
            another rank had (a rank stuck in a collective its peers never joined).
        stall_s: That grace period, for the message.

    Returns:
        A dict of RunCapture field names (status, error, timed, trace_files, ranks, ...).
    """
    if not ranks:
        return {
            "status": RunStatus.CRASHED,
            "error": ScriptError(
                type="NoRanks", message="no rank started: torchrun failed before launching the script"
            ),
            "notes": [],
        }
    caps = [r.capture for r in ranks]
    lead = ranks[0].capture
    notes = _notes(ranks)
    error: ScriptError | None = None
    failing = cause(ranks)
    steps_seen = min(c.steps_seen for c in caps)
    if timed_out:
        status = RunStatus.TIMEOUT
        error = ScriptError(
            type="Timeout",
            message=f"the job was still running after --timeout {timeout_s:g} s and was stopped "
            f"after {steps_seen} steps",
            step=steps_seen + 1,
        )
    elif failing is not None:
        status = RunStatus.CRASHED
        error = _rank_error(failing)
        others = [r.rank for r in ranks if r is not failing and r.capture.status != RunStatus.STOPPED]
        if others:
            notes.append(
                f"rank {failing.rank} failed first; torchrun then ended the other rank(s) "
                f"{', '.join(map(str, others))}"
            )
    elif stalled:
        status = RunStatus.TIMEOUT
        who = ", ".join(map(str, stalled))
        error = ScriptError(
            type="RankStalled",
            message=f"rank(s) {who} had not stopped {stall_s:g} s after the other ranks stopped "
            f"at step {max(c.steps_seen for c in caps)} (waiting in a collective the others never "
            "joined? ranks must run the same number of steps)",
            step=steps_seen + 1,
        )
    elif all(c.status == RunStatus.NO_STEPS for c in caps):
        status = RunStatus.NO_STEPS
    elif any(c.status == RunStatus.STOPPED for c in caps):
        status = RunStatus.STOPPED
    elif all(c.status in (RunStatus.COMPLETED, RunStatus.NO_STEPS) for c in caps):
        status = RunStatus.COMPLETED
    else:  # ranks ended by torchrun (SIGTERM) with no rank failing on its own
        status = RunStatus.CRASHED
        odd = next(r for r in ranks if r.capture.status not in (RunStatus.STOPPED, RunStatus.COMPLETED))
        error = ScriptError(
            type="RankEnded",
            message=f"rank {odd.rank} ended with status {odd.capture.status}",
            log=f"{odd.name}/{odd.capture.stderr_log}",
        )
    steps_per_rank = sorted({c.steps_seen for c in caps})
    if len(steps_per_rank) > 1 and status in (RunStatus.STOPPED, RunStatus.COMPLETED):
        notes.append(f"ranks saw different step counts ({steps_per_rank}): the analysis aligns steps by position")
    if len(ranks) > 1:
        notes.append(
            f"{len(ranks)} ranks merged: step time is the slowest rank's, samples/s is the slowest "
            f"rank's rate x {len(ranks)} ranks (fix trials are judged by the slowest rank), samples and "
            f"batches per step are per rank (rank {ranks[0].rank}'s)"
        )
    peaks = [c.peak_memory_bytes for c in caps if c.peak_memory_bytes is not None]
    return {
        "status": status,
        "error": error,
        "step_source": lead.step_source,
        "step_source_reason": lead.step_source_reason,
        "user_code": lead.user_code,
        "steps_seen": steps_seen,
        "warmup_steps": min(c.warmup_steps for c in caps),
        "timed_steps": min(c.timed_steps for c in caps),
        "profiled_steps": min(c.profiled_steps for c in caps),
        "cprofiled_steps": min(c.cprofiled_steps for c in caps),
        "timed": merge_timed([c.timed for c in caps]),
        "phases_s": merge_phases([c.phases_s for c in caps]),
        "losses": lead.losses,
        "peak_memory_bytes": max(peaks) if peaks else None,
        "memory_kind": lead.memory_kind,
        "environment": lead.environment,
        "dataloaders": lead.dataloaders,
        "fix_notes": lead.fix_notes,
        # NOTE: the traces stay listed in the rank captures only (``ranks`` points at them);
        # readers (advisor.api, metrics.analyze_path) collect them from there, and listing them
        # here as well would load every rank twice.
        "trace_files": [],
        "pstats_file": next(
            (f"{r.name}/{r.capture.pstats_file}" for r in ranks if r.capture.pstats_file), None
        ),
        "ranks": [r.name for r in ranks],
        "notes": notes,
    }
