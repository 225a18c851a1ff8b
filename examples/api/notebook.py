"""The Python API, notebook style: diagnose a script, read the report as DataFrames, reload it.

Run it as a script (``.venv/bin/python examples/api/notebook.py``) or cell by cell (``# %%``)
in Jupyter or VS Code. It diagnoses ``examples/data_loading.py`` (a training loop starved by
augmentation in the DataLoader) with short phases and one fix trial: about a minute on a laptop
CPU (seven short runs of the script). Arguments: an optional run directory, and ``--no-fixes``
to skip the fix trials (seconds instead of a minute). ``tests/examples/test_api_example.py``
runs it both ways.
"""

# %% Setup
import json
import sys
import tempfile
from pathlib import Path

import advisor

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "data_loading.py"
ARGS = [a for a in sys.argv[1:] if a != "--no-fixes"]
RUN = Path(ARGS[0]) if ARGS else Path(tempfile.mkdtemp(prefix="advisor-api-")) / "run"

# %% Diagnose: the keyword arguments are `advisor diagnose`'s options (--warmup, --steps, ...)
report = advisor.diagnose(
    SCRIPT,
    args=["--num-samples", "512"],  # for the script, unchanged
    out=RUN,
    warmup=2,
    steps=8,
    profile_steps=3,
    fixes="--no-fixes" not in sys.argv,
    fix=["dataloader_workers"],  # try only this fix...
    repeats=2,  # ...with two interleaved baseline/variant pairs
)
print("run:", report.run.status, "in", report.run.run_dir)
if report.primary is not None:
    print("primary bottleneck:", report.primary.category.value)

# %% Findings, most severe first
findings = advisor.frames.findings(report)
print(findings[["code", "severity", "category", "impact_frac", "fixes"]].to_string(index=False))

# %% Where the step time went (measured) and what a fix could recover (modelled, an estimate)
print(advisor.frames.breakdown(report).head(5).to_string(index=False))
print(advisor.frames.recoverable(report).to_string(index=False))

# %% The fix trials: each speedup against its own baseline, with its confidence interval
trials = advisor.frames.trials(report)
if len(trials):
    print(trials[["fix", "combined", "speedup", "ci_low", "ci_high", "verdict", "kept"]].to_string(index=False))

# %% Per-step times
steps = advisor.frames.steps(report)
print(steps[["step", "step_time_ms", "data_loading_ms"]].describe().loc[["count", "mean", "50%"]])

# %% Later, or elsewhere: load the saved run, or diagnose its traces again without running anything
again = advisor.load(RUN)
assert again.to_dict() == report.to_dict()
print("re-analyzed:", sorted(f.code for f in advisor.analyze(RUN).findings))

# %% report.json against its JSON Schema (the same schema as docs/report.schema.json)
schema = advisor.report_schema()
try:
    import jsonschema
except ImportError:
    print("schema: install jsonschema to validate report.json")
else:
    jsonschema.validate(json.loads((RUN / "report.json").read_text(encoding="utf-8")), schema)
    print("schema: report.json is valid")
