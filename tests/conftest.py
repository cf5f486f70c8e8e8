"""Shared fixtures: an app on the CPU with its own settings, and a TestClient over it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


def make_client(**overrides: object) -> TestClient:
    return TestClient(create_app(Settings(device="cpu", **overrides)))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c
