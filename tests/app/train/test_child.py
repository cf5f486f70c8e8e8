"""A run's process whose server stopped listening (its shutdown, the suite met it under load) ends quietly: the
broken pipe is no failure to report, and reporting it on that same pipe raised a second error into stderr."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

import pytest

from app.train import runs
from app.train.child import paced, train_in_child


def test_a_run_whose_server_stopped_listening_ends_without_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[str] = []

    def train(config: dict[str, Any], tell: Any, cancel: Any) -> Any:
        told.append("step")
        tell("step", {"step": 1})  # the parent's end is closed: a broken pipe
        raise AssertionError("unreachable: tell raised")

    monkeypatch.setattr(runs.arch, "train", train)
    parent, child = mp.get_context("spawn").Pipe(duplex=False)
    parent.close()
    train_in_child({}, child, None)  # returns: nothing raised
    assert told == ["step"] and child.closed


def test_a_run_that_fails_still_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def train(config: dict[str, Any], tell: Any, cancel: Any) -> Any:
        raise ValueError("no such task")

    monkeypatch.setattr(runs.arch, "train", train)
    parent, child = mp.get_context("spawn").Pipe(duplex=False)
    train_in_child({}, child, None)
    assert parent.recv() == ("failed", {"message": "ValueError: no such task"})


def test_the_test_hook_paces_steps_and_a_stop_ends_the_wait() -> None:
    """ATTENTION_LAB_TEST_TRAIN_MIN_STEP_S (the browser tests' server): each step's event then the rest of the step's
    least time; other events pass at once; unset, the events go straight through. The bounds checked are lower
    bounds (a loaded machine only waits longer) but the stop's, 30 s under the 60 s it would otherwise wait."""
    sent: list[str] = []
    send = lambda kind, data: sent.append(kind)  # noqa: E731
    cancel = threading.Event()
    assert paced(send, cancel, 0) is send
    tell = paced(send, cancel, 0.05)
    start = time.monotonic()
    for kind in ("eval", "step", "step", "step", "snapshot"):
        tell(kind, {})
    assert time.monotonic() - start >= 0.15 and sent == ["eval", "step", "step", "step", "snapshot"]
    slow = paced(send, cancel, 60)
    cancel.set()  # a stop
    start = time.monotonic()
    slow("step", {})
    assert time.monotonic() - start < 30
