"""GET /api/v1/figure: a page's figures drawn by matplotlib from its JSON twin, as SVG (text kept), PDF and PNG."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client

SVG = "{http://www.w3.org/2000/svg}"
STAGE_NAMES = {"projection": "Projection", "scores": "Scores", "mask": "Mask", "softmax": "Softmax",
               "weighted_sum": "Weighted sum"}  # fmt: skip
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def svg_texts(body: bytes) -> list[str]:
    root = ET.fromstring(body)
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def pdf_pages(body: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page[^s]", body))


@pytest.mark.parametrize("stage", [1, 2, 3, 4, 5])
def test_every_stage_of_the_lab_as_svg_with_its_tokens_title_and_settings(client: TestClient, stage: int) -> None:
    page = f"/?tokens=cat+sat+on+the+mat&stage={stage}&mask=causal"
    twin = client.get(page, headers={"Accept": "application/json"}).json()
    r = client.get("/api/v1/figure", params={"page": page, "format": "svg"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("image/svg+xml")
    texts = svg_texts(r.content)
    for token in ("cat", "sat", "on", "the", "mat"):
        assert token in texts
    assert f"Lab · toy (d = 4, 1 head) · {STAGE_NAMES[twin['key']]}" in texts  # the title
    for m in twin["matrices"]:  # each matrix is a panel, titled by its label
        assert any(t.startswith(m["label"]) for t in texts), m["label"]
    caption = next(t for t in texts if t.startswith("Attention Lab"))
    assert "mask=causal" in caption and "preset=toy" in caption and "scale=sqrt_dk" in caption
    if stage == 3:
        assert "−∞" in texts  # masked cells say so, and are hatched
        assert b"<pattern" in r.content or b"hatch" in r.content.lower()


def test_pdf_is_one_page_and_png_is_drawn_at_twice_the_resolution(client: TestClient) -> None:
    page = "/?tokens=cat+sat+on&stage=4"
    pdf = client.get("/api/v1/figure", params={"page": page, "format": "pdf"})
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    assert pdf_pages(pdf.content) == 1
    png = client.get("/api/v1/figure", params={"page": page, "format": "png"})
    assert png.content.startswith(b"\x89PNG")
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png.content))
    assert image.info.get("dpi", (0, 0))[0] == pytest.approx(200, abs=1)
    assert image.width >= 800


def test_chinese_labels_render_with_a_cjk_font(client: TestClient) -> None:
    from app.export.figure import cjk_font

    page = "/?tokens=猫+坐+在+垫子+上&stage=4&lang=zh"
    r = client.get("/api/v1/figure", params={"page": page, "format": "svg"})
    texts = svg_texts(r.content)
    assert "垫子" in texts and "查询" in texts and "键" in texts
    if cjk_font() is None:
        pytest.skip("no CJK font installed (apt-get install fonts-wqy-microhei)")
    assert cjk_font().encode() in r.content  # named in the SVG's font-family
    pdf = client.get("/api/v1/figure", params={"page": page, "format": "pdf"})
    assert (pdf_pages(pdf.content) == 1 and b"WenQuanYi" in pdf.content) or b"CJK" in pdf.content


@pytest.mark.parametrize(
    ("page", "expect"),
    [
        ("/block?tokens=cat+sat+on&stage=softmax", ["cat", "A (weights) · head 0 · (N, N) = (3, 3)"]),
        ("/embed?tokens=cat+sat&stage=2", ["cat", "sat"]),
    ],
)
def test_other_pages(client: TestClient, page: str, expect: list[str]) -> None:
    r = client.get("/api/v1/figure", params={"page": page})
    assert r.status_code == 200, r.text
    texts = svg_texts(r.content)
    for e in expect:
        assert e in texts


def test_a_page_without_a_figure_or_an_unknown_page_is_a_422_naming_page(client: TestClient) -> None:
    for page in ("/nowhere", "https://example.com/", "/lessons", "/?tokens=a&mask=zzz"):
        r = client.get("/api/v1/figure", params={"page": page})
        assert r.status_code == 422, page
        assert r.json()["detail"][0]["loc"] == ["query", "page"]
    assert client.get("/api/v1/figure", params={"page": "/", "format": "gif"}).status_code == 422


def test_figures_are_bounded() -> None:
    """A heat map past FIGURE_MAX_CELLS is averaged over blocks; more panels than FIGURE_MAX_PANELS is refused."""
    import time

    tokens = "+".join(f"w{i}" for i in range(20))
    with make_client(figure_max_cells=256, figure_max_panels=2) as c:
        t = time.perf_counter()
        r = c.get("/api/v1/figure", params={"page": f"/?tokens={tokens}&stage=4", "format": "png"})
        assert r.status_code == 200
        assert time.perf_counter() - t < 30
        svg = c.get("/api/v1/figure", params={"page": f"/?tokens={tokens}&stage=4"})
        assert any("mean of 2×2 blocks" in t for t in svg_texts(svg.content))
        r = c.get("/api/v1/figure", params={"page": "/?tokens=a+b&stage=1"})  # four panels
        assert r.status_code == 422 and "FIGURE_MAX_PANELS" in r.json()["message"]


def test_a_1024_token_trace_draws_quickly() -> None:
    import time

    tokens = "+".join(f"w{i}" for i in range(1024))
    with make_client() as c:
        t = time.perf_counter()
        r = c.get("/api/v1/figure", params={"page": f"/?preset=gpt2-small&tokens={tokens}&stage=4", "format": "png"})
        assert r.status_code == 200, r.text
        assert time.perf_counter() - t < 60


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_real_models_pages_as_svg_and_pdf(client: TestClient, smollm2, lang: str) -> None:  # type: ignore[no-untyped-def]
    """/heads (the head grid, the chosen head's pattern, the probe's loss), /model, /lens and /predict (curves)."""
    expect = {
        "/heads?preset=smollm2&text=The+cat+sat": ["A · 第 18 层 · 头 6" if lang == "zh" else "A · layer 18 · head 6"],
        "/model?preset=smollm2&text=The+cat+sat": ["熵 · 层 × 头" if lang == "zh" else "entropy · layer × head"],
        "/lens?preset=smollm2&text=The+cat+sat": [
            " cat",
            "最终预测的概率（逐层）" if lang == "zh" else "p(final prediction) by layer",
        ],
        "/predict?preset=smollm2&text=The+cat+sat": ["The→ cat", "损失" if lang == "zh" else "loss"],
    }
    for page, texts in expect.items():
        r = client.get("/api/v1/figure", params={"page": f"{page}&lang={lang}"})
        assert r.status_code == 200, (page, r.text)
        shown = svg_texts(r.content)
        for t in texts:
            assert t in shown, (page, t)
        pdf = client.get("/api/v1/figure", params={"page": f"{page}&lang={lang}", "format": "pdf"})
        assert pdf_pages(pdf.content) == 1


@pytest.mark.parametrize(
    ("page", "titles"),
    [
        ("/?tokens=cat+sat+on&stage=4", {"en": ["Lab · toy (d = 4, 1 head) · Softmax", "A (weights) · head 0 · (N, N) = (3, 3)"],
                                         "zh": ["实验室 · 玩具（d = 4，1 个头） · Softmax", "A（权重） · 头 0 · (N, N) = (3, 3)"]}),
        ("/?tokens=cat+sat+on&stage=1", {"en": ["Lab · toy (d = 4, 1 head) · Projection", "X (inputs) · (N, d_model) = (3, 4)"],
                                         "zh": ["实验室 · 玩具（d = 4，1 个头） · 投影", "X（输入） · (N, d_model) = (3, 4)"]}),
        ("/block?tokens=cat+sat+on&stage=9", {"en": ["Whole block · toy (d = 4, 1 head) · FFN hidden",
                                                     "FFN hidden · (N, d_ff) = (3, 16)"],
                                              "zh": ["完整的块 · 玩具（d = 4，1 个头） · FFN 隐藏层", "FFN 隐藏层 · (N, d_ff) = (3, 16)"]}),
    ],
)  # fmt: skip
def test_titles_are_in_the_pages_language(client: TestClient, page: str, titles: dict[str, list[str]]) -> None:
    """The figure's title and each panel's are the catalogue's words in the page's language: Chinese in zh (no
    English name such as "weights" left), English in en (no Chinese)."""
    for lang, expected in titles.items():
        r = client.get("/api/v1/figure", params={"page": f"{page}&lang={lang}", "format": "svg"})
        assert r.status_code == 200, r.text
        texts = svg_texts(r.content)
        for title in expected:
            assert title in texts, (title, [t for t in texts if "·" in t])
        shown = [t for t in texts if "·" in t and not re.search(r"\w=\w", t)]  # the titles, not the caption's settings
        assert len(shown) >= len(expected)
        if lang == "zh":
            assert all(CJK.search(t) for t in shown), shown
            assert not any(w in t for t in shown for w in ("weights", "head", "layer", "hidden", "Lab")), shown
        else:
            assert not any(CJK.search(t) for t in shown), shown


def _overlapping(fig) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Every pair of one axis' tick labels whose boxes, as matplotlib lays them out, intersect."""
    renderer = fig.canvas.get_renderer()
    pairs = []
    for ax in fig.axes:
        for texts in (ax.get_xticklabels(), ax.get_yticklabels()):
            shown = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text() and t.get_visible()]
            for i, (a, box_a) in enumerate(shown):
                pairs += [(a, b) for b, box_b in shown[i + 1 :] if box_a.overlaps(box_b)]
    return pairs


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_long_probes_token_labels_do_not_overlap(lang: str) -> None:
    """/heads' figure for an induction probe of 65 tokens (two runs of 32 words and a BOS): the key axis' labels
    were printed over each other. Thinned (and upright) until no two labels' boxes intersect; a short sentence
    keeps every label."""
    import numpy as np

    from app.render.figure import Curves, Figure, Heat, draw

    words = ["Henri", "units", "(c2)", "spe", "Bever", "habitation", "elective", "Apples", "geared", "speculate",
             "urgent", "worlds", "orns", "ributes", "Timmy", "Allies", "neuropsych", "Chapel", "secure", "attic",
             "Micro", "Eric", "otti", "rites", "borrowing", "posable", "fren", "pattern", "这个", "词元", "长长的词", "x"]  # fmt: skip
    probe = ["<|im_start|>", *words, *words]
    n = len(probe)
    weights = np.tril(np.random.default_rng(0).random((n, n)))
    grid = Heat("induction · layer × head", [str(i) for i in range(30)], [str(j) for j in range(9)],
                np.random.default_rng(1).random((30, 9)), np.zeros((30, 9), bool), "sequential", ylabel="layer",
                xlabel="head")  # fmt: skip
    pattern = Heat("A · layer 18 · head 6", probe, probe, weights, weights == 0, "sequential")
    loss = Curves("loss per position", [str(i) for i in range(n - 1)], [("loss", list(np.linspace(18, 0, n - 1)))])
    seen: dict[str, list[str]] = {}

    def check(fig) -> None:  # type: ignore[no-untyped-def]
        seen["overlaps"] = [f"{a} / {b}" for a, b in _overlapping(fig)]
        weights = next(ax for ax in fig.axes if ax.get_title().startswith("A"))
        seen["keys"] = [t.get_text() for t in weights.get_xticklabels() if t.get_text()]

    for fmt in ("svg", "pdf"):
        draw(Figure("heads · smollm2", [grid, pattern, loss]), fmt, "Attention Lab · /heads", lang, inspect=check)
        assert seen["overlaps"] == [], seen["overlaps"][:5]
        assert 8 <= len(seen["keys"]) < n  # thinned, not emptied
    short = Heat("A", ["cat", "sat", "on", "the", "mat"], ["cat", "sat", "on", "the", "mat"], np.eye(5),
                 np.zeros((5, 5), bool), "sequential")  # fmt: skip
    draw(Figure("lab", [short]), "svg", "Attention Lab · /", lang, inspect=check)
    assert seen["overlaps"] == [] and seen["keys"] == ["cat", "sat", "on", "the", "mat"]


def test_a_figure_whose_labels_fit_is_laid_out_once_and_drawn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout _declutter checked is the one written: no draw to find the labels' boxes, and savefig neither
    lays the figure out again nor draws it twice (two layouts and three draws before; the same figure within a
    point)."""
    import numpy as np
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from app.render import figure
    from app.render.figure import heat_svg

    calls = {"layout": 0, "draw": 0}
    execute, draw = ConstrainedLayoutEngine.execute, MplFigure.draw

    def counting_execute(self, fig):  # type: ignore[no-untyped-def]
        calls["layout"] += 1
        return execute(self, fig)

    def counting_draw(self, renderer):  # type: ignore[no-untyped-def]
        calls["draw"] += 1
        return draw(self, renderer)

    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", counting_execute)
    monkeypatch.setattr(MplFigure, "draw", counting_draw)
    monkeypatch.setattr(figure, "_svgs", type(figure._svgs)())  # none kept from another test
    tokens = ["猫", "坐", "在", "垫子", "上"]
    svg = heat_svg(np.tril(np.full((5, 5), 0.2)), tokens, tokens, "sequential", "weights")
    assert "垫子" in svg and calls == {"layout": 1, "draw": 1}
    # The same matrix again (another URL for it) is the SVG kept, not drawn again; another matrix is drawn.
    assert heat_svg(np.tril(np.full((5, 5), 0.2)), tokens, tokens, "sequential", "weights") == svg
    assert calls == {"layout": 1, "draw": 1}
    other = heat_svg(np.tril(np.full((5, 5), 0.3)), tokens, tokens, "sequential", "weights")
    assert other != svg and calls == {"layout": 2, "draw": 2}
    masked = np.triu(np.ones((5, 5), dtype=bool), 1)
    assert heat_svg(np.tril(np.full((5, 5), 0.2)), tokens, tokens, "sequential", "weights", masked) != svg
    assert calls == {"layout": 3, "draw": 3}


def test_numbers_in_a_wide_panels_cells_fit_their_cells() -> None:
    """Three 5 × 16 panels side by side (/block's figure): at 7 pt a cell's number ran into its neighbours'. Each
    panel's numbers shrink to fit their cells (never under CELL_FONT_MIN points); a 5 × 5 map keeps 7 pt."""
    import numpy as np

    from app.render.figure import CELL_FONT_MIN, Figure, Heat, draw

    rng = np.random.default_rng(0)
    seen: dict[str, list] = {}

    def check(fig) -> None:  # type: ignore[no-untyped-def]
        renderer = fig.canvas.get_renderer()
        seen["panels"] = []
        for ax in fig.axes:
            if not ax.texts:
                continue
            boxes = [t.get_window_extent(renderer) for t in ax.texts]
            cell = ax.get_window_extent(renderer).width / len(ax.get_xticks())
            assert max(b.width for b in boxes) <= cell
            assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
            seen["panels"].append({t.get_fontsize() for t in ax.texts})

    wide = [Heat(f"h{i}", [f"t{r}" for r in range(5)], [str(c) for c in range(16)], rng.normal(size=(5, 16)),
                 np.zeros((5, 16), bool), "diverging") for i in range(3)]  # fmt: skip
    draw(Figure("block", wide), "svg", "Attention Lab · /block", inspect=check)
    assert len(seen["panels"]) == 3 and all(len(s) == 1 and CELL_FONT_MIN <= min(s) < 7 for s in seen["panels"])
    small = Heat("A", list("abcde"), list("abcde"), rng.random((5, 5)), np.zeros((5, 5), bool), "sequential")
    draw(Figure("lab", [small]), "svg", "Attention Lab · /", inspect=check)
    assert seen["panels"] == [{7}]


def test_the_same_figure_is_the_same_bytes_whenever_drawn() -> None:
    """No time of drawing and no random ids in the file: an SVG kept by `heat_svg` (its LRU) is the same bytes as the
    same heat map drawn again after it left (it held the date of its first draw in dc:date, and ids hashed with a
    salt drawn per draw); a PDF held its CreationDate. The PNG never held either."""
    import numpy as np

    from app.render import figure

    values = np.array([[1.0, -np.inf, -np.inf], [0.25, 0.75, -np.inf], [0.2, 0.3, 0.5]])
    masked = np.isneginf(values)
    first = figure.heat_svg(values, ["a", "b", "c"], ["a", "b", "c"], "linear", "weights", masked)
    with figure._svgs_lock:
        figure._svgs.clear()  # drawn again, not served from the cache
    again = figure.heat_svg(values, ["a", "b", "c"], ["a", "b", "c"], "linear", "weights", masked)
    assert first == again and "dc:date" not in first and "url(#" in first  # its ids: hashed, and the same
    spec = figure.Figure("t", [figure.Heat("h", ["a", "b"], ["a", "b"], np.eye(2), np.eye(2) == 0, "linear")])
    for fmt in ("svg", "pdf", "png"):
        assert figure.draw(spec, fmt, "cap") == figure.draw(spec, fmt, "cap"), fmt
    assert b"CreationDate" not in figure.draw(spec, "pdf", "cap")
