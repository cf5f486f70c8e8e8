"""What the training runs' fork server imports before it forks a run (app/train/runs.py `context`), in that process
only: it yields the cores first (TRAIN_NICENESS, so its own imports and every run it forks wait for the lab's
requests), then imports what a run runs (app/train/child.py: the trainer, torch with it, not the web kernel), once for
every run it will fork."""

from __future__ import annotations

import contextlib
import os

NICENESS = 10  # app/train/runs.py TRAIN_NICENESS (imported here it would nice whoever imports this module first)

with contextlib.suppress(OSError):  # never less nice than a worker started with --nice
    os.setpriority(os.PRIO_PROCESS, 0, max(NICENESS, os.getpriority(os.PRIO_PROCESS, 0)))

from . import child  # noqa: E402, F401  (after the nice: torch's import is the bulk of a run's start)
