"""Running the CLI in-process like the console script, and checking its one-line errors."""

from __future__ import annotations

import pytest

from advisor.cli.main import main
from advisor.errors import EXIT_USAGE


def invoke(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI like the console script; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def one_line_error(code: int, err: str, exit_code: int = EXIT_USAGE) -> str:
    """Assert ``err`` is exactly one ``advisor: error: ...`` line (no internal error); return it."""
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("advisor: error: "), err
    assert "internal error" not in err
    return lines[0]
