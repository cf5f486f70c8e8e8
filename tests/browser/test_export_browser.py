"""In Chromium: the download links of three pages give an SVG with the page's tokens and a one-page PDF, and the
lab's "Show code" and "Cite" panels fill in when opened (htmx), in English and Chinese."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no /usr/bin/chromium: apt-get install -y chromium"),
]


@pytest.fixture(scope="module")
def base(live_server: str) -> str:
    """The session's server: a server of this file's own was the same server (no setting of its own), started again
    (4 s on CI)."""
    return live_server


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    """pytest-playwright's browser (its own event loop, as every browser test here), a context that downloads."""
    context = browser.new_context(accept_downloads=True)
    yield context.new_page()
    context.close()


@pytest.mark.parametrize(
    ("path", "token"),
    [
        ("/?tokens=cat+sat+on+the+mat&stage=4", "mat"),
        ("/block?tokens=cat+sat+on&stage=softmax", "sat"),
        ("/?tokens=猫+坐+在+垫子+上&stage=3&lang=zh", "垫子"),
    ],
)
def test_pressing_download_gives_the_figure(base: str, page, path: str, token: str) -> None:  # type: ignore[no-untyped-def]
    # Its links and panels are in the page and htmx is ready at its load: no wait for the network to go quiet.
    page.goto(base + path)
    for fmt in ("svg", "pdf"):
        with page.expect_download() as info:
            page.locator(f"[data-figure={fmt}]").first.click()
        body = Path(info.value.path()).read_bytes()
        if fmt == "svg":
            assert body.startswith(b"<?xml") and f">{token}<".encode() in body
        else:
            assert body.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", body)) == 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_show_code_and_cite_fill_in_when_opened(base: str, page, lang: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{base}/?tokens=cat+sat+on&stage=4&lang={lang}")
    page.locator("[data-show-code] > summary").click()
    page.locator("[data-code-text=lab] code").wait_for()
    page.locator("[data-code-text=torch] code").wait_for()
    assert "from attention_lab import trace" in page.locator("[data-code-text=lab]").inner_text()
    assert "torch.softmax" in page.locator("[data-code-text=torch]").inner_text()
    page.locator("[data-cite] > summary").click()
    page.locator("[data-cite-text] [data-provenance]").wait_for()
    assert "tokens=cat+sat+on" in page.locator("[data-cite-text]").inner_text()
    assert page.url.startswith(f"{base}/?tokens=cat+sat+on")  # the panels pushed no URL


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_copy_puts_the_snippet_on_the_clipboard_and_the_panel_spans_the_lab(base: str, browser, lang: str) -> None:  # type: ignore[no-untyped-def]
    """Each snippet's Copy button (the Clipboard API) copies its text; on "/" at 1280 px the panel is under both
    columns, as wide as the page, so no line of a snippet is clipped."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page = context.new_page()
    page.goto(f"{base}/?tokens=cat+sat+on&stage=4&lang={lang}")
    page.locator("[data-show-code] > summary").click()
    for kind in ("lab", "torch"):
        page.locator(f"[data-code-text={kind}] code").wait_for()
        button = page.locator(f"button[data-copy-code={kind}]")
        label = button.inner_text()
        assert label == {"en": "Copy", "zh": "复制"}[lang]
        button.click()
        page.locator(f"button[data-copy-code={kind}]", has_text={"en": "Copied", "zh": "已复制"}[lang]).wait_for()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == page.locator(f"[data-code-text={kind}]").text_content() and "print" in copied
    panel = page.locator("[data-export-panel]").bounding_box()
    stage = page.locator(".lab-body").bounding_box()
    assert panel and stage and panel["width"] >= stage["width"] - 1  # the page's width, not the right column's
    for kind in ("lab", "torch"):
        clipped = page.locator(f"[data-code-text={kind}]").evaluate("p => p.scrollWidth - p.clientWidth")
        assert clipped <= 0, (kind, clipped)
    context.close()


def test_each_download_is_saved_under_a_name_that_opens_and_runs(base: str, page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What a researcher takes away, clicked in the page: every download has its page's name and its format's
    extension (the BibTeX once came as `cite`, no extension), and the plain-torch snippet, saved under the name the
    page gives it, runs offline and prints the page's numbers (saved as the `torch.py` the panel once named it, its
    own `import torch` imported itself: a circular-import error)."""
    path = "/?tokens=cat+sat+on&stage=4"
    page.goto(base + path)
    page.locator("[data-show-code] > summary").click()
    page.locator("[data-cite] > summary").click()
    names = {}
    for sel in ("[data-figure=svg]", "[data-figure=pdf]", "[data-notebook]", "[data-code=lab]", "[data-code=torch]",
                "[data-cite-format=bibtex]", "[data-cite-format=csl]"):  # fmt: skip
        with page.expect_download() as info:
            page.locator(sel).first.click()
        names[sel] = info.value.suggested_filename
        info.value.save_as(tmp_path / names[sel])
        if sel.startswith("[data-code="):  # the name the panel shows is the name it is saved as
            assert page.locator(sel).inner_text() == names[sel]
    assert names == {
        "[data-figure=svg]": "attention-lab-lab.svg", "[data-figure=pdf]": "attention-lab-lab.pdf",
        "[data-notebook]": "attention-lab-lab.ipynb", "[data-code=lab]": "attention-lab-lab-lab.py",
        "[data-code=torch]": "attention-lab-lab-torch.py", "[data-cite-format=bibtex]": "attention-lab-lab.bib",
        "[data-cite-format=csl]": "attention-lab-lab-csl.json",
    }  # fmt: skip
    assert (tmp_path / "attention-lab-lab.bib").read_text().startswith("@software{")
    assert json.loads((tmp_path / "attention-lab-lab-csl.json").read_text())[0]["type"] == "software"
    root = Path(__file__).resolve().parents[2]
    ran = subprocess.run([sys.executable, "attention-lab-lab-torch.py"], cwd=tmp_path, capture_output=True, text=True,
                         env=os.environ | {"PYTHONPATH": str(root)}, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    with urllib.request.urlopen(base + path.replace("/?", "/index.json?")) as r:
        twin = json.load(r)
    shown = [[float(x) for x in line.split()] for line in ran.stdout.splitlines()[1:]]
    (weights,) = [m["values"] for m in twin["matrices"]]
    assert all(
        abs(a - b) < 1e-4 for row, want in zip(shown, weights, strict=True) for a, b in zip(row, want, strict=True)
    )
