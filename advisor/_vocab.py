"""The base of every fixed vocabulary (statuses, verdicts, safety, categories, severities...).

A :class:`Vocab` member *is* its string: it compares, hashes, sorts, formats and serialises as
the word itself, so JSON files and reports read exactly as before, while code names the members
(``RunStatus.CRASHED``) and a typo is an ``AttributeError`` instead of a silent mismatch.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

V = TypeVar("V", bound="Vocab")


class Vocab(str, Enum):
    """A string enum whose ``str()`` and ``format()`` are the word itself (Python 3.10 has no StrEnum)."""

    # NOTE: a plain ``(str, Enum)`` member formats as ``Class.MEMBER`` from Python 3.11 on;
    # reports and messages interpolate these values (``{x}`` and ``{x!r}``), so str, format
    # and repr are all pinned to the word, exactly as when these were plain strings.
    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Every word, in declaration order."""
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls: type[V], word: str) -> V | str:
        """Return the member named by ``word``, or ``word`` itself when it is not one.

        Loaders use this so that a file written by a newer advisor (with a word this version
        does not know) still loads; the unknown word is kept as a plain string.
        """
        try:
            return cls(word)
        except ValueError:
            return word
