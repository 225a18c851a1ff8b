"""torchrun's own ``main``, ended without waiting for the threads it left: ``python -m advisor.distributed.torchrun_main ARGS``.

torch.distributed.run tees the ranks' logs from the threads of a pool (``TailLog``) that its
agent stops as it shuts down. A SIGTERM that lands in the wrong place of that shutdown (advisor
killed outright: the parent-death signal) leaves them running, and the interpreter's exit waits
for them for ever: 1 of 25 jobs whose advisor was SIGKILLed on this machine left torchrun asleep
in ``concurrent.futures``' exit hook, its ranks long gone. Here torchrun's ``main`` runs as
``python -m torch.distributed.run`` would run it, with the same arguments, exit code and
traceback; the exit then runs the ``atexit`` hooks and flushes the streams, and ends the process
without joining threads.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from advisor._proc import exit_code_of, quick_exit


def run_then_exit(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` as a program's main; exit with its code without waiting for threads it left running."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exit_code_of(exc)
    except BaseException:  # noqa: BLE001 - reported as the interpreter reports an uncaught one
        traceback.print_exc()
        code = 1
    quick_exit(code, join_threads=False)


def main() -> NoReturn:
    """Run torchrun with this process's arguments."""
    from torch.distributed.run import main as torchrun

    sys.argv[0] = "torchrun"  # its usage and errors name it as the user knows it
    run_then_exit(torchrun)


if __name__ == "__main__":
    main()
