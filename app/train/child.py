"""What a training run's own process runs (`runs.supervise` forks it from the fork server, which imported this
module once: app/train/forkserver.py): only this module and what it imports are loaded there. `app.train.runs` (the
server's side) imports the web kernel, FastAPI and the presets for the pages; a run's process needs none of them
(loading them took some 1.3 s of CPU, and the fork server would hold them all)."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from . import arch

# A test hook, unset in use: every step of a run takes at least this many seconds (the rest of it waited out after
# the step is told; a stop still ends the wait at once). tests/browser/test_train_browser.py sets it so that a run
# lasts several of the page's redraws (one a second at most) on any machine: on a fast one 300 steps took less.
MIN_STEP_S = "ATTENTION_LAB_TEST_TRAIN_MIN_STEP_S"


def paced(send: Any, cancel: Any, min_step_s: float) -> Any:
    """`send` with each step's event followed by the rest of `min_step_s` since the one before (0: `send` itself)."""
    if min_step_s <= 0:
        return send
    last = time.monotonic()

    def tell(kind: str, data: Any) -> None:
        nonlocal last
        send(kind, data)
        if kind == "step":
            cancel.wait(max(0.0, last + min_step_s - time.monotonic()))
            last = time.monotonic()

    return tell


def train_in_child(config: dict[str, Any], conn: Any, cancel: Any) -> None:
    """In the run's own process: train and send every event, then the weights."""
    import torch

    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting the server for the cores
    try:
        send = paced(lambda kind, data: conn.send((kind, data)), cancel, float(os.environ.get(MIN_STEP_S) or 0))
        run = arch.train(config, send, cancel)
        conn.send(("params", {k: v.numpy() for k, v in run.params.items()}))
    except (BrokenPipeError, ConnectionResetError):  # the server stopped listening (shutting down): no one to tell
        pass
    except Exception as e:  # reported to the page, not lost in a child's stderr
        with contextlib.suppress(OSError):  # unless the server has gone meanwhile
            conn.send(("failed", {"message": f"{type(e).__name__}: {e}"}))
    finally:
        conn.close()
