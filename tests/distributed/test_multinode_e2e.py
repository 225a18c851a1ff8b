"""Two "nodes" on 127.0.0.1: two ``advisor diagnose --nnodes 2 --node-rank R`` launches, 2 ranks each, gloo.

They meet through torchrun's c10d rendezvous (node 0 hosts it), write ``<out>/node0`` and
``<out>/node1`` side by side (a shared file system), and ``advisor analyze <out>`` (or the two
node folders) reads the four ranks as one job, naming each rank's node. Four torch processes plus
two torchruns take 30-90 s on the shared 2-core machine, so these are ``slow``; the option
checks below them run in ``make test``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from proc_helpers import pids_with_args

from advisor.distributed.launch import rendezvous_env
from advisor.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp_gloo.py"
LIMIT_S = 240


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(out: Path, *script_args: str) -> list[subprocess.CompletedProcess[str]]:
    """Start both nodes at once; wait for both (each has advisor's own --timeout)."""
    port = _port()
    procs = []
    for node in (0, 1):
        cmd = [
            sys.executable, "-m", "advisor", "diagnose", "--nnodes", "2", "--node-rank", str(node),
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--nproc-per-node", "2", "--out", str(out),
            "--warmup", "1", "--steps", "3", "--profile-steps", "2", "--timeout", "180", "-q",
            "--format", "json", "-o", str(out.parent / f"node{node}.json"),
            str(EXAMPLE), "--steps", "40", *script_args,
        ]
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=LIMIT_S)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return done


def _analyze(*paths: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "advisor", "analyze", *map(str, paths), "--format", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=LIMIT_S,
    )
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _node_of(out: Path) -> dict[int, int]:
    nodes = {}
    for node in (0, 1):
        info = json.loads((out / f"node{node}" / "node.json").read_text())
        assert info["node_rank"] == node and info["hostname"] == socket.gethostname()
        nodes.update(dict.fromkeys(info["ranks"], node))
    return nodes


@pytest.mark.e2e
@pytest.mark.slow
def test_two_nodes_on_localhost_make_one_job(tmp_path: Path) -> None:
    out = tmp_path / "job"
    runs = _two_nodes(out, "--slow-rank", "3", "--slow-ms", "40")
    for run in runs:
        assert run.returncode in (0, 1), run.stderr  # findings may remain; the script did not fail
    nodes = _node_of(out)
    assert sorted(nodes) == [0, 1, 2, 3] and sorted(nodes.values()) == [0, 0, 1, 1]
    for job in (_analyze(out), _analyze(out / "node0", out / "node1")):
        rows = {r["rank"]: r for r in job["ranks"]}
        assert sorted(rows) == [0, 1, 2, 3]
        for rank, node in nodes.items():
            assert rows[rank]["node"].startswith(f"node {node} ")
        assert job["summary"]["straggler_rank"] == 3
        assert any(f"the straggler, rank 3, ran on node {nodes[3]}" in n for n in job["notes"])
        assert any("2 node(s) merged" in n for n in job["notes"])
    assert not pids_with_args(str(out / "node0" / "config.json"))
    assert not pids_with_args(str(out / "node1" / "config.json"))


@pytest.mark.e2e
@pytest.mark.slow
def test_a_failing_rank_on_one_node_is_named_and_every_rank_stops(tmp_path: Path) -> None:
    out = tmp_path / "job"
    runs = _two_nodes(out, "--fail-rank", "3", "--fail-step", "3")
    assert [r.returncode for r in runs] == [3, 3], [r.stderr[-400:] for r in runs]  # the script failed
    nodes = _node_of(out)
    failing_node = nodes[3]
    assert "rank 3" in runs[failing_node].stderr and "failed on purpose" not in runs[failing_node].stdout
    for node in (0, 1):
        assert not pids_with_args(str(out / f"node{node}" / "config.json"))  # every rank stopped
        for rank in (r for r, n in nodes.items() if n == node):
            # partial data kept: each rank's own capture, with the steps it saw
            cap = json.loads((out / f"node{node}" / f"rank{rank}" / "capture.json").read_text())
            assert cap["steps_seen"] >= 1
    job = _analyze(out)
    assert any(f"rank 3 on node {failing_node}" in n and "failed first" in n for n in job["notes"]), job["notes"]
    assert "rank 3" in str(job["run"].get("error")), job["run"]


def test_rendezvous_options_become_torchrun_variables() -> None:
    env = rendezvous_env(2, 1, "127.0.0.1:29400")
    assert env == {
        "PET_NODE_RANK": "1", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "127.0.0.1:29400",
        "PET_RDZV_ID": "advisor", "PET_RDZV_CONF": "is_host=0",
    }
    assert rendezvous_env(2, 0, "node001:29400")["PET_RDZV_CONF"] == "is_host=1"
    static = rendezvous_env(3, 2, "node001:29500", backend="static")
    assert static["PET_MASTER_ADDR"] == "node001" and static["PET_MASTER_PORT"] == "29500"
    assert rendezvous_env(1, None, None) == {}


@pytest.mark.parametrize(
    ("nnodes", "node_rank", "endpoint", "says"),
    [
        (2, 0, "127.0.0.1", "HOST:PORT"),
        (2, 0, "host:99999", "HOST:PORT"),
        (2, None, "host:29400", "--node-rank"),
        (2, 2, "host:29400", "out of range"),
        (1, 0, "host:29400", "--nnodes"),
        (2, 1, None, "--rdzv-endpoint"),
    ],
)
def test_bad_rendezvous_options_say_what_to_do(nnodes, node_rank, endpoint, says) -> None:
    with pytest.raises(UsageError, match=says):
        rendezvous_env(nnodes, node_rank, endpoint)


def test_diagnose_refuses_bad_rendezvous_before_running(tmp_path: Path, capsys) -> None:
    from cli_helpers import invoke

    code, _, err = invoke(capsys, "diagnose", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "nohostport",
                          "--out", str(tmp_path / "run"), str(EXAMPLE))
    assert code == 2 and "HOST:PORT" in err
    assert not (tmp_path / "run").exists()
    assert os.environ.get("PET_RDZV_ENDPOINT") is None  # nothing leaked into our environment
