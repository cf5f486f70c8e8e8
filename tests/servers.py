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
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(settings: dict[str, str], *args: str, wait_s: float = 90) -> Iterator[tuple[str, int]]:
    """The server with `settings` (ATTENTION_LAB_* without the prefix) and extra CLI `args`, on a free port;
    yields (base URL, pid) once /healthz answers, and stops it afterwards."""
    port = free_port()
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu"} | {f"ATTENTION_LAB_{k}": v for k, v in settings.items()}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError("the server did not start: " + log.read().decode(errors="replace")[-2000:])
                time.sleep(0.2)
            yield base, proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=30)
