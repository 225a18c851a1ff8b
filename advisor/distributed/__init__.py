"""Multi-process (torchrun) support: launching a job with the capture child in every rank, and merging the per-rank captures."""
