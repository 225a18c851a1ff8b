"""Optional ``[[...]]`` message segments: dropped when a value inside is unknown, validated at load."""

from __future__ import annotations

import math

import pytest
import yaml

from advisor.capture.model import DataLoaderInfo, Environment, RunCapture, UtilSummary
from advisor.engine.condition import ConditionError
from advisor.engine.evaluate import diagnose
from advisor.engine.message import parse_template
from advisor.engine.rules import load_rules
from advisor.errors import RuleError
from advisor.metrics.registry import METRICS, is_declared

from .test_loader import GOOD, write_rule

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def parse(text: str):
    return parse_template(text, is_declared, METRICS)


def test_segment_kept_when_every_value_is_known():
    t = parse("Loading.[[ num_workers={dataloader_num_workers:int}, pin={dataloader_pin_memory_flag:bool}.]] End.")
    text = t.render({"dataloader_num_workers": 4, "dataloader_pin_memory_flag": 1})
    assert text == "Loading. num_workers=4, pin=True. End."
    assert t.names == ("dataloader_num_workers", "dataloader_pin_memory_flag")


@pytest.mark.parametrize("missing", [None, math.nan, "absent"])
def test_segment_dropped_whole_when_one_value_is_unknown(missing):
    t = parse("Loading.[[ num_workers={dataloader_num_workers:int}, pin={dataloader_pin_memory_flag:bool}.]] End.")
    values = {"dataloader_num_workers": 4}
    if missing != "absent":
        values["dataloader_pin_memory_flag"] = missing
    assert t.render(values) == "Loading. End."


def test_unknown_outside_a_segment_is_still_na_and_segments_are_independent():
    t = parse("{data_loading_frac:.0%} loading[[, {cpu_count:int} cores]][[, {rank_count:int} ranks]].")
    assert t.render({"cpu_count": 8}) == "n/a loading, 8 cores."


def test_locations_in_a_segment_need_a_location():
    t = parse("Slow copies[[ at {locations}]].")
    assert t.render({}, locations="") == "Slow copies."
    assert t.render({}, locations="a.py:3") == "Slow copies at a.py:3."


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("a [[b {cpu_count}", "never closed"),
        ("a {cpu_count}]] b", "closes no optional segment"),
        ("[[a [[{cpu_count}]] b]]", "cannot be nested"),
        ("a[[ no field ]] {cpu_count}", "has no {field}"),
        ("a[[ {cpu_cont} ]]", "unknown metric 'cpu_cont' (did you mean 'cpu_count'"),
        ("a[[ {cpu_count:.0Q} ]]", "bad format spec"),
        ("a[[ {cpu_count.real} ]]", "plain metric names only"),
        ("a[[ {cpu_count ]]}", "bad template"),
    ],
)
def test_malformed_segments_are_rejected(template, fragment):
    with pytest.raises(ConditionError) as info:
        parse(template)
    assert fragment in str(info.value)


def test_malformed_segment_fails_at_rule_load_with_path_and_key(tmp_path):
    write_rule(tmp_path, {**GOOD, "message": "Waits.[[ {sync_count:int} calls"})
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert "sync/SY001.yaml: message: optional segment '[[' is never closed" in str(info.value)


def test_rule_file_segment_survives_yaml_folding(tmp_path):
    # Rule messages are folded (>-) YAML blocks; a segment may span a line break.
    text = "code: SY001\nmessage: >-\n  Waits.[[ {sync_count:int}\n  calls.]] Done.\n"
    message = yaml.safe_load(text)["message"]
    assert parse(message).render({"sync_count": 3}) == "Waits. 3 calls. Done."
    assert parse(message).render({}) == "Waits. Done."


@pytest.fixture(scope="module")
def resnet_traces(shared_traces):
    compute = pytest.importorskip("advisor.metrics.compute")
    from advisor.trace.load import load_traces

    return compute, load_traces(shared_traces / RESNET)


def test_real_bare_trace_messages_have_no_na(resnet_traces):
    compute, traces = resnet_traces
    d = diagnose(compute.compute_metrics(traces))
    dl001 = next(f for f in d.findings if f.code == "DL001")
    assert "n/a" not in dl001.message, dl001.message
    assert "num_workers" not in dl001.message and "CPU cores" not in dl001.message
    assert "of each step" in dl001.message and "ms per step in DataLoader.__next__" in dl001.message
    for f in d.findings:  # the other capture-only values (pin_memory, batch size) are dropped too
        assert "n/a" not in f.message, f"{f.code}: {f.message}"


def test_real_trace_with_capture_shows_the_values(resnet_traces):
    compute, traces = resnet_traces
    capture = RunCapture(
        dataloaders=(DataLoaderInfo(batch_size=32, num_workers=0, pin_memory=False, persistent_workers=False),),
        environment=Environment(device="cuda", cpu_count=12),
        gpu=UtilSummary(mean_util_frac=0.41),
    )
    d = diagnose(compute.compute_metrics(traces, capture=capture))
    messages = {f.code: f.message for f in d.findings}
    assert "Main DataLoader: num_workers=0, pin_memory=False, persistent_workers=False. CPU cores: 12." in messages["DL001"]
    assert "the main DataLoader has pin_memory=False." in messages["HD001"]
    assert "n/a" not in messages["DL001"]
