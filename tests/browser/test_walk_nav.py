"""A class walk (stop 52): the header's links differed from page to page (the lab's row had "Whole block", "KV cache"
and "Model view"; the lessons' and /train's had not), and the menu said "Training view" beside "Train". Now at a
given width every page's header shows the same links, each page under the same name everywhere, and no two names
alike: /train is "Train a tiny GPT", as its page is titled."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

pytestmark = pytest.mark.browser

PAGES = ["/", "/lessons", "/model", "/predict", "/train", "/generate", "/models", "/r"]
HEADER = """() => {
  const path = a => new URL(a.href).pathname;
  const nav = document.querySelector('header.top nav.links');
  return {row: [...nav.querySelectorAll(':scope > a:not([data-lang])')].filter(a => a.checkVisibility()).map(path),
          names: [...nav.querySelectorAll('a:not([data-lang])')].map(a => [path(a), a.textContent.trim()])};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_has_the_same_header(browser: Browser, live_server: str, lang: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        for width in (1280, 1920):
            page.set_viewport_size({"width": width, "height": 720})
            rows, names = {}, {}
            for path in PAGES:
                page.goto(f"{live_server}{path}?lang={lang}", wait_until="domcontentloaded")
                got = page.evaluate(HEADER)
                rows[path] = got["row"]
                for href, name in got["names"]:
                    names.setdefault(href, set()).add(name)
            assert len({tuple(r) for r in rows.values()}) == 1, (width, rows)  # the same links in the row
            assert all(len(n) == 1 for n in names.values()), names  # each page one name everywhere
            labels = [next(iter(n)) for p, n in names.items() if p != "/docs"]
            assert len(set(labels)) == len(labels), labels  # no two alike
        train = next(iter(names["/train"]))
        assert train == {"en": "Train a tiny GPT", "zh": "训练一个小 GPT"}[lang], train
    finally:
        page.close()
