"""Which file a kept fix's diff changes: the script, or the local module that holds its training code.

A launcher script often only sets a config and calls ``train.main()`` from a module beside it
(``chargpt.py`` calling ``attention_lm.main``): the model, its optimizer and the DataLoader live
in that module, and a diff of the launcher could only add header lines. The diff goes to the
first file that holds training code: the script itself, else a module it imports from its own
folder, one level deep, in the order of its imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst

from advisor.fixes.diff_edits import _LoaderFinder, _ModelFinder


def holds_training(source: str) -> bool:
    """Whether ``source`` builds a model's optimizer or a DataLoader (False where it does not parse)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return False
    model, loaders = _ModelFinder(), _LoaderFinder()
    module.visit(model)
    module.visit(loaders)
    return model.model is not None or bool(loaders.names)


def local_imports(source: str, folder: Path) -> list[Path]:
    """Return the modules ``source`` imports that are files in ``folder`` (``import x``, ``from x import y``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level in (0, 1):
            names.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            names += [a.name for a in node.names]
    paths = (folder / f"{n}.py" for n in dict.fromkeys(names) if n.isidentifier())
    return [p for p in paths if p.is_file()]


def training_file(script: Path) -> Path:
    """Return the file a diff of ``script``'s kept fixes changes.

    The script itself, unless it holds no training code and a local module it imports does.
    """
    script = Path(script)
    try:
        source = script.read_text(encoding="utf-8")
    except OSError:
        return script  # the caller reports the unreadable script
    if holds_training(source):
        return script
    for module in local_imports(source, script.parent):
        try:
            if holds_training(module.read_text(encoding="utf-8")):
                return module
        except (OSError, UnicodeDecodeError):
            continue
    return script
