"""Does the speedup advisor reports hold when the fix is applied by hand?

For each example with a hand-fixed twin (``examples/<name>.py`` and ``examples/fixed/<name>.py``):

1. run advisor's fix loop (``run_trials``) on the example, with the fixes its diagnosis suggests
   (``--from-diagnose``: read them from ``advisor diagnose --format json``; default: the fixes
   listed in ``SUGGESTED`` below, which mirror the rules' fix ids);
2. plainly time, interleaved, three scripts with no advisor in the process: the original, the
   original with advisor's kept fixes written into the source (its own diff, applied to a copy),
   and the hand-tuned twin (the ceiling). Each script prints its own steady samples/s
   (``done: N steps, R samples/s``); the median over the repeats is used;
3. print a table: advisor's reported speedup (with its interval) vs the plainly measured speedup
   of the same fix vs the twin's. A fix that is advice only (``host_reads``) is never run by
   advisor: its row reads ``advice: not measured`` and the plain column times its diff.

``--memory`` does the same for the memory fixes on ``examples/memory_bound.py``: advisor's
``activation_checkpointing`` and ``fit_accumulation`` trials under a ``--memory-budget`` set just
above the plain baseline's peak (so the baseline is near the limit), each trial's speed and
memory figures beside the same fix by hand (advisor's checkpointing diff applied to a copy; the
script's own ``--accum K`` with advisor's k), the twin, and the baseline, interleaved plain runs
that print their own samples/s and peak RSS.

``--script-args`` does the same for a fix made through the script's own arguments: advisor's
``script_args`` trial on ``tests/scripts/tiny_gpt.py --batch-size 8 --accum 40`` (nanoGPT-style
accumulation, no DataLoader) beside the same script run by hand, interleaved, with the command
line advisor hands over (one batch of 320, no accumulation). The load average is printed before
and after: on a shared machine the ratio is only meaningful next to it.

Usage:
    .venv/bin/python benchmarks/fix_speedups.py [--examples data_loading grad_accumulation]
        [--repeats 3] [--plain-repeats 3] [--json out.json]
    .venv/bin/python benchmarks/fix_speedups.py --script-args [--repeats 3] [--plain-repeats 3]
    .venv/bin/python benchmarks/fix_speedups.py --memory [--repeats 2] [--plain-repeats 2]
    .venv/bin/python benchmarks/fix_speedups.py --noisy 1 [--plain-repeats 4]

``--noisy BUSY`` is issue #26's row: ``tests/scripts/char_transformer.py`` diagnosed beside BUSY
busy processes, each trial beside the same change timed plainly, interleaved, under the same load
(``benchmarks/noisy_machine.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo import load  # noqa: E402 - a sibling script, not a package

from advisor.capture.model import RunSpec  # noqa: E402
from advisor.engine.model import FixRef  # noqa: E402
from advisor.fixes import catalog  # noqa: E402
from advisor.fixes.diff import transform  # noqa: E402
from advisor.fixes.loop import TrialProgress, run_trials  # noqa: E402

# The fixes the rules suggest for each example's bottleneck (ids from the shared vocabulary).
SUGGESTED: dict[str, tuple[str, ...]] = {
    "data_loading": (
        "dataloader_workers", "persistent_workers", "prefetch_factor", "cpu_threads", "pin_memory",
    ),
    "grad_accumulation": ("batch_fusion",),
    "tiny_model": ("torch_compile", "batch_fusion", "larger_batch"),
    "compute_bound": ("bf16_autocast", "torch_compile"),
    "sync_logging": ("host_reads",),  # advice: never run, its diff is timed by hand below
    "pageable_copies": ("pin_memory", "non_blocking_copy"),
    "monai_segmentation": ("dataloader_workers", "cpu_threads", "bf16_autocast"),
    "transformer_lm": ("bf16_autocast", "torch_compile", "fused_optimizer"),
    "inference_autograd": ("inference_mode",),
    "attention_lm": ("fused_attention",),
}

RATE = re.compile(r"([0-9.]+) samples/s")


def suggested_from_diagnose(script: Path, out: Path) -> list[FixRef]:
    """Fix refs from ``advisor diagnose --no-fixes --format json`` (the real rules)."""
    report = out / "diagnose.json"
    cmd = [sys.executable, "-m", "advisor", "diagnose", "--no-fixes", "--format", "json",
           "-o", str(report), "--out", str(out / "diagnose"), str(script)]
    subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO)
    data = json.loads(report.read_text())
    refs: dict[str, FixRef] = {}
    for finding in data.get("findings", []):
        for fix in finding.get("fixes", []):
            refs.setdefault(fix["id"], FixRef(fix["id"], fix.get("safety", "safe")))
    return list(refs.values())


def plain_rate(script: Path, args: list[str]) -> tuple[float | None, float]:
    """Run a script plainly; return its printed samples/s and the wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          cwd=script.parent)
    wall = time.perf_counter() - t0
    found = RATE.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        print(f"  ! {script.name} failed (exit {proc.returncode}): {proc.stderr.strip()[-200:]}")
        return None, wall
    return float(found[-1]), wall


def bench(name: str, repeats: int, plain_repeats: int, from_diagnose: bool, work: Path) -> dict:
    script = REPO / "examples" / f"{name}.py"
    twin = REPO / "examples" / "fixed" / f"{name}.py"
    out = work / name
    if from_diagnose:
        suggested = suggested_from_diagnose(script, out)
    else:
        suggested = [FixRef(f, catalog.get(f).safety) for f in SUGGESTED.get(name, ())]
    print(f"== {name}: trying {', '.join(r.id for r in suggested) or 'nothing'} ({load()})", flush=True)

    def show(e: TrialProgress) -> None:
        est = f" est {e.estimate:.2f}x" if e.estimate else ""
        rate = f" {e.samples_per_s:.0f}/s" if e.samples_per_s else ""
        print(f"   [{e.stage}] {e.fix} {e.repeat}/{e.repeats}{rate}{est} {e.message}", flush=True)

    t0 = time.perf_counter()
    spec = RunSpec(script=script, out_dir=out / "run", seed=0, quiet=True)
    outcome = run_trials(spec, suggested, unsafe=True, repeats=repeats, progress=show)
    loop_s = time.perf_counter() - t0
    for t in outcome.trials:
        sp = f"{t.speedup:.2f}x [{t.ci_low or 0:.2f}, {t.ci_high or 0:.2f}]" if t.speedup else "-"
        print(f"   {t.fix:20s} {t.verdict:9s} {sp:24s} {t.reason[:90]}")
    result = {
        "example": name, "kept": list(outcome.kept), "loop_s": round(loop_s, 1),
        "advisor_speedup": None, "advisor_ci": None, "plain_speedup": None, "twin_speedup": None,
        "trials": [{"fix": t.fix, "verdict": t.verdict, "speedup": t.speedup,
                    "ci": [t.ci_low, t.ci_high], "params": t.params, "reason": t.reason}
                   for t in outcome.trials],
    }
    # What advisor reports: the kept set; when nothing was kept, its best measured trial (so the
    # plain timing checks a "no effect" verdict too).
    measured = [t for t in outcome.trials if t.speedup is not None and t.verdict != "failed"]
    shown = outcome.combined or (max(measured, key=lambda t: t.speedup) if measured else None)
    advice = [t for t in outcome.trials if t.verdict == "advice"]
    checked = list(outcome.kept_trials) or ([shown] if shown is not None else []) or advice
    if shown is None and advice:
        # NOTE: advice is never run by advisor: it reports no figure, and the plain columns time
        # its diff applied by hand.
        result["advisor_verdict"] = "advice: not measured"
        result["checked_fix"] = "+".join(t.fix for t in advice)
    if shown is not None:
        result["advisor_speedup"] = shown.speedup
        result["advisor_ci"] = [shown.ci_low, shown.ci_high]
        result["advisor_verdict"] = shown.verdict
        result["checked_fix"] = shown.fix

    variants = {"original": script, "twin": twin}
    if checked:
        fixed_src, manual = transform(script.read_text(), checked)
        by_hand = out / f"{name}_advisor_fix.py"
        by_hand.write_text(fixed_src)
        variants["advisor_fix"] = by_hand
        result["manual"] = manual
    rates: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(plain_repeats):  # interleaved: original, advisor's fix, twin, ...
        for key, path in variants.items():
            r, _wall = plain_rate(path, [])
            if r is not None:
                rates[key].append(r)
    med = {k: (statistics.median(v) if v else None) for k, v in rates.items()}
    result["plain_samples_per_s"] = med
    result["plain_runs"] = rates
    if med["original"]:
        if med.get("advisor_fix"):
            result["plain_speedup"] = med["advisor_fix"] / med["original"]
        if med["twin"]:
            result["twin_speedup"] = med["twin"] / med["original"]
    return result


ACCUM_SCRIPT = REPO / "tests" / "scripts" / "tiny_gpt.py"
ACCUM_ARGS = ("--batch-size", "8", "--accum", "40")


def bench_script_args(repeats: int, plain_repeats: int, work: Path, plain_steps: int = 8) -> dict:
    """advisor's ``script_args`` trial vs the same new command line timed by hand, side by side."""
    before = load()
    print(f"== script_args on {ACCUM_SCRIPT.name} {' '.join(ACCUM_ARGS)} ({before})", flush=True)
    # NOTE: a step is 40 micro-batches (seconds each on a loaded 2-core machine): few steps.
    spec = RunSpec(script=ACCUM_SCRIPT, args=(*ACCUM_ARGS, "--steps", "100000"), out_dir=work / "script_args" / "run",
                   seed=0, quiet=True, warmup_steps=2, timed_steps=6, profiled_steps=0)
    t0 = time.perf_counter()
    outcome = run_trials(spec, [FixRef("script_args", "unsafe")], unsafe=True, repeats=repeats)
    loop_s = time.perf_counter() - t0
    trial = next((t for t in outcome.trials if t.fix == "script_args"), None)
    result: dict = {"example": "tiny_gpt --accum 40", "loop_s": round(loop_s, 1), "load_before": before, "load_after_trials": load()}
    if trial is None or not trial.params.get("args"):
        print(f"   script_args was not tried: {trial.reason if trial else 'no trial'}")
        return result
    new_args = [a for a in trial.params["args"] if a]
    # NOTE: the trial's args end with advisor's own --steps 100000 (the capture stops the
    # script); by hand each run does a fixed number of optimizer steps instead.
    new_args = [*new_args[: new_args.index("--steps")], *new_args[new_args.index("--steps") + 2 :]]
    print(f"   advisor: {trial.verdict} {fmt(trial.speedup)} [{trial.ci_low or 0:.2f}, {trial.ci_high or 0:.2f}], "
          f"loss diff {trial.loss_max_rel_diff}; hands over: {trial.params.get('command')}", flush=True)
    steps = ["--steps", str(plain_steps)]
    runs = {"original": [*ACCUM_ARGS, *steps], "new arguments": [*new_args, *steps]}
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(plain_repeats):  # interleaved: original, new arguments, original, ...
        for key, args in runs.items():
            r, _wall = plain_rate(ACCUM_SCRIPT, args)
            if r is not None:
                rates[key].append(r)
    med = {k: (statistics.median(v) if v else None) for k, v in rates.items()}
    result.update(
        advisor_speedup=trial.speedup, advisor_ci=[trial.ci_low, trial.ci_high], advisor_verdict=trial.verdict,
        command=trial.params.get("command"), plain_samples_per_s=med, plain_runs=rates,
        plain_speedup=(med["new arguments"] / med["original"]) if med["original"] and med["new arguments"] else None,
        load_after=load(),
    )
    print(f"   by hand ({plain_repeats} interleaved runs of {plain_steps} steps each): original "
          f"{rates['original']} samples/s, new arguments {rates['new arguments']} samples/s")
    print(f"   advisor {fmt(trial.speedup)} vs by hand {fmt(result['plain_speedup'])}  ({load()})")
    return result


PEAK = re.compile(r"peak rss ([0-9.]+) MiB")
MEMORY_SCRIPT = REPO / "examples" / "memory_bound.py"


def plain_run(script: Path, args: list[str]) -> tuple[float | None, float | None]:
    """Run a script plainly; return its printed samples/s and peak RSS in MiB."""
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=script.parent)
    rate, peak = RATE.findall(proc.stdout), PEAK.findall(proc.stdout)
    if proc.returncode != 0 or not rate or not peak:
        print(f"  ! {script.name} {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-200:]}")
        return None, None
    return float(rate[-1]), float(peak[-1])


def bench_memory(repeats: int, plain_repeats: int, work: Path, steps: int = 8) -> dict:
    """The memory fixes' reported speed and memory beside the same fixes by hand, side by side."""
    from advisor.fixes.fix import NEAR_LIMIT_FRAC

    before = load()
    steps_arg = ["--steps", str(steps)]
    _, base_peak = plain_run(MEMORY_SCRIPT, steps_arg)
    # NOTE: just above the plain peak, so advisor's baseline (the same script, plus the capture's
    # hooks) sits near the limit: about 95% of the budget, above ME001's 90% and the fix's 80%.
    budget = int((base_peak or 1000) * 2**20 / 0.95) + 16 * 2**20
    print(f"== memory fixes on {MEMORY_SCRIPT.name}: plain peak {base_peak} MiB, --memory-budget "
          f"{budget / 2**20:.0f} MiB (near the limit above {NEAR_LIMIT_FRAC:.0%}) ({before})", flush=True)
    spec = RunSpec(script=MEMORY_SCRIPT, args=("--steps", "100000"), out_dir=work / "memory" / "run", seed=0,
                   quiet=True, warmup_steps=2, timed_steps=5, profiled_steps=0, memory_budget_bytes=budget)
    t0 = time.perf_counter()
    outcome = run_trials(spec, [FixRef("activation_checkpointing", "safe"), FixRef("fit_accumulation", "unsafe")],
                         unsafe=True, repeats=repeats)
    loop_s = time.perf_counter() - t0
    result: dict = {"example": "memory_bound", "budget_mib": round(budget / 2**20), "loop_s": round(loop_s, 1),
                    "load_before": before, "load_after_trials": load(), "kept": list(outcome.kept),
                    "notes": list(outcome.notes), "trials": {}}
    by_hand: dict[str, tuple[Path, list[str]]] = {"original": (MEMORY_SCRIPT, steps_arg)}
    for t in outcome.trials:
        mem = f"{t.memory_ratio:.2f}x" if t.memory_ratio else "-"
        print(f"   advisor {t.fix:24s} {t.verdict:9s} speed {fmt(t.speedup)} [{t.ci_low or 0:.2f}, {t.ci_high or 0:.2f}] "
              f"memory {mem} ({t.peak_memory_bytes and t.peak_memory_bytes / 2**20:.0f} MiB) {t.reason[:160]}", flush=True)
        result["trials"][t.fix] = {"verdict": t.verdict, "speedup": t.speedup, "ci": [t.ci_low, t.ci_high],
                                   "memory_ratio": t.memory_ratio, "peak_mib": (t.peak_memory_bytes or 0) / 2**20,
                                   "params": t.params, "reason": t.reason}
        if t.fix == "activation_checkpointing" and t.verdict not in ("skipped", "failed"):
            src, manual = transform(MEMORY_SCRIPT.read_text(), [t])
            copy = work / "memory" / "memory_bound_checkpointed.py"
            copy.write_text(src)
            by_hand[t.fix] = (copy, steps_arg)
            result["trials"][t.fix]["diff_manual"] = manual
        if t.fix == "fit_accumulation" and t.params.get("k"):
            by_hand[t.fix] = (MEMORY_SCRIPT, [*steps_arg, "--accum", str(t.params["k"])])
    by_hand["twin"] = (REPO / "examples" / "fixed" / "memory_bound.py", steps_arg)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in by_hand}
    for _ in range(plain_repeats):  # interleaved: original, each fix by hand, twin, ...
        for key, (script, args) in by_hand.items():
            rate, peak = plain_run(script, args)
            if rate is not None and peak is not None:
                runs[key].append((rate, peak))
    med = {k: ((statistics.median(r for r, _ in v), statistics.median(m for _, m in v)) if v else None)
           for k, v in runs.items()}
    result.update(plain_runs=runs, load_after=load())
    base = med.get("original")
    print(f"\n{'fix':26s} {'advisor speed':22s} {'advisor memory':16s} {'by hand speed':14s} {'by hand memory':14s}")
    for key in by_hand:
        if key == "original":
            continue
        t = result["trials"].get(key, {})
        hand = med.get(key)
        hs = hand[0] / base[0] if hand and base else None
        hm = hand[1] / base[1] if hand and base else None
        ci = t.get("ci") or [None, None]
        adv = fmt(t.get("speedup")) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci[0] else "")
        mem = f"{t['memory_ratio']:.2f}x" if t.get("memory_ratio") else "-"
        print(f"{key:26s} {adv:22s} {mem:16s} {fmt(hs):14s} {fmt(hm):14s}")
        result.setdefault("by_hand", {})[key] = {"speedup": hs, "memory_ratio": hm, "median": hand}
    print(f"plain medians (samples/s, peak MiB): {med}")
    print(f"({load()})")
    return result


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--examples", nargs="*",
        default=["data_loading", "grad_accumulation", "sync_logging", "inference_autograd", "attention_lm"],
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--plain-repeats", type=int, default=3)
    p.add_argument("--from-diagnose", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--work", type=Path)
    p.add_argument("--script-args", action="store_true", help="the argument trial on an accumulating loop, vs by hand")
    p.add_argument("--memory", action="store_true", help="the memory fixes under --memory-budget, vs by hand")
    p.add_argument("--noisy", type=int, metavar="BUSY",
                   help="issue #26's reproducing script beside BUSY busy processes, vs plain timing (noisy_machine.py)")
    args = p.parse_args()
    if args.noisy is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from noisy_machine import main as noisy  # noqa: PLC0415 - a sibling script, not a package

        noisy(["--busy", str(args.noisy), "--plain-repeats", str(args.plain_repeats)])
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="advisor-fixbench-"))
    if args.memory:
        result = bench_memory(args.repeats, args.plain_repeats, work)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    if args.script_args:
        result = bench_script_args(args.repeats, args.plain_repeats, work)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    results = []
    for name in args.examples:
        if not (REPO / "examples" / f"{name}.py").is_file() or not (REPO / "examples" / "fixed" / f"{name}.py").is_file():
            print(f"== {name}: skipped (no example or no hand-fixed twin)")
            continue
        results.append(bench(name, args.repeats, args.plain_repeats, args.from_diagnose, work))
    print()
    print(load())
    print(f"{'example':18s} {'kept':20s} {'fix checked':20s} {'advisor (95% CI), verdict':36s} "
          f"{'plain, same fix':16s} {'twin (ceiling)':14s} loop")
    for r in results:
        ci = r["advisor_ci"]
        adv = fmt(r["advisor_speedup"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and ci[0] else "")
        adv += f" {r.get('advisor_verdict', '')}"
        print(f"{r['example']:18s} {'+'.join(r['kept']) or '(none)':20s} {r.get('checked_fix', '-'):20s} {adv:36s} "
              f"{fmt(r['plain_speedup']):16s} {fmt(r['twin_speedup']):14s} {r['loop_s']:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
