"""Writes tests/data/gpu_small/worker0.pt.trace.json.gz with the project's trace generator.

Run from the repository root: ``.venv/bin/python tests/data/gpu_small/make.py``. The scenario is
:func:`tracegen.small_model` (tests/metrics/tracegen.py); a test checks the committed file is
byte-identical to what the generator makes, so edit the generator, then re-run this.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "metrics"))

import tracegen  # noqa: E402

if __name__ == "__main__":
    print(tracegen.small_model().write(HERE / "worker0.pt.trace.json.gz"))
