"""Files a run's ``torch.save`` would write over: set aside first, put back when the diagnose ends.

advisor runs the user's script many times in the user's folder (the capture, then every trial
run; a sweep's cell runs), each cut short once its steps are timed. A script that saves as it trains (``best.pt``
when its validation improves, ``ckpt/e0.pt`` at each epoch's end) saved in every run, over the
file of that name the user's own training had left: on a script of ours a trial run rewrote
``ckpt/e0.pt``. Now the first save over an existing file in any run of one diagnose renames that
file beside itself (``e0.pt.advisor-kept-<token>``: the same folder, so the same file system and
no copy) and lists it; the diagnose puts every listed file back when it ends, however it ends,
over what its runs wrote there. A diagnose killed before that leaves the renamed files, named for
what they are, and its list in the temporary folder; the next diagnose removes a dead one's list
once nothing it names is set aside (16 empty ones had gathered in /tmp over a day of our tests).

The runs learn where the list is from :data:`ENV` (``<token>:<list path>``), which the diagnose
sets for the processes it starts and nothing else reads. What a run writes where nothing was
before stays, as a plain run's would.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from advisor._proctree import pid_exists

ENV = "ADVISOR_SET_ASIDE"
"""``<token>:<path of the list>``, set by :func:`saves_set_aside` for the runs it starts."""


def set_aside_before_save(target: Any) -> None:
    """Run side: rename the existing file ``target`` names, once per diagnose, before a save writes it.

    Anything but a path (a file object, a buffer), a path with nothing there yet, or a file this
    diagnose set aside already is left alone.
    """
    spec = os.environ.get(ENV)
    if not spec or not isinstance(target, str | os.PathLike):
        return
    token, _, listing = spec.partition(":")
    path = os.path.abspath(os.fspath(target))
    kept = f"{path}.advisor-kept-{token}"
    if os.path.lexists(kept) or not os.path.isfile(path):
        return
    # NOTE: listed before the rename: a run killed between the two leaves a line whose kept
    # file does not exist, which putting back skips, never a renamed file nobody lists
    with open(listing, "a", encoding="utf-8") as fh:
        fh.write(json.dumps([path, kept]) + "\n")
    os.replace(path, kept)


@contextlib.contextmanager
def saves_set_aside() -> Iterator[list[str]]:
    """Diagnose side: let the runs started inside set files aside, and put them back on the way out.

    Yields the list the paths put back are appended to (for the report's notes).
    """
    _sweep(Path(tempfile.gettempdir()))
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    listing = os.path.join(folder, "saves.jsonl")
    token = f"{os.getpid()}-{time.time_ns() % 1_000_000_000}"
    before = os.environ.get(ENV)
    os.environ[ENV] = f"{token}:{listing}"
    restored: list[str] = []
    try:
        yield restored
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        restored.extend(put_back(Path(listing)))
        with contextlib.suppress(OSError):
            os.remove(listing)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


PREFIX = "advisor-set-aside-"
"""The list's folder: ``<tempdir>/advisor-set-aside-<pid>-<random>``, the pid the diagnose's."""


def _sweep(tmp: Path) -> None:
    """Remove the list folders of diagnoses killed before their end that set nothing aside.

    A diagnose killed by SIGKILL cannot remove its folder; the next one does, when that
    diagnose's process is gone and no file its list names is still set aside (such a list is
    the record of where the user's files are, and stays).
    """
    try:
        folders = list(tmp.glob(f"{PREFIX}*-*"))
    except OSError:
        return
    for folder in folders:
        pid = folder.name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or pid_exists(int(pid)):
            continue
        listing = folder / "saves.jsonl"
        if listing.exists() and any(os.path.lexists(kept) for _path, kept in _entries(listing)):
            continue
        with contextlib.suppress(OSError):
            listing.unlink(missing_ok=True)
            folder.rmdir()


def _entries(listing: Path) -> list[tuple[str, str]]:
    """Return the (path, kept) pairs a list names, unreadable lines skipped."""
    try:
        lines = listing.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            path, kept = json.loads(line)
        except (ValueError, TypeError):
            continue
        out.append((str(path), str(kept)))
    return out


def restored_note(paths: list[str]) -> str:
    """Return the report's note on the files the script's runs saved over, put back as they were."""
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (f"the script's runs saved over {len(paths)} existing file(s), each set aside first and put back "
            f"when the runs ended: {shown}")


def put_back(listing: Path) -> list[str]:
    """Move every listed file back to its name; return the names put back."""
    out = []
    for path, kept in _entries(listing):
        if os.path.lexists(kept):
            with contextlib.suppress(OSError):
                os.replace(kept, path)
                out.append(path)
    return out
