"""The fix loop: re-run the script with each fix applied at run time, measure, keep what helps.

:func:`run_trials` runs it in three parts, each testable alone: **plan** (:mod:`.plan`: which
fixes, which runs; no run is made), **measure** (:mod:`.measure`: the interleaved runs of the
:class:`Measurer`, and :mod:`.stages`: fixes on top of another, the combination) and **select**
(:mod:`.select`, :mod:`.memory`: which rung, which set; no run is made). Every fix's own
behaviour comes from its catalog object (:mod:`advisor.fixes.catalog`); nothing here branches on
a fix id. The design, step by step, is in ``docs/fix-loop.md``.
"""

from __future__ import annotations

from advisor.fixes.loop.measure import Measurer
from advisor.fixes.loop.options import (
    INSTALLER,
    LoopOptions,
    Runner,
    default_runner,
    installer_modules,
)
from advisor.fixes.loop.progress import TrialProgress
from advisor.fixes.loop.run import run_trials

__all__ = [
    "INSTALLER", "LoopOptions", "Measurer", "Runner", "TrialProgress", "default_runner", "installer_modules", "run_trials",
]
