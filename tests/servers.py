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

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
def server(settings: dict[str, str], *args: str, wait_s: float = 90, stop_s: float = 30) -> Iterator[Server]:
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
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() - start > wait_s:
                    log.seek(0)
                    raise RuntimeError("the server did not start: " + log.read().decode(errors="replace")[-2000:])
                time.sleep(0.2)
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
def served(settings: dict[str, str], *args: str, wait_s: float = 90) -> Iterator[tuple[str, int]]:
    """`server`, as (base URL, pid)."""
    with server(settings, *args, wait_s=wait_s) as running:
        yield running.base, running.proc.pid
