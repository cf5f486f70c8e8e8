"""The provenance block (app/web/provenance.py, written into each answer where it is built, no middleware): on every
page's JSON twin and on every /api/v1 answer about a real model, cached or not, GET or POST; its sha256 is the
served file's; the figures carry the same block in their SVG and PDF metadata; the OpenAPI schema shows it."""

from __future__ import annotations

import contextlib
import hashlib
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import __version__
from tests.conftest import make_client

Q = {"preset": "smollm2", "text": "The cat sat"}
# Every /api/v1 operation that answers JSON about a model given as `preset` (the routes are listed from the app
# below, and each must be here or in NOT_A_MODEL_ANSWER).
REAL = {
    "/api/v1/attention": {**Q, "layer": "1"},
    "/api/v1/attention/tiles": Q,
    "/api/v1/attention/sink": {**Q, "layer": "1"},
    "/api/v1/attention/window": {**Q, "layer": "1", "stage": "4", "rows": "2", "cols": "2"},
    "/api/v1/attribution": Q,
    "/api/v1/block": {**Q, "layer": "1"},
    "/api/v1/block/window": {**Q, "layer": "1", "rows": "2", "cols": "2"},
    "/api/v1/model_view": Q,
    "/api/v1/generate": {**Q, "max_new_tokens": "1"},
    "/api/v1/predict": Q,
    "/api/v1/logit_lens": Q,
    "/api/v1/head_ranking": Q,
    "/api/v1/head_roles": Q,
    "/api/v1/prune": Q,
    "/api/v1/patch": {"preset": "smollm2", "clean": "The cat", "corrupted": "The dog"},
}
NOT_A_MODEL_ANSWER = {
    "/api/v1/decode": "the K/V cache walk runs on the built-in presets",
    "/api/v1/params": "counts a shape's parameters: no weights are read",
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def served_sha256(smollm2: Any) -> str:
    h = hashlib.sha256()
    with Path(smollm2.path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_block(block: dict[str, Any], smollm2: Any, link: str | None = None) -> None:
    """The block; a page's names the page (`link`), an API answer's no address (its GET and POST are one answer)."""
    assert block["version"] == __version__ and block["model"] == "smollm2" and block["lab"] == "Attention Lab"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", block["date"])
    assert block["permalink"].endswith(link) if link else "permalink" not in block
    path = Path(smollm2.path)
    assert block["files"] == [{"name": path.name, "bytes": path.stat().st_size, "sha256": served_sha256(smollm2)}]


def test_every_model_operation_is_covered(client: TestClient) -> None:
    """The /api/v1 GET twins whose query names a `preset` are all checked below (a new one must be added)."""
    paths = client.get("/openapi.json").json()["paths"]
    with_preset = {
        path for path, ops in paths.items()
        if path.startswith("/api/v1") and "get" in ops and not path.endswith((".npz", ".png", ".svg", ".csv", ".npy"))
        and any(p["name"] == "preset" for p in ops["get"].get("parameters", []))
    }  # fmt: skip
    assert with_preset - set(NOT_A_MODEL_ANSWER) == set(REAL)


@pytest.mark.parametrize("path", sorted(REAL))
def test_every_real_model_answer_carries_the_block(client: TestClient, smollm2: Any, path: str) -> None:
    r = client.get(path, params=REAL[path])
    assert r.status_code == 200, r.text[:300]
    check_block(r.json()["provenance"], smollm2)
    again = client.get(path, params=REAL[path])  # a cached answer carries it too
    assert again.json()["provenance"] == r.json()["provenance"]
    assert int(again.headers["content-length"]) == len(again.content)


def test_a_post_answer_carries_it_and_a_random_preset_answer_does_not(client: TestClient, smollm2: Any) -> None:
    r = client.post("/api/v1/attention", json={"preset": "smollm2", "text": "The cat", "layer": 2})
    check_block(r.json()["provenance"], smollm2)
    got = client.get("/api/v1/attention", params={"preset": "smollm2", "text": "The cat", "layer": "2"})
    assert got.json() == r.json()  # the GET twin's answer is the POST's, block and all
    assert "provenance" not in client.get("/api/v1/attention", params={"tokens": "a b"}).json()
    assert "provenance" not in client.get("/api/v1/attention", params={"tokens": "a", "preset": "nope"}).json()


@pytest.mark.parametrize(
    "page", ["/lens?text=The+cat+sat", "/?preset=smollm2&text=The+cat&layer=2&head=1&stage=4", "/predict?text=The+cat"]
)
def test_a_real_models_twin_carries_the_block(client: TestClient, smollm2: Any, page: str) -> None:
    path, _, query = page.partition("?")
    twin = client.get(("/index" if path == "/" else path) + ".json?" + query).json()
    check_block(twin["provenance"], smollm2, page)
    cited = client.get("/api/v1/cite", params={"page": page, "format": "json"}).json()
    assert {k: v for k, v in cited.items() if k != "permalink"} == {
        k: v for k, v in twin["provenance"].items() if k != "permalink"
    }


def test_a_toy_twin_names_its_seed(client: TestClient) -> None:
    twin = client.get("/index.json", params={"tokens": "a b", "stage": "4", "seed": "3"}).json()
    assert twin["provenance"]["model"] == "toy" and twin["provenance"]["weights"] == "seeded random weights (seed 3)"
    html = client.get("/", params={"tokens": "a b", "stage": "4"})  # the page itself is untouched
    assert html.headers["content-type"].startswith("text/html") and '"provenance"' not in html.text


def pdf_text(body: bytes) -> bytes:
    """The PDF's info dictionary and its streams, inflated: where its metadata's text lies."""
    out = [body]
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", body, re.S):
        with contextlib.suppress(zlib.error):
            out.append(zlib.decompress(m.group(1)))
    return b"\n".join(out)


def test_the_figures_metadata_carries_the_hash(client: TestClient, smollm2: Any) -> None:
    page = "/?preset=smollm2&text=The+cat&layer=2&head=1&stage=4"
    sha = served_sha256(smollm2)
    svg = client.get("/api/v1/figure", params={"page": page, "format": "svg"})
    assert svg.status_code == 200, svg.text[:300]
    meta = re.search(rb"<metadata>(.*?)</metadata>", svg.content, re.S)
    assert meta and sha.encode() in meta.group(1) and __version__.encode() in meta.group(1)
    pdf = client.get("/api/v1/figure", params={"page": page, "format": "pdf"})
    info = pdf_text(pdf.content)
    assert sha.encode() in info and b"smollm2" in info


def test_no_layer_reads_an_answer_for_it_and_the_schema_shows_it(client: TestClient) -> None:
    """The block is written where each answer is built: no ASGI layer holds answers back to stamp them, and every
    operation that may carry it documents it (its answer's schema has `provenance`, a `Provenance`)."""
    layer, names = client.app.middleware_stack, []  # type: ignore[attr-defined]
    while layer is not None:
        names.append(type(layer).__name__)
        layer = getattr(layer, "app", None)
    assert "Edge" in names and "Kernel" in names and "Provenance" not in names
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path in REAL:
        for method in ("get", "post"):
            if method not in spec["paths"][path]:
                continue
            content = spec["paths"][path][method]["responses"]["200"]["content"]["application/json"]
            answer = schemas[content["schema"]["$ref"].rsplit("/", 1)[-1]]
            assert "Provenance" in str(answer["properties"]["provenance"]), (path, method)
    assert "provenance" in schemas["AttentionResponse"]["properties"]  # an answer's own model keeps its name
    assert "provenance" in schemas["LabView"]["properties"]
