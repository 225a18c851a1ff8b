"""The run's end: how long a plain run of the script takes to exit after its last step.

A plain run ends in CPython's shutdown, which frees every module and object: 0.6-1.1 s here
for a process that imported torch and ``torch._dynamo``, 7% of the demo's 12 s run. The
capture and the trial runs never pay it (they leave with ``os._exit``: the script's exit hooks
must not run after a run advisor cut short), so the whole-run projection left it out, and with
it a part that no fix changes: the demo's kept fixes were projected at 1.45x on the whole run
where the plain script, timed with and without ``fix.diff``, ran 1.32x faster.

The warm-start server imported the script's imports and ran none of its code; a child it forks
and lets exit the usual way pays that shutdown and nothing else (``{"end": ...}`` in
:mod:`advisor.capture.warm_server`). The diagnose asks for it as it launches the server
(:meth:`EndProbe.ask`): the server answers once it has imported, beside the capture's start-up,
and like its imports it is paused from the capture's first step, so nothing runs beside the
measured steps; the answer is read once the capture has returned (:meth:`EndProbe.collect`),
before any other request goes to the server.
Its CPU time is taken: the shutdown runs on one core and waits for nothing, so the CPU time is
what a plain run pays with a core to itself, whatever else the machine ran at that moment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from advisor.capture.warm_server import send_message

COLLECT_TIMEOUT_S = 15.0
"""How long :meth:`EndProbe.collect` waits for the answer once the server is ready (it takes about a second)."""


@dataclass
class EndProbe:
    """One measurement of the run's end through a warm-start server (:class:`~advisor.capture.warm.WarmServer`)."""

    server: Any
    asked: bool = False

    def ask(self) -> None:
        """Send the request (once); the server answers after its imports."""
        if self.asked or not self.server.alive or self.server.sock is None:
            return
        try:
            send_message(self.server.sock, {"end": True})
        except OSError:
            return
        self.asked = True

    def collect(self) -> float | None:
        """Return the end's CPU seconds, None when it was never asked for or could not be measured.

        It reads the server's ready messages first (they come before the answer); a server that
        does not answer in time is closed, since its late answer would be read as another reply.
        """
        if not self.asked:
            return None
        self.asked = False
        self.server.resume()  # paused at the capture's first step, ready or not
        if not self.server.ready():
            return None
        t0 = time.perf_counter()
        msg = self.server.receive(COLLECT_TIMEOUT_S)
        self.server.waited_s += time.perf_counter() - t0
        if msg is None:
            self.server.refused = "the server did not time the run's end in time"
            self.server.close()
            return None
        end = msg.get("end") if isinstance(msg, dict) else None
        cpu = end.get("cpu_s") if isinstance(end, dict) else None
        return float(cpu) if isinstance(cpu, int | float) and cpu >= 0 else None
