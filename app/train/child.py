"""What a training run's own process runs (`runs.supervise` forks it from the fork server, which imported this
module once: app/train/forkserver.py): only this module and what it imports are loaded there. `app.train.runs` (the
server's side) imports the web kernel, FastAPI and the presets for the pages; a run's process needs none of them
(loading them took some 1.3 s of CPU, and the fork server would hold them all)."""

from __future__ import annotations

import contextlib
from typing import Any

from . import arch


def train_in_child(config: dict[str, Any], conn: Any, cancel: Any) -> None:
    """In the run's own process: train and send every event, then the weights."""
    import torch

    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting the server for the cores
    try:
        run = arch.train(config, lambda kind, data: conn.send((kind, data)), cancel)
        conn.send(("params", {k: v.numpy() for k, v in run.params.items()}))
    except (BrokenPipeError, ConnectionResetError):  # the server stopped listening (shutting down): no one to tell
        pass
    except Exception as e:  # reported to the page, not lost in a child's stderr
        with contextlib.suppress(OSError):  # unless the server has gone meanwhile
            conn.send(("failed", {"message": f"{type(e).__name__}: {e}"}))
    finally:
        conn.close()
