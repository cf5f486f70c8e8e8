"""A room code as a student types it (#32 item 7): with a dash, a space, in any case or in a phone's full-width
letters, the join form lets it through and the server reads it as the same code."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.rooms.store import normal_code
from tests.conftest import make_client

TYPED = ["ZZG-39U", "zzg-39u", "ZZG 39U", "ZZG39U", " zzg–39u ", "ＺＺＧ－３９Ｕ"]


@pytest.fixture(scope="module")
def lab() -> TestClient:
    return make_client()


def pattern(client: TestClient) -> re.Pattern[str]:
    """The join form's own `pattern` (a browser matches it against the whole value, as fullmatch does)."""
    page = BeautifulSoup(client.get("/r?lang=en").text, "html.parser")
    box = page.select_one("form.join-form input[name=code]")
    assert box is not None
    return re.compile(box["pattern"])


@pytest.mark.parametrize("typed", TYPED)
def test_a_code_with_a_dash_passes_the_form_and_joins(lab: TestClient, typed: str) -> None:
    if typed.strip() == typed:  # the browser checks the value as typed; spaces at the ends only the server trims
        assert pattern(lab).fullmatch(typed), typed
    assert normal_code(typed) == "ZZG39U"
    r = lab.get("/r", params={"code": typed, "lang": "zh"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/r/ZZG39U?lang=zh"


@pytest.mark.parametrize("typed", ["ZZ", "ZZG_39U", "ZZG-39", "ZZG-39UU"])
def test_what_cannot_be_a_code_is_still_refused(lab: TestClient, typed: str) -> None:
    assert normal_code(typed) is None
    assert lab.get("/r", params={"code": typed}, follow_redirects=False).status_code == 404
    if len(typed) < 6 or "_" in typed:
        assert not pattern(lab).fullmatch(typed)
