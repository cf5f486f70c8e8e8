"""Classroom features: exports, presenter mode with a QR code, the embeddable view."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
from bs4 import BeautifulSoup


def soup(r):
    return BeautifulSoup(r.text, "html.parser")


def test_csv_export_is_labelled_and_exact(client):
    r = client.get("/api/v1/attention/export.csv", params={"mask": "causal", "stage": "mask", "tensor": "masked"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["", "猫", "坐", "在", "垫子", "上"] and rows[1][0] == "猫" and rows[1][2] == "-inf"
    body = client.get("/api/v1/attention", params={"mask": "causal", "stages": "mask"}).json()
    assert float(rows[2][1]) == body["stages"][0]["tensors"]["masked"][0][1][0]


def test_npy_export_keeps_every_head_and_minus_infinity(client):
    r = client.get(
        "/api/v1/attention/export.npy",
        params={"preset": "gpt2-small", "tokens": "a b c", "mask": "causal", "stage": "mask", "tensor": "masked"},
    )
    a = np.load(io.BytesIO(r.content))
    assert a.shape == (12, 3, 3) and a[0, 0, 1] == -np.inf


def test_a_query_heads_k_and_v_under_gqa_are_the_kv_head_it_reads(client):
    # 4 query heads share 2 K/V heads: head 3 reads K/V head 1 (the long trace's and the page's rule); K's head 3
    # was an IndexError (500) in every matrix route
    q = {"tokens": "a b c", "d_model": 8, "n_heads": 4, "n_kv_heads": 2, "stage": "projection"}
    whole = np.load(io.BytesIO(client.get("/api/v1/attention/export.npy", params={**q, "tensor": "k"}).content))
    assert whole.shape == (2, 3, 2)
    for tensor in ("k", "v"):
        for head, kv in ((0, 0), (1, 0), (2, 1), (3, 1)):
            r = client.get("/api/v1/attention/export.csv", params={**q, "tensor": tensor, "head": head})
            assert r.status_code == 200, r.text
            rows = list(csv.reader(io.StringIO(r.text)))[1:]
            npy = np.load(
                io.BytesIO(client.get("/api/v1/attention/export.npy", params={**q, "tensor": tensor}).content)
            )
            assert (
                np.array([[float(v) for v in row[1:]] for row in rows], dtype=np.float32).tolist() == npy[kv].tolist()
            )
            w = client.get("/api/v1/attention/window", params={**q, "tensor": tensor, "head": head})
            assert w.status_code == 200 and np.array(w.json()["values"], dtype=np.float32).tolist() == npy[kv].tolist()
            assert (
                client.get("/api/v1/attention/heatmap.png", params={**q, "tensor": tensor, "head": head}).status_code
                == 200
            )
    assert client.get("/api/v1/attention/window", params={**q, "tensor": "k", "head": 4}).status_code == 422


def test_svg_heat_map_for_slides(client):
    r = client.get("/api/v1/attention/heatmap.svg", params={"mask": "causal"})
    assert r.status_code == 200 and "猫" in r.text  # drawn by matplotlib: each of the 25 cells holds its number
    assert len(re.findall(r"<text[^>]*>(?:-?\d\.\d\d|−∞)</text>", r.text)) == 25
    big = client.get("/api/v1/attention/heatmap.svg", params={"tokens": " ".join(["w"] * 70)})
    assert big.status_code == 422 and "heatmap.png" in big.json()["message"]


def test_svg_heat_map_hatches_the_weights_the_mask_set_to_0_as_the_png_does(client, monkeypatch):
    """The causal mask's weights are 0, not −∞: the PNG hatched them and the SVG drew them as small weights."""
    import app.render.figure as figure

    drawn, draw = [], figure.draw
    monkeypatch.setattr(figure, "draw", lambda spec, *a, **k: drawn.append(spec.panels[0]) or draw(spec, *a, **k))
    tokens = "one two three four"
    causal = client.get("/api/v1/attention/heatmap.svg", params={"tokens": tokens, "mask": "causal"})
    plain = client.get("/api/v1/attention/heatmap.svg", params={"tokens": tokens, "mask": "none"})
    assert causal.status_code == plain.status_code == 200
    assert [h.hatched.tolist() for h in drawn] == [
        np.triu(np.ones((4, 4), bool), 1).tolist(),
        np.zeros((4, 4), bool).tolist(),
    ]
    assert "hatched" in causal.text and "hatched" not in plain.text  # the caption says what the hatching means


def test_presenter_mode_shows_a_qr_code_of_the_student_view(client):
    page = soup(client.get("/?stage=4&mask=causal&present=1&lang=en"))
    assert "present" in page.body["class"]
    assert page.select_one("form#controls").has_attr("hidden")
    qr = page.select_one(".qr")
    code = qr.select_one("code")
    assert qr.select_one("svg") is not None and "present" not in code["data-share-url"]
    assert "stage=4" in code["data-share-url"] and code.text == "testserver"  # the wall shows the short address
    leave = page.select_one("[data-toggle=present]")["href"]
    assert "present" not in leave and "stage=4" in leave
    assert "present=1" in page.select_one("[data-action=next]")["href"]  # stepping stays in presenter mode


def test_embed_view_has_no_chrome_and_can_be_framed(client):
    r = client.get("/embed", params={"stage": 3, "mask": "causal", "hide": "controls,explain,formula"})
    page = soup(r)
    assert page.select_one("header.top") is None and page.select_one("footer") is None
    assert page.select_one("form#controls").has_attr("hidden") and page.select_one(".formula") is None
    assert page.select_one("[data-action=next]")["href"].startswith("/embed?")
    assert "frame-ancestors *" in r.headers["content-security-policy"]
    assert "frame-ancestors 'self'" in client.get("/").headers["content-security-policy"]


def test_every_kind_of_user_text_is_escaped_including_a_10000_character_token(client):
    long = "x" * 9_990 + "<b>ok</b>"
    tokens = ["<script>alert(1)</script>", '"quoted"', "'single'", "\u202eright-to-left", "🙂", long]
    r = client.get("/", params={"tokens": " ".join(tokens), "stage": "4", "lang": "en"})
    assert r.status_code == 200
    assert "<script>alert(1)</script>" not in r.text and "<b>ok</b>" not in r.text
    labels = [th.text for th in soup(r).select("table[data-matrix=weights] tbody th")]
    assert labels == tokens
    api = client.get("/api/v1/attention", params={"tokens": " ".join(tokens), "stages": "softmax"})
    assert api.json()["tokens"] == tokens
    too_long = client.get("/api/v1/attention", params={"tokens": "y" * 10_001})
    assert too_long.status_code == 422 and "10000" in too_long.json()["message"].replace(",", "")


def test_the_math_font_stylesheet_never_404s(monkeypatch):
    from pathlib import Path

    import app.main as main
    from tests.conftest import make_client

    with make_client() as c:
        r = c.get("/vendor/math-font.css")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/css")
    monkeypatch.setattr(main, "MATH_FONT", Path("/nonexistent"))
    with make_client() as c:  # a machine without npm: an empty stylesheet, not a missing file
        r = c.get("/vendor/math-font.css")
        assert r.status_code == 200 and "@font-face" not in r.text
