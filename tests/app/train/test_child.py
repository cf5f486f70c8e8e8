"""A run's process whose server stopped listening (its shutdown, the suite met it under load) ends quietly: the
broken pipe is no failure to report, and reporting it on that same pipe raised a second error into stderr."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pytest

from app.train import runs
from app.train.child import train_in_child


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
