"""A page is declared once (app/web/registry.py): its folder plus one registry line route it, put it in the menu,
let a class follow it and queue it as heavy work when it says so."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app import templating as i18n
from app.main import create_app
from app.settings import Settings
from app.web import registry
from app.web.registry import PAGES, Page

FAKE = Page("fake", "/fake", "tests.app.web.fakepage.page", "models.html", nav="more", heavy=True)


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setattr(registry, "PAGES", (*PAGES, FAKE))  # the one registry line
    for lang, label in (("en", "A fake page"), ("zh", "假页面")):  # its catalogue entries
        monkeypatch.setitem(i18n.MESSAGES[lang], "nav.fake", label)
    return TestClient(create_app(Settings(device="cpu")))


def test_a_registered_page_is_routed_in_the_menu_and_followable(fake_client: TestClient) -> None:
    page = fake_client.get("/fake?lang=zh")
    assert page.status_code == 200
    more = page.text.split("data-more-nav", 1)[1].split("</details>", 1)[0]
    assert re.search(r'<a href="/fake\?lang=zh" aria-current="page">假页面</a>', more)  # in the menu, marked current
    assert 'action="/r" class="start-class"' in page.text  # followable: it offers "Start a class"
    assert registry.followable("/fake") and not registry.followable("/fake/x")
    assert '<a href="/fake?lang=en">A fake page</a>' in fake_client.get("/params").text  # every page's menu lists it
    assert "/fake" in registry.heavy_paths()


def test_the_registry_states_what_the_hand_lists_said() -> None:
    """The menu, the followable pages and the heavy ones as they were listed by hand before the registry."""
    assert [p.path for p in registry.nav("first")] == ["/", "/lessons", "/block", "/decode", "/model"]
    assert [p.path for p in registry.nav("more")] == [
        "/sinks",
        "/generate",
        "/predict",
        "/lens",
        "/heads",
        "/attribution",
        "/train",
        "/cross",
        "/architectures",
        "/cost",
        "/tiles",
        "/demos",
        "/params",
        "/models",
    ]
    for path in ("/", "/block", "/lessons", "/lessons/five-stages", "/patch", "/train", "/tiles"):
        assert registry.followable(path), path
    for path in ("/embed", "/models", "/r", "/docs", "/api/v1/attention", "/lessons/", "/lessons/A"):
        assert not registry.followable(path), path
    assert registry.heavy_paths() >= {"/generate", "/model", "/predict", "/lens", "/heads", "/patch", "/api/v1/patch"}
    assert not registry.heavy_paths() & {"/", "/block", "/train"}


def test_each_page_is_named_in_both_catalogues() -> None:
    for page in PAGES:
        if page.nav:
            assert page.label in i18n.MESSAGES["en"] and page.label in i18n.MESSAGES["zh"], page.name
