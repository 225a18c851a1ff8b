"""The safe expression language: grammar, rejection of anything else, None semantics."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from advisor.engine import condition
from advisor.engine.condition import ConditionError, parse_expression
from advisor.engine.message import parse_template
from advisor.metrics.registry import METRICS, is_declared


def parse(text: str):
    return parse_expression(text, is_declared, METRICS)


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("data_loading_frac > 0.05", {"data_loading_frac": 0.4}, True),
        ("data_loading_frac > 0.05", {"data_loading_frac": 0.05}, False),
        ("0.1 < data_loading_frac <= 0.5", {"data_loading_frac": 0.5}, True),
        ("0.1 < data_loading_frac <= 0.5", {"data_loading_frac": 0.6}, False),
        ("sync_count + item_count >= 2", {"sync_count": 1, "item_count": 1}, True),
        ("step_time_ms * 1000 / cpu_op_count < 50", {"step_time_ms": 0.35, "cpu_op_count": 75}, True),
        ("not dataparallel_flag == 1", {"dataparallel_flag": 0}, True),
        ("-data_loading_frac < 0", {"data_loading_frac": 0.1}, True),
        ("abs(data_loading_frac - 0.5) < 0.1", {"data_loading_frac": 0.45}, True),
        ("min(sync_count, item_count) == 1", {"sync_count": 1, "item_count": 5}, True),
        ("rank_count >= 2 or dataparallel_flag == 1", {"rank_count": 1, "dataparallel_flag": 1}, True),
        ("has_gpu_flag == True", {"has_gpu_flag": 1}, True),
    ],
)
def test_grammar(text, values, expected):
    assert parse(text).holds(values) is expected


@pytest.mark.parametrize(
    "text",
    [
        "data_loading_frac > 0.05",
        "data_loading_frac < 0.05",
        "data_loading_frac == 0",
        "data_loading_frac != 0",
        "not data_loading_frac > 0.05",
        "not (data_loading_frac > 0.05 and rank_count >= 2)",
        "data_loading_frac + 1 > 0",
        "data_loading_frac / 1 >= 0 or rank_count > 100",
        "abs(data_loading_frac) >= 0",
    ],
)
def test_missing_evidence_never_fires(text):
    """Comparisons with None are unknown, and unknown -- even negated -- never fires."""
    expr = parse(text)
    assert expr.holds({}) is False
    assert expr.holds({"data_loading_frac": None, "rank_count": None}) is False
    assert expr.holds({"data_loading_frac": float("nan")}) is False


def test_three_valued_logic():
    expr = parse("data_loading_frac > 0.05 or rank_count >= 2")
    assert expr.evaluate({"rank_count": 4}) is True  # true or unknown = true
    assert expr.evaluate({"rank_count": 1}) is None  # false or unknown = unknown
    expr = parse("data_loading_frac > 0.05 and rank_count >= 2")
    assert expr.evaluate({"rank_count": 1}) is False  # false and unknown = false
    assert expr.evaluate({"rank_count": 4}) is None


def test_arithmetic_with_none_and_division_by_zero():
    assert parse("step_time_ms * 1000 / cpu_op_count").evaluate({"step_time_ms": 1.0}) is None
    assert parse("step_time_ms / cpu_op_count").evaluate({"step_time_ms": 1.0, "cpu_op_count": 0}) is None
    assert parse("step_time_ms / cpu_op_count < 50").holds({"step_time_ms": 1.0, "cpu_op_count": 0}) is False


def test_min_max_skip_unknown_values():
    assert parse("max(gpu_util_frac, gpu_busy_frac)").evaluate({"gpu_busy_frac": 0.3}) == 0.3
    assert parse("max(gpu_util_frac, gpu_busy_frac)").evaluate({}) is None
    assert parse("max(sync_wait_frac, 0)").evaluate({}) == 0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("data_loading_frac.__class__", "Attribute is not allowed"),
        ("data_loading_frac.real > 0", "Attribute is not allowed"),
        ("__import__('os').system('true')", "not allowed"),
        ("open('/etc/passwd')", "call to 'open' is not allowed"),
        ("eval('1')", "call to 'eval' is not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("lambda x: x", "Lambda is not allowed"),
        ("data_loading_frac[0]", "Subscript is not allowed"),
        ("__builtins__", "name '__builtins__' is not allowed"),
        ("_private > 0", "name '_private' is not allowed"),
        ("9 ** 9 ** 9", "Pow is not allowed"),
        ("rank_count ** 2 > 1", "Pow is not allowed"),
        ("rank_count // 2 > 1", "FloorDiv is not allowed"),
        ("rank_count % 2 == 0", "Mod is not allowed"),
        ("rank_count << 64", "LShift is not allowed"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("(1, 2)", "Tuple is not allowed"),
        ("{'a': 1}", "Dict is not allowed"),
        ("rank_count if rank_count else 0", "IfExp is not allowed"),
        ("rank_count in (1, 2)", "comparison In is not allowed"),
        ("rank_count is None", "comparison Is is not allowed"),
        ("max(*[1, 2])", "positional arguments only"),
        ("max(rank_count, key=abs)", "positional arguments only"),
        ("abs(1, 2)", "exactly one argument"),
        ("max > 1", "function 'max' can only be called"),
        ("None", "constant None is not allowed"),
        ("b'bytes'", "not allowed"),
        ("f'{rank_count}'", "JoinedStr is not allowed"),
        ("(x := 1)", "NamedExpr is not allowed"),
        ("rank_count >", "syntax error"),
        ("import os", "syntax error"),
        ("sync_cout > 1", "unknown metric 'sync_cout' (did you mean 'sync_count'"),
        ("", "non-empty"),
        ("-" * 5000 + "1", "longer than"),
        ("-" * 100 + "1", "deeper than"),
        ("+".join(["rank_count"] * 60) + " > 0", "deeper than"),
    ],
)
def test_rejected_at_parse_time(text, fragment):
    with pytest.raises(ConditionError, match=None) as info:
        parse(text)
    assert fragment in str(info.value)


def test_yaml_numbers_are_expressions():
    assert parse_expression(0, is_declared).evaluate({}) == 0
    assert parse_expression(0.5, is_declared).evaluate({}) == 0.5


def test_evaluator_never_calls_eval_exec_or_compile():
    """The engine's source never reaches Python's code execution builtins."""
    engine = Path(condition.__file__).parent
    for path in engine.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile", "__import__"), path


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{data_loading_frac.__class__}", "plain metric names only"),
        ("{data_loading_frac[0]}", "plain metric names only"),
        ("{data_loading_frac!r}", "conversions are not allowed"),
        ("{data_loading_frac:{rank_count}}", "nested fields"),
        ("{data_loadin_frac:.0%}", "did you mean 'data_loading_frac'"),
        ("{data_loading_frac:.0Q}", "bad format spec"),
        ("{locations:>10}", "takes no format spec"),
        ("{", "bad template"),
        ("{}", "plain metric names only"),
        ("{0}", "plain metric names only"),
    ],
)
def test_bad_templates(template, fragment):
    with pytest.raises(ConditionError) as info:
        parse_template(template, is_declared, METRICS)
    assert fragment in str(info.value)


def test_template_rendering():
    t = parse_template(
        "{data_loading_frac:.0%} {h2d_bytes:bytes} {dataloader_pin_memory_flag:bool} "
        "{kernel_count:int} {rank_count} {locations}",
        is_declared,
    )
    text = t.render({"data_loading_frac": 0.384, "h2d_bytes": 19267584, "dataloader_pin_memory_flag": 0,
                     "kernel_count": 1462.4}, locations="a.py:3")
    assert text == "38% 18.4 MiB False 1,462 n/a a.py:3"
    assert t.names == ("data_loading_frac", "dataloader_pin_memory_flag", "h2d_bytes", "kernel_count", "rank_count")


def test_the_ms_spec_writes_milliseconds_as_the_report_does():
    """DL001 said "0.0 ms per step in DataLoader.__next__" under a breakdown row of 0.13 ms (tiny_model)."""
    t = parse_template("{dataloader_wait_ms:ms} / {step_time_ms:ms}", is_declared)
    assert t.render({"dataloader_wait_ms": 0.1274, "step_time_ms": 1234.5}) == "0.13 ms / 1,234 ms"
    assert t.render({"dataloader_wait_ms": 0.0123, "step_time_ms": None}) == "0.012 ms / n/a"
