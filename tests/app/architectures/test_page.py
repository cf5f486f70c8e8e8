"""/architectures: the three families' masks on one input, checked against their definitions: the encoder reads
every real token both ways, the decoder-only model only the tokens up to itself, the encoder–decoder's cross-attention
every real source token from every target row (N_tgt × N_src, no causal mask); padding never read; en and zh."""

from __future__ import annotations

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(pretrained=False))) as c:
        yield c


def test_the_three_families_masks(client: TestClient) -> None:
    view = client.get("/architectures.json?text=a+b+c+d&pad=2&pos=1").json()
    assert view["view"] == "architectures" and view["tokens"] == ["a", "b", "c", "d", "<pad>", "<pad>"]
    enc, dec, ed = (f["masks"] for f in view["families"])
    real = np.array([True] * 4 + [False] * 2)
    bi = np.array(enc[0]["visible"])
    assert (bi == real[None, :]).all()  # every row reads every real token, no pad
    causal = np.array(dec[0]["visible"])
    assert (causal == (np.tril(np.ones((6, 6), dtype=bool)) & real[None, :])).all()
    assert enc[0]["reads"] == ["0:a", "1:b", "2:c", "3:d"] and dec[0]["reads"] == ["0:a", "1:b"]
    names = [m["name"] for m in ed]
    assert names == ["encoder", "decoder", "cross"]
    cross = np.array(ed[2]["visible"])
    assert cross.shape == (5, 6) and (cross == real[None, :]).all()  # <bos> and 4 target rows × 6 source columns
    assert (np.array(ed[1]["visible"]) == np.tril(np.ones((5, 5), dtype=bool))).all()
    assert ed[1]["rows"][1] == "1:d"  # the target: the input reversed


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_in_both_languages(client: TestClient, lang: str) -> None:
    r = client.get(f"/architectures?lang={lang}")
    assert r.status_code == 200
    soup = BeautifulSoup(r.text, "html.parser")
    ids = [s["id"] for s in soup.select(".arch-family")]
    assert ids == ["family-encoder_only", "family-decoder_only", "family-encoder_decoder"]
    assert len(soup.select(".arch-mask svg")) == 5
    assert soup.select_one("[data-mask='cross']")["data-rows"] != soup.select_one("[data-mask='cross']")["data-cols"]
    if lang == "zh":
        assert soup.select_one("input[name='text']")["value"] == "天 上 有 月 和 星" and "因果" in soup.text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_mask_is_named_and_frames_the_chosen_row(client: TestClient, lang: str) -> None:
    soup = BeautifulSoup(client.get(f"/architectures?text=a+b+c+d&pad=2&pos=1&lang={lang}").text, "html.parser")
    for figure in soup.select(".arch-mask"):
        svg = figure.select_one("svg")
        assert svg["aria-label"].strip() and figure.select_one("h4").text in svg["aria-label"]
        assert not [x for x in svg.find_all("text") if not x.text.strip()]  # no empty title keeping a blank band
        frame = svg.select("rect.chosen-row")
        assert len(frame) == 1 and frame[0]["data-row"] == "1"
        y, height = float(frame[0]["y"]), float(frame[0]["height"])
        across = [x.text for x in svg.select("text[text-anchor=end]") if y < float(x["y"]) < y + height]
        assert across == [svg.select_one("text.chosen-label").text] and across[0].startswith("1:"), across
        assert across[0] in svg["aria-label"]


def test_bad_input_is_422_naming_the_field(client: TestClient) -> None:
    r = client.get("/architectures?pad=9")
    assert r.status_code == 422 and "pad" in r.headers["X-Lab-Error"]


@pytest.mark.parametrize(("lang", "query", "named"), [
    ("en", "pad=9", "Padding after it (pad)"), ("zh", "pad=9", "后面补的 padding 数（pad）"),
    ("en", "minilm=x", "MiniLM head (layer.head) (minilm)"), ("zh", "pos=-1", "查看第几个位置（pos）"),
])  # fmt: skip
def test_a_refused_field_is_named_by_its_label_and_key(client: TestClient, lang: str, query: str, named: str) -> None:
    from urllib.parse import unquote

    r = client.get(f"/architectures?{query}&text=a+b+c&lang={lang}")
    assert r.status_code == 422 and named in unquote(r.headers["X-Lab-Error"])
    soup = BeautifulSoup(r.text, "html.parser")
    assert named in soup.select_one("[role=alert]").text
    assert soup.select_one("input[name=text]")["value"] == "a b c"  # the form as typed
    key = query.split("=")[0]
    assert soup.select_one(f"input[name={key}]")["value"] == query.split("=")[1]
    j = client.get(f"/architectures.json?{query}")
    assert j.status_code == 422 and j.json()["detail"][0]["loc"][-1] == key


NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}  # a browser's own navigation: the shell


@pytest.mark.parametrize("path", ["/architectures?pad=3", "/cost?model=toy&n_max=128"])  # not asked before: a shell
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_deferred_page_and_its_shell_hold_one_presenter_switch_in_the_header(client: TestClient, path: str,
                                                                               lang: str) -> None:  # fmt: skip
    """The shell (templates/_deferred.html) and the page htmx swaps in both leave the switch to the header, as every
    other page does (they drew one beside the title, in <main>): one switch, whichever is shown, pointing at the
    page's own URL with present=1, and back."""
    url = f"{path}{'&' if '?' in path else '?'}lang={lang}"
    shell = BeautifulSoup(client.get(url, headers=NAVIGATE).text, "html.parser")
    whole = BeautifulSoup(client.get(url).text, "html.parser")
    assert shell.select_one("main[data-deferred]") is not None and whole.select_one("main[data-deferred]") is None
    for soup in (shell, whole):
        (switch,) = soup.select("a[data-toggle=present]")
        assert switch.find_parent("header") is not None and switch.find_parent("main") is None
        assert "present=1" in switch["href"] and switch["href"].startswith(path.split("?")[0] + "?")
    presented = BeautifulSoup(client.get(url + "&present=1", headers=NAVIGATE).text, "html.parser")
    (leave,) = presented.select("header a[data-toggle=present]")
    assert "present=1" not in leave["href"] and leave.text.strip() in ("Leave presenter mode", "退出演示模式")
