"""The backend of ``advisor verify``: the kept fixes timed plainly beside their claim (:mod:`advisor.verify`)."""

from __future__ import annotations

from advisor.verify.model import VERIFY_FILE
from advisor.verify.run import verify_run
from advisor.verify.text import pair_line as verification_pair_line
from advisor.verify.text import summary_lines as verification_lines

__all__ = ["VERIFY_FILE", "verification_lines", "verification_pair_line", "verify_run"]
