"""What the training runs' fork server imports before it forks a run (app/train/runs.py `context`), in that process
only: it yields the cores first (TRAIN_NICENESS, so its own imports and every run it forks wait for the lab's
requests), then imports what a run runs (app/train/child.py: the trainer, torch with it, not the web kernel), once for
every run it will fork, and `torch._dynamo`: the optimizer's constructor (`torch.optim.AdamW`, dynamo-disabled) imports
it on its first call, some 2 s of CPU (3 s on a loaded machine) before each forked run's first step when the fork
server had not."""

from __future__ import annotations

import contextlib
import os

NICENESS = 10  # app/train/runs.py TRAIN_NICENESS (imported here it would nice whoever imports this module first)

with contextlib.suppress(OSError):  # never less nice than a worker started with --nice
    os.setpriority(os.PRIO_PROCESS, 0, max(NICENESS, os.getpriority(os.PRIO_PROCESS, 0)))

import torch._dynamo  # noqa: E402, F401  (what AdamW's first construction imports, once here rather than per run)

from . import child  # noqa: E402, F401  (after the nice: torch's import is the bulk of a run's start)
