"""Heads with jobs (issue #33), the pages /heads and /patch on a tiny decoder built here: the API's numbers in both
languages, the JSON twins, presenter mode, the knock-out of the top induction heads, the pruning curve in words,
a chosen patching cell linking both runs into the lab, and the model view linking each head to its roles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client

TEXT = "The cat sat on the mat. The dog sat on the log."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    pytest.importorskip("transformers")
    from tests.own_models import build

    path, _ = build("llama", tmp_path_factory.mktemp("heads-pages") / "tiny", seed=6)
    with make_client(models=f"tiny={path}", pretrained=False) as c:
        yield c


def page(c: TestClient, path: str, **params: str) -> BeautifulSoup:
    r = c.get(path, params=params)
    assert r.status_code == 200, r.headers.get("x-lab-error")
    return BeautifulSoup(r.text, "html.parser")


@pytest.mark.parametrize(("lang", "title"), [("en", "Heads with jobs"), ("zh", "各司其职的头")])
def test_the_heads_page_shows_the_apis_numbers(tiny: TestClient, lang: str, title: str) -> None:
    params = {"preset": "tiny", "text": TEXT, "probe_n": "16", "lang": lang}
    doc = tiny.get("/api/v1/head_roles", params={k: v for k, v in params.items() if k != "lang"}).json()
    soup = page(tiny, "/heads", **params)
    assert soup.h2.text == title
    cells = soup.select("table.model-grid td")
    assert len(cells) == 3 * 4
    first = doc["roles"]["induction"][0][0]
    assert abs(float(cells[0]["data-value"]) - first) < 1e-9
    loss = soup.select_one(".probe-loss")
    assert abs(float(loss["data-second"]) - doc["probe_loss"]["second"]) < 1e-9
    top = soup.select_one("ol.top-heads a")["data-head"]
    assert top == f"{doc['top']['induction'][0]['layer']}.{doc['top']['induction'][0]['head']}"
    twin = tiny.get("/heads.json", params=params).json()
    assert twin["probe"]["token_ids"] == doc["probe"]["token_ids"] and twin["role"] == "induction"
    assert len(twin["weights"]) == 2 * 16 + 1


def test_knocking_out_the_top_induction_heads_and_the_pruning_curve(tiny: TestClient) -> None:
    params = {"preset": "tiny", "text": "The cat sat on the mat.", "probe_n": "16"}
    twin = tiny.get("/heads.json", params=params | {"knock": "2", "prune": "1"}).json()
    top = tiny.get("/api/v1/head_roles", params=params | {"top": "2"}).json()["top"]["induction"]
    assert twin["ablated"]["ablate"] == sorted([[h["layer"], h["head"]] for h in top])
    prune = tiny.get("/api/v1/prune", params={"preset": "tiny", "text": "The cat sat on the mat."}).json()
    assert twin["curve"]["can_go"] == prune["can_go"] and twin["curve"]["mean_loss"] == prune["mean_loss"]
    soup = page(tiny, "/heads", **params, knock="2", prune="1")
    assert soup.select_one(".knocked") is not None
    assert int(soup.select_one(".prune-says")["data-can-go"]) == prune["can_go"]


def test_the_patch_page_and_a_chosen_cell(tiny: TestClient) -> None:
    params = {"preset": "tiny", "clean": "The cat sat on the mat.", "corrupted": "The dog sat on the log."}
    doc = tiny.get("/api/v1/patch", params=params).json()
    for lang in ("en", "zh"):
        soup = page(tiny, "/patch", **params, grid="mlp_out", cell="1.3", lang=lang)
        cells = soup.select("table.patch-grid td")
        assert len(cells) == 3 * len(doc["clean_ids"])
        assert soup.select_one("input[name=clean]")["value"] == params["clean"]
        chosen = soup.select_one("#cell")
        assert chosen["data-cell"] == "1.3"
        links = [a["href"] for a in chosen.select("a[data-run]")]
        assert "token_ids=" + ",".join(map(str, doc["clean_ids"])) in links[0]
        assert "token_ids=" + ",".join(map(str, doc["corrupted_ids"])) in links[1] and "layer=1" in links[1]
    twin = tiny.get("/patch.json", params=params | {"grid": "head"}).json()
    assert twin["grids"] == doc["grids"] and len(twin["grid"][0]) == 4
    bad = tiny.get("/patch", params=params | {"corrupted": "The dog"})
    assert bad.status_code == 422 and "same number of tokens" in bad.text


def test_presenter_mode_and_bad_view_parameters(tiny: TestClient) -> None:
    soup = page(tiny, "/heads", preset="tiny", text=TEXT, probe_n="8", present="1")
    assert "present" in soup.body["class"]
    r = tiny.get("/heads", params={"preset": "tiny", "text": TEXT, "role": "bracket"})
    assert r.status_code == 422 and "role" in r.headers["x-lab-error"]
    r = tiny.get("/patch", params={"preset": "tiny", "clean": "a b", "corrupted": "a c", "grid": "x"})
    assert r.status_code == 422 and "grid" in r.headers["x-lab-error"]


def test_the_nav_links_the_heads_page(tiny: TestClient) -> None:
    soup = page(tiny, "/heads", preset="tiny", text=TEXT, probe_n="8")
    link = next(a for a in soup.select("nav.links a") if a.text == "Heads with jobs")
    assert link["href"].startswith("/heads") and link["aria-current"] == "page"


def test_the_model_view_links_a_chosen_head_to_its_roles(tiny: TestClient) -> None:
    soup = page(tiny, "/model", preset="tiny", text=TEXT, layer="2", head="1")
    link = soup.select_one("a[data-roles]")
    assert link["data-roles"] == "2.1" and link["href"].startswith("/heads?") and "head=2.1" in link["href"]
    r = tiny.get(link["href"].split("#")[0])
    assert r.status_code == 200
    roles = BeautifulSoup(r.text, "html.parser")
    assert roles.select_one("td.chosen")["data-layer"] == "2" and roles.select_one("td.chosen")["data-head"] == "1"


# -- #42: figures a class can read, and a first load that says it computes ---------------------------------------

NAVIGATION = {"sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}  # a browser's own navigation


def numbers(texts: list[str]) -> list[float]:
    return [float(s) for s in texts if s.replace(".", "", 1).replace(",", "").isdigit()]


def test_the_pruning_curve_is_a_chart_with_axes_titles_and_tick_numbers(tiny: TestClient) -> None:
    """#42: the curve had no axis, no tick number and no title; it is the lab's line chart now (app/render/charts.py),
    its axes titled, numbered on both, the plain loss + 5 % and the heads that can go in its legend."""
    soup = page(tiny, "/heads", preset="tiny", text="The cat sat on the mat.", probe_n="8", prune="1")
    chart = soup.select_one("#prune figure.prune-chart svg.chart")
    assert chart is not None and chart["data-chart"] == "prune"
    texts = [t.text for t in chart.select("text")]
    assert {"heads removed, least important first", "mean loss (nats)", "Mean loss as heads are removed"} <= set(texts)
    ticks = numbers(texts)
    layers_heads = 3 * 4
    assert 0 in ticks and max(ticks) >= layers_heads / 2 and len(ticks) >= 5  # both axes numbered
    can_go = int(soup.select_one(".prune-says")["data-can-go"])
    assert f"{can_go} heads can go" in texts and "the plain loss + 5 %" in texts
    assert chart.select_one("polyline[data-series='mean loss']") is not None
    narrow = soup.select_one("#prune figure.prune-chart svg[data-chart=prune-narrow]")  # a phone's (lab.css)
    assert narrow is not None and {t.text for t in narrow.select("text")} >= {t for t in texts if not t[0].isdigit()}
    width = float(narrow["viewbox"].split()[2])  # html.parser lowers attribute names
    smallest = min(float(t["font-size"]) for t in narrow.select("text"))
    assert smallest * 350 / width >= 12  # drawn 350 px wide, its smallest text still 12 px (the page's was 6–7)
    zh = page(tiny, "/heads", preset="tiny", text="The cat sat on the mat.", probe_n="8", prune="1", lang="zh")
    assert "移除的头数（从最不重要的开始）" in [t.text for t in zh.select("#prune svg.chart text")]
    twin = tiny.get("/heads.json", params={"preset": "tiny", "text": "The cat sat on the mat.", "prune": "1"}).json()
    assert "chart" not in twin["curve"] and "pattern_svg" not in twin  # drawings, not data: the JSON face has none


def test_the_probe_drawing_has_axes_both_copies_and_the_induction_diagonal_on_its_squares(tiny: TestClient) -> None:
    """#42: the probe's drawing had no axis labels and its dashed diagonal was hard to see (and ran one square off:
    through key i − n, the duplicate-token diagonal, not the induction diagonal key i − n + 1 it is said to mark)."""
    n = 8
    soup = page(tiny, "/heads", preset="tiny", text=TEXT, probe_n=str(n))
    svg = soup.select_one("figure.probe-figure svg.probe-pattern")
    assert svg is not None
    assert svg.select_one("[data-axis=x]").text == "key position j (the token read)"
    assert svg.select_one("[data-axis=y]").text == "query position i"
    assert [t.text for t in svg.select("text[data-copy]")] == ["copy 1", "copy 1", "copy 2", "copy 2"]  # keys, queries
    ticks = numbers([t.text for t in svg.select("text.tick")])
    assert 0 in ticks and max(ticks) >= n
    legend = soup.select_one("figure.probe-figure figcaption")
    assert "induction diagonal" in legend.text and legend.select_one("svg line[stroke-dasharray]") is not None
    # The diagonal passes through the centre of square (query i, key i − n + 1) for every query of the second copy.
    weights = tiny.get("/heads.json", params={"preset": "tiny", "text": TEXT, "probe_n": str(n)}).json()["weights"]
    m, bos = len(weights), len(weights) - 2 * n
    line = svg.select_one("line.induction-diagonal")
    x1, y1, x2, y2 = (float(line[k]) for k in ("x1", "y1", "x2", "y2"))
    box = svg.select_one("rect")  # the square's frame: where position 0 starts, and its side
    left, top, side = float(box["x"]), float(box["y"]), float(box["width"])
    cell = side / m
    for i in range(bos + n, m):
        cx, cy = left + (i - n + 1 + 0.5) * cell, top + (i + 0.5) * cell
        at = x1 + (cy - y1) * (x2 - x1) / (y2 - y1)  # the line's x at that square's centre height
        assert abs(at - cx) < 0.02 * cell, (i, at, cx)  # on the square (drawn to 0.01 px), not its neighbour
    assert float(line["stroke-width"]) >= 2.5  # seen from the back, not a hairline
    zh = page(tiny, "/heads", preset="tiny", text=TEXT, probe_n=str(n), lang="zh")
    assert [t.text for t in zh.select("svg.probe-pattern text[data-copy]")] == ["第一遍", "第一遍", "第二遍", "第二遍"]


def test_the_probes_loss_bars_have_their_axes(tiny: TestClient) -> None:
    """#42, every chart with labelled axes and tick numbers: the probe's loss per position (steps 3 and 4 of the
    lesson ask about it) had neither; its loss axis is numbered in nats, its positions too, and the knock-out's line
    is drawn over the bars."""
    n = 8
    soup = page(tiny, "/heads", preset="tiny", text=TEXT, probe_n=str(n), knock="2")
    bars = soup.select_one("#probe figure.probe-bars svg.loss-bars")
    assert bars.select_one("[data-axis=y]").text == "loss (nats)"
    assert bars.select_one("[data-axis=x]").text == "position in the probe"
    ticks = numbers([t.text for t in bars.select("text.tick")])
    assert 0 in ticks and max(ticks) >= n and len(ticks) >= 4
    twin = tiny.get("/heads.json", params={"preset": "tiny", "text": TEXT, "probe_n": str(n)}).json()
    assert len(bars.select("rect")) == len(twin["probe_loss"]["positions"])  # a bar per position
    assert bars.select_one("polyline[data-knocked]") is not None


def test_a_browsers_first_load_gets_the_pages_shell_at_once_then_its_numbers_by_htmx(tiny: TestClient) -> None:
    """#42: /heads and /patch took 10-14 s as plain page loads with nothing on screen but the tab's spinner. A
    browser's navigation now gets the page's shell at once (its title, a "computing" status, the lesson panel),
    which asks htmx for the page at its own URL (the key the progress box polls); the page's answer is kept, so the
    next navigation gets it whole. Scripts, htmx, rooms and test clients get the page itself; a browser without
    script follows the shell's link, which waits for the numbers (wait=1)."""
    for path, params in (
        ("/heads", {"preset": "tiny", "text": "A shell first, then the heads.", "probe_n": "8"}),
        ("/patch", {"preset": "tiny", "clean": "The cat sat on the mat.", "corrupted": "The dog sat on the log."}),
    ):
        params = params | {"lang": "en", "lesson": "heads-jobs", "lesson_step": "2"}
        r = tiny.get(path, params=params, headers=NAVIGATION)
        assert r.status_code == 200
        shell = BeautifulSoup(r.text, "html.parser")
        main = shell.select_one("main[data-deferred]")
        assert main is not None and shell.select_one("table.model-grid") is None  # nothing computed yet
        assert main["hx-trigger"] == "load" and main["hx-select"] == "main" and main["hx-swap"] == "outerHTML"
        assert main["hx-get"] == f"{path}?{r.request.url.query.decode()}"  # its own URL: the page's progress key
        assert shell.select_one("#deferred-status[role=status] progress") is not None
        assert shell.select_one(".lesson-panel .question") is not None  # the question is there at once
        assert shell.h2.text == ("Heads with jobs" if path == "/heads" else "Activation patching")
        plain = shell.select_one("noscript a[data-deferred-wait]")["href"]
        assert plain.endswith("&wait=1")
        # htmx's request for it: the page itself, which the next navigation is then given whole.
        htmx = tiny.get(main["hx-get"], headers={"hx-request": "true"})
        assert htmx.status_code == 200 and 'table class="model-grid' in htmx.text and "data-deferred" not in htmx.text
        again = tiny.get(path, params=params, headers=NAVIGATION)
        assert again.headers.get("x-cache") == "hit" and "data-deferred" not in again.text
        # No script: the shell's link waits for the numbers; a client that is no browser never sees a shell.
        waited = tiny.get(plain.replace("&amp;", "&"), headers=NAVIGATION | {"cache-control": "no-cache"})
        assert 'table class="model-grid' in waited.text and "data-deferred" not in waited.text
        fresh = params | {"lang": "zh"}
        assert "data-deferred" not in tiny.get(path, params=fresh).text
    # A refused lesson is said at once, as the page would (nothing to compute), and the JSON face is never a shell.
    r = tiny.get("/heads", params={"preset": "tiny", "lesson": "no-such"}, headers=NAVIGATION)
    assert r.status_code == 422 and "no lesson" in r.headers["x-lab-error"] and "data-deferred" not in r.text
    twin = tiny.get("/heads.json", params={"preset": "tiny", "text": TEXT, "probe_n": "8"}, headers=NAVIGATION)
    assert twin.json()["view"] == "heads"
