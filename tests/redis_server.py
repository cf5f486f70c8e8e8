"""A throwaway redis-server on a free loopback port (Debian's `redis-server`; .ci/run installs it), for the room
tests and the rooms benchmark: nothing is saved to disk, and it stops with the block. `PersistentRedis` is one that
can be killed and started again mid-test, keeping its data as the README's recipe does (appendonly yes)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from tests.servers import free_port
from tests.wait import NeverHappened, wait_until


def available() -> bool:
    return shutil.which("redis-server") is not None


def _started(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    """redis-server, once it answers PING (loading its append-only file first, when it has one)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def pong() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("redis-server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    try:
        wait_until(pong, 60, "redis-server answers PING", interval=0.05)
    except (NeverHappened, RuntimeError):
        proc.kill()
        raise RuntimeError(f"redis-server did not start on port {port}") from None
    return proc


@contextmanager
def redis_server() -> Iterator[str]:
    """Yields redis://127.0.0.1:PORT/0 once the server answers PING."""
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--protected-mode", "yes", "--loglevel", "warning"]  # fmt: skip
    proc = _started(cmd, port)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class PersistentRedis:
    """redis-server with an append-only file (fsync on every write) in a temporary directory, on one port for its
    life: `kill()` it (SIGKILL, as a crash would) and `start()` it again with its data."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.TemporaryDirectory(prefix="lab-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir.name, "--save", "",
               "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes", "--loglevel", "warning"]  # fmt: skip
        self.proc = _started(cmd, self.port)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> PersistentRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.dir.cleanup()
