"""A real `attention-lab serve` in a subprocess, for the tests (and tools) that need HTTP over loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from tests.wait import NeverHappened, wait_until

ROOT = Path(__file__).resolve().parent.parent
# How long a server may take to answer /healthz: it imports torch and the app, seconds on a quiet machine, past a
# minute on CI's loaded 2-core one beside the other worker's tests and browsers (a browser test's session server once
# failed to start within 60 s there). A server that dies says so at once (its process ended); this bounds the wait
# only, under pytest-timeout's 300 s for the test whose fixture starts it.
START_S = 150.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(base: str, timeout: float = 2) -> bool:
    """Whether the server at `base` answers /healthz now (not while it starts, nor once it is gone)."""
    try:
        return httpx.get(base + "/healthz", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(base: str, proc: subprocess.Popen[bytes], wait_s: float = START_S) -> None:
    """Returns once the server at `base` answers /healthz; RuntimeError if its process `proc` ends first, or past
    `wait_s` seconds."""
    try:
        wait_until(lambda: proc.poll() is not None or healthy(base), wait_s, f"{base} answers /healthz", 0.05)
    except NeverHappened as exc:
        raise RuntimeError(f"the server did not start: {exc}") from None
    if proc.poll() is not None:
        raise RuntimeError(f"the server did not start: it exited ({proc.returncode})")


@dataclass(frozen=True)
class Server:
    """A running `attention-lab serve`: its address, its process (signal it, poll it) and its log so far."""

    base: str
    port: int
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    start_s: float  # seconds until /healthz first answered

    def log_tail(self, chars: int = 3000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-chars:]


@contextmanager
def server(settings: dict[str, str], *args: str, wait_s: float = START_S, stop_s: float = 30) -> Iterator[Server]:
    """The server with `settings` (ATTENTION_LAB_* without the prefix; DEVICE is cpu unless given) and extra CLI
    `args`, on a free port, once /healthz answers; its log (stderr) printed when the block fails. Afterwards it is
    stopped: SIGTERM, then killed if it is still there after `stop_s`."""
    port = free_port()
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu"} | {f"ATTENTION_LAB_{k}": v for k, v in settings.items()}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        base = f"http://127.0.0.1:{port}"
        try:
            start = time.monotonic()
            try:
                wait_healthy(base, proc, wait_s)
            except RuntimeError as exc:
                log.seek(0)
                raise RuntimeError(f"{exc}: " + log.read().decode(errors="replace")[-2000:]) from None
            running = Server(base, port, proc, log, time.monotonic() - start)
            try:
                yield running
            except BaseException:
                print(f"the server's log, its end:\n{running.log_tail()}", file=sys.stderr)
                raise
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(stop_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait(timeout=30)


@contextmanager
def served(settings: dict[str, str], *args: str, wait_s: float = START_S) -> Iterator[tuple[str, int]]:
    """`server`, as (base URL, pid)."""
    with server(settings, *args, wait_s=wait_s) as running:
        yield running.base, running.proc.pid
