"""Capture stage: run a user's script in a child process and record what it did.

``RunSpec`` goes in, ``RunCapture`` (saved as ``capture.json`` in the run directory) comes out.
"""
