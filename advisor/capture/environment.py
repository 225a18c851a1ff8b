"""Facts about where a capture ran: versions, devices, threads, matmul peak, host, git commit, peak memory."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from advisor.capture.model import Environment
from advisor.capture.peak import cpu_model, cpu_peaks
from advisor.capture.vocab import MemoryKind


def environment() -> Environment:
    """Python, torch, CUDA, device and host facts of this process (git commit: the parent)."""
    torch_version, cuda, device, device_name, gpus = "", None, "cpu", platform.processor(), 0
    threads = None
    torch = sys.modules.get("torch")
    if torch is not None:
        torch_version = torch.__version__
        threads = torch.get_num_threads()
        cuda = torch.version.cuda
        try:
            if torch.cuda.is_available():
                gpus = torch.cuda.device_count()
                # NOTE: a CUDA run is one whose script started CUDA, not one on a machine with a
                # GPU: a CPU script there got GPU fix trials and a "cuda / H100" header.
                if torch.cuda.is_initialized():
                    device, device_name = "cuda", torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - a broken driver still leaves a CPU capture
            pass
    return Environment(
        python=platform.python_version(),
        torch=torch_version,
        cuda=cuda,
        device=device,
        device_name=device_name or platform.machine(),
        gpu_count=gpus,
        cpu_count=os.cpu_count() or 0,
        platform=platform.platform(),
        hostname=socket.gethostname(),
        intra_op_threads=threads,
        cpu_model=cpu_model(),
        # NOTE: only for a CPU run of a process that imported torch (the capture child): a GPU
        # run's arithmetic is on the GPU, and a process without torch has nothing to measure.
        matmul_peaks=cpu_peaks(threads) if torch is not None and device == "cpu" else (),
    )


def peak_memory() -> tuple[int | None, MemoryKind]:
    """CUDA max allocated when the script used the GPU, else this process's peak RSS."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.max_memory_allocated()), MemoryKind.CUDA
    except Exception:  # noqa: BLE001
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, MemoryKind.RSS


def git_commit(folder: Path) -> str | None:
    """Return the HEAD commit of the git repository holding ``folder`` (None: no git or repo)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None
