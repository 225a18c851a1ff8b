"""Outputs never destroy what is already there: ``-o`` targets, ``--out`` folders, ``--write``.

Each case is one the fault campaign found destroying data: a special file replaced by a
regular one, a symlink replaced, a neighbour ``OUT.tmp`` overwritten, user files in an
``--out`` folder deleted, an earlier ``.bak`` overwritten, a script's mode lost, a read-only
script written, two runs sharing one folder.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_helpers import invoke, one_line_error

from advisor.errors import EXIT_USAGE, InputError

SCRIPT = "import time\nx = 1\n"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "report.json"



@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(GOLDEN, run / "report.json")
    return run



# -- -o -----------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_output_to_a_fifo_writes_into_it_and_keeps_it_a_fifo(capsys, run_dir: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            received.append(fh.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        code, _, err = invoke(capsys, "report", str(run_dir), "--format", "json", "-o", str(fifo))
    finally:
        # NOTE: unblock a reader still waiting for a writer. Non-blocking: a reader that has just
        # read everything may still be alive, and a blocking open would then wait forever for the
        # next reader (the CI run of 2026-11-27 hung here).
        if thread.is_alive():
            with contextlib.suppress(OSError):  # ENXIO: no reader has it open
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced by a regular file"
    assert code == 0, err
    assert received and b'"schema_version"' in received[0]


def test_output_to_a_symlink_writes_its_target_and_keeps_the_link(capsys, run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "real.md"
    target.write_text("old\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    code, _, err = invoke(capsys, "report", str(run_dir), "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("## advisor")


def test_output_keeps_a_neighbouring_tmp_file_and_the_mode(capsys, run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("old\n")
    out.chmod(0o640)
    neighbour = tmp_path / "notes.txt.tmp"
    neighbour.write_text("the user's own file\n")
    code, _, err = invoke(capsys, "report", str(run_dir), "-o", str(out))
    assert code == 0, err
    assert neighbour.read_text() == "the user's own file\n"
    assert "Primary bottleneck" in out.read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "notes.txt.tmp", "run"]


def test_output_to_a_folder_is_refused(capsys, run_dir: Path, tmp_path: Path) -> None:
    from advisor._files import write_text

    folder = tmp_path / "somewhere"
    folder.mkdir()
    (folder / "keep").write_text("x")
    code, _, err = invoke(capsys, "report", str(run_dir), "-o", str(folder))
    assert code == EXIT_USAGE and "is a directory" in err and "internal error" not in err
    with pytest.raises(InputError, match="is a folder; choose another -o path"):
        write_text(folder, "text")
    assert sorted(p.name for p in folder.iterdir()) == ["keep"]


@pytest.mark.parametrize("name", ["report.json", "capture.json", "config.json", "traces/x.json", "rank0/a.txt"])
def test_output_into_a_run_directorys_own_names_is_refused(capsys, run_dir: Path, name: str) -> None:
    before = (run_dir / "report.json").read_bytes()
    line = one_line_error(*invoke(capsys, "report", str(run_dir), "--format", "json", "-o", str(run_dir / name))[::2])
    assert "run directory" in line
    assert (run_dir / "report.json").read_bytes() == before


def _on_a_full_disk(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with ``$FULL`` a 4 KiB tmpfs, in a private mount namespace (nothing outside sees it)."""
    full = tmp_path / "full"
    full.mkdir()
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs `unshare -m` (a private mount namespace) to mount a tiny tmpfs")
    script = f'mount -t tmpfs -o size=4k tmpfs "$FULL" && {command}; code=$?; echo "files: $(ls -A "$FULL")"; exit $code'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env={**os.environ, "FULL": str(full)},
        cwd=tmp_path, timeout=120,
    )


@pytest.mark.e2e
def test_full_disk_is_one_line_error_and_leaves_no_temp_file(run_dir: Path, tmp_path: Path) -> None:
    done = _on_a_full_disk(tmp_path, f'{sys.executable} -m advisor report "{run_dir}" --format json -o "$FULL/r.json"')
    line = one_line_error(done.returncode, done.stderr)
    assert "no space left" in line.lower()
    assert done.stdout.strip() == "files:", "a partial output or temp file was left on the full disk"


# -- --out and run directories --------------------------------------------------------------------


def _diagnose(capsys, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return invoke(capsys, "diagnose", "-q", "--no-fixes", *argv, str(script))


@pytest.mark.parametrize("existing", ["traces/mine.json", "config.json", "stdout.log", "rank1data/x.txt", "notes.txt"])
def test_out_refuses_a_non_empty_folder_that_is_not_a_run_directory(capsys, tmp_path: Path, existing: str) -> None:
    folder = tmp_path / "work"
    (folder / existing).parent.mkdir(parents=True, exist_ok=True)
    (folder / existing).write_text("user data")
    line = one_line_error(*_diagnose(capsys, tmp_path, "--out", str(folder))[::2])
    assert "not an advisor run directory" in line
    assert (folder / existing).read_text() == "user data"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [existing]


def test_out_dot_in_a_project_folder_touches_nothing(capsys, tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "project"
    (project / "traces").mkdir(parents=True)
    (project / "traces" / "keep.json").write_text("{}")
    (project / "rank0_notes").mkdir()
    monkeypatch.chdir(project)
    one_line_error(*_diagnose(capsys, tmp_path, "--out", ".")[::2])
    assert (project / "traces" / "keep.json").read_text() == "{}"
    assert (project / "rank0_notes").is_dir()


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path: Path, monkeypatch) -> None:
    from advisor.cli.cmd_diagnose import default_run_dir

    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    first, second = default_run_dir(script), default_run_dir(script)
    assert first != second
    assert first.is_dir() and second.is_dir()
    assert first.parent == second.parent and first.parent.name == "advisor-runs"


def test_a_run_folder_that_cannot_be_created_is_one_line_error(capsys, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "advisor-runs").write_text("a file where the runs folder would go")
    monkeypatch.chdir(tmp_path)
    line = one_line_error(*_diagnose(capsys, tmp_path)[::2])
    assert "--out" in line


def test_read_only_working_directory_is_one_line_error(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    real_mkdir = os.mkdir

    def read_only(path, mode=0o777, *args, **kwargs):  # type: ignore[no-untyped-def]
        if Path(path).absolute().is_relative_to(tmp_path / "advisor-runs") or Path(path).name == "advisor-runs":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    line = one_line_error(*_diagnose(capsys, tmp_path)[::2])
    assert "read-only" in line.lower()


# -- --write ----------------------------------------------------------------------------------------


def _diff_for(script: Path, new: str) -> str:
    old = script.read_text()
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True),
            fromfile=f"a/{script.name}", tofile=f"b/{script.name}",
        )
    )


def test_write_keeps_every_backup_and_the_mode(tmp_path: Path) -> None:
    from advisor.fixes.diff import write_diff

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    (tmp_path / "train.py.bak").write_text("an earlier backup\n")
    new = SCRIPT.replace("x = 1", "x = 2")
    backup = write_diff(script, _diff_for(script, new))
    assert script.read_text() == new
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert (tmp_path / "train.py.bak").read_text() == "an earlier backup\n"
    assert backup == tmp_path / "train.py.bak.1" and backup.read_text() == SCRIPT
    newer = new.replace("x = 2", "x = 3")
    assert write_diff(script, _diff_for(script, newer)) == tmp_path / "train.py.bak.2"
    assert (tmp_path / "train.py.bak.1").read_text() == SCRIPT


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_write_refuses_a_read_only_script(tmp_path: Path) -> None:
    from advisor.fixes.diff import write_diff

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    script.chmod(0o444)
    with pytest.raises(InputError, match="read-only"):
        write_diff(script, _diff_for(script, SCRIPT.replace("x = 1", "x = 2")))
    assert script.read_text() == SCRIPT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_write_through_a_symlink_edits_the_target(tmp_path: Path) -> None:
    from advisor.fixes.diff import write_diff

    real = tmp_path / "src" / "train.py"
    real.parent.mkdir()
    real.write_text(SCRIPT)
    link = tmp_path / "train.py"
    link.symlink_to(real)
    write_diff(link, _diff_for(link, SCRIPT.replace("x = 1", "x = 2")))
    assert link.is_symlink()
    assert "x = 2" in real.read_text()


@pytest.mark.parametrize("inside", ["traces/new", "x/y/z"])
def test_out_inside_another_run_is_refused(capsys, tmp_path: Path, run_dir: Path, inside: str) -> None:
    """``--out runB/traces/new`` put a second run's trace among runB's; `analyze runB/traces` read both (issue #30 campaign)."""
    (run_dir / "traces").mkdir()
    line = one_line_error(*_diagnose(capsys, tmp_path, "--out", str(run_dir / inside))[::2])
    assert "inside the run directory" in line
    assert sorted(p.name for p in run_dir.rglob("*")) == ["report.json", "traces"]
