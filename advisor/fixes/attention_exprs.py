"""Small recognisers over libcst expressions, shared by the attention matcher and its rewrite.

Each answers one question about an expression's source (is it ``-inf``, a Python number,
``sqrt`` of a last dimension, a causal ``tril(ones(n, n))``) without ever guessing, and
:func:`_class_facts` reads what a class's ``__init__`` makes ``self.x`` (dropout and softmax
modules, causal buffers). What cannot be mapped onto SDPA with certainty raises :class:`Refused`.
Imports libcst, never torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst


class Refused(Exception):
    """A recognised attention whose mapping onto SDPA is not certain; the message says why."""


# -- small helpers over expressions ---------------------------------------------------------------

_EMPTY = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    """Source text of a node."""
    return _EMPTY.code_for_node(node)


def dotted(node: cst.BaseExpression) -> str:
    """Dotted name of a name or attribute chain (``torch.nn.functional``); empty for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def _strip(node: cst.BaseExpression) -> cst.BaseExpression:
    """Return the node without its parentheses (libcst keeps them on the node)."""
    if getattr(node, "lpar", None):
        return node.with_changes(lpar=[], rpar=[])
    return node


def _int(node: cst.BaseExpression) -> int | None:
    node = _strip(node)
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _int(node.expression)
        return None if inner is None else -inner
    return None


def _args(call: cst.Call, names: tuple[str, ...]) -> dict[str, cst.BaseExpression]:
    """Bind a call's arguments to parameter ``names`` (positional, then keywords); Refused on ``*``."""
    out: dict[str, cst.BaseExpression] = {}
    pos = 0
    for a in call.args:
        if a.star:
            raise Refused(f"`{code(call)}` passes *args/**kwargs")
        if a.keyword is None:
            if pos >= len(names):
                raise Refused(f"`{code(call)}` has more arguments than expected")
            out[names[pos]] = a.value
            pos += 1
        else:
            out[a.keyword.value] = a.value
    return out


def _is_neg_inf(node: cst.BaseExpression) -> bool:
    text = code(_strip(node)).replace(" ", "").replace("'", '"').lower()
    return text in {'float("-inf")', '-float("inf")', "-math.inf", "-torch.inf", "-np.inf", "-numpy.inf"}


def _names(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:  # noqa: N802 - libcst's visitor naming
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:  # noqa: N802
            n.value.visit(self)  # the attribute's own name is not a variable
            return False

    node.visit(V())
    return found


def _is_number(node: cst.BaseExpression) -> bool:
    """Tell whether an expression is provably a Python number (never a tensor)."""
    node = _strip(node)
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _is_number(node.expression)
    if isinstance(node, cst.BinaryOperation):
        return _is_number(node.left) and _is_number(node.right)
    if isinstance(node, cst.Call):
        callee = dotted(node.func)
        if callee.startswith("math.") or callee in {"int", "float"}:
            return True  # math.* and int()/float() return Python numbers, whatever they read
        return isinstance(node.func, cst.Attribute) and node.func.attr.value == "size" and len(node.args) == 1
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
    return False


def _last_dim_of(node: cst.BaseExpression) -> str | None:
    """``x`` for ``x.size(-1)`` / ``x.shape[-1]`` (source text), else None."""
    node = _strip(node)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "size":
        if len(node.args) == 1 and _int(node.args[0].value) == -1:
            return code(node.func.value)
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and _int(node.slice[0].slice.value) == -1:
            return code(node.value.value)
    return None


def _sqrt_of_last_dim(node: cst.BaseExpression) -> str | None:
    """``x`` for ``math.sqrt(x.size(-1))`` or ``x.size(-1) ** 0.5``."""
    node = _strip(node)
    if isinstance(node, cst.Call) and dotted(node.func) == "math.sqrt" and len(node.args) == 1:
        return _last_dim_of(node.args[0].value)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        if code(_strip(node.right)) == "0.5":
            return _last_dim_of(node.left)
    return None


def _inv_sqrt_of_last_dim(node: cst.BaseExpression) -> str | None:
    """``x`` for ``x.size(-1) ** -0.5`` or ``1 / math.sqrt(x.size(-1))``."""
    node = _strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        if code(_strip(node.right)).replace(" ", "") == "-0.5":
            return _last_dim_of(node.left)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        if code(_strip(node.left)) in {"1", "1.0"}:
            return _sqrt_of_last_dim(node.right)
    return None


def _matmul(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    node = _strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and dotted(node.func) in {"torch.matmul", "torch.bmm"} and len(node.args) == 2:
        if all(a.keyword is None and not a.star for a in node.args):
            return node.args[0].value, node.args[1].value
    return None


def _untranspose(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``k`` for ``k.transpose(-2, -1)``, ``k.transpose(-1, -2)``, ``k.mT`` or ``torch.transpose(k, -2, -1)``."""
    node = _strip(node)
    if isinstance(node, cst.Attribute) and node.attr.value == "mT":
        return node.value
    if isinstance(node, cst.Call) and len(node.args) in (2, 3):
        dims = [_int(a.value) for a in node.args[-2:]]
        if sorted(d for d in dims if d is not None) != [-2, -1]:
            return None
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "transpose" and len(node.args) == 2:
            if dotted(node.func) != "torch.transpose":
                return node.func.value
        if dotted(node.func) == "torch.transpose" and len(node.args) == 3:
            return node.args[0].value
    return None



# -- the class's facts: dropout and softmax modules, causal buffers ---------------------------------


@dataclass
class _ClassFacts:
    dropouts: set[str] = field(default_factory=set)  # self.<name> = nn.Dropout(...)
    softmaxes: set[str] = field(default_factory=set)  # self.<name> = nn.Softmax(dim=-1)
    tril_buffers: set[str] = field(default_factory=set)  # buffers holding tril(ones(n, n))


def _module_ctor(node: cst.BaseExpression, name: str) -> cst.Call | None:
    node = _strip(node)
    if isinstance(node, cst.Call) and dotted(node.func).split(".")[-1] == name:
        return node
    return None


def _class_facts(cls: cst.ClassDef) -> _ClassFacts:
    facts = _ClassFacts()
    init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
    if init is None:
        return facts

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802
            for t in node.targets:
                target = t.target
                if not (isinstance(target, cst.Attribute) and dotted(target.value) == "self"):
                    continue
                attr = target.attr.value
                if _module_ctor(node.value, "Dropout") is not None:
                    facts.dropouts.add(attr)
                sm = _module_ctor(node.value, "Softmax")
                if sm is not None:
                    try:
                        dim = _args(sm, ("dim",)).get("dim")
                    except Refused:
                        dim = None
                    if dim is not None and _int(dim) == -1:
                        facts.softmaxes.add(attr)
                if _is_tril_ones(node.value):
                    facts.tril_buffers.add(attr)

        def visit_Call(self, node: cst.Call) -> None:  # noqa: N802
            if dotted(node.func) == "self.register_buffer" and len(node.args) >= 2:
                name = _strip(node.args[0].value)
                if isinstance(name, cst.SimpleString) and _is_tril_ones(node.args[1].value):
                    facts.tril_buffers.add(name.evaluated_value if isinstance(name.evaluated_value, str) else "")

    init.visit(V())
    return facts


def _ones_square(node: cst.BaseExpression) -> bool:
    """``torch.ones(n, n, ...)`` with the same size expression twice."""
    node = _strip(node)
    if not (isinstance(node, cst.Call) and dotted(node.func).split(".")[-1] == "ones"):
        return False
    sizes = [a.value for a in node.args if a.keyword is None and not a.star]
    if len(sizes) == 1 and isinstance(_strip(sizes[0]), cst.Tuple):
        sizes = [e.value for e in _strip(sizes[0]).elements]
    return len(sizes) == 2 and code(_strip(sizes[0])) == code(_strip(sizes[1]))


def _tri(node: cst.BaseExpression, which: str) -> bool:
    """``torch.<which>(ones(n, n))`` or ``ones(n, n).<which>(d)`` with the diagonal that makes it causal."""
    node = _strip(node)
    if not isinstance(node, cst.Call):
        return False
    want = 0 if which == "tril" else 1
    if dotted(node.func) == f"torch.{which}" and node.args:
        diag = next((a.value for a in node.args[1:] if a.keyword is None or a.keyword.value == "diagonal"), None)
        return _ones_square(node.args[0].value) and (_int(diag) if diag is not None else 0) == want
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == which:
        diag = node.args[0].value if node.args else None
        return _ones_square(node.func.value) and (_int(diag) if diag is not None else 0) == want
    return False


def _peel(node: cst.BaseExpression) -> cst.BaseExpression:
    """Drop what keeps a square matrix's last two dims square and triangular.

    That is ``.bool()``, ``.to(...)``, ``.view(1, 1, n, n)``, ``[None, None]``, ``.unsqueeze(0)``
    and ``[..., :T, :T]`` slices with equal bounds.
    """
    while True:
        node = _strip(node)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            attr = node.func.attr.value
            if attr in {"bool", "to", "float", "cuda", "contiguous"}:
                node = node.func.value
                continue
            if attr == "unsqueeze" and len(node.args) == 1 and _int(node.args[0].value) == 0:
                node = node.func.value
                continue
            if attr in {"view", "reshape"} and len(node.args) >= 2:
                lead = [_int(a.value) for a in node.args[:-2]]
                if all(v == 1 for v in lead):
                    node = node.func.value
                    continue
            return node
        if isinstance(node, cst.Subscript):
            if _square_slice(node.slice):
                node = node.value
                continue
            return node
        return node


def _square_slice(elements: tuple[cst.SubscriptElement, ...] | list[cst.SubscriptElement]) -> bool:
    """``[:, :, :T, :T]``, ``[:T, :T]``, ``[..., :T, :T]`` or ``[None, None]``: the last two equal."""
    items = [e.slice for e in elements]
    if all(isinstance(i, cst.Index) and code(i.value) == "None" for i in items):
        return True
    if len(items) < 2:
        return False
    a, b = items[-2], items[-1]
    if not (isinstance(a, cst.Slice) and isinstance(b, cst.Slice)):
        return False
    if a.lower is not None or b.lower is not None or a.step is not None or b.step is not None:
        return False
    if code(a) != code(b):
        return False
    lead = items[:-2]
    return all(
        (isinstance(i, cst.Slice) and i.lower is None and i.upper is None and i.step is None)
        or (isinstance(i, cst.Index) and code(i.value) in {"...", "None"})
        for i in lead
    )


def _is_tril_ones(node: cst.BaseExpression) -> bool:
    return _tri(_peel(node), "tril")

