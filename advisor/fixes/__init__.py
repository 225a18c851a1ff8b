"""Fixes: run-time interventions, the trial loop that measures them, and source diffs."""
