"""What ops/image_check.py and ops/compose_check.py share: finding a container engine and a compose tool, loopback
HTTP, and the lines they print. Standard library only: the checks run with any python3, no venv needed."""

from __future__ import annotations

import http.client as httpc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = os.environ.get("IMAGE") or "attention-lab"


class CheckFailed(Exception):
    """One check did not hold; the message says which and what was seen."""


def ok(what: str) -> None:
    print(f"  ok  {what}", flush=True)


def say(what: str) -> None:
    print(f"{what}", flush=True)


def require(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def stop_on_sigterm() -> None:
    """A SIGTERM (a timeout, a CI's cancel) ends the check as Ctrl-C does, so that its `finally` removes what it
    started."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def skip(why: str) -> None:
    """No container engine: say so plainly and succeed (these checks are not part of `make test`)."""
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(0)


def _works(cmd: Sequence[str]) -> bool:
    try:
        return subprocess.run(list(cmd), capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def engine() -> str:
    """docker, else podman (CONTAINER_ENGINE picks one); exits 0 with a message where neither is installed."""
    wanted = os.environ.get("CONTAINER_ENGINE")
    names = [wanted] if wanted else ["docker", "podman"]
    for name in names:
        if shutil.which(name) and _works([name, "info"]):
            return name
    found = [n for n in names if shutil.which(n)]
    if found:
        skip(f"{found[0]} is installed but `{found[0]} info` fails (is its daemon or service running?)")
    skip("no container engine (docker or podman) on this machine; install one to build and check the image")
    raise AssertionError  # unreachable


def compose_tool(eng: str) -> list[str]:
    """`docker compose`, else `docker-compose`, else `podman-compose` (COMPOSE, e.g. "podman compose", picks one)."""
    if os.environ.get("COMPOSE"):
        return os.environ["COMPOSE"].split()
    candidates = [["docker", "compose"], ["docker-compose"]] if eng == "docker" else []
    candidates += [["podman-compose"], ["podman", "compose"]] if eng == "podman" else []
    for cmd in candidates:
        if shutil.which(cmd[0]) and _works([*cmd, "version"]):
            return cmd
    skip(f"{eng} is installed but no compose tool (docker compose, docker-compose or podman-compose)")
    raise AssertionError  # unreachable


def run(
    cmd: Sequence[str], *, check: bool = True, quiet: bool = False, merge: bool = False, timeout: float = 600, **kw: Any
) -> str:
    """Run a command, return its stdout (with its stderr when `merge`: a container's logs are on both); a failure
    shows the command and its output."""
    err = subprocess.STDOUT if merge else subprocess.PIPE
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout, **kw)
    out, errors = str(p.stdout), str(p.stderr or "")
    if check and p.returncode != 0:
        raise CheckFailed(f"`{' '.join(cmd)}` exited {p.returncode}:\n{out[-3000:]}{errors[-3000:]}")
    if not quiet and p.returncode != 0:
        print(out[-2000:] + errors[-2000:], file=sys.stderr)
    return out


def image_exists(eng: str) -> bool:
    return subprocess.run([eng, "image", "inspect", IMAGE], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    port: int,
    path: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 300,
) -> Answer:
    """One request to 127.0.0.1:port (loopback only: nothing else is ever addressed)."""
    conn = httpc.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    start = time.perf_counter()
    try:
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        raw = r.read()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, raw, time.perf_counter() - start)
    finally:
        conn.close()


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """Poll `probe` until it returns something true (exceptions count as not yet); the value, or CheckFailed."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
            last = value
        except (OSError, httpc.HTTPException, CheckFailed, ValueError) as e:
            last = e
        time.sleep(every)
    raise CheckFailed(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def healthy(port: int) -> bool:
    r = http(port, "/healthz", timeout=5)
    return r.status == 200 and r.json().get("status") == "ok"
