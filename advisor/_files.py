"""Writing files without harming what is already there: the one place advisor writes user paths.

Three writers, each refusing rather than guessing:

* :func:`write_text` writes an output file (``-o``, JSON in a run directory). A regular or absent
  target is written through a unique temporary file beside it and renamed over it, so a crash never
  leaves half a file; a symlink is followed to its target (the link stays a link); a character
  device or FIFO (``/dev/null``, ``/dev/stdout``, a pipe) is written in place, never replaced by a
  regular file; a folder, socket or block device is refused.
* :func:`backup` copies a file to the first free ``NAME.bak``, ``NAME.bak.1``, ... (created
  exclusively: an earlier backup is never overwritten).
* :func:`rewrite_script` is ``--write``: it refuses a read-only script, keeps every earlier backup
  and the file's mode.

Every failure is an :class:`~advisor.errors.InputError` whose message says what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from advisor.errors import InputError

_MAX_BACKUPS = 1000


def _target(path: Path) -> Path:
    """Follow symlinks: writing "to a link" means writing to what it points at."""
    return Path(os.path.realpath(path))


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


def write_text(path: str | Path, text: str, *, what: str = "-o path") -> Path:
    """Write ``text`` to ``path`` without destroying anything that is not a regular file.

    Args:
        path: Destination; a symlink is followed, a missing parent folder is created.
        text: The content (UTF-8).
        what: How the message names the option to change (``-o path``, ``--out``).

    Returns:
        The path written (the symlink's target when ``path`` is a link).

    Raises:
        InputError: The target is a folder or another special file, or the write failed (full
            disk, no permission), with what to do.
    """
    target = _target(Path(path))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise InputError(f"cannot write {path} ({_reason(exc)}); choose another {what}") from exc
    # NOTE: surrogateescape writes a non-UTF-8 file name (as Python decodes it) back as its bytes.
    data = text.encode("utf-8", "surrogateescape")
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        # NOTE: a device or a pipe is written in place: renaming over it would replace the node.
        try:
            with open(target, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise InputError(f"cannot write {path} ({_reason(exc)}); choose another {what}") from exc
        return target
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise InputError(f"{path} is {kind}; choose another {what}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _replace_atomically(target, data, None if mode is None else stat.S_IMODE(mode))
    except OSError as exc:
        raise InputError(f"cannot write {path} ({_reason(exc)}); choose another {what}") from exc
    return target


def _replace_atomically(target: Path, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a unique temp file beside ``target``, then rename it over ``target``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".advisor-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is None:
            # mkstemp makes 0600; a new file gets the usual umask-derived mode instead.
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def backup(path: str | Path) -> Path:
    """Copy ``path`` to the first free ``NAME.bak``, ``NAME.bak.1``, ... and return the copy's path.

    The backup is created exclusively (``O_EXCL``): an earlier backup is never overwritten, even
    by a concurrent writer. Its mode and times are the original's.

    Raises:
        InputError: No free name, or the copy failed.
    """
    src = Path(path)
    for i in range(_MAX_BACKUPS):
        candidate = src.with_name(src.name + (".bak" if i == 0 else f".bak.{i}"))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"cannot create a backup of {src} ({_reason(exc)}); nothing was changed") from exc
        try:
            with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
                shutil.copyfileobj(inp, out)
            shutil.copystat(src, candidate)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(candidate)
            raise InputError(f"cannot back up {src} ({_reason(exc)}); nothing was changed") from exc
        return candidate
    raise InputError(f"{src} already has {_MAX_BACKUPS} backups; remove old {src.name}.bak* files first")


def rewrite_script(path: str | Path, text: str) -> Path:
    """Replace a user's script with ``text`` (``--write``), keeping a backup and the file's mode.

    Returns:
        The backup's path.

    Raises:
        InputError: The script is read-only or not a regular file, or writing failed (the
            script is then unchanged).
    """
    given = Path(path)
    target = _target(given)
    try:
        st = target.stat()
    except OSError as exc:
        raise InputError(f"cannot read {given} ({_reason(exc)})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{given} is not a regular file; --write only edits regular files")
    if not (st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(target, os.W_OK):
        raise InputError(f"{given} is read-only; make it writable to use --write, or apply the diff yourself")
    saved = backup(target)
    try:
        _replace_atomically(target, text.encode("utf-8", "surrogateescape"), stat.S_IMODE(st.st_mode))
    except OSError as exc:
        raise InputError(f"cannot write {given} ({_reason(exc)}); it is unchanged, backup in {saved}") from exc
    return saved
