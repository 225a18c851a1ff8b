"""A small, safe expression language for rule conditions and impact estimates.

Rule files are data: their ``when`` and ``impact`` texts are parsed with :mod:`ast` and walked
over a whitelist of node types. Nothing is ever passed to ``eval``, ``exec`` or ``compile``.

Grammar (everything else is rejected when the rule loads):

* ``and``, ``or``, ``not``;
* comparisons ``<  <=  >  >=  ==  !=``, chained (``0.1 < x <= 0.5``);
* arithmetic ``+  -  *  /`` and unary ``-``/``+`` (no ``**``, ``//``, ``%``: no huge powers);
* calls to ``min``, ``max`` and ``abs`` only, positional arguments only;
* numeric, boolean and string constants (numbers up to 1e15 in size, strings up to 200
  characters; strings only compare, they take no arithmetic, so ``"x" * 2500000000`` is refused);
* names, which must be declared metrics (``advisor.metrics.registry``).

Missing evidence is ``None`` and never makes a rule fire. Evaluation uses three-valued
(Kleene) logic:

* arithmetic with ``None`` (or a division by zero) gives ``None``;
* a comparison with a ``None`` operand is unknown (``None``), not true;
* ``not None`` is ``None``; ``and`` is false if any operand is false, else unknown if any is
  unknown; ``or`` is true if any operand is true, else unknown if any is unknown;
* ``min``/``max`` skip ``None`` arguments (``None`` only when all are ``None``), which makes
  ``max(x, 0)`` the idiom for "x, or 0 when unknown"; ``abs(None)`` is ``None``.

A rule fires only when its condition evaluates to exactly true, so "unknown" never fires.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

MAX_EXPRESSION_CHARS = 2000
"""Longest expression accepted (guards the parser against pathological inputs)."""
MAX_DEPTH = 40
"""Deepest syntax tree accepted."""
MAX_CONSTANT = 1e15
"""Largest number literal accepted (``1e999`` is infinity; a huge integer costs memory)."""
MAX_STRING_CHARS = 200
"""Longest string literal accepted."""

_FUNCTIONS = ("min", "max", "abs")

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class ConditionError(ValueError):
    """An expression is not valid in the rule language; the message says why."""


@dataclass(frozen=True)
class Expression:
    """A parsed, validated expression.

    Attributes:
        source: The text as written in the rule file.
        names: Metric names it reads, sorted.
    """

    source: str
    names: tuple[str, ...]
    _tree: ast.expr

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """Evaluate over ``values`` (metric name -> value); missing names are ``None``."""
        return _eval(self._tree, values)

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Return True only when the expression evaluates to exactly true (unknown is false)."""
        return _truth(self.evaluate(values)) is True

    def margins(self, values: Mapping[str, Any]) -> tuple[Margin, ...]:
        """Each threshold the expression must clear, with the value it compared over ``values``.

        Only comparisons of a quantity with a number that all must hold (the expression itself,
        or a part of a top-level ``and``): a condition that held there held by the smallest of
        their margins. Parts of an ``or``, and comparisons of two quantities, have no single
        threshold and give none.
        """
        return tuple(_margins(self._tree, values))


@dataclass(frozen=True)
class Margin:
    """One threshold of a condition and the value compared with it.

    Attributes:
        quantity: What was compared, as written (a metric name, or an expression of them).
        value: Its value (None when unknown).
        op: The comparison, as written (``>=``), with the quantity on the left.
        threshold: The number it was compared with.
    """

    quantity: str
    value: float | None
    op: str
    threshold: float

    @property
    def relative(self) -> float | None:
        """How far past the threshold the value lies, as a share of the threshold (negative: short of it)."""
        if self.value is None or not self.threshold:
            return None
        past = self.value - self.threshold if self.op in (">", ">=") else self.threshold - self.value
        return past / abs(self.threshold)


_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
_SYMBOL = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


def _margins(node: ast.expr, values: Mapping[str, Any]) -> Iterator[Margin]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        for child in node.values:
            yield from _margins(child, values)
        return
    if not isinstance(node, ast.Compare):
        return
    left = node.left
    for op, right in zip(node.ops, node.comparators, strict=True):
        symbol = _SYMBOL.get(type(op))
        if symbol is not None:
            if _is_number(right) and not _is_number(left):
                yield _margin(left, symbol, right, values)
            elif _is_number(left) and not _is_number(right):
                yield _margin(right, _FLIPPED[symbol], left, values)
        left = right


def _is_number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _margin(quantity: ast.expr, symbol: str, number: ast.expr, values: Mapping[str, Any]) -> Margin:
    value = _eval(quantity, values)
    known = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return Margin(ast.unparse(quantity), known, symbol, float(number.value))  # type: ignore[attr-defined]


def parse_expression(text: Any, is_declared: Callable[[str], bool], known: Iterable[str] = ()) -> Expression:
    """Parse and validate ``text`` against the whitelist.

    Args:
        text: The expression (a string, or a bare number/bool from YAML).
        is_declared: Tells whether a name is a declared metric.
        known: Declared names, used only to suggest a close match for a typo.

    Raises:
        ConditionError: syntax error, a construct outside the whitelist, or an undeclared name.
    """
    if isinstance(text, bool) or isinstance(text, (int, float)):
        text = repr(text)
    if not isinstance(text, str) or not text.strip():
        raise ConditionError("expected a non-empty expression string")
    source = text.strip()
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ConditionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        # NOTE: ast.parse only builds a tree; nothing in it is executed or compiled to code.
        tree = ast.parse(source.replace("\n", " "), mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"syntax error: {exc.msg} (column {exc.offset})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ConditionError(f"cannot parse: {type(exc).__name__}") from None
    names: set[str] = set()
    _check(tree.body, names, is_declared, tuple(known), depth=0)
    # NOTE: folded YAML keeps line breaks of indented lines; one line reads better in docs.
    return Expression(source=" ".join(source.split()), names=tuple(sorted(names)), _tree=tree.body)


def _check(
    node: ast.AST,
    names: set[str],
    is_declared: Callable[[str], bool],
    known: tuple[str, ...],
    depth: int,
) -> None:
    if depth > MAX_DEPTH:
        raise ConditionError(f"expression nested deeper than {MAX_DEPTH} levels")

    def sub(child: ast.AST) -> None:
        _check(child, names, is_declared, known, depth + 1)

    if isinstance(node, ast.BoolOp):
        for value in node.values:
            sub(value)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
            raise ConditionError(f"operator {type(node.op).__name__} is not allowed")
        sub(node.operand)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _ARITH:
            raise ConditionError(
                f"operator {type(node.op).__name__} is not allowed (only + - * /)"
            )
        for side in (node.left, node.right):
            if isinstance(side, ast.Constant) and isinstance(side.value, str):
                raise ConditionError("arithmetic on a string is not allowed (strings can only be compared)")
        sub(node.left)
        sub(node.right)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise ConditionError(
                    f"comparison {type(op).__name__} is not allowed (only < <= > >= == !=)"
                )
        sub(node.left)
        for comparator in node.comparators:
            sub(comparator)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise ConditionError(f"call to {shown!r} is not allowed (only {', '.join(_FUNCTIONS)})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or not node.args:
            raise ConditionError(f"{node.func.id}() takes positional arguments only")
        if node.func.id == "abs" and len(node.args) != 1:
            raise ConditionError("abs() takes exactly one argument")
        for arg in node.args:
            sub(arg)
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (bool, int, float, str)):
            raise ConditionError(f"constant {node.value!r} is not allowed")
        if isinstance(node.value, str) and len(node.value) > MAX_STRING_CHARS:
            raise ConditionError(f"string constant longer than {MAX_STRING_CHARS} characters")
        if (
            isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
            and not (math.isfinite(node.value) and abs(node.value) <= MAX_CONSTANT)
        ):
            raise ConditionError(f"number {str(node.value)[:20]} is out of range (at most {MAX_CONSTANT:g} in size)")
    elif isinstance(node, ast.Name):
        _check_name(node.id, names, is_declared, known)
    else:
        raise ConditionError(f"{type(node).__name__} is not allowed in a rule expression")


def _check_name(name: str, names: set[str], is_declared: Callable[[str], bool], known: tuple[str, ...]) -> None:
    if name.startswith("_"):
        raise ConditionError(f"name {name!r} is not allowed")
    if name in _FUNCTIONS:
        raise ConditionError(f"function {name!r} can only be called")
    if name in ("True", "False", "None"):  # pragma: no cover - Python parses these as constants
        raise ConditionError(f"name {name!r} is not allowed")
    if not is_declared(name):
        raise ConditionError(f"unknown metric {name!r}{did_you_mean(name, known)}")
    names.add(name)


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """`` (did you mean 'x'?)`` with the closest candidates, or an empty string."""
    matches = difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"


def clean_value(value: Any) -> Any:
    """Normalise a metric value: numpy scalars to Python, NaN to ``None``."""
    if value is None:
        return None
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _truth(value: Any) -> bool | None:
    if value is None:
        return None
    return bool(value)


def _eval(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return clean_value(values.get(node.id))
    if isinstance(node, ast.BoolOp):
        return _eval_boolop(node, values)
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        if operand is None:
            return None
        if isinstance(node.op, ast.Not):
            return not operand
        if isinstance(operand, str):
            return None
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, values)
        right = _eval(node.right, values)
        if left is None or right is None or isinstance(left, str) or isinstance(right, str):
            return None  # NOTE: no string arithmetic: "x" * n could build a string of any size
        try:
            return _ARITH[type(node.op)](left, right)
        except (ZeroDivisionError, TypeError, OverflowError):
            return None
    if isinstance(node, ast.Compare):
        return _eval_compare(node, values)
    if isinstance(node, ast.Call):
        args = [_eval(a, values) for a in node.args]
        func = node.func.id  # type: ignore[attr-defined]
        if func == "abs":
            return None if args[0] is None or isinstance(args[0], str) else abs(args[0])
        known = [a for a in args if a is not None]
        if not known:
            return None
        try:
            return min(known) if func == "min" else max(known)
        except TypeError:
            return None
    raise ConditionError(f"{type(node).__name__} is not allowed")  # pragma: no cover - checked at load


def _eval_boolop(node: ast.BoolOp, values: Mapping[str, Any]) -> bool | None:
    unknown = False
    if isinstance(node.op, ast.And):
        for child in node.values:
            truth = _truth(_eval(child, values))
            if truth is False:
                return False
            unknown = unknown or truth is None
        return None if unknown else True
    for child in node.values:
        truth = _truth(_eval(child, values))
        if truth is True:
            return True
        unknown = unknown or truth is None
    return None if unknown else False


def _eval_compare(node: ast.Compare, values: Mapping[str, Any]) -> bool | None:
    left = _eval(node.left, values)
    result: bool | None = True
    for op, comparator in zip(node.ops, node.comparators, strict=True):
        right = _eval(comparator, values)
        if left is None or right is None:
            result = None
        else:
            try:
                ok = _COMPARE[type(op)](left, right)
            except TypeError:
                ok = None
            if ok is False:
                return False
            if ok is None:
                result = None
        left = right
    return result
