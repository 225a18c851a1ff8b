"""Findings as GitHub Actions workflow commands (``--format github``): one annotation per finding.

Each line is ``::error file=F,line=N,title=T::MESSAGE`` (``warning``, or ``notice`` for ``info``),
which the Actions runner shows on the pull request's diff. GitHub's escaping rules apply: in the
message ``%``, CR and LF become ``%25``, ``%0D`` and ``%0A``; in the properties ``:`` and ``,``
also become ``%3A`` and ``%2C``. Without them a kernel name holding a newline and ``::`` could
start a workflow command of its own (``::add-mask::``, ``::stop-commands::``).
"""

from __future__ import annotations

from advisor.engine.model import Finding, sort_findings
from advisor.report.ci_paths import repo_path
from advisor.report.model import Report

COMMANDS: dict[str, str] = {"error": "error", "warning": "warning", "info": "notice"}
"""advisor severity -> workflow command (an unknown severity is a ``notice``)."""


def escape_data(text: str) -> str:
    """Escape a workflow command's message (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (the message's escapes plus ``:`` and ``,``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding, script: str | None) -> str:
    """One workflow command for ``finding``, at its first code location (else at the script)."""
    props: list[str] = []
    loc = finding.locations[0] if finding.locations else None
    file = repo_path(loc.file) if loc is not None else (repo_path(script) if script else "")
    if file:
        props.append(f"file={escape_property(file)}")
        if loc is not None and loc.line and loc.line > 0:
            props.append(f"line={int(loc.line)}")
    props.append(f"title={escape_property(f'{finding.code} {finding.name}')}")
    message = finding.message
    if len(finding.locations) > 1:
        others = ", ".join(f"{repo_path(x.file)}:{x.line}" if x.line else repo_path(x.file) for x in finding.locations[1:])
        message += f" (also at {others})"
    if finding.fixes:
        message += "\nfix: " + ", ".join(f"{x.id} ({x.safety})" for x in finding.fixes)
    return f"::{COMMANDS.get(finding.severity, 'notice')} {','.join(props)}::{escape_data(message)}"


def render_github(report: Report) -> str:
    """Render ``report``'s findings as workflow commands, one per line ("" when nothing was found)."""
    return "".join(annotation(f, report.run.script) + "\n" for f in sort_findings(report.findings))
