"""Stack frames as torch.profiler names them, and the guess whether one is the user's code.

A leaf of the metrics package: the step analysis (:mod:`advisor.metrics.input_work`) and the
resolvers of :mod:`advisor.metrics.userframes` both read frames through it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Bare traces only: top-level packages whose frames are never "the user's code" (stacks strip
# site-packages/).
LIBRARY_TOPS = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "pandas",
        "tqdm", "transformers", "accelerate", "datasets", "monai", "lightning", "pytorch_lightning",
        "timm", "PIL", "advisor", "apex", "deepspeed", "fairscale", "huggingface_hub", "safetensors",
        "tokenizers", "scipy", "sklearn", "cv2", "albumentations", "importlib", "ipykernel",
    }
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"runpy", "threading", "typing"}


UserPredicate = Callable[[str], bool]

INSTRUMENTATION_RE = re.compile(r"(^|/)advisor/(capture|fixes)/\w+\.py\(\d+\): ")
"""Frames of advisor's own code inside a profiled run: the capture's hooks (which wrap ``.item()``,
``.to()``, ``backward`` and the modules to name call sites) and the run-time fixes."""


def is_instrumentation(frame: str) -> bool:
    """Whether a ``python_function`` frame is advisor's own instrumentation, whose time is its caller's.

    On the H200 (2026-11-27) the hooks' wrappers were the host-bound finding's top sites
    (``advisor/capture/hooks.py:483 (wrapper)``): the report told the user to fix advisor's code.
    """
    return INSTRUMENTATION_RE.search(frame.replace("\\", "/")) is not None


def looks_like_user_file(path: str) -> bool:
    """Guess whether a frame's file is the user's code, for traces without a capture.

    A heuristic over names (site-packages, ``lib/pythonX``, known library packages): a run's
    own policy (``RunCapture.user_code``) replaces it wherever a capture exists.
    """
    if not path or path.startswith("<") or "site-packages" in path or "dist-packages" in path:
        return False
    norm = path.replace("\\", "/")
    if re.search(r"/lib/python\d", norm) or "/advisor/" in norm:
        return False
    parts = [p for p in norm.split("/") if p and p != "."]
    if not parts:
        return False
    top = parts[0] if not norm.startswith("/") else ""
    if top in LIBRARY_TOPS or top in _STDLIB:
        return False  # NOTE: "multiprocessing/queues.py" is a stdlib package's file, not the user's
    if len(parts) == 1:
        stem = parts[0].rsplit(".", 1)[0]
        return stem not in _STDLIB
    return True


def parse_frame(text: str) -> tuple[str, int, str] | None:
    """``"file.py(12): func"`` -> (file, 12, func); None for built-ins and module markers."""
    m = FRAME_RE.match(text.strip())
    if not m:
        return None
    return m.group("file"), int(m.group("line")), m.group("func")
