"""DataLoader settings passed as ``**kw``: set them in the mapping where it is built, when that is safe.

A script of ours built one mapping for its two loaders (``kw = dict(batch_size=..., collate_fn=...,
num_workers=...)``, then ``DataLoader(train, shuffle=True, **kw)`` and ``DataLoader(val, **kw)``).
The kept ``persistent_workers`` came with no diff: a keyword added to the calls could pass it
twice, so the diff said to set it "in that mapping" and left it to the user. The mapping itself
is the place: :func:`set_in_mappings` adds the keys there, when the name is bound once in the
script, to a ``dict(...)`` call or a ``{...}`` literal with string keys, and is read nowhere but
as ``**name`` in ``DataLoader(...)`` calls (so no other call receives the new keys). A key the
mapping already holds takes the new value, as a keyword of the call would. Anything else keeps
the note.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from advisor.fixes.diff_edits import _is_loader, _set_kwarg


class _Uses(cst.CSTVisitor):
    """Count, per name, its bindings, its reads and its reads as ``**name`` in a DataLoader call."""

    def __init__(self) -> None:
        self.bound: dict[str, list[cst.BaseExpression]] = {}
        self.reads: dict[str, int] = {}
        self.splats: dict[str, int] = {}
        self.explicit: dict[str, set[str]] = {}  # the keywords the calls that splat a name also pass

    def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802 - libcst's visitor naming
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                self.bound.setdefault(t.target.value, []).append(node.value)
            else:  # NOTE: a, b = ... or x[k] = ...: a name bound there is not one this pass edits
                for name in _names(t.target):
                    self.bound.setdefault(name, []).append(cst.Name("None"))

    def visit_Call(self, node: cst.Call) -> None:  # noqa: N802
        if _is_loader(node):
            for a in node.args:
                if a.star == "**" and isinstance(a.value, cst.Name):
                    self.splats[a.value.value] = self.splats.get(a.value.value, 0) + 1
                    self.explicit.setdefault(a.value.value, set()).update(
                        b.keyword.value for b in node.args if b.keyword is not None)

    def visit_Name(self, node: cst.Name) -> None:  # noqa: N802
        self.reads[node.value] = self.reads.get(node.value, 0) + 1


def _names(node: cst.CSTNode) -> list[str]:
    found: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:  # noqa: N802
            found.append(n.value)

    node.visit(_Collect())
    return found


def _editable(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.Call):
        return isinstance(value.func, cst.Name) and value.func.value == "dict" and all(
            a.keyword is not None or a.star == "**" for a in value.args)
    if isinstance(value, cst.Dict):
        return all(isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) for e in value.elements)
    return False


def mapping_names(module: cst.Module, keys: Mapping[str, str]) -> dict[str, set[str]]:
    """Return the names whose mapping :func:`set_in_mappings` can edit, each with the keys it may take.

    A key one of the calls passes itself is set in that call, never in the mapping (it would be
    passed twice).
    """
    uses = _Uses()
    module.visit(uses)
    out = {}
    for name, count in uses.splats.items():
        values = uses.bound.get(name, [])
        # NOTE: reads count the name's binding target too (one per assignment)
        if len(values) == 1 and _editable(values[0]) and uses.reads.get(name, 0) == count + 1:
            out[name] = set(keys) - uses.explicit.get(name, set())
    return out


def _with_key(value: cst.BaseExpression, key: str, expr: cst.BaseExpression) -> cst.BaseExpression:
    """Return the ``dict(...)`` call or ``{...}`` literal with ``key`` set to ``expr`` (replaced where it is)."""
    if isinstance(value, cst.Call):
        return _set_kwarg(value, key, expr)
    if not isinstance(value, cst.Dict):
        return value
    elements = list(value.elements)
    for i, e in enumerate(elements):
        if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == key:
            elements[i] = e.with_changes(value=expr)
            return value.with_changes(elements=elements)
    return value.with_changes(elements=[*elements, cst.DictElement(cst.SimpleString(repr(key)), expr)])


class _SetKeys(cst.CSTTransformer):
    def __init__(self, names: dict[str, set[str]], keys: Mapping[str, str]) -> None:
        self.names, self.keys = names, keys

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:  # noqa: N802
        name = next((t.target.value for t in original.targets if isinstance(t.target, cst.Name)), None)
        if name not in self.names:
            return updated
        value = updated.value
        for key, code in self.keys.items():
            if key in self.names[name]:
                value = _with_key(value, key, cst.parse_expression(code))
        return updated.with_changes(value=value)


def set_in_mappings(module: cst.Module, keys: Mapping[str, str]) -> tuple[cst.Module, dict[str, set[str]]]:
    """Set ``keys`` (keyword -> expression) in every editable ``**`` mapping of a DataLoader.

    Returns:
        The module, and each mapping's name with the keys set in it.
    """
    names = mapping_names(module, keys) if keys else {}
    if not names:
        return module, {}
    return module.visit(_SetKeys(names, keys)), names
