"""``advisor verify RUN``: time the kept fixes the way a user would, beside what the report claimed.

A diagnose claims a speedup for the kept fixes, measured on steady steps and projected over the
whole run. This package checks the claim without advisor in the way: the run's ``fix.diff``
applied to the script in memory (:mod:`advisor.verify.patch`), the original and the patched
source run as whole processes (:mod:`advisor.verify.runner`), in alternating pairs with the load
average before each (:mod:`advisor.verify.measure`), and the ratio of their wall times, with its
interval, set against the claim (:mod:`advisor.verify.model`).

Nothing here imports torch: the script's processes do.
"""
