"""Rewrite hand-written attention into ``scaled_dot_product_attention``: one libcst transformation.

The same transformation serves both sides of the ``fused_attention`` fix, so what a trial
measures is exactly what the diff proposes:

- the diff (:mod:`advisor.fixes.diff`) runs :func:`rewrite_source` on the user's script;
- the run-time install (:mod:`advisor.fixes.catalog.fused_attention`) runs it on one module
  class's source (``inspect.getsource``) and binds the rewritten ``forward`` to the class.

What is recognised, inside the ``forward`` method of a class (statements of one block, with
intermediate names followed back through their assignments)::

    scores = q @ k.transpose(-2, -1)          # or torch.matmul / torch.bmm, k.mT
    scores = scores / math.sqrt(k.size(-1))   # optional: / d or * s, before or after the mask
    scores = scores.masked_fill(MASK, float("-inf"))   # optional
    weights = scores.softmax(dim=-1)          # or F.softmax / torch.softmax / nn.Softmax(dim=-1)
    weights = F.dropout(weights, p, training) # optional: F.dropout or an nn.Dropout attribute
    y = weights @ v                           # anywhere inside a larger expression

becomes ``y = F.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=...,
is_causal=..., scale=...)``, every keyword mapped with certainty or the function is refused
with a reason (never a guess):

- ``scale``: none when the divisor is ``sqrt`` of q's or k's last dimension (SDPA's default);
  an explicit ``scale=`` when the factor is provably a Python number (literals, ``math.*``,
  ``.size(i)``/``.shape[i]``, ``int``/``float`` and arithmetic of those); ``scale=1.0`` when the
  scores are not scaled in the chain; refused when the factor may be a tensor (``self.scale``).
- masks: only ``masked_fill(M, -inf)`` (a finite fill such as ``-1e9`` treats a fully masked
  row differently). ``is_causal=True`` only when ``M`` is provably the causal mask of a square
  matrix: ``ones(n, n).triu(1)``, or ``tril(ones(n, n)) == 0`` / ``~tril`` (also a buffer
  registered in ``__init__`` with that value, sliced with equal bounds ``[:, :, :T, :T]``);
  any other boolean mask becomes ``attn_mask=~(M)``. Additive masks (``scores + mask``) are
  refused: SDPA reads a boolean and a float mask differently and the source does not say which.
- softmax over ``dim=-1`` only, without a ``dtype=``.
- dropout: ``dropout_p=p if training else 0.0`` from ``F.dropout``'s arguments (its defaults
  when omitted), or ``self.drop.p if self.drop.training else 0.0`` for an ``nn.Dropout``
  attribute. Dropout draws different random masks in SDPA, so losses differ in training.
- the attention weights must not be used anywhere else in the method (SDPA does not return
  them), and every name the new call reads must still mean what it meant where it was read.

Mathematically the result is the same attention; numerically the fused kernels round
differently (fp32: ~1e-6 relative), which is why the fix is marked unsafe.

This module imports libcst but never torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

SDPA = "torch.nn.functional.scaled_dot_product_attention"
"""The fully qualified callee, used when the module has no ``F`` alias for torch.nn.functional."""


class Refused(Exception):
    """A recognised attention whose mapping onto SDPA is not certain; the message says why."""


@dataclass(frozen=True)
class Rewrite:
    """The outcome of rewriting a source.

    Attributes:
        source: The new source (the input unchanged when nothing was rewritten).
        changed: ``Class.forward`` of every method rewritten.
        refused: ``Class.forward: reason`` for every hand-written attention left alone.
        loads: ``from_pretrained`` calls of models given ``attn_implementation="sdpa"``.
    """

    source: str
    changed: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    loads: tuple[str, ...] = ()


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


# -- one block of a forward method ----------------------------------------------------------------


@dataclass(frozen=True)
class _Def:
    index: int
    expr: cst.BaseExpression
    env: dict[str, _Def]  # the bindings visible where this expression was evaluated


@dataclass
class _Match:
    q: cst.BaseExpression
    k: cst.BaseExpression
    v: cst.BaseExpression
    kwargs: list[tuple[str, str]]
    consumed: set[int]  # statements defining the scores/weights (deleted)
    mask_stmts: set[int]  # statements defining the mask (deleted when nothing else reads them)
    weight_names: set[str]
    read: list[tuple[cst.BaseExpression, dict[str, _Def]]]  # expressions moved, with their env


class _Forward:
    """Match attention in one forward method; the class's facts say what ``self.x`` are."""

    def __init__(self, facts: _ClassFacts) -> None:
        self.facts = facts

    # following names back ----------------------------------------------------------------------

    def _resolve(self, node: cst.BaseExpression, env: dict[str, _Def], used: set[int], names: set[str]):
        node = _strip(node)
        while isinstance(node, cst.Name) and node.value in env:
            d = env[node.value]
            used.add(d.index)
            names.add(node.value)
            node, env = _strip(d.expr), d.env
        return node, env

    def match(self, node: cst.BaseExpression, env: dict[str, _Def]) -> _Match | None:
        """Match ``weights @ v``; None when it is not attention, Refused when not certain."""
        pair = _matmul(node)
        if pair is None:
            return None
        p, v = pair
        used: set[int] = set()
        names: set[str] = set()
        node, penv = self._resolve(p, env, used, names)
        kwargs: list[tuple[str, str]] = []
        read: list[tuple[cst.BaseExpression, dict[str, _Def]]] = [(v, env)]
        dropout = self._dropout(node)
        if dropout is not None:
            inner, p_expr = dropout
            read.append((cst.parse_expression(p_expr), penv))
            node, penv = self._resolve(inner, penv, used, names)
        scores = self._softmax(node)
        if scores is None:
            if dropout is not None:
                raise Refused(f"dropout on `{code(node)}`, which is not a softmax over the last dim")
            return None
        node, senv = self._resolve(scores, penv, used, names)
        mask_stmts: set[int] = set()
        scale: str | None = None
        scale_dim: str | None = None
        scale_seen = mask_seen = False
        causal = False
        mask: str | None = None
        while True:
            node = _strip(node)
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "masked_fill":
                if mask_seen:
                    raise Refused("two masks on the scores")
                mask_seen = True
                a = _args(node, ("mask", "value"))
                if "value" not in a or "mask" not in a or not _is_neg_inf(a["value"]):
                    fill = code(a["value"]) if "value" in a else "?"
                    raise Refused(f"masked_fill with `{fill}`, not -inf: a fully masked row would differ from SDPA's")
                causal, mask = self._mask(a["mask"], senv, mask_stmts, read)
                node, senv = self._resolve(node.func.value, senv, used, names)
                continue
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.Multiply)):
                if scale_seen:
                    raise Refused("the scores are scaled twice")
                scale_seen = True
                scale_dim, scale = self._scale(node)
                read.append((node.right, senv))
                node, senv = self._resolve(node.left, senv, used, names)
                continue
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
                raise Refused("an additive mask (scores + mask): SDPA reads boolean and float masks differently")
            break
        qk = _matmul(node)
        if qk is None:
            raise Refused(f"the softmax's input `{code(node)}` is not q @ k.transpose(-2, -1)")
        q, kt = qk
        kt, kenv = self._resolve(kt, senv, used, names)
        k = _untranspose(kt)
        if k is None:
            raise Refused(f"`{code(kt)}` is not k.transpose(-2, -1)")
        read += [(q, senv), (k, kenv)]
        if scale_seen and scale_dim in {code(_strip(q)), code(_strip(k))}:
            scale = None  # 1/sqrt of q's or k's last dim: SDPA's own default
        if not scale_seen:
            scale = "1.0"  # unscaled scores: SDPA would scale by 1/sqrt(d) unless told not to
        if mask is not None:
            kwargs.append(("attn_mask", mask))
        if dropout is not None:
            kwargs.append(("dropout_p", dropout[1]))
        if causal:
            kwargs.append(("is_causal", "True"))
        if scale is not None:
            kwargs.append(("scale", scale))
        return _Match(q, k, v, kwargs, used, mask_stmts, names, read)

    def _scale(self, node: cst.BinaryOperation) -> tuple[str | None, str]:
        """Return ``(x, scale)`` for ``scores / d`` or ``scores * s``.

        ``x`` is set when the factor is 1/sqrt of ``x``'s last dim (SDPA's default when ``x`` is
        q or k); ``scale`` is the explicit ``scale=`` source.
        """
        right = node.right
        if isinstance(node.operator, cst.Divide):
            if not _is_number(right):
                raise Refused(f"the scores are divided by `{code(right)}`, which may be a tensor")
            return _sqrt_of_last_dim(right), f"1.0 / ({code(_strip(right))})"
        if not _is_number(right):
            raise Refused(f"the scores are multiplied by `{code(right)}`, which may be a tensor (scale must be a float)")
        return _inv_sqrt_of_last_dim(right), code(_strip(right))

    def _softmax(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        node = _strip(node)
        if not isinstance(node, cst.Call):
            return None
        callee = dotted(node.func)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "softmax" and callee.split(".")[0] not in {
            "F", "torch", "nn", "functional"
        }:
            a = _args(node, ("dim",))
            subject: cst.BaseExpression = node.func.value
        elif callee in {"F.softmax", "torch.softmax", "nn.functional.softmax", "torch.nn.functional.softmax",
                        "functional.softmax"}:
            a = _args(node, ("input", "dim"))
            if "input" not in a:
                return None
            subject = a["input"]
        elif callee.startswith("self.") and callee[5:] in self.facts.softmaxes and len(node.args) == 1:
            return node.args[0].value
        else:
            return None
        if a.get("dtype") is not None:
            raise Refused(f"`{code(node)}` computes the softmax in another dtype")
        if "dim" not in a or _int(a["dim"]) != -1:
            raise Refused(f"`{code(node)}` is not a softmax over dim=-1")
        return subject

    def _dropout(self, node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
        node = _strip(node)
        if not isinstance(node, cst.Call):
            return None
        callee = dotted(node.func)
        if callee in {"F.dropout", "nn.functional.dropout", "torch.nn.functional.dropout", "functional.dropout"}:
            a = _args(node, ("input", "p", "training", "inplace"))
            p = code(a["p"]) if "p" in a else "0.5"
            training = code(a["training"]) if "training" in a else "True"
        elif callee == "torch.dropout":
            a = _args(node, ("input", "p", "train"))
            if "p" not in a or "train" not in a:
                return None
            p, training = code(a["p"]), code(a["train"])
        elif callee.startswith("self.") and callee[5:] in self.facts.dropouts and len(node.args) == 1:
            return node.args[0].value, f"{callee}.p if {callee}.training else 0.0"
        else:
            return None
        if "input" not in a:
            return None
        p_expr = p if training == "True" else f"{p} if {training} else 0.0"
        return a["input"], p_expr

    def _mask(
        self, mask: cst.BaseExpression, env: dict[str, _Def], stmts: set[int],
        read: list[tuple[cst.BaseExpression, dict[str, _Def]]],
    ) -> tuple[bool, str | None]:
        """(is_causal, attn_mask source) for ``masked_fill(mask, -inf)``."""
        resolved, menv = self._resolve(mask, env, stmts, set())
        if self._is_causal_mask(resolved):
            return True, None
        read.append((mask, env))
        text = code(_strip(mask))
        simple = isinstance(_strip(mask), (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
        return False, f"~{text}" if simple else f"~({text})"

    def _is_causal_mask(self, node: cst.BaseExpression) -> bool:
        """``ones(n, n).triu(1)``, ``tril == 0``, ``~tril``, ``tril.logical_not()`` (tril possibly a buffer)."""
        node = _strip(node)
        if _tri(_peel(node), "triu"):
            return True
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            c = node.comparisons[0]
            if isinstance(c.operator, cst.Equal) and code(_strip(c.comparator)) in {"0", "0.0", "False"}:
                return self._is_tril(node.left)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
            return self._is_tril(node.expression)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "logical_not":
            return not node.args and self._is_tril(node.func.value)
        return False

    def _is_tril(self, node: cst.BaseExpression) -> bool:
        peeled = _peel(node)
        if _tri(peeled, "tril"):
            return True
        return (
            isinstance(peeled, cst.Attribute) and dotted(peeled.value) == "self"
            and peeled.attr.value in self.facts.tril_buffers
        )


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


# -- the rewrite ------------------------------------------------------------------------------------


def _simple_assign(stmt: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        a = stmt.body[0]
        if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name):
            return a.targets[0].target.value, a.value
    return None


def _assigned_names(stmt: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:  # noqa: N802
            found.update(_names(n.target) if isinstance(n.target, (cst.Name, cst.Tuple, cst.List)) else set())

        def visit_AugAssign(self, n: cst.AugAssign) -> None:  # noqa: N802
            if isinstance(n.target, cst.Name):
                found.add(n.target.value)

        def visit_For(self, n: cst.For) -> None:  # noqa: N802
            found.update(_names(n.target))

    stmt.visit(V())
    return found


def _name_counts(node: cst.CSTNode) -> Counter[str]:
    counts: Counter[str] = Counter()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:  # noqa: N802
            counts[n.value] += 1

    node.visit(V())
    return counts


class _BlockRewriter:
    """Rewrite the statements of the blocks of one forward method (analysed on the original nodes)."""

    def __init__(self, fwd: _Forward, sdpa: str, func: cst.FunctionDef) -> None:
        self.fwd = fwd
        self.sdpa = sdpa
        self.in_func = _name_counts(func)
        self.count = 0

    def rewrite(self, original: list[cst.BaseStatement], updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """Return the block's new statements (``updated``: the same block with inner blocks rewritten)."""
        in_block = Counter[str]()
        for stmt in original:
            in_block.update(_name_counts(stmt))
        # NOTE: a name the method mentions outside this block is never dropped with a statement.
        self.outside = {n for n, c in self.in_func.items() if c > in_block.get(n, 0)}
        env: dict[str, _Def] = {}
        out = list(updated)
        drop: set[int] = set()
        for i, stmt in enumerate(original):
            if isinstance(stmt, cst.SimpleStatementLine):
                out[i] = self._rewrite_stmt(i, stmt, env, original, drop)
            assign = _simple_assign(stmt)
            if assign is not None:
                env = {**env, assign[0]: _Def(i, assign[1], env)}
            else:
                # NOTE: any other binding (tuple unpacking, loops, augmented assignments) makes the
                # name opaque from here on: it is never followed back.
                env = {k: d for k, d in env.items() if k not in _assigned_names(stmt)}
        return [s for i, s in enumerate(out) if i not in drop]

    def _rewrite_stmt(
        self, i: int, stmt: cst.SimpleStatementLine, env: dict[str, _Def], body: list[cst.BaseStatement],
        drop: set[int],
    ) -> cst.BaseStatement:
        outer = self

        class T(cst.CSTTransformer):
            def leave_BinaryOperation(self, o: cst.BinaryOperation, u: cst.BinaryOperation) -> cst.BaseExpression:  # noqa: N802
                return outer._try(o, u, i, env, body, drop)

            def leave_Call(self, o: cst.Call, u: cst.Call) -> cst.BaseExpression:  # noqa: N802
                return outer._try(o, u, i, env, body, drop)

        return stmt.visit(T())  # type: ignore[return-value]

    def _try(
        self, original: cst.BaseExpression, updated: cst.BaseExpression, i: int, env: dict[str, _Def],
        body: list[cst.BaseStatement], drop: set[int],
    ) -> cst.BaseExpression:
        m = self.fwd.match(original, env)
        if m is None:
            return updated
        # NOTE: every name the new call reads must be bound here as it was where it was read,
        # or moving the expression would read another value.
        for expr, where in m.read:
            for name in _names(expr):
                if env.get(name) is not where.get(name):
                    raise Refused(f"`{name}` is reassigned between its use and the attention's output")
        others = [s for j, s in enumerate(body) if j not in m.consumed and j != i]
        here, matched = _name_counts(body[i]), _name_counts(original)
        for name in m.weight_names:
            if name in self.outside or here[name] > matched[name] or any(name in _names(s) for s in others):
                raise Refused(f"`{name}` (the scores or attention weights) is used elsewhere; SDPA does not return it")
        drop |= m.consumed
        for j in sorted(m.mask_stmts - m.consumed):
            assign = _simple_assign(body[j])
            if assign is not None and assign[0] not in self.outside and not any(
                assign[0] in _names(s) for k, s in enumerate(body) if k != j and k not in m.consumed and k != i
            ):
                drop.add(j)
        self.count += 1
        args = [code(_strip(m.q)), code(_strip(m.k)), code(_strip(m.v))] + [f"{k}={v}" for k, v in m.kwargs]
        return cst.parse_expression(f"{self.sdpa}({', '.join(args)})")


class _Transformer(cst.CSTTransformer):
    def __init__(self, sdpa: str) -> None:
        self.sdpa = sdpa
        self.classes: list[tuple[cst.ClassDef, _ClassFacts]] = []
        self.changed: list[str] = []
        self.refused: list[str] = []
        self.loads: list[str] = []

    def leave_Call(self, o: cst.Call, u: cst.Call) -> cst.Call:  # noqa: N802
        """``attn_implementation="sdpa"`` on a Hugging Face model's ``from_pretrained(...)``."""
        if not (isinstance(u.func, cst.Attribute) and u.func.attr.value == "from_pretrained"):
            return u
        owner = dotted(u.func.value).split(".")[-1]
        # NOTE: tokenizers, configs and processors load with from_pretrained too; only models
        # (BertModel, AutoModelForCausalLM, GPT2LMHeadModel) take attn_implementation.
        if "Model" not in owner or any(a.star or (a.keyword and a.keyword.value == "attn_implementation") for a in u.args):
            return u
        args = list(u.args)
        if args and not isinstance(args[-1].comma, cst.Comma):
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(
            keyword=cst.Name("attn_implementation"), value=cst.SimpleString('"sdpa"'),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
        ))
        self.loads.append(code(o.func))
        return u.with_changes(args=args)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:  # noqa: N802
        self.classes.append((node, _class_facts(node)))

    def leave_ClassDef(self, o: cst.ClassDef, u: cst.ClassDef) -> cst.ClassDef:  # noqa: N802
        self.classes.pop()
        return u

    def leave_FunctionDef(self, o: cst.FunctionDef, u: cst.FunctionDef) -> cst.FunctionDef:  # noqa: N802
        if o.name.value != "forward" or not self.classes or not any(s is o for s in self.classes[-1][0].body.body):
            return u
        cls, facts = self.classes[-1]
        where = f"{cls.name.value}.forward"
        rewriter = _BlockRewriter(_Forward(facts), self.sdpa, o)
        try:
            new = o.visit(_Blocks(rewriter))
        except Refused as exc:
            self.refused.append(f"{where}: {exc}")
            return u
        if rewriter.count:
            self.changed.append(where)
            return new  # type: ignore[return-value]
        return u


class _Blocks(cst.CSTTransformer):
    """Run the block rewriter on every indented block of one method (inner blocks first)."""

    def __init__(self, rewriter: _BlockRewriter) -> None:
        self.rewriter = rewriter

    def leave_IndentedBlock(self, o: cst.IndentedBlock, u: cst.IndentedBlock) -> cst.IndentedBlock:  # noqa: N802
        return u.with_changes(body=self.rewriter.rewrite(list(o.body), list(u.body)))


def sdpa_callee(module: cst.Module) -> str:
    """How the script names SDPA: ``F.`` when it imports ``torch.nn.functional as F``, else in full."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if dotted(alias.name) == "torch.nn.functional" and alias.asname is not None:
                        return f"{code(alias.asname.name)}.scaled_dot_product_attention"
            if isinstance(small, cst.ImportFrom) and small.module is not None and dotted(small.module) == "torch.nn":
                names = small.names if isinstance(small.names, (list, tuple)) else []
                for alias in names:
                    if alias.name.value == "functional":
                        local = code(alias.asname.name) if alias.asname is not None else "functional"
                        return f"{local}.scaled_dot_product_attention"
    return SDPA


def rewrite_module(module: cst.Module, sdpa: str | None = None) -> tuple[cst.Module, Rewrite]:
    """Rewrite hand-written attention in every class's ``forward`` of a parsed module.

    Args:
        module: The parsed source.
        sdpa: The callee to write (default: :func:`sdpa_callee` of the module).

    Returns:
        The new module and what was changed or refused (``Rewrite.source`` is the new code).
    """
    tr = _Transformer(sdpa or sdpa_callee(module))
    new = module.visit(tr)
    return new, Rewrite(new.code, tuple(tr.changed), tuple(tr.refused), tuple(tr.loads))


def rewrite_source(source: str, sdpa: str | None = None) -> Rewrite:
    """Rewrite hand-written attention in ``source`` (a script, or one class's source)."""
    return rewrite_module(cst.parse_module(source), sdpa)[1]


def forward_source(rewritten_class: str, class_name: str) -> str:
    """Return the rewritten ``forward`` of ``class_name`` from a rewritten class source, dedented."""
    module = cst.parse_module(rewritten_class)
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == class_name:
            for item in stmt.body.body:
                if isinstance(item, cst.FunctionDef) and item.name.value == "forward":
                    return cst.Module(body=[item.with_changes(leading_lines=[])]).code
    raise ValueError(f"no {class_name}.forward in the rewritten source")
