"""End to end: training, inference, marker and argument-passing scripts through capture()."""

from __future__ import annotations

import gzip
import json
import pstats
import re
from pathlib import Path

import psutil
import pytest
import torch

from advisor.capture.model import RunCapture

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

# NOTE: issue #20: stored once, gzip-compressed, in TensorBoard's layout
TRACE_NAME = re.compile(r"^traces/[^/]+_\d+\.\d+\.pt\.trace\.json\.gz$")


def _trace_events(run_dir: Path, rel: str) -> list[dict]:
    return json.loads(gzip.decompress((run_dir / rel).read_bytes()))["traceEvents"]


def _line_of(script: str, text: str) -> int:
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_training_loop(run_script):
    cap, events = run_script("train_loop.py", record_loss_steps=3, seed=0)
    run_dir = Path(cap.run_dir)
    assert cap.status == "stopped" and cap.ok and cap.exit_code == 0 and cap.error is None
    assert cap.step_source == "optimizer"
    assert (cap.warmup_steps, cap.timed_steps, cap.profiled_steps, cap.cprofiled_steps) == (1, 3, 2, 2)
    assert cap.steps_seen == 10  # and two profiled steps for the trace budget's probe, in no trace
    timed = cap.timed
    assert len(timed.step_times_ms) == 3 and all(t > 0 for t in timed.step_times_ms)
    assert timed.samples == (8, 8, 8) and timed.batches == (1, 1, 1)
    assert timed.samples_per_s == pytest.approx(24 / (sum(timed.step_times_ms) / 1000))
    assert 0 < timed.time_to_first_step_s < cap.wall_s
    assert len(cap.losses) == 3 and all(isinstance(v, float) for v in cap.losses)
    # the script printed each loss with .item(): the recorded ones are the same numbers
    printed = [float(m) for m in re.findall(r"loss (\S+)", (run_dir / "stdout.log").read_text())]
    assert printed[:3] == pytest.approx(cap.losses, abs=1e-4)
    assert "trained" not in (run_dir / "stdout.log").read_text()  # stopped, not finished

    (loader,) = cap.dataloaders
    assert (loader.batch_size, loader.num_workers, loader.pin_memory) == (8, 0, False)
    assert loader.dataset_type.endswith("TensorDataset") and not loader.iterable_dataset
    assert loader.file == str(SCRIPTS / "train_loop.py")
    assert loader.line == _line_of("train_loop.py", "loader = DataLoader(")

    env = cap.environment
    assert env.torch == torch.__version__ and env.python and env.cpu_count >= 1
    assert cap.memory_kind == "rss" and cap.peak_memory_bytes > 10_000_000
    assert cap.gpu.note and "GPU not sampled" in cap.gpu.note
    if env.device == "cpu":  # issue #32: no GPU-sampling note on a CPU run, where none is expected
        assert not any("GPU not sampled" in n for n in cap.notes), cap.notes

    # traces: TensorBoard layout, valid JSON, one ProfilerStep per profiled step
    (trace,) = cap.trace_files
    assert TRACE_NAME.match(trace)
    assert [p.name for p in (run_dir / "traces").iterdir()] == [Path(trace).name]  # no plain copy
    names = [e.get("name", "") for e in _trace_events(run_dir, trace)]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    assert sum(n == "Optimizer.step#SGD.step" for n in names) == 2
    assert any(n.startswith("enumerate(DataLoader)") for n in names)
    stats = pstats.Stats(str(run_dir / cap.pstats_file))
    # the cProfile window saw the script's work (module-level code itself is not a call)
    assert any(key[2] == "mse_loss" for key in stats.stats)  # type: ignore[attr-defined]

    assert RunCapture.load(run_dir) == cap
    phases = [e.phase for e in events]
    assert phases[0] == "starting" and phases[-1] == "done" and events[-1].message == "stopped"
    order = [p for p in dict.fromkeys(phases)]
    assert order == ["starting", "warmup", "timed", "profiled", "cprofile", "finishing", "done"]
    assert max(e.step for e in events) == 10 and events[-1].steps_total == 10


def test_inference_loop_uses_model_calls(run_script):
    # NOTE: the precedence is optimizer > backward > outermost module call > DataLoader batch
    # (issue 15): an inference loop over a DataLoader counts a step per model call.
    cap, _ = run_script("infer_loop.py")
    assert cap.status == "stopped"
    assert cap.step_source == "module"
    assert cap.timed.samples == (4, 4, 4) and cap.timed.batches == (1, 1, 1)
    assert "each call of the model" in cap.step_source_reason
    assert any("steps were counted from module" in n for n in cap.notes)
    names = [e.get("name", "") for e in _trace_events(Path(cap.run_dir), cap.trace_files[0])]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2


def test_custom_loop_with_marker(run_script):
    cap, _ = run_script("custom_loop.py", profiled_steps=0)
    assert cap.status == "stopped" and cap.step_source == "marker"
    assert cap.timed_steps == 3 and cap.profiled_steps == 0
    assert cap.timed.samples == (None, None, None) and cap.timed.samples_per_s is None
    assert cap.timed.steps_per_s > 0
    assert cap.trace_files == () and cap.pstats_file is None  # profiled_steps=0: no profiler


def test_script_gets_its_arguments_unchanged(run_script, tmp_path):
    args = ("--out", "x.json", "-q", "--timeout", "5", "--", "--not-an-option", "pos")
    cap, _ = run_script("echo_args.py", *args, cwd=tmp_path)
    seen = json.loads((Path(cap.run_dir) / "stdout.log").read_text().splitlines()[0])
    assert seen["argv"][1:] == list(args)
    assert seen["parsed"] == {"out": "x.json", "q": True, "timeout": 5.0,
                              "rest": ["--not-an-option", "pos"]}
    assert seen["path0"] == str(SCRIPTS)
    assert seen["name"] == "__main__" and seen["file"] == str(SCRIPTS / "echo_args.py")
    assert seen["cwd"] == str(tmp_path)
    # 3 marked steps of the 8 asked: completed with a note, not an error
    assert cap.status == "completed" and cap.steps_seen == 3
    assert any("fewer than the 8 asked" in n for n in cap.notes)


def test_gradient_accumulation_batches_per_step(run_script):
    cap, _ = run_script("train_loop.py", "--accum", "2")
    assert cap.status == "stopped" and cap.step_source == "optimizer"
    assert cap.timed.batches == (2, 2, 2) and cap.timed.samples == (16, 16, 16)
    # warm-up (1 step) is shorter than the 2 micro-batches: the first optimizer step arrives in
    # the timed phase; measurement restarts silently (nothing measured was dropped)
    assert not any("restarted" in n for n in cap.notes)


def test_dataloader_workers_do_not_survive(run_script):
    cap, _ = run_script("train_loop.py", "--workers", "2", profiled_steps=0)
    assert cap.status == "stopped" and cap.dataloaders[0].num_workers == 2
    config = str(Path(cap.run_dir) / "config.json")
    alive = []
    for proc in psutil.process_iter(["cmdline"]):
        if config in (proc.info["cmdline"] or []):
            alive.append(proc.pid)
    assert alive == []


def test_full_run_goes_to_the_end(run_script):
    cap, _ = run_script("train_loop.py", "--steps", "10", full=True)
    assert cap.status == "completed" and cap.steps_seen == 10 and cap.exit_code == 0
    assert cap.profiled_steps == 2 and len(cap.trace_files) == 1
    assert "trained 10 steps" in (Path(cap.run_dir) / "stdout.log").read_text()
    assert not any("fewer than" in n for n in cap.notes)


def test_the_script_runs_in_its_own_process_group_of_the_users_session(tmp_path):
    """Linux schedules each session as one group (autogroup): a child in a session of its own got
    the CPU share of one busy process beside it and ran a two-thread step 25x slower than the
    same script started plainly. Its own process group (for ^C and the sweep) is enough."""
    import os

    from advisor.capture.model import RunSpec
    from advisor.capture.run import capture

    script = tmp_path / "where.py"
    script.write_text(
        "import os, torch, advisor\n"
        f"open({str(tmp_path / 'ids.txt')!r}, 'w').write(f'{{os.getsid(0)}} {{os.getpgrp()}} {{os.getpid()}}')\n"
        "for _ in range(1000):\n    torch.ones(2).sum()\n    advisor.step()\n"
    )
    cap = capture(RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=1, timed_steps=2, profiled_steps=0))
    assert cap.status == "stopped"
    sid, pgrp, pid = map(int, (tmp_path / "ids.txt").read_text().split())
    assert sid == os.getsid(0)
    assert pgrp == pid != os.getpgrp()


@pytest.mark.slow  # NOTE: 8 s, most of it compiling; make test-all runs it
def test_a_model_compiled_in_place_counts_its_own_samples(tmp_path):
    """``model.compile()`` hides the model's calls from the forward hooks: the loss module must not count the samples."""
    from advisor.capture.model import RunSpec
    from advisor.capture.run import capture

    script = tmp_path / "inplace.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 6)\n"
        "model.compile(backend='eager')\n"
        "loss_fn = torch.nn.CrossEntropyLoss()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "for i in range(40):\n"
        "    x = torch.randn(5, 3, 4)  # 5 sequences of 3: the loss sees 15 rows\n"
        "    loss = loss_fn(model(x).reshape(15, 6), torch.zeros(15, dtype=torch.long))\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n"
    )
    cap = capture(RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2, timed_steps=4, profiled_steps=0))
    assert cap.ok and cap.step_source == "optimizer"
    assert set(cap.timed.samples) == {5}  # the model's input, as without compile (the loss's 15 rows before)


def test_recompiles_inside_the_timed_window_are_counted(tmp_path):
    """A compiled step whose input shape changes every step recompiles in the timed window too."""
    from advisor.capture.model import RunSpec
    from advisor.capture.run import capture

    script = tmp_path / "recompile.py"
    script.write_text(
        "import torch\n"
        "w = torch.nn.Parameter(torch.randn(4, 4))\n"
        "opt = torch.optim.SGD([w], lr=0.01)\n"
        "f = torch.compile(lambda x: (x @ w).sin().sum(), backend='eager', dynamic=False)\n"
        "for i in range(100):\n"
        "    f(torch.randn(2 + i, 4)).backward()\n"
        "    opt.step(); opt.zero_grad()\n"
    )
    cap = capture(RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2, timed_steps=4, profiled_steps=0))
    assert cap.status == "stopped"
    assert cap.timed.compiles >= 2
