"""Multi-process (torchrun) support: merging the per-rank captures of one distributed job."""
