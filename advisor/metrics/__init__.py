"""Metrics stage: turn a capture's traces (or any torch.profiler trace) into named tables and scalars."""
