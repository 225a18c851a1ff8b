"""Checkpoints between steps: each ``torch.save`` in the training loop timed as work between steps.

A run that saves a checkpoint every N steps spends that time between two optimizer steps, as
an evaluation does. The step that holds a large save is slow and left out of the steady step
(:mod:`advisor.metrics.periodic`), so without this the whole-run projection lost it, and a
small one hid in the median step. Each ``torch.save`` call on the main thread after the first
training step becomes an occurrence of :mod:`advisor.capture.between`:

* named by the user's function the loop called for it (``save_checkpoint``), or ``torch.save``
  at the loop's line when the loop saves inline;
* its period from two occurrences, or from the script's ``save_every``-like variable;
* saves before the first step (a copy of the initial weights) are start-up, not periodic.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from advisor.capture.set_aside import set_aside_before_save

SAVE = "torch.save"
"""The function an inline save is named by (the work itself: the loop is not the occurrence)."""


def timed_save(
    original: Callable[..., Any], rec: Any, stack: Callable[[], tuple[Any, ...]],
    unhooked: Callable[[Callable[[], Any]], Any] = lambda save: save(),
) -> Callable[..., Any]:
    """Return ``torch.save`` timed as work between steps on ``rec`` (a :class:`StepRecorder`).

    ``stack`` returns the user's frames as the hooks walk them, outermost first, as (file,
    function, first line, current line). ``unhooked`` runs the save without advisor's hooks on
    the user's modules (a whole model pickled with them failed: word_language_model's
    ``torch.save(model, f)`` at its epoch's end crashed a trial run).
    """
    main, pid = threading.get_ident(), os.getpid()
    busy = [False]

    def save(*args: Any, **kwargs: Any) -> Any:
        try:  # the user's file of that name, from before the diagnose, is not this run's to replace
            set_aside_before_save(args[1] if len(args) > 1 else kwargs.get("f"))
        except OSError:
            pass
        if busy[0] or rec.steps_seen == 0 or threading.get_ident() != main or os.getpid() != pid:
            return unhooked(lambda: original(*args, **kwargs))
        busy[0] = True
        start = rec.clock()
        try:
            return unhooked(lambda: original(*args, **kwargs))
        finally:
            end = rec.clock()
            busy[0] = False
            try:
                frames = stack()
                if frames:
                    file, _function, _first, line = frames[-1]
                    # NOTE: a frame of its own below the caller's, so the save is an occurrence
                    # apart from an evaluation in the same function between the same steps.
                    rec.between.call(rec.steps_seen, start, end, (*frames, (file, SAVE, 0, line)),
                                     profiled=rec.open_window is not None)
            except Exception:  # noqa: BLE001 - timing a save must never break the user's save
                pass

    save.__name__ = getattr(original, "__name__", "save")
    save.__doc__ = getattr(original, "__doc__", None)
    return save
