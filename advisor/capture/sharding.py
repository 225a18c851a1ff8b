"""Whether an IterableDataset splits its stream between DataLoader workers.

A DataLoader with ``num_workers=N`` over an IterableDataset runs the data set's whole
``__iter__`` in each of the N workers: unless the stream is split by worker (the data set reads
``torch.utils.data.get_worker_info()``, in its class or in the loader's ``worker_init_fn``, as
torch's documentation shows), an epoch yields every sample N times. Read from source text, never
by running anything: a class or function that names ``get_worker_info`` splits.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from advisor.capture.usercode import library_roots

MARK = "get_worker_info"
"""What a data set (or its worker_init_fn) that splits its stream by worker calls."""


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def worker_split(dataset: Any, worker_init_fn: Any = None) -> bool | None:
    """Tell whether ``dataset``'s stream is split by worker: True, False, or None (cannot tell).

    True when its class (or a base class of its own, up to torch's) or ``worker_init_fn`` names
    :data:`MARK`; False when neither does and the class is the user's; None for a class from an
    installed library (which may split in ways this does not read: a sharding filter, its own
    helper) or one whose source cannot be read.
    """
    cls = type(dataset)
    own = [c for c in cls.__mro__ if not c.__module__.startswith(("torch.", "builtins", "typing"))]
    texts = {c: _source(c) for c in own}
    if any(MARK in t for t in texts.values()) or (worker_init_fn is not None and MARK in _source(worker_init_fn)):
        return True
    try:
        file = os.path.realpath(inspect.getfile(cls))
    except (OSError, TypeError):
        return None
    if not own or not texts.get(cls, _source(cls)) or file.startswith(library_roots()):
        return None
    return False
