"""One redis-server and one `attention-lab worker` shared by the tests of a module that neither kill nor stop the
worker (tests/app/train/test_queue.py, tests/app/lab/test_jobs_queue.py): its start (imports, torch, its lab, its
fork server) is paid once per module, not per test. Each test starts on an emptied Redis (`fresh`): no test sees
another's runs, jobs, logs or presets. The worker's log goes to a file (read with `log_since`), never to a pipe that
nobody reads and that would fill."""

from __future__ import annotations

import io
import subprocess
from dataclasses import dataclass
from typing import IO

import redis

from app.lab.jobs import JOBS_QUEUE, NAMESPACE, TRAIN_QUEUE, WORKERS
from app.lab.jobs import LIVE as JOBS_LIVE
from app.train.queue import LIVE as RUNS_LIVE
from tests.wait import wait_until


@dataclass(frozen=True)
class Shared:
    """The module's Redis (`url`), its queue worker and the worker's log (stderr)."""

    url: str
    worker: subprocess.Popen[bytes]
    log: IO[bytes]

    def log_end(self) -> int:
        """Where the worker's log ends now: what a test's `log_since` reads from."""
        return self.log.seek(0, io.SEEK_END)

    def log_since(self, offset: int) -> bytes:
        self.log.seek(offset)
        return self.log.read()


def fresh(shared: Shared) -> str:
    """The shared Redis, as a fresh one: once no run or job is live and both queues are empty (the previous test's
    work all ended), every key goes but the queue worker's own (Dramatiq's heartbeats, its beat in WORKERS, which
    the web workers read to know a queue worker runs); returns its URL once the worker has beaten."""
    assert shared.worker.poll() is None, "the shared queue worker exited"
    r = redis.Redis.from_url(shared.url)
    try:
        busy = (RUNS_LIVE, JOBS_LIVE, f"{NAMESPACE}:{TRAIN_QUEUE}", f"{NAMESPACE}:{JOBS_QUEUE}")
        wait_until(lambda: not r.exists(*busy), 60, "the previous test's runs and jobs to end")
        keep = {f"{NAMESPACE}:__heartbeats__".encode(), WORKERS.encode()}
        gone = [k for k in r.scan_iter() if k not in keep]
        if gone:
            r.delete(*gone)
        wait_until(lambda: r.zcard(WORKERS), 120, "the shared queue worker to beat")
    finally:
        r.close()
    return shared.url
