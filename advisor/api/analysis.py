"""The backend of ``advisor analyze``: diagnose traces a user already has, and the rule evaluation diagnose shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor.api.rules import rule_set
from advisor.engine.model import Diagnosis
from advisor.errors import InputError
from advisor.metrics.headline_scale import on_headline_scale
from advisor.metrics.model import Metrics
from advisor.report.model import Report, build_report


def analyze_report(
    path: str | Path | Sequence[str | Path],
    engine_config: Any = None,
    inline_ignores: bool = True,
    *,
    jobs: int | None = None,
) -> Report:
    """Diagnose a trace file, a directory of traces, or a saved run directory.

    Several paths (or a folder of ``node<R>/`` run directories) are the parts of one multi-node
    job, merged (:mod:`advisor.distributed.nodes`); the report names each rank's node.
    ``inline_ignores=False`` (``--no-inline-ignores``) keeps findings that comments suppress.
    ``jobs`` rank files are analysed at a time, in worker processes (None: one per core; see
    :mod:`advisor.distributed.parallel`). ``engine_config`` may be a function returning it: it is
    then called while the workers run (a bad selection still stops them, and is raised).

    Raises:
        InputError: the path is missing or holds no readable trace (TraceError).
    """
    from advisor.distributed.nodes import locate_job, with_nodes
    from advisor.distributed.parallel import analyze_job, default_jobs
    from advisor.metrics.compute import merge_digests
    from advisor.metrics.userframes import user_predicate

    paths = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    if not paths:
        raise InputError("no path given; pass a .json/.json.gz trace, a folder of traces or a run directory")
    job = locate_job(paths)
    capture = job.capture
    resolved: dict[str, Any] = {}

    def meanwhile() -> None:
        resolved["config"] = engine_config() if callable(engine_config) else engine_config
        _load_evaluation()

    digests, focus = analyze_job(job.files, default_jobs() if jobs is None else jobs, user_predicate(capture),
                                 meanwhile=meanwhile, steps=capture.profiled_steps if capture is not None else 0)
    source = " ".join(map(str, paths))
    metrics = with_nodes(merge_digests(digests, capture=capture, pstats_path=job.pstats, source=source, focus=focus), job)
    # NOTE: profiler stacks name bare files (``train.py``): look beside the trace and the script too.
    dirs = (
        Path.cwd(),
        *(p if p.is_dir() else p.parent for p in paths),
        *([Path(capture.script).parent] if capture and capture.script else []),
    )
    timed = capture.timed.step_times_ms if capture is not None else ()
    diagnosis = evaluate(on_headline_scale(metrics, timed), resolved["config"], dirs, inline_ignores)
    # the timeline is the straggler's when the tables are (merge_digests' focus)
    shown = focus or (digests[0] if digests else None)
    extras = shown.lead if shown is not None else None
    return build_report(metrics, diagnosis, capture=capture, timeline=extras.timeline if extras else ())


def evaluate(
    metrics: Metrics, engine_config: Any = None, search_dirs: Sequence[Path] = (), inline_ignores: bool = True
) -> Diagnosis:
    """Run the rule engine over metrics, then drop findings ``# advisor: ignore`` comments cover.

    ``search_dirs`` are where relative source paths from the trace are looked up. A finding that
    held by a narrow margin gets a note (:mod:`advisor.engine.borderline`).
    """
    from advisor.engine.borderline import borderline_notes
    from advisor.engine.evaluate import diagnose
    from advisor.engine.suppress import apply_inline_ignores

    rules = rule_set()
    diagnosis = diagnose(metrics, engine_config, rules=rules)
    if inline_ignores:
        diagnosis = apply_inline_ignores(diagnosis, search_dirs)
    return replace(diagnosis, notes=(*diagnosis.notes, *borderline_notes(diagnosis.findings, rules)))


def _load_evaluation() -> None:
    """Import what the rule engine and the renderers need (done while rank workers run)."""
    # NOTE: about a tenth of a second of imports that would otherwise run after the workers,
    # in series; while they run, this process only waits.
    import advisor.engine.evaluate
    import advisor.engine.suppress
    import advisor.report.render  # noqa: F401

    rule_set()
