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
from dataclasses import dataclass

import libcst as cst

from advisor.fixes.attention_exprs import (
    Refused,
    _class_facts,
    _ClassFacts,
    _names,
    _strip,
    code,
    dotted,
)
from advisor.fixes.attention_match import _Def, _Forward

SDPA = "torch.nn.functional.scaled_dot_product_attention"
"""The fully qualified callee, used when the module has no ``F`` alias for torch.nn.functional."""


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
