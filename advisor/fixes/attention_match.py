"""Match hand-written attention in one ``forward`` method, following names back through a block.

:class:`_Forward` recognises the chain ``softmax(q @ k^T * scale [masked]) [dropout] @ v`` and
maps each piece onto a keyword of ``scaled_dot_product_attention`` (see
:mod:`advisor.fixes.attention` for what is accepted and what is refused). Imports libcst, never torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from advisor.fixes.attention_exprs import (
    Refused,
    _args,
    _ClassFacts,
    _int,
    _inv_sqrt_of_last_dim,
    _is_neg_inf,
    _is_number,
    _matmul,
    _peel,
    _sqrt_of_last_dim,
    _strip,
    _tri,
    _untranspose,
    code,
    dotted,
)


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

