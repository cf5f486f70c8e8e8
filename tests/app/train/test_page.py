"""/train's page (#42): every label it shows comes from the catalogues (in Chinese no "repeat", "rope", "lr" or "seed"
left in English), its live block renders alone as htmx asks for it, and its charts are the lab's, titled
and numbered on both axes, the loss's x axis as long as the run."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

from .test_api import TINY, events_until_end

# Latin words a Chinese /train keeps: the model's names and sizes, the export's format, the heads' labels.
LATIN_OK = {"GPT", "d_model", "RoPE", "MLP", "Hugging", "Face", "zip", "JSON", "Python"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(pretrained=False, train_max_queued=2))
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def run_id(client: TestClient) -> str:
    run = client.post("/api/v1/train", json=TINY | {"steps": 30}).json()["id"]
    assert events_until_end(client, run)[-1][1]["status"] == "done"
    return str(run)


def shown_words(html: str, run_id: str) -> set[str]:
    page = BeautifulSoup(html, "html.parser")
    for el in page.select("script, style, header, footer, code, .train-samples"):  # the site's chrome; a model's text
        el.decompose()
    text = page.get_text(" ").replace(f"train-{run_id}", "").replace(run_id, "")
    text = re.sub(r"\bL\d+\.H\d+\b", "", text)  # a head's name, as everywhere in the lab
    for box in page.select("option"):
        text += " " + box.get_text()
    return set(re.findall(r"[A-Za-z][A-Za-z_0-9]+", text))


@pytest.mark.parametrize("query", ["", "run={run}", "run={run}&compare={run}&present=1"])
def test_a_chinese_train_page_shows_no_english_label(client: TestClient, run_id: str, query: str) -> None:
    r = client.get(f"/train?{query.format(run=run_id)}&lang=zh")
    assert r.status_code == 200
    assert shown_words(r.text, run_id) - LATIN_OK == set()
    page = BeautifulSoup(r.text, "html.parser")
    if query:
        settings = page.select_one(".train-settings").get_text(" ")
        assert "学习率" in settings and "随机种子" in settings and "RoPE" in settings
        assert "重复" in page.select_one(".train-run h3").get_text()


def test_the_live_block_renders_alone_with_its_run(client: TestClient, run_id: str) -> None:
    """As a live run's redraw asks for it (#42: the block alone did not know the panel's macro, every redraw a 500)."""
    for lang in ("en", "zh"):
        whole = client.get(f"/train?run={run_id}&lang={lang}")
        block = client.get(f"/train?run={run_id}&lang={lang}", headers={"HX-Request": "true"})
        assert whole.status_code == block.status_code == 200, block.text[:300]
        live = BeautifulSoup(block.text, "html.parser")
        assert live.select_one("#train-live") is not None and live.select_one("header") is None
        assert (
            live.select_one(f"#run-{run_id} dd[data-n=train_loss]").get_text()
            == BeautifulSoup(whole.text, "html.parser").select_one(f"#run-{run_id} dd[data-n=train_loss]").get_text()
        )


def test_the_charts_are_titled_and_numbered_on_both_axes(client: TestClient, run_id: str) -> None:
    page = BeautifulSoup(client.get(f"/train?run={run_id}&lang=en").text, "html.parser")
    loss = page.select_one("svg.chart[data-chart=loss]")
    induction = page.select_one("svg.chart[data-chart=induction]")
    for chart in (loss, induction):
        assert chart is not None
        assert chart.select_one("text.axis-title.x").get_text() == "step"
        assert len(chart.select("text.tick.x")) >= 3 and len(chart.select("text.tick.y")) >= 3
    assert [t.get_text() for t in loss.select("text.axis-title")] == ["step", "nats per token"]
    assert loss.select("text.tick.x")[-1].get_text() == "30"  # the run's steps: the axis is as long as the run
