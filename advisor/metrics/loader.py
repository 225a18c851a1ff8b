"""The main DataLoader's settings as metrics, and how many copies of each sample its epoch yields."""

from __future__ import annotations

from typing import Any


def loader_metrics(loader: Any) -> dict[str, float]:
    """Return the DataLoader metrics of the capture's first DataLoader (``DataLoaderInfo``).

    ``iterable_copies``: an IterableDataset whose stream is not split by worker
    (:mod:`advisor.capture.sharding` found no ``get_worker_info`` in the user's class or the
    loader's ``worker_init_fn``) runs whole in each worker, so an epoch yields each sample once
    per worker; 1 otherwise (a map-style data set, one process, a split or an unknown stream).
    """
    workers = int(loader.num_workers or 0)
    unsplit = bool(loader.iterable_dataset) and getattr(loader, "worker_split", None) is False and workers > 1
    return {
        "dataloader_num_workers": float(workers),
        "dataloader_pin_memory_flag": 1.0 if loader.pin_memory else 0.0,
        "dataloader_persistent_workers_flag": 1.0 if loader.persistent_workers else 0.0,
        "iterable_dataset_flag": 1.0 if loader.iterable_dataset else 0.0,
        "iterable_copies": float(workers) if unsplit else 1.0,
    }
