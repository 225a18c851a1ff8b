"""The warm start (issue #16): a fork server whose children behave exactly like cold capture children.

Real processes throughout (one server per test module where the test does not kill it): the
script's imports read without running it, a forked run against a cold one (status, exit code,
losses, threads, logs), the server's death mid-run and between runs (cold fallback), and advisor
killed outright (no server or child left).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from advisor.capture.model import RunCapture, RunSpec, RunStatus, StartKind
from advisor.capture.run import capture
from advisor.capture.warm import (
    WarmServer,
    WarmStartLost,
    launch_early,
    spec_refusal,
    warm_runner,
)
from advisor.capture.warm_preload import installed_module, script_imports

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux-only")

REPO = Path(__file__).resolve().parents[2]
TRAIN_LOOP = REPO / "tests" / "scripts" / "train_loop.py"
SLOW_LOADER = REPO / "tests" / "fixes" / "scripts" / "slow_loader.py"
SMALL = {"warmup_steps": 1, "timed_steps": 3, "profiled_steps": 0, "cprofile_steps": 0}


def _spec(out: Path, script: Path = TRAIN_LOOP, *args: str, **kw: object) -> RunSpec:
    return RunSpec(script=script, args=tuple(args), out_dir=out, seed=0, record_loss_steps=3, quiet=True,
                   cwd=out.parent, **{**SMALL, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("warm")
    with WarmServer(_spec(root / "run"), log=root / "server.log") as s:
        assert s.start(), s.refused
        yield s


def test_the_scripts_top_level_imports_are_read_without_running_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        from __future__ import annotations
        import os, numpy as np
        import torch.nn
        from torch.utils.data import DataLoader
        from . import sibling
        raise SystemExit("never run")
        def f():
            import json
        try:
            import yaml
        except ImportError:
            pass
    """))
    assert script_imports(script) == ["os", "numpy", "torch.nn", "torch.utils.data"]
    (tmp_path / "broken.py").write_text("import (\n")
    assert script_imports(tmp_path / "broken.py") == []
    assert script_imports(tmp_path / "missing.py") == []


def test_only_installed_modules_count_and_a_local_file_shadows_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.capture.usercode import library_roots

    if "tabnanny" in sys.modules:
        pytest.skip("tabnanny is already imported here; the shadowing check needs a module not yet loaded")
    roots = library_roots()
    assert installed_module("tabnanny", roots)
    (tmp_path / "mylocal.py").write_text("x = 1\n")
    (tmp_path / "tabnanny.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not installed_module("mylocal", roots)
    assert not installed_module("tabnanny", roots)  # the script's folder would win in its child
    assert not installed_module("no_such_module_anywhere", roots)


def test_a_local_file_named_like_a_module_the_server_imported_means_cold(tmp_path: Path) -> None:
    from advisor.capture.warm_preload import shadowed

    (tmp_path / "train.py").write_text("import json\n")
    assert shadowed(str(tmp_path)) is None
    (tmp_path / "json.py").write_text("x = 1\n")  # json is imported here, as in the server
    assert "json.py" in (shadowed(str(tmp_path)) or "")


def test_the_server_preloads_installed_imports_and_refuses_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.capture.warm_preload import preload

    if "wave" in sys.modules:
        pytest.skip("wave is already imported here; the check needs a stdlib module not yet loaded")
    (tmp_path / "mylocal.py").write_text("raise RuntimeError('the script's own module must not be imported')\n")
    (tmp_path / "train.py").write_text("import mylocal\nimport wave\nfrom json import dumps\n")
    (tmp_path / "spawns.py").write_text(
        "import threading\nstop = threading.Event()\nthread = threading.Thread(target=stop.wait, daemon=True)\n"
        "thread.start()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ready = preload(["json"], str(tmp_path / "train.py"), None)
    assert ready["ready"] and "wave" in ready["imported"] and "mylocal" not in ready["imported"]
    try:
        refused = preload(["json", "spawns"], None, None)
    finally:
        spawns = sys.modules.pop("spawns", None)
        if spawns is not None:  # NOTE: a thread left running would stop later tests in this process from forking
            spawns.stop.set()
            spawns.thread.join(5)
    assert not refused["ready"] and "importing spawns started a thread" in refused["refusal"]


def test_the_server_runs_a_modules_warmer_once_after_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.capture import warm_preload

    calls: list[str] = []
    monkeypatch.setattr(warm_preload, "WARMERS", {"json": lambda: calls.append("json")})
    assert warm_preload.preload(["json", "csv"], None, None)["ready"]
    assert calls == ["json"]


def test_a_compiler_probe_that_fails_is_left_to_the_children(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import cpu_vec_isa

    from advisor.capture.warm_preload import probe_vector_isa

    def broken() -> list[object]:
        raise RuntimeError("no compiler")

    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", broken)
    probe_vector_isa()  # a warm-up only: the children probe as a cold run would


def test_compiles_modules_are_preloaded_only_where_the_script_was_seen_to_compile(tmp_path: Path) -> None:
    from advisor.api.fixloop import FixOptions, _lazy_skip

    cap = RunCapture(run_dir=str(tmp_path), status=RunStatus.COMPLETED, lazy_imports=("torch._dynamo",))
    compiles = replace(cap, lazy_imports=("torch._dynamo", "torch._inductor.compile_fx"))
    by_hand = replace(cap, lazy_imports=())
    compile_fx = ("torch._inductor.compile_fx",)
    assert _lazy_skip(FixOptions(), cap) == compile_fx
    assert _lazy_skip(FixOptions(), compiles) == ()
    assert _lazy_skip(FixOptions(), by_hand) == ("torch._dynamo", *compile_fx)
    # before the capture, or with compile as a fix: torch._dynamo on a guess, compile's never
    # (the torch_compile fix's runs pay their compiler's start as the user's run would)
    assert _lazy_skip(FixOptions(), None) == compile_fx
    assert _lazy_skip(FixOptions(unsafe=True), by_hand) == compile_fx
    assert _lazy_skip(FixOptions(only=("torch_compile",)), by_hand) == compile_fx
    assert WarmServer(_spec(tmp_path / "run")).skip == compile_fx  # a sweep's server: no capture to go by


def test_a_gpu_visible_to_a_cuda_build_means_cold_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from advisor.capture import warm_preload as warm

    devices: list[str] = ["/dev/nvidia0"]
    monkeypatch.setattr(warm.glob, "glob", lambda pattern: list(devices))
    monkeypatch.setattr(warm.os.path, "exists", lambda path: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda="12.4", hip=None)))
    assert "GPU is visible" in (warm.gpu_visible() or "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert warm.gpu_visible() is None  # the user hid every device
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    devices.clear()
    assert warm.gpu_visible() is None  # a CUDA build on a machine without a GPU
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda=None, hip=None)))
    devices.append("/dev/nvidia0")
    assert warm.gpu_visible() is None  # a CPU build cannot use it


def test_runs_that_must_start_cold_say_why() -> None:
    spec = _spec(Path("/tmp/x"))
    assert spec_refusal(spec) is None
    assert "profiled" in (spec_refusal(replace(spec, profiled_steps=2)) or "")
    assert "torchrun" in (spec_refusal(replace(spec, nproc_per_node=2)) or "")
    # a profiled run whose start-up nobody reads (the kept fixes' run) may be forked
    assert spec_refusal(replace(spec, profiled_steps=2, startup_reported=False)) is None
    assert "torchrun" in (spec_refusal(replace(spec, nproc_per_node=2, startup_reported=False)) or "")


@pytest.mark.e2e
def test_a_server_launched_early_serves_the_runner_and_ends_with_it(tmp_path: Path) -> None:
    base = _spec(tmp_path / "run")
    server = launch_early(base, capture, log=tmp_path / "server.log")
    assert server is not None and server.proc is not None and not server.is_ready
    time.sleep(0.5)  # the caller's own work, while the server imports
    with warm_runner(base, capture, launched=server) as (run, stats):
        first = run(replace(base, out_dir=tmp_path / "first"))
        profiled = run(replace(base, out_dir=tmp_path / "kept", profiled_steps=2, startup_reported=False))
    assert first.start == StartKind.WARM and first.ok
    assert profiled.start == StartKind.WARM and profiled.ok and profiled.trace_files
    assert profiled.time_to_first_step_s is None and profiled.timed.time_to_first_step_s is not None
    assert stats.warm == 2 and stats.server_pid == server.proc.pid
    assert 0.0 <= stats.waited_s < stats.start_s  # the half second before the first run was not waited for
    assert server.proc.poll() is not None  # ended with the block


def _state(pid: int) -> str:
    return psutil.Process(pid).status()


@pytest.mark.e2e
def test_a_paused_server_takes_no_cpu_until_resumed_and_its_start_leaves_the_pause_out(tmp_path: Path) -> None:
    server = launch_early(_spec(tmp_path / "run"), capture, log=tmp_path / "logs" / "server.log")
    assert server is not None and server.proc is not None
    assert not (tmp_path / "logs").exists()  # nothing in a folder the capture has yet to prepare
    server.pause()  # still importing torch
    deadline = time.monotonic() + 10
    while _state(server.proc.pid) != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.01)  # the signal is delivered when the kernel next schedules it
    assert _state(server.proc.pid) == psutil.STATUS_STOPPED
    cpu = psutil.Process(server.proc.pid).cpu_times()
    time.sleep(1.0)
    assert psutil.Process(server.proc.pid).cpu_times() == cpu
    server.resume()
    assert server.ready(), server.refused
    assert server.paused_s >= 1.0 and 0.0 < server.start_s
    server.pause()  # ready: nothing to stop
    assert _state(server.proc.pid) != psutil.STATUS_STOPPED
    server.close()
    assert server.proc.returncode == 0  # it ended by itself when its socket closed, not killed


@pytest.mark.e2e
def test_a_server_closed_while_paused_ends_and_keeps_its_log(tmp_path: Path) -> None:
    spec = replace(_spec(tmp_path / "run"), env={"PYTHONVERBOSE": "1"})  # the server prints every import
    server = launch_early(spec, capture, log=tmp_path / "logs" / "server.log")
    assert server is not None and server.proc is not None
    assert server.ready(), server.refused
    server.close()
    assert "import 'torch'" in (tmp_path / "logs" / "server.log").read_text()
    other = launch_early(_spec(tmp_path / "run2"), capture, log=tmp_path / "logs2" / "server.log")
    assert other is not None and other.proc is not None
    other.pause()
    other.close()  # stopped mid-import: it is killed, not waited for
    assert other.proc.returncode == -signal.SIGKILL


BY_HAND = """
import torch
w = torch.zeros(4, requires_grad=True)
for step in range(6):
    loss = ((torch.ones(4) - w) ** 2).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad  # no torch.optim: torch._dynamo is never imported
        w.grad = None
"""


@pytest.mark.e2e
@pytest.mark.slow  # two cold captures and a server: 9.7 s, the longest capture test in make test
def test_the_server_leaves_out_what_the_script_never_imported(tmp_path: Path) -> None:
    from advisor.api.fixloop import FixOptions, launch_server

    script = tmp_path / "by_hand.py"
    script.write_text(BY_HAND)
    base = _spec(tmp_path / "run", script)
    # NOTE: two warm-up steps, as a diagnose has five: the trace probe starts with the last one,
    # after the first step (with one, it starts before it and its profiler imports torch._dynamo)
    cap = capture(replace(base, out_dir=tmp_path / "capture", profiled_steps=1, warmup_steps=2))
    assert cap.ok and cap.lazy_imports == ()  # seen before the profiler, which imports torch._dynamo
    assert capture(_spec(tmp_path / "optim")).lazy_imports == ("torch._dynamo",)  # TRAIN_LOOP's optimizer
    server = launch_server(base, FixOptions(), cap)
    assert server is not None and server.skip == ("torch._dynamo", "torch._inductor.compile_fx")
    with warm_runner(base, capture, launched=server) as (run, stats):
        first = run(replace(base, out_dir=tmp_path / "first"))
    assert first.start == StartKind.WARM and first.ok
    assert "torch" in stats.imported and "torch._dynamo" not in stats.imported
    assert "torch._inductor.compile_fx" not in stats.imported
    # compile may run (unsafe fixes, or fixes named with --fix), or what the script imports is
    # unknown: preload the lazy modules, but compile's only where the script was seen to compile
    for options, seen in ((FixOptions(unsafe=True), cap), (FixOptions(only=("torch_compile",)), cap),
                          (FixOptions(), replace(cap, lazy_imports=None))):
        other = launch_server(base, options, seen)
        assert other is not None and other.skip == ("torch._inductor.compile_fx",)
        other.close()


COMPILES = """
import sys
import torch
net = torch.nn.Linear(4, 1)
compiled = torch.compile(net)  # imports inductor's compiler; never called: nothing compiles here
opt = torch.optim.SGD(net.parameters(), lr=0.1)
isa = sys.modules["torch._inductor.cpu_vec_isa"].valid_vec_isa_list
print("vector isa probed before the script:", isa.cache_info().currsize, flush=True)
for step in range(6):
    loss = net(torch.ones(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.e2e
@pytest.mark.slow  # a cold capture and a server that import inductor and probe the compiler: about 15 s
def test_a_script_seen_to_compile_gets_a_server_that_set_up_the_compiler_once(tmp_path: Path) -> None:
    from advisor.api.fixloop import FixOptions, fit_server, launch_server

    script = tmp_path / "compiles.py"
    script.write_text(COMPILES)
    base = _spec(tmp_path / "run", script)
    early = launch_server(base, FixOptions())  # as the diagnose does, before its capture
    assert early is not None and early.skip == ("torch._inductor.compile_fx",)
    cap = capture(replace(base, out_dir=tmp_path / "capture"))
    assert cap.ok and cap.lazy_imports == ("torch._dynamo", "torch._inductor.compile_fx")
    assert "probed before the script: 0" in (tmp_path / "capture" / "stdout.log").read_text()  # cold: the user's cost
    server = fit_server(early, base, FixOptions(), cap)
    assert server is early and server.skip == ()  # extended, not started again
    with warm_runner(base, capture, launched=server) as (run, stats):
        warm = run(replace(base, out_dir=tmp_path / "warm"))
    assert warm.start == StartKind.WARM and warm.ok
    assert stats.imported[-1] == "torch._inductor.compile_fx" and stats.start_s > 0
    assert "probed before the script: 1" in (tmp_path / "warm" / "stdout.log").read_text()


@pytest.mark.e2e
def test_a_server_launched_early_and_never_used_is_ended_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.capture import warm

    assert launch_early(_spec(tmp_path / "run"), capture, enabled=False) is None
    assert launch_early(_spec(tmp_path / "run", nproc_per_node=2), capture) is None
    assert launch_early(_spec(tmp_path / "run"), lambda spec, progress=None: None) is None  # cannot fork
    server = launch_early(_spec(tmp_path / "run"), capture)
    assert server is not None and server.proc is not None
    calls: list[str] = []
    real_kill, real_wait = warm.kill_group, server.proc.wait
    monkeypatch.setattr(warm, "kill_group", lambda pid, *a: (calls.append("kill"), real_kill(pid, *a))[1])
    monkeypatch.setattr(server.proc, "wait", lambda timeout=None: (calls.append("wait"), real_wait(timeout))[1])
    server.close()  # while it imports torch it reads no socket: waiting for it to notice would be 2 s lost
    assert calls[:2] == ["kill", "wait"]
    assert server.proc.poll() is not None


@pytest.mark.e2e
def test_a_warm_run_is_the_cold_run(server: WarmServer, tmp_path: Path) -> None:
    warm = capture(_spec(tmp_path / "warm"), warm=server)
    cold = capture(_spec(tmp_path / "cold"))
    assert (warm.start, cold.start) == (StartKind.WARM, StartKind.COLD)
    for cap in (warm, cold):
        assert (cap.status, cap.exit_code) == (RunStatus.STOPPED, 0), cap.error
    assert warm.losses == cold.losses and len(warm.losses) == 3  # the same seeded training
    assert warm.steps_seen == cold.steps_seen
    # torch's intra-op pool was never started in the server: the child gets the cold default
    assert warm.environment.intra_op_threads == cold.environment.intra_op_threads
    assert "step 1 loss" in (tmp_path / "warm" / "stdout.log").read_text()
    saved = json.loads((tmp_path / "warm" / "capture.json").read_text())
    assert saved["start"] == "warm" and saved["phases_s"]["timed"] > 0
    # torch was imported before the fork: the warm child's imports are a sliver of the cold one's
    assert warm.phases_s["imports"] < cold.phases_s["imports"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "status", "code", "error"),
    [(("--exit-at", "2", "--exit-code", "3"), RunStatus.COMPLETED, 3, None),
     (("--crash-at", "2"), RunStatus.CRASHED, 1, "ValueError")],
    ids=["sys-exit-3", "crash"],
)
def test_a_warm_run_ends_with_the_scripts_own_exit(server: WarmServer, tmp_path: Path, args, status, code, error) -> None:  # type: ignore[no-untyped-def]
    # NOTE: the same statuses and codes as a cold child's (tests/capture/test_capture_failures.py)
    warm = capture(_spec(tmp_path / "warm", TRAIN_LOOP, *args), warm=server)
    assert warm.start == StartKind.WARM
    assert (warm.status, warm.exit_code) == (status, code), warm.error
    assert (warm.error.type if warm.error else None) == error
    if error:
        assert "ValueError: boom in step 2" in (tmp_path / "warm" / "stderr.log").read_text()


@pytest.mark.e2e
def test_a_warm_process_answers_like_popen(server: WarmServer, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = _spec(run_dir, TRAIN_LOOP, "--hang-at", "1")
    config = run_dir / "config.json"
    from advisor._serde import dump_json, to_jsonable

    dump_json({"spec": {**to_jsonable(spec), "script": str(TRAIN_LOOP)}, "run_dir": str(run_dir)}, config)
    with open(run_dir / "out.log", "wb") as out:
        proc = server.popen(["python", str(config)], spec, out, out)
    try:
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2)
        assert os.getpgid(proc.pid) == proc.pid  # its own process group...
        assert os.getsid(proc.pid) == os.getsid(0)  # ...in our session (Linux schedules sessions apart)
        assert psutil.Process(proc.pid).ppid() == server.proc.pid  # type: ignore[union-attr]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)


HOLD = """
import os, sys, time
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10_000):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    while step == 0 and os.path.exists(sys.argv[1]):
        time.sleep(0.02)  # held after its first step while the marker exists
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_the_servers_death_mid_run_reruns_it_cold(tmp_path: Path) -> None:
    script, marker = tmp_path / "hold.py", tmp_path / "hold"
    script.write_text(HOLD)
    marker.touch()
    base = _spec(tmp_path / "run", script, str(marker))
    killed: list[psutil.Process] = []

    def kill_server(event) -> None:  # type: ignore[no-untyped-def]
        if event.step >= 1 and not killed:  # the warm child is held after its first step
            child = psutil.Process(json.loads((tmp_path / "second" / "child.json").read_text())["pid"])
            server = child.parent()
            killed.extend([server, child])
            server.kill()
            marker.unlink()  # the cold re-run goes straight through

    with warm_runner(base, capture) as (run, stats):
        marker_kept = marker.read_text()
        marker.unlink()
        first = run(replace(base, out_dir=tmp_path / "first"))
        marker.write_text(marker_kept)
        second = run(replace(base, out_dir=tmp_path / "second"), progress=kill_server)
        # later runs start cold without asking the dead server (tested with a real run in
        # test_a_dead_server_refuses_new_runs)
    assert first.start == StartKind.WARM and first.ok
    assert killed, "the server was never killed"
    assert second.start == StartKind.COLD and second.ok  # run again, cold, in full
    assert (stats.warm, stats.cold) == (1, 1)
    assert any("died" in reason for reason in stats.cold_reasons), stats.cold_reasons
    _, alive = psutil.wait_procs(killed, timeout=30)
    assert alive == [], "the server or its child outlived the server's death"
    assert "warm-started" in stats.notes()[0] and "cold because" in stats.notes()[0]


@pytest.mark.e2e
@pytest.mark.slow  # 11 s: make test-all (make test stays under 5 minutes)
def test_after_the_servers_death_runs_start_cold(tmp_path: Path) -> None:
    base = _spec(tmp_path / "run")
    with warm_runner(base, capture) as (run, stats):
        first = run(replace(base, out_dir=tmp_path / "first"))
        assert first.start == StartKind.WARM and first.ok
        server = psutil.Process(stats.server_pid)
        server.kill()
        server.wait(30)
        second = run(replace(base, out_dir=tmp_path / "second"))
        third = run(replace(base, out_dir=tmp_path / "third"))
    assert (second.start, third.start) == (StartKind.COLD, StartKind.COLD)
    assert second.ok and third.ok and second.losses == first.losses
    assert (stats.warm, stats.cold) == (1, 2)
    assert any("gone" in reason or "died" in reason for reason in stats.cold_reasons), stats.cold_reasons


@pytest.mark.e2e
def test_a_dead_server_refuses_new_runs(tmp_path: Path) -> None:
    with WarmServer(_spec(tmp_path / "run")) as s:
        assert s.start(), s.refused
        s.proc.kill()  # type: ignore[union-attr]
        s.proc.wait()  # type: ignore[union-attr]
        with pytest.raises(WarmStartLost):
            capture(_spec(tmp_path / "after"), warm=s)
        assert not s.alive and s.refusal(_spec(tmp_path / "x")) is not None


PARENT = """
import json, sys
from pathlib import Path
from advisor.capture.model import RunSpec
from advisor.capture.run import capture
from advisor.capture.warm import warm_runner
out = Path(sys.argv[1])
spec = RunSpec(script=Path(sys.argv[2]), args=("--hang-at", "1"), out_dir=out / "run", warmup_steps=1,
               timed_steps=3, profiled_steps=0, cprofile_steps=0, quiet=True, cwd=out)
def told(event):
    if event.step >= 1:
        child = json.loads((out / "run" / "child.json").read_text())
        print(json.dumps({"child": child["pid"]}), flush=True)
with warm_runner(spec, capture) as (run, _):
    run(spec, progress=told)
"""


@pytest.mark.e2e
def test_advisor_killed_outright_leaves_neither_server_nor_child(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), str(TRAIN_LOOP)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        line = parent.stdout.readline()  # type: ignore[union-attr]
        assert line, parent.communicate()[1]
        child = psutil.Process(json.loads(line)["child"])
        server = child.parent()
        assert server is not None and "advisor.capture.warm" in server.cmdline()
        assert server.ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait()
    gone, alive = psutil.wait_procs([server, child], timeout=60)
    for proc in alive:
        proc.kill()
    assert alive == [], f"left behind: {[p.pid for p in alive]}"


def test_cold_start_when_asked_or_when_the_capture_cannot_fork(tmp_path: Path) -> None:
    calls: list[RunSpec] = []

    def fake(spec: RunSpec, progress=None):  # type: ignore[no-untyped-def]
        calls.append(spec)
        return RunCapture(status=RunStatus.STOPPED)

    for enabled in (False, True):
        with warm_runner(_spec(tmp_path / "run"), fake, enabled=enabled) as (run, stats):
            run(_spec(tmp_path / "a"))
        assert (stats.warm, stats.cold) == (0, 1)
        reason = next(iter(stats.cold_reasons))
        assert ("--cold-start" in reason) if not enabled else ("cannot fork" in reason)
    assert len(calls) == 2

