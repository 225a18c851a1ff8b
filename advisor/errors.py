"""One error hierarchy and the exit codes it maps to.

Every error a user can cause is an :class:`AdvisorError` whose message is one line that says
what to do next. The CLI boundary (``advisor.cli.main``) is the only place that turns them into
exit codes; nothing else prints and exits.
"""

from __future__ import annotations

EXIT_OK = 0
"""Nothing found, or everything found was fixed."""
EXIT_FINDINGS = 1
"""Findings at or above ``--fail-on`` remain."""
EXIT_USAGE = 2
"""Bad usage, bad input (missing file, broken trace, bad rule file) or an internal error."""
EXIT_SCRIPT_FAILED = 3
"""The user's script failed (raised, timed out); the partial capture is still written."""


class AdvisorError(Exception):
    """Base of every error advisor reports to the user: a one-line, actionable message."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(AdvisorError):
    """The command line or configuration is wrong (unknown option value, missing script)."""


class InputError(AdvisorError):
    """An input file is missing, empty, truncated or not what it claims to be."""


class TraceError(InputError):
    """A trace file cannot be read as a torch.profiler / Kineto Chrome trace."""


class RuleError(AdvisorError):
    """A rule file is invalid; the message names its path and the offending key."""


class ScriptFailed(AdvisorError):
    """The user's script raised, crashed or timed out; what was measured is kept on disk."""

    exit_code = EXIT_SCRIPT_FAILED


EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells report it); SIGTERM exits 143 and SIGHUP 129 (128 + the signal)."""


class Interrupted(AdvisorError):
    """The user stopped a run (Ctrl-C, SIGTERM, SIGHUP); the message says where what was measured is saved.

    The exit code is 128 + the signal's number, as a shell reports a process the signal ended,
    whichever stage (capture, fix trials, sweep) it arrived in.
    """

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, signum: int = 2) -> None:  # 2: SIGINT, Ctrl-C
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum
