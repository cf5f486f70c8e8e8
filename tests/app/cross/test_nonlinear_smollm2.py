"""/cross's nonlinearity panel on SmolLM2 (nl=smollm2): the page's and its JSON twin's numbers against transformers'
eager attention with hooks (tests/engine/test_nonlinear.py's `reference`), at 1e-4; its sizes bounded, a 422 naming
the field; the switch back to the toy; en and zh."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.engine.test_nonlinear import reference

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def client(smollm2) -> Iterator[TestClient]:  # smollm2: skipped where the package is not installed
    with TestClient(create_app(Settings())) as c:
        yield c


def test_the_panel_equals_transformers_with_hooks(client: TestClient, smollm2, llama) -> None:
    text = "Attention reads every token before it, and the softmax decides how much."
    r = client.get("/cross.json", params={"nl": "smollm2", "nl_layer": 8, "nl_head": 2, "nl_text": text})
    assert r.status_code == 200, r.text
    nl = r.json()["nonlinear"]
    assert (nl["model"], nl["layer"], nl["head"], nl["kv"]) == ("smollm2", 8, 2, 0)
    ids = smollm2.tokenize(text)
    ref = reference(llama, ids, 8, 2)
    (ax, wx), (a2x, w2x), (ay, wy), (axy, wxy) = (ref[k] for k in ("x", "2x", "y", "x+y"))

    def same(ours: list[float], theirs: torch.Tensor) -> None:
        torch.testing.assert_close(torch.tensor(ours, dtype=torch.float64), theirs, rtol=0, atol=1e-4)

    same(nl["scale"]["a2x"], a2x[-1])
    same(nl["scale"]["two_ax"], 2 * ax[-1])
    same(nl["sum"]["axy"], axy[-1])
    same(nl["sum"]["ax_ay"], (ax + ay)[-1])
    same(nl["scale"]["wx"], wx[-1])
    same(nl["scale"]["w2x"], w2x[-1])
    same(nl["sum"]["wy"], wy[-1])
    same(nl["sum"]["wxy"], wxy[-1])
    assert nl["scale"]["diff"] == pytest.approx(float((a2x - 2 * ax).norm() / (2 * ax).norm()), abs=1e-4)
    assert nl["sum"]["diff"] == pytest.approx(float((axy - ax - ay).norm() / (ax + ay).norm()), abs=1e-4)
    for part in ("scale", "sum"):
        assert nl[part]["held_diff"] < 1e-9 and nl[part]["share"] == pytest.approx(1.0)
    assert nl["cols"] == smollm2.labels(ids) and nl["row"] == nl["cols"][-1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_shows_the_switch_and_the_numbers(client: TestClient, lang: str) -> None:
    r = client.get(f"/cross?nl=smollm2&lang={lang}")
    assert r.status_code == 200
    soup = BeautifulSoup(r.text, "html.parser")
    panel = soup.select_one("#cross-nonlinear")
    assert panel["data-model"] == "smollm2" and len(panel.select("table")) == 4
    twin = client.get(f"/cross.json?nl=smollm2&lang={lang}").json()["nonlinear"]
    diffs = panel.select(".nl-diff")
    assert float(diffs[0]["data-diff"]) == pytest.approx(twin["scale"]["diff"])
    assert float(diffs[1]["data-share"]) == pytest.approx(twin["sum"]["share"])
    shown = [float(td.text) for td in panel.select("#nl-scale table.nl-out tbody tr")[0].select("td")]
    assert shown == pytest.approx(twin["scale"]["a2x"][: len(shown)], abs=1e-3)
    current = panel.select_one(".cross-nl-switch a[aria-current]")
    assert current is not None and "SmolLM2" in current.text
    toy = [a for a in panel.select(".cross-nl-switch a") if "nl=smollm2" not in a["href"]]
    back = BeautifulSoup(client.get(toy[0]["href"]).text, "html.parser").select_one("#cross-nonlinear")
    assert back["data-model"] == "toy"
    assert ("GQA" in panel.text) and (("共用" in panel.text) if lang == "zh" else ("shares" in panel.text))


@pytest.mark.parametrize(("query", "field"), [("nl_layer=30", "nl_layer"), ("nl_head=9", "nl_head"),
                                              ("nl_text=" + "cat+" * 60, "nl_text"), ("nl_text=" + "x" * 401, "nl_text"),
                                              ("nl_layer=-1", "nl_layer"), ("nl=gpt5", "nl")])  # fmt: skip
def test_sizes_are_bounded_422_naming_the_field(client: TestClient, query: str, field: str) -> None:
    r = client.get(f"/cross?nl=smollm2&{query}")
    assert r.status_code == 422 and field in r.headers.get("X-Lab-Error", ""), (r.status_code, r.headers)
    j = client.get(f"/cross.json?nl=smollm2&{query}")
    assert j.status_code == 422 and field in j.text


def test_without_smollm2_the_switch_is_refused() -> None:
    with TestClient(create_app(Settings(pretrained=False))) as c:
        r = c.get("/cross.json?nl=smollm2")
        assert r.status_code == 422 and "nl" in r.text
