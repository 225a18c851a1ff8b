"""Capture a multi-process job: the script runs under torchrun with the capture child in every rank.

:func:`capture_distributed` is :func:`advisor.capture.run.capture` for ``nproc_per_node > 1`` or
``nnodes > 1``. It starts ``python -m advisor.distributed.torchrun_main ... -m advisor.capture.child CONFIG``
(torchrun, not a home-made launcher: the script sees the RANK / LOCAL_RANK / WORLD_SIZE /
MASTER_ADDR environment it would see under torchrun), so every rank runs the user's script
inside the capture child, which writes into ``<run>/rank<N>/``. Afterwards each rank folder gets
its own ``capture.json`` (a run directory of its own) and the job's ``capture.json`` merges them
(:mod:`advisor.distributed.merge`).

Stopping: every rank counts the same steps (one per optimizer step) and stops at the same one,
right after that step's optimizer step, when its gradient all-reduce has completed on every
rank; no rank then starts a collective its peers would not join, and each exits with
``os._exit`` (no barrier, no ``destroy_process_group``). Nothing may hang:

* a rank that fails ends the job: torchrun sends the others SIGTERM (the child saves what it
  measured) and SIGKILL after ``--shutdown-timeout``; the merged capture names the failing rank;
* a rank that has not stopped ``STOP_GRACE_S`` after another rank stopped (a script whose ranks
  run different step counts, stuck in a collective) is ended by the parent (``RankStalled``);
* ``spec.timeout_s`` ends the whole job (SIGTERM to torchrun, then SIGKILL to the group);
* advisor interrupted (Ctrl-C, SIGTERM, SIGHUP) ends the job the same way, writes the merged
  ``capture.json`` with status ``interrupted``, then lets the interrupt go on; advisor killed
  outright sends torchrun SIGTERM (parent-death signal), which ends the ranks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from advisor import rundir
from advisor._proc import ProcessTree, stop_child
from advisor._serde import dump_json, from_dict, to_jsonable
from advisor.capture.environment import environment, git_commit
from advisor.capture.model import (
    Phase,
    ProgressEvent,
    RunCapture,
    RunSpec,
    RunStatus,
)
from advisor.capture.run import (
    EventRelay,
    ProgressCallback,
    interrupted_error,
    prepare_run_dir,
    report_done,
    started,
    steps_total,
    validate_script,
    validate_spec,
)
from advisor.capture.sampler import UtilSampler
from advisor.capture.syspath import PYTHON_FLAGS
from advisor.distributed.merge import merge_ranks, read_rank
from advisor.errors import UsageError
from advisor.rundir import (
    CHILD_FILE,
    CONFIG_FILE,
    EVENTS_FILE,
    STDERR_LOG,
    STDOUT_LOG,
    rank_dir_name,
    rank_dirs,
)

LOGS_DIR = rundir.TORCHRUN_LOGS_DIR
"""torchrun's own per-rank log files (``--log-dir``), moved into each rank folder afterwards."""
SHUTDOWN_TIMEOUT_S = 10.0
"""torchrun's grace for the other ranks to save their results after one failed (then SIGKILL)."""
STOP_GRACE_S = 60.0
"""How long ranks still running may take to stop after the first rank stopped."""
TERM_GRACE_S = SHUTDOWN_TIMEOUT_S + 10.0
"""After the parent ends the job (timeout, stall), how long torchrun may take before SIGKILL."""
SAMPLE_INTERVAL_S = 0.5
_POLL_S = 0.2


def torchrun_command(spec: RunSpec, config: Path, logs_dir: Path) -> list[str]:
    """Build the torchrun command line that runs the capture child in every rank.

    Single node: ``--standalone`` (a local rendezvous on a free port). Several nodes: torchrun
    reads the rendezvous from its ``PET_*`` environment variables (``PET_RDZV_ENDPOINT``,
    ``PET_RDZV_ID``, ``PET_NODE_RANK``...), which the user sets on every node.
    """
    cmd = [
        sys.executable, *PYTHON_FLAGS, "-m", "advisor.distributed.torchrun_main",
        "--nproc-per-node", str(spec.nproc_per_node),
        "--nnodes", str(spec.nnodes),
        "--max-restarts", "0",
        "--shutdown-timeout", f"{SHUTDOWN_TIMEOUT_S:g}",
        "--log-dir", str(logs_dir),
        "--tee", "3",  # per-rank log files, and every rank's output in the job's logs too
    ]
    if spec.nnodes == 1:
        cmd.append("--standalone")
    # NOTE: --no-python: torchrun starts the given command as it is, so each rank's child gets
    # -P as the single-process child does (advisor.capture.syspath); -u is what torchrun adds
    return [*cmd, "--no-python", sys.executable, "-u", *PYTHON_FLAGS, "-m", "advisor.capture.child", str(config)]


RDZV_BACKENDS = ("c10d", "static")
"""Rendezvous backends ``--rdzv-backend`` accepts (torchrun's names)."""
DEFAULT_RDZV_ID = "advisor"


def node_dir_name(node_rank: int) -> str:
    """Name the run directory of node ``node_rank`` inside a multi-node job's output folder."""
    return f"node{int(node_rank)}"


def rendezvous_env(
    nnodes: int,
    node_rank: int | None,
    endpoint: str | None,
    backend: str = "c10d",
    rdzv_id: str = DEFAULT_RDZV_ID,
) -> dict[str, str]:
    """Turn ``--node-rank / --rdzv-endpoint / --rdzv-backend`` into torchrun's ``PET_*`` variables.

    torchrun reads every option from a ``PET_<OPTION>`` variable too, so the rendezvous travels in
    the launch's environment. With ``c10d`` node 0 hosts the rendezvous store at the endpoint
    (``is_host=1``; the others connect to it), which also lets two launches on one machine meet
    on 127.0.0.1; the rendezvous, not the node rank, then orders the global ranks. With
    ``static`` the endpoint is the master's address and the node rank orders the ranks.

    Returns:
        The variables (empty for one node without an endpoint).

    Raises:
        UsageError: A malformed endpoint, a node rank missing or out of range, or the options
            given for a single-node job.
    """
    if nnodes == 1:
        if endpoint is not None or node_rank is not None:
            raise UsageError("--node-rank and --rdzv-endpoint are for multi-node jobs: add --nnodes N (N > 1)")
        return {}
    if endpoint is None:
        if node_rank is not None:
            raise UsageError("--node-rank needs --rdzv-endpoint HOST:PORT (the rendezvous every node joins)")
        return {}
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT (e.g. node001:29500)")
    if node_rank is None:
        raise UsageError("--nnodes needs --node-rank R on every node (0 on the node that hosts the rendezvous)")
    if not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank} is out of range for --nnodes {nnodes} (0 to {nnodes - 1})")
    if backend not in RDZV_BACKENDS:
        raise UsageError(f"--rdzv-backend {backend!r}: choose one of {', '.join(RDZV_BACKENDS)}")
    env = {"PET_NODE_RANK": str(node_rank), "PET_RDZV_BACKEND": backend}
    if backend == "static":
        return {**env, "PET_MASTER_ADDR": host.strip("[]"), "PET_MASTER_PORT": port}
    return {
        **env,
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ID": rdzv_id,
        "PET_RDZV_CONF": f"is_host={int(node_rank == 0)}",
    }


def _write_node_file(run_dir: Path, spec: RunSpec, ranks: list[int]) -> None:
    """Say which node this run directory is, for ``advisor analyze`` of several nodes' folders."""
    import socket

    env = {**os.environ, **spec.env}
    node = env.get("PET_NODE_RANK") or env.get("GROUP_RANK")
    dump_json(
        {
            "node_rank": int(node) if node and node.isdigit() else None,
            "hostname": socket.gethostname(),
            "nnodes": spec.nnodes,
            "nproc_per_node": spec.nproc_per_node,
            "ranks": ranks,
        },
        run_dir / rundir.NODE_FILE,
    )


def _check_multinode(spec: RunSpec) -> None:
    env = {**os.environ, **spec.env}
    if spec.nnodes > 1 and not (env.get("PET_RDZV_ENDPOINT") or env.get("PET_MASTER_ADDR")):
        raise UsageError(
            f"--nnodes {spec.nnodes} needs a rendezvous: pass --rdzv-endpoint HOST:PORT and --node-rank R "
            "on every node (or set PET_RDZV_ENDPOINT=host:port, PET_RDZV_ID, PET_RDZV_BACKEND=c10d, as for torchrun)"
        )


def capture_distributed(spec: RunSpec, progress: ProgressCallback | None = None) -> RunCapture:
    """Run ``spec.script`` under torchrun with the capture in every rank; merge the ranks.

    Args:
        spec: What to run; ``nproc_per_node`` and ``nnodes`` give the job's shape. Fixes in
            ``spec.fixes`` are applied in every rank.
        progress: Called from a background thread with rank 0's progress events; the first
            has phase ``starting``, the last ``done`` with the job's status.

    Returns:
        The job's :class:`RunCapture` (``ranks`` lists the rank folders), also saved as
        ``<spec.out_dir>/capture.json``; each ``rank<N>/`` holds that rank's own capture.json,
        traces and logs. Failures are the status (``crashed`` with the failing rank named in
        ``error``, ``timeout``), never an exception.

    Raises:
        UsageError: The script is missing or not Python, the spec is invalid, or a multi-node
            job has no rendezvous configured.
    """
    script = validate_script(spec.script)
    validate_spec(spec)
    if spec.nproc_per_node < 1 or spec.nnodes < 1:
        raise UsageError("--nproc-per-node and --nnodes must be 1 or more")
    _check_multinode(spec)
    run_dir = prepare_run_dir(spec.out_dir)
    logs_dir = run_dir / LOGS_DIR
    if logs_dir.exists():
        shutil.rmtree(logs_dir)
    config = run_dir / CONFIG_FILE
    dump_json({"spec": {**to_jsonable(spec), "script": str(script)}, "run_dir": str(run_dir), "pid": os.getpid()}, config)
    cmd = torchrun_command(spec, config, logs_dir)

    if progress is not None:
        progress(ProgressEvent(phase=Phase.STARTING, steps_total=steps_total(spec)))
    # NOTE: rank 0 speaks for the job's progress; all ranks run the same steps.
    relay = EventRelay(run_dir / rank_dir_name(0) / EVENTS_FILE, progress)
    start = time.perf_counter()
    interrupt: KeyboardInterrupt | None = None
    timed_out, stalled = False, []
    with started(cmd, spec, run_dir) as (proc, tree):
        sampler = UtilSampler(proc.pid, SAMPLE_INTERVAL_S)
        sampler.start()
        relay.start()
        try:
            timed_out, stalled = _supervise(proc, run_dir, spec, start, tree)
        except KeyboardInterrupt as exc:  # ^C, or SIGTERM/SIGHUP (advisor._proc.interrupt_once)
            interrupt = exc
        finally:
            try:
                wall_s = time.perf_counter() - start
                cpu, gpu = sampler.stop()
                relay.stop()
                if proc.poll() is None:  # interrupted: let the ranks save, then end them
                    tree.refresh()
                    _end(proc)
            finally:
                tree.kill_all()

    env = to_jsonable(environment())
    env["git_commit"] = git_commit(script.parent)
    base: dict[str, Any] = {
        "script": str(script),
        "args": list(spec.args),
        "fixes": to_jsonable(spec.fixes),
        "environment": env,
    }
    ranks = []
    found = rank_dirs(run_dir)
    for rank, folder in found:
        # NOTE: a node's ranks are contiguous, and torchrun names log folders by local rank.
        logs = _copy_logs(logs_dir, rank - found[0][0], spec, folder)
        rank_run = read_rank(rank, folder, base, logs)
        rank_run.capture.save(folder)
        ranks.append(rank_run)
    shutil.rmtree(logs_dir, ignore_errors=True)  # copied into the rank folders
    merged = merge_ranks(ranks, timed_out=timed_out, timeout_s=spec.timeout_s, stalled=stalled, stall_s=STOP_GRACE_S)
    if interrupt is not None:
        steps = int(merged.get("steps_seen") or 0)
        merged = {**merged, "status": RunStatus.INTERRUPTED, "error": to_jsonable(interrupted_error(interrupt, steps))}
    notes = list(merged.pop("notes"))
    if gpu.note:
        notes.append(gpu.note)
    missing = spec.nproc_per_node * spec.nnodes - len(ranks)
    if missing > 0 and spec.nnodes > 1:
        notes.append(f"{missing} rank(s) ran on other nodes: their folders are on those nodes")
    data = {
        **base,
        **to_jsonable(merged),
        "run_dir": str(run_dir),
        "exit_code": proc.returncode,
        "cpu": to_jsonable(cpu),
        "gpu": to_jsonable(gpu),
        "stdout_log": STDOUT_LOG,
        "stderr_log": STDERR_LOG,
        "events_file": f"rank0/{EVENTS_FILE}" if ranks else None,
        "wall_s": round(wall_s, 4),
        "notes": list(dict.fromkeys(notes)),
    }
    if data.get("phases_s"):
        ranks_s = sum(data["phases_s"].values())
        data["phases_s"] = {"process": round(max(wall_s - ranks_s, 0.0), 4), **data["phases_s"]}
    result = from_dict(RunCapture, data)
    result.save(run_dir)
    if spec.nnodes > 1:
        _write_node_file(run_dir, spec, [r.rank for r in ranks])
    if interrupt is not None:
        raise interrupt
    report_done(progress, relay, spec, result, wall_s)
    return result


def _rank_stopped(folder: Path) -> bool:
    """Tell whether the rank saved final results after stopping or ending normally."""
    data = rundir.read_child(folder) or {}
    return bool(data.get("finished")) and data.get("status") in (RunStatus.STOPPED, RunStatus.COMPLETED, RunStatus.NO_STEPS)


def _supervise(
    proc: subprocess.Popen[bytes], run_dir: Path, spec: RunSpec, start: float, tree: ProcessTree
) -> tuple[bool, list[int]]:
    """Wait for torchrun; end the job on timeout or when ranks stall after others stopped.

    Returns:
        (timed out, ranks that stalled).
    """
    deadline = None if spec.timeout_s is None else start + spec.timeout_s
    first_stop: float | None = None
    seen: dict[int, float] = {}
    while proc.poll() is None:
        tree.refresh()
        now = time.perf_counter()
        if deadline is not None and now >= deadline:
            _end(proc)
            return True, []
        # NOTE: cheap poll: a rank's child.json is read only when its mtime changes.
        for rank, folder in rank_dirs(run_dir):
            try:
                mtime = (folder / CHILD_FILE).stat().st_mtime
            except OSError:
                continue
            if seen.get(rank) != mtime:
                seen[rank] = mtime
                if first_stop is None and _rank_stopped(folder):
                    first_stop = now
        if first_stop is not None and now - first_stop > STOP_GRACE_S:
            stalled = [r for r, folder in rank_dirs(run_dir) if not _rank_stopped(folder)]
            if stalled:
                _end(proc)
                return False, stalled
            first_stop = None  # all stopped: torchrun is just exiting
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_POLL_S)
    return False, []


def _end(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM torchrun (it forwards it to the ranks, which save), then kill the group."""
    stop_child(proc, TERM_GRACE_S)


def _copy_logs(logs_dir: Path, local: int, spec: RunSpec, folder: Path) -> tuple[str, str]:
    """Copy torchrun's log files of local rank ``local`` into ``folder``; return their names there.

    torchrun names its log folders by local rank (``<log-dir>/<run id>/attempt_0/<local>/``).
    """
    names = (STDOUT_LOG, STDERR_LOG)
    if not 0 <= local < spec.nproc_per_node:
        return names
    for name in names:
        for src in sorted(logs_dir.glob(f"*/attempt_*/{local}/{name}")):
            with contextlib.suppress(OSError):
                shutil.copyfile(src, folder / name)
    return names
