"""The one native module, the trace scanner (``advisor/trace/_scan.c``); all else is in pyproject.toml.

Here rather than in pyproject's ``ext-modules`` table, which setuptools still calls experimental
and warns about on every build. ``optional``: where it cannot be compiled (no C compiler),
advisor installs without it and decodes traces through msgspec alone (``advisor.trace.native``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "advisor.trace._scan",
            ["advisor/trace/_scan.c"],
            depends=["advisor/trace/_scan_json.h", "advisor/trace/_scan_tables.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
        )
    ]
)
