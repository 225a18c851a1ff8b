"""Finding the folders of multiprocessing's listener sockets held by a process (advisor._listeners)."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from advisor import _listeners

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sockets are found through /proc")


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _listen(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen()
    return sock


def test_a_listener_folder_held_by_the_process_is_found_and_removed(temp_root: Path) -> None:
    sock = _listen(temp_root / "pymp-abc123" / "listener-xyz")
    try:
        found = _listeners.listener_dirs([os.getpid()])
        assert found == [(temp_root / "pymp-abc123").resolve()]
        _listeners.remove(found)
        assert not (temp_root / "pymp-abc123").exists()
    finally:
        sock.close()


def test_only_multiprocessing_listeners_in_the_temp_folder_count(temp_root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    socks = [
        _listen(temp_root / "mine" / "listener-a"),  # not a pymp- folder
        _listen(temp_root / "pymp-1" / "other-b"),  # not a listener socket
        _listen(elsewhere / "pymp-2" / "listener-c"),  # not in the temporary folder
    ]
    try:
        assert _listeners.listener_dirs([os.getpid()]) == []
    finally:
        for s in socks:
            s.close()


def test_a_folder_holding_anything_else_is_kept(temp_root: Path) -> None:
    sock = _listen(temp_root / "pymp-keep" / "listener-z")
    (temp_root / "pymp-keep" / "notes.txt").write_text("not multiprocessing's")
    try:
        _listeners.remove(_listeners.listener_dirs([os.getpid()]))
        assert (temp_root / "pymp-keep" / "notes.txt").exists()
    finally:
        sock.close()


def test_a_process_that_is_gone_holds_nothing() -> None:
    assert _listeners.listener_dirs([2**22 + 12345]) == []
