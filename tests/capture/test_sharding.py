"""Whether an IterableDataset splits its stream by worker (advisor.capture.sharding), and the metric it makes."""

from __future__ import annotations

import json

import torch
from torch.utils.data import IterableDataset, get_worker_info

from advisor.capture.model import DataLoaderInfo
from advisor.capture.sharding import worker_split
from advisor.metrics.loader import loader_metrics


class Whole(IterableDataset):
    def __iter__(self):
        yield from range(10)


class Split(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        yield from range(info.id if info else 0, 10, info.num_workers if info else 1)


class SplitBelow(Split):
    """A subclass of a class that splits: it splits."""


def by_worker_init(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    info.dataset.start = info.id


def test_a_users_stream_splits_when_its_class_or_worker_init_fn_reads_the_worker() -> None:
    assert worker_split(Whole()) is False
    assert worker_split(Split()) is True and worker_split(SplitBelow()) is True
    assert worker_split(Whole(), by_worker_init) is True
    assert worker_split(Whole(), lambda _i: None) is False


def test_a_library_class_is_not_judged() -> None:
    # a data set defined in an installed package may split another way (a sharding filter)
    from torch.utils.data.datapipes.iter import IterableWrapper

    assert worker_split(IterableWrapper(range(3))) is None
    assert worker_split(json.JSONDecoder()) is None  # the standard library, for that matter


def _loader(**kw: object) -> DataLoaderInfo:
    return DataLoaderInfo(batch_size=64, **kw)  # type: ignore[arg-type]


def test_an_epoch_holds_one_copy_per_worker_of_an_unsplit_stream_only() -> None:
    assert loader_metrics(_loader(num_workers=2, iterable_dataset=True, worker_split=False))["iterable_copies"] == 2
    assert loader_metrics(_loader(num_workers=2, iterable_dataset=True, worker_split=True))["iterable_copies"] == 1
    assert loader_metrics(_loader(num_workers=2, iterable_dataset=True, worker_split=None))["iterable_copies"] == 1
    assert loader_metrics(_loader(num_workers=1, iterable_dataset=True, worker_split=False))["iterable_copies"] == 1
    assert loader_metrics(_loader(num_workers=4))["iterable_copies"] == 1  # map-style: the sampler splits it
    flags = loader_metrics(_loader(num_workers=4, pin_memory=True))
    assert (flags["dataloader_num_workers"], flags["dataloader_pin_memory_flag"], flags["iterable_dataset_flag"]) == (4, 1, 0)
