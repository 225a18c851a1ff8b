"""Capture stage: run a user's script in a child process and record what it did.

``RunSpec`` goes in, ``RunCapture`` (saved as ``capture.json`` in the run directory) comes out.

Modules: ``run`` (the parent: :func:`advisor.capture.run.capture`), ``child`` (the process that
runs the script), ``recorder`` (steps and phases, no torch), ``hooks`` (the torch patches, child
only), ``sampler`` (CPU/GPU utilisation from the parent), ``environment``, ``progress`` (rich
live display), ``model`` (the boundary types) and ``vocab`` (step sources, memory kinds).
"""
