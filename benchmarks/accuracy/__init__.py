"""advisor-bench: generated training scripts with a measured truth, and how often advisor is right.

``cases`` generates the scripts (a seeded cross of model families, batch sizes, injected
bottlenecks and severities), ``truth`` times each one plainly with its injection switched on and
off and its input path apart from the step, ``score``
runs ``advisor diagnose --no-fixes`` on it and compares, ``run`` is the command line
(``make bench-accuracy``) that writes ``docs/accuracy.md``.
"""
