"""A student's path through the lab in a real browser: step, toggle, reload, keys, language, offline."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from tests.browser.navigate import click_to_load

pytestmark = pytest.mark.browser


def row(page: Page, matrix: str, r: int) -> list[str]:
    return page.locator(f"table[data-matrix={matrix}] td[data-row='{r}']").evaluate_all(
        "tds => tds.map(td => td.dataset.value)"
    )


def test_step_through_the_five_stages_without_reloading(page: Page, live_server: str):
    page.goto(f"{live_server}/?lang=en&mask=none")
    page.evaluate("window.__same_document = true")
    keys = ["projection", "scores", "mask", "softmax", "weighted_sum"]
    expect(page.locator("#stage")).to_have_attribute("data-stage", "projection")
    for i, key in enumerate(keys[1:], start=2):
        page.click("[data-action=next]")
        expect(page.locator("#stage")).to_have_attribute("data-index", str(i))
        assert parse_qs(urlparse(page.url).query)["stage"] == [key]  # the URL was pushed
    assert page.evaluate("window.__same_document") is True  # htmx swapped the panel, no full load
    page.click("[data-toggle=mask]")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "true")
    twin = page.get_attribute("a[data-twin=json]", "href") or ""
    assert "mask=causal" in twin
    expect(page.locator('link[rel=alternate][type="application/json"]')).to_have_attribute("href", twin)
    expect(page.locator("[data-action=next]")).not_to_have_attribute("href", "")


def test_toggle_the_mask_at_softmax_and_read_row_one(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=4&mask=causal&lang=en")
    assert row(page, "weights", 0) == ["1.0", "0.0", "0.0", "0.0", "0.0"]
    page.click("[data-toggle=mask]")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "false")
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    off = [float(v) for v in row(page, "weights", 0)]
    assert all(v > 0 for v in off) and abs(sum(off) - 1) < 1e-5
    expect(page.locator("form#controls select[name=mask]")).to_have_value("none")  # controls updated out of band
    page.click("[data-toggle=mask]")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "true")
    assert row(page, "weights", 0)[0] == "1.0"


def test_the_pushed_url_reloads_to_the_same_view(page: Page, live_server: str):
    page.goto(f"{live_server}/?lang=en&mask=none")
    for index in ("2", "3"):
        page.click("[data-action=next]")
        expect(page.locator("#stage")).to_have_attribute("data-index", index)
    page.click("[data-toggle=mask]")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "true")
    before = row(page, "masked", 1)
    page.reload()
    expect(page.locator("#stage")).to_have_attribute("data-stage", "mask")
    assert row(page, "masked", 1) == before and before[2] == "-inf"


def test_keyboard_shortcuts(page: Page, live_server: str):
    page.goto(f"{live_server}/?lang=en&mask=none")
    stage = page.locator("#stage")
    page.keyboard.press("ArrowRight")
    expect(stage).to_have_attribute("data-index", "2")
    page.keyboard.press("ArrowRight")
    expect(stage).to_have_attribute("data-index", "3")
    page.keyboard.press("ArrowLeft")
    expect(stage).to_have_attribute("data-index", "2")
    page.keyboard.press("m")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "true")
    page.keyboard.press("s")
    expect(page.locator("form#controls select[name=scale]")).to_have_value("none")
    assert parse_qs(urlparse(page.url).query)["scale"] == ["none"]
    page.keyboard.press("s")
    expect(page.locator("form#controls select[name=scale]")).to_have_value("dk")
    # typing in the tokens box must not step: wait until the network is quiet, so a wrongly sent request would
    # have come back, then check that nothing changed
    before = page.url
    page.click("input[name=tokens]")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("m")
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    expect(stage).to_have_attribute("data-index", "2")
    assert page.url == before


def test_language_switch_keeps_the_state(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=4&mask=causal&lang=en")
    page.click("[data-lang=zh]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    expect(page.locator(".notice")).to_contain_text("第一行恰好是 1.00")
    page.click("[data-lang=en]")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator(".notice")).to_contain_text("The first row is exactly 1.00")


@pytest.mark.parametrize("mode", ["", "&present=1&hints=off&lesson=five-stages&lesson_step=2"])
def test_after_a_step_the_header_follows_the_new_view(page: Page, live_server: str, mode: str):
    """The language links and "Start a class" come with each step's answer, out of band (#43): the language link
    opens the stage stepped to, keeping presenter mode, hints off and the lesson, and leaving the example to the
    language; back to the stage before (htmx's history) shows its own links again."""
    page.goto(f"{live_server}/?lang=en&stage=scores{mode}")
    stage = page.locator("#stage")
    zh = page.locator("a[data-lang=zh]")
    expect(stage).to_have_attribute("data-stage", "scores")
    page.click("[data-action=next]")
    expect(stage).to_have_attribute("data-stage", "mask")
    expect(zh).to_have_attribute("href", re.compile(r"[?&]stage=mask(&|$)"))
    linked = parse_qs(urlparse(zh.get_attribute("href") or "").query)
    assert linked["lang"] == ["zh"] and "tokens" not in linked
    for key, value in parse_qs(mode).items():
        assert linked[key] == value
    start = parse_qs(page.locator("form[data-room-start] input[name=query]").input_value())
    assert start["stage"] == ["mask"] and start["tokens"] == ["cat sat on the mat"]  # the class sees the same numbers
    page.go_back()
    expect(stage).to_have_attribute("data-stage", "scores")
    expect(zh).to_have_attribute("href", re.compile(r"[?&]stage=scores(&|$)"))
    page.go_forward()
    expect(stage).to_have_attribute("data-stage", "mask")
    zh.click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(stage).to_have_attribute("data-stage", "mask")
    expect(page.locator("table[data-matrix] tbody th").first).to_have_text("猫")  # the Chinese example


def test_clicking_a_cell_shows_its_arithmetic(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=2&lang=en")
    value = page.get_attribute("table[data-matrix=scaled] td[data-row='1'][data-col='2']", "data-value")
    page.click("table[data-matrix=scaled] td[data-row='1'][data-col='2'] a")
    expect(page.locator("#arithmetic .result strong")).to_have_text(value or "")
    expect(page.locator("#arithmetic li math")).to_have_count(3)
    expect(page.locator("#arithmetic")).to_contain_text("∑")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_clicked_cells_arithmetic_is_in_view_beside_the_cell(page: Page, live_server: str, lang: str):
    """At 1280×720 the box sat below every matrix of the stage, out of view when the clicked cell (Q's, or X's) was
    high on the page: it now stays in the window, under the clicked cell, while the cell is in view."""
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{live_server}/?stage=1&lang={lang}")
    for matrix in ("q", "x"):
        cell = page.locator(f"table[data-matrix={matrix}] td[data-row='1'][data-col='2']")
        cell.locator("a").click()
        box = page.locator("#arithmetic")
        expect(box).to_have_attribute("data-cell", f"{matrix}.0.1.2")
        wait = page.wait_for_function  # the page scrolls to the clicked cell once swapped: poll for the state
        wait(
            "() => { const r = document.querySelector('#arithmetic').getBoundingClientRect();"
            " return r.top >= 0 && r.bottom <= innerHeight; }"
        )
        at, shown = cell.bounding_box(), box.bounding_box()
        assert at is not None and shown is not None
        assert at["y"] >= 0 and at["y"] + at["height"] <= shown["y"], (matrix, at, shown)  # the cell is not covered


def test_a_phone_reaches_the_form_below_the_stage_from_the_top(page: Page, live_server: str):
    """On a phone the numbers come first and the form after them, where a student did not find it: a link under the
    step bar goes there (a laptop shows the form above and no link)."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/?stage=2&lang=zh")
    link = page.locator("#stage a.to-controls")
    expect(link).to_be_visible()
    assert link.bounding_box()["y"] < 844  # type: ignore[index]  # on the first screen
    link.click()
    expect(page.locator("form#controls input[name=tokens]")).to_be_in_viewport()
    page.set_viewport_size({"width": 1280, "height": 720})
    expect(link).to_be_hidden()


@pytest.mark.parametrize(("lang", "said"), [("en", "Try again in 3 s"), ("zh", "请 3 秒后再试")])
def test_a_request_turned_away_says_so_and_when_to_try_again(page: Page, live_server: str, lang: str, said: str):
    """/generate's filters, typed quickly, were refused (429) while the page kept the last answer as if it were the
    new setting's, saying nothing: a refused htmx request now says so, with the server's Retry-After."""
    page.goto(f"{live_server}/?lang={lang}")

    def refuse(route):  # type: ignore[no-untyped-def]
        if route.request.headers.get("hx-request"):
            return route.fulfill(status=429, headers={"Retry-After": "3"}, body='{"message": "busy"}')
        return route.continue_()

    page.route("**/*", refuse)
    page.click("[data-action=next]")
    expect(page.locator("#refused")).to_contain_text(said)
    expect(page.locator("#stage")).to_have_attribute("data-index", "1")  # the view it had, not swapped


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_on_a_phone_a_lesson_step_comes_before_the_numbers(page: Page, live_server: str, lang: str):
    """A class walk: on a phone a lesson step's question sat 850–1,600 px down, under every matrix; it now comes
    first, on the first screen, and the matrices follow it."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/?lesson=five-stages&lesson_step=2&lang={lang}")
    panel = page.locator("#stage .lesson-panel")
    expect(panel).to_be_visible()
    top = panel.bounding_box()
    first = page.locator("#stage table[data-matrix]").first.bounding_box()
    assert top is not None and first is not None
    assert top["y"] < 844 and top["y"] < first["y"], (top, first)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_the_form_recomputes_and_errors_show_inline(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=4&lang=en")
    page.fill("input[name=tokens]", "we love small models")
    page.select_option("select[name=mask]", "causal")
    page.click("form#controls button[type=submit]")
    expect(page.locator("table[data-matrix=weights] tbody th").first).to_have_text("we")
    expect(page.locator("table[data-matrix=weights] tbody tr")).to_have_count(4)
    page.fill("input[name=n_heads]", "3")
    page.click("form#controls button[type=submit]")
    expect(page.locator("#stage .error")).to_contain_text("n_heads")


def test_no_request_leaves_loopback_and_the_csp_blocks_nothing(page: Page, live_server: str):
    hosts: set[str] = set()
    refused: list[str] = []
    page.on("request", lambda req: hosts.add(urlparse(req.url).hostname or req.url.split(":")[0]))
    page.on("console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.goto(f"{live_server}/?stage=3&mask=causal&lang=zh")
    page.click("[data-action=next]")
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    page.keyboard.press("m")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "false")
    # Presenter mode fits the numbers with inline sizes set by script; a step's htmx swap must not copy them back
    # as style attributes (htmx's default attributesToSettle did, refused by the CSP on every step).
    page.goto(f"{live_server}/?stage=2&lang=en&present=1")
    page.click("[data-action=next]")
    expect(page.locator("#stage")).to_have_attribute("data-index", "3")
    page.click("[data-action=next]")
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    page.goto(f"{live_server}/?preset=gpt2-small&tokens=" + "+".join(f"w{i}" for i in range(30)) + "&stage=4")
    page.locator("#zoom").hover()
    page.goto(f"{live_server}/docs")
    expect(page.locator(".swagger-ui .title").first).to_contain_text("Attention Lab")
    page.wait_for_load_state("networkidle")
    assert hosts - {"data"} == {"127.0.0.1"}
    assert refused == []


def test_block_page_steps_through_the_whole_block(page: Page, live_server: str):
    page.goto(f"{live_server}/block?mask=causal&lang=en")
    stage = page.locator("#stage")
    order = [
        "ln1",
        "projection",
        "scores",
        "mask",
        "softmax",
        "weighted_sum",
        "residual1",
        "ln2",
        "ffn_hidden",
        "ffn_out",
        "output",
    ]
    expect(stage).to_have_attribute("data-stage", order[0])
    for key in order[1:]:
        page.keyboard.press("ArrowRight")
        expect(stage).to_have_attribute("data-stage", key)
    assert parse_qs(urlparse(page.url).query)["stage"] == ["output"]
    page.click("[data-lang=zh]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(stage).to_have_attribute("data-stage", "output")


def test_a_lesson_reveals_its_answer_and_opens_the_lab(page: Page, live_server: str):
    page.goto(f"{live_server}/lessons/row-one?lang=en")
    answer = page.locator("li.lesson-step[data-step='1'] details.answer p")
    expect(answer).to_be_hidden()
    page.click("li.lesson-step[data-step='1'] details.answer summary")
    expect(answer).to_be_visible()
    expect(answer).to_contain_text("exp(−∞) = 0")
    click_to_load(page, "li.lesson-step[data-step='1'] a[data-open=lab]")  # the lab's page, loaded before it is read
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    assert row(page, "weights", 0) == ["1.0", "0.0", "0.0", "0.0", "0.0"]
    expect(page.locator("#arithmetic")).to_have_count(0)  # the cell the lesson asks about is not opened for them
    page.click("table[data-matrix=weights] td[data-row='0'][data-col='0'] a")
    expect(page.locator("#arithmetic")).to_be_visible()


def test_the_kv_cache_lesson_steps_through_decoding(page: Page, live_server: str):
    page.goto(f"{live_server}/lessons/kv-cache?lang=zh")
    page.click("li.lesson-step[data-step='1'] a[data-open=lab]")
    expect(page.locator(".cache-size")).to_have_attribute("data-cache-len", "2")
    for n in ("3", "4"):
        page.keyboard.press("ArrowRight")
        expect(page.locator(".cache-size")).to_have_attribute("data-cache-len", n)
    expect(page.locator(".notice")).to_have_attribute("data-equal", "true")


def test_the_toy_lab_opens_with_the_causal_mask_on(page: Page, live_server: str):
    """The chapter's lab is GPT's: stage 4's first row is exactly 1.00 until the mask is switched off."""
    page.goto(f"{live_server}/?stage=4&lang=zh")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "true")
    assert row(page, "weights", 0) == ["1.0", "0.0", "0.0", "0.0", "0.0"]


def test_unchanged_cells_keep_their_colour_across_the_mask_toggle(page: Page, live_server: str):
    """Stage 3's S′: the lower triangle does not change when the causal mask goes off, nor may its colours."""
    colours = "tds => tds.map(td => getComputedStyle(td).backgroundColor)"
    page.goto(f"{live_server}/?stage=3&mask=causal&lang=en")
    on = {r: page.eval_on_selector_all(f"table[data-matrix=masked] td[data-row='{r}']", colours) for r in range(5)}
    page.click("[data-toggle=mask]")
    expect(page.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "false")
    off = {r: page.eval_on_selector_all(f"table[data-matrix=masked] td[data-row='{r}']", colours) for r in range(5)}
    for r in range(5):
        assert on[r][: r + 1] == off[r][: r + 1], r  # j <= i: the same value, the same colour
    assert page.locator("table[data-matrix=masked] + [data-colorbar], .matrix [data-colorbar]").count() >= 1


def test_masked_weights_are_hatched_not_small(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=4&mask=causal&lang=en")
    cell = page.locator("table[data-matrix=weights] td[data-row='0'][data-col='3']")
    expect(cell).to_have_class("masked")
    expect(page.locator("table[data-matrix=weights] td[data-row='3'][data-col='0']")).not_to_have_class("masked")


PHONE_PAGES = [
    "/?lang=zh&stage=4",
    "/?lang=en&stage=1",
    "/?lang=en&preset=gpt2-small&stage=4&tokens=" + "+".join(f"w{i}" for i in range(40)),
    "/?lang=zh&stage=2&present=1",
    "/block?lang=zh",
    "/decode?lang=en&step=2",
    "/demos?lang=zh",
    "/params?lang=en",
    "/lessons/five-stages?lang=zh",
    "/r?lang=zh",
    "/generate?lang=zh&max_new_tokens=4",
    "/sinks?lang=zh&layer=15",
]


@pytest.mark.parametrize("url", PHONE_PAGES)
def test_no_page_scrolls_sideways_on_a_phone(page: Page, live_server: str, url: str):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server + url)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    tabs = page.locator("ol.tabs")
    if tabs.count():  # the step tabs keep to one row that scrolls
        assert tabs.first.evaluate("el => getComputedStyle(el).flexWrap") == "nowrap"


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=["1280x720", "1920x1080"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_fits_the_projector_at_every_stage(page: Page, live_server: str, size, lang):
    """The formula and every matrix of the stage on one screen, without scrolling; numbers ≥ 20 px on 1080p."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    for stage in range(1, 6):
        page.goto(f"{live_server}/?stage={stage}&present=1&lang={lang}")
        boxes = [page.locator(".formula").bounding_box()]
        boxes += [t.bounding_box() for t in page.locator("table[data-matrix]:visible").all()]
        assert len(boxes) >= 2, stage
        for box in boxes:
            assert box is not None and box["x"] >= 0 and box["y"] >= 0, stage
            assert box["x"] + box["width"] <= width and box["y"] + box["height"] <= height, (stage, box)
        if height >= 1080:
            px = page.locator("table[data-matrix] td").first.evaluate("td => parseFloat(getComputedStyle(td).fontSize)")
            assert px >= 20, (stage, px)


@pytest.mark.parametrize("url", ["/?stage=2&lang=zh", "/block?lang=en", "/decode?lang=zh&step=1", "/demos?lang=en",
                                 "/params?lang=zh", "/lessons/five-stages?lang=en", "/?stage=4&present=1&lang=en"])  # fmt: skip
def test_no_resource_fails_while_a_page_loads(page: Page, live_server: str, url: str):
    """Fonts, styles, scripts and images included: nothing answers 4xx or 5xx."""
    bad: list[str] = []
    page.on("response", lambda r: bad.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(live_server + url)
    page.wait_for_load_state("networkidle")
    assert not bad


def test_clicking_the_heat_map_moves_the_inspector_and_the_readout_follows(page: Page, live_server: str):
    toks = "+".join(f"w{i}" for i in range(64))
    page.goto(f"{live_server}/?preset=gpt2-small&stage=4&lang=en&tokens={toks}")
    expect(page.locator(".zoom[data-color=log]")).to_have_count(1)  # weights default to a readable log scale
    img = page.locator("#zoom")
    img.scroll_into_view_if_needed()
    box = img.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.7)
    expect(page.locator("#hover-readout")).not_to_be_empty()
    page.mouse.click(box["x"] + box["width"] * 0.1, box["y"] + box["height"] * 0.9)  # row ~57, column ~6
    expect(page.locator("table[data-matrix=weights] td").first).to_have_attribute("data-row", "48")
    assert "tile=48%2C0" in page.url
