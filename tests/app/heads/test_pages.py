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
