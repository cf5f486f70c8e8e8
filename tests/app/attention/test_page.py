"""The lab page, parsed as HTML: stable hooks, values equal to the JSON twin, fragments, languages, errors."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from bs4 import BeautifulSoup

from app.templating import MESSAGES, negotiate


def soup(r):
    return BeautifulSoup(r.text, "html.parser")


def cells(table):
    rows = {}
    for td in table.select("td[data-row][data-col]"):
        rows.setdefault(int(td["data-row"]), {})[int(td["data-col"])] = td["data-value"]
    return [[rows[r][c] for c in sorted(rows[r])] for r in sorted(rows)]


def test_first_stage_has_the_hooks_and_the_json_twin(client):
    r = client.get("/?lang=en")
    assert r.status_code == 200
    page = soup(r)
    stage = page.select_one("#stage")
    assert stage["data-stage"] == "projection" and stage["data-index"] == "1"
    assert page.select_one("table[data-matrix=x]").get("data-head") is None
    for name in "qkv":
        assert page.select_one(f"table[data-matrix={name}][data-head='0']") is not None
    alt = page.select_one('link[rel=alternate][type="application/json"]')
    assert alt["href"].startswith("/api/v1/attention")
    for hook in (
        "[data-action=next]",
        "[data-action=prev]",
        "[data-toggle=mask]",
        "[data-toggle=scale]",
        "[data-lang=zh]",
        "[data-lang=en]",
    ):
        assert page.select_one(hook) is not None, hook
    assert "(N, d_k) = (5, 4)" in page.select_one("table[data-matrix=q]").find_parent("figure").text


@pytest.mark.parametrize("stage", ["1", "2", "3", "4", "5"])
def test_every_number_on_the_page_equals_the_json_twin(client, stage):
    page = soup(client.get(f"/?stage={stage}&mask=causal&lang=en"))
    twin = page.select_one("a[data-twin=json]")["href"]
    body = client.get(twin).json()
    tensors = {k: v for s in body["stages"] for k, v in s["tensors"].items()}
    tables = page.select("#stage .stage-data > .matrices > figure table[data-matrix]")
    assert tables
    for table in tables:
        expected = tensors[table["data-matrix"]]
        if table.get("data-head") is not None:
            expected = expected[int(table["data-head"])]
        got = [[float(v) for v in row] for row in cells(table)]
        want = [[float("-inf") if v is None else v for v in row] for row in expected]
        assert got == want, table["data-matrix"]


def test_causal_softmax_row_one_is_exactly_one(client):
    page = soup(client.get("/?stage=4&mask=causal&lang=en"))
    weights = cells(page.select_one("table[data-matrix=weights]"))
    assert weights[0] == ["1.0", "0.0", "0.0", "0.0", "0.0"]
    assert "The first row is exactly 1.00" in page.select_one(".notice").text
    assert page.select_one("[data-toggle=mask]")["aria-pressed"] == "true"


def test_mask_stage_prints_minus_infinity(client):
    page = soup(client.get("/?stage=mask&mask=causal"))
    td = page.select_one("table[data-matrix=mask] td[data-row='0'][data-col='1']")
    assert td["data-value"] == "-inf" and td.text.strip() == "−∞" and "neginf" in td["class"]
    assert page.select_one("table[data-matrix=mask] td[data-row='1'][data-col='0']")["data-value"] == "0.0"


def test_toggling_the_mask_keeps_the_stage(client):
    page = soup(client.get("/?stage=4&mask=causal"))
    href = page.select_one("[data-toggle=mask]")["href"]
    q = parse_qs(urlparse(href).query)
    assert q["stage"] == ["4"] and q["mask"] == ["none"]
    off = soup(client.get(href))
    assert off.select_one("#stage")["data-index"] == "4"
    assert cells(off.select_one("table[data-matrix=weights]"))[0][1] != "0.0"


def test_scale_toggle_cycles(client):
    page = soup(client.get("/?stage=2"))
    assert "scale=none" in page.select_one("[data-toggle=scale]")["href"]
    page = soup(client.get("/?stage=2&scale=none"))
    assert "scale=dk" in page.select_one("[data-toggle=scale]")["href"]


def test_prev_next_step_through_the_stages(client):
    url, seen = "/?lang=en", []
    for _ in range(5):
        page = soup(client.get(url))
        seen.append(page.select_one("#stage")["data-stage"])
        nxt = page.select_one("[data-action=next]")
        url = nxt.get("href")
    assert seen == ["projection", "scores", "mask", "softmax", "weighted_sum"]
    assert url is None  # stage 5 has no next
    assert soup(client.get("/")).select_one("[data-action=prev]").get("href") is None


def test_htmx_request_gets_the_panel_and_the_controls_out_of_band(client):
    r = client.get("/?stage=3", headers={"HX-Request": "true"})
    assert r.status_code == 200
    assert "HX-Request" in r.headers["vary"]
    assert r.text.lstrip().startswith('<section id="stage"')
    assert "<html" not in r.text
    page = soup(r)
    assert page.select_one("form#controls")["hx-swap-oob"] == "true"


def test_cell_arithmetic_shows_the_terms(client):
    page = soup(client.get("/?stage=2&cell=scaled.0.1.2&lang=en"))
    box = page.select_one("#arithmetic")
    value = page.select_one("table[data-matrix=scaled] td[data-row='1'][data-col='2']")["data-value"]
    assert box.select_one(".result strong").text == value
    lines = box.select("li math")  # typeset: MathML, real minus signs, indices from 0 as in the headers
    assert len(lines) == 3 and "∑" in lines[0].text and "÷" in lines[2].text
    subscripts = [m.text for m in lines[0].select("msub > mrow")][:5]
    assert subscripts == ["1", "2", "t", "1,t", "2,t"]  # q_1 · k_2 = Σ_t q_{1,t} k_{2,t}: row 1, column 2
    assert lines[2].select("mn")[-1].text.replace("−", "-") == value and "-" not in box.text  # U+2212 signs
    assert "selected" in page.select_one("table[data-matrix=scaled] td[data-row='1'][data-col='2']")["class"]
    weight = soup(client.get("/?stage=4&cell=weights.0.2.1&lang=en")).select_one("#arithmetic")
    assert "exp" in weight.text and "∑" in weight.text and len(weight.select("li math")) == 3


def test_a_long_sum_is_written_in_part_and_says_so(client):
    """GPT-2's q·k has 64 terms (and its projections 768): the line was a screenful that scrolled sideways. The first
    two terms, ⋯, the last; a sentence says how many are left out; the result is still the whole sum's."""
    for query, cell, n in (("preset=gpt2-small&stage=2", "scaled.0.1.0", 64), ("d_model=16&stage=1", "q.0.1.0", 16)):
        r = client.get(f"/?{query}&tokens=a+b+c&cell={cell}&lang=en")
        page = soup(r)
        box = page.select_one("#arithmetic")
        tensor, _, row, col = cell.split(".")
        value = page.select_one(f"table[data-matrix={tensor}] td[data-row='{row}'][data-col='{col}']")["data-value"]
        assert box.select_one(".result strong").text.replace("−", "-") == value
        line = box.select("li math")[0]
        assert "⋯" in line.text and line.text.count("·") == 3 + (n == 64)  # 3 terms written (and q·k's own dot)
        assert f"The sum has {n} terms: {n - 3} of them are left out" in box.text
    toy = soup(client.get("/?stage=2&cell=scaled.0.1.2&lang=en")).select_one("#arithmetic")
    assert "⋯" not in toy.text and "left out" not in toy.text  # 4 terms: every one written


def test_an_input_cell_says_where_its_number_comes_from(client):
    """X explained nothing when clicked: now its origin (a vector drawn for the token's text, or a real model's
    hidden state), and with a position table the sum e + p that makes it, equal to the cell's value."""
    page = soup(client.get("/?stage=1&cell=x.0.1.2&lang=en"))
    box = page.select_one("#arithmetic")
    value = page.select_one("table[data-matrix=x] td[data-row='1'][data-col='2']")["data-value"]
    assert box.select_one(".result strong").text.replace("−", "-") == value
    assert "N(0, 1)" in box.text and "“sat”" in box.text
    page = soup(client.get("/?stage=1&cell=x.0.1.2&positions=sinusoidal&lang=zh"))
    box = page.select_one("#arithmetic")
    value = page.select_one("table[data-matrix=x] td[data-row='1'][data-col='2']")["data-value"]
    sum_line = box.select("li math")[0]
    assert "+" in sum_line.text and sum_line.select("mn")[-1].text.replace("−", "-") == value
    assert "位置表（正弦（相加））" in box.text and "的输入，第 2 维" in box.text


def test_compare_view_shows_both_sides_with_row_stats(client):
    page = soup(client.get("/?stage=4&compare=mask&lang=en"))
    sides = page.select(".compare-view .side")
    assert [s["data-mask"] for s in sides] == ["none", "causal"]
    causal = cells(sides[1].select_one("table[data-matrix=weights]"))
    assert causal[0] == ["1.0", "0.0", "0.0", "0.0", "0.0"]
    assert len(sides[0].select("table.stats tbody tr")) == 5
    scale = soup(client.get("/?stage=4&compare=scale")).select(".compare-view .side")
    assert [s["data-scale"] for s in scale] == ["sqrt_dk", "none"]


def test_language_follows_accept_language_and_the_switch_keeps_state(client):
    zh = soup(client.get("/?stage=4&mask=causal", headers={"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}))
    assert zh.html["lang"] == "zh-CN"
    assert "第一行恰好是 1.00" in zh.select_one(".notice").text
    switch = zh.select_one("[data-lang=en]")["href"]
    q = parse_qs(urlparse(switch).query)
    assert q == {"stage": ["4"], "mask": ["causal"], "lang": ["en"]}
    en = soup(client.get(switch, headers={"Accept-Language": "zh-CN"}))
    assert en.html["lang"] == "en" and en.select_one("#stage")["data-index"] == "4"


def test_negotiate():
    assert negotiate(None, "zh-TW,zh;q=0.9") == "zh"
    assert negotiate(None, "fr, en;q=0.8, zh;q=0.5") == "en"
    assert negotiate("zh", "en") == "zh"
    assert negotiate("xx", None) == "en"


def test_catalogue_has_the_same_keys_and_placeholders_in_both_languages():
    assert MESSAGES["en"].keys() == MESSAGES["zh"].keys()
    for key, text in MESSAGES["en"].items():
        assert set(re.findall(r"{(\w+)", text)) == set(re.findall(r"{(\w+)", MESSAGES["zh"][key])), key


@pytest.mark.parametrize(
    ("url", "field"),
    [("/?stage=9", "stage"), ("/?d_model=5&n_heads=2", "n_heads"), ("/?head=3", "head"), ("/?seed=abc", "seed")],
)
def test_bad_parameters_show_an_inline_error_naming_the_field(client, url, field):
    r = client.get(url + "&lang=zh")
    assert r.status_code == 422
    err = soup(r).select_one("#stage .error")
    assert f"“{field}”" in err.text and "有误" in err.text
    assert soup(r).select_one("form#controls") is not None  # the user can fix it in place


@pytest.mark.parametrize(
    ("url", "field", "said"),
    [
        ("/?tokens=a+b&mask=custom&mask_matrix=[[1]]", "mask_matrix", "必须是 2 × 2（查询 × 键）"),
        ("/?tokens=a+b&mask=document&segment_ids=-1,0", "segment_ids", "段编号必须是非负整数"),
        ("/?tokens=a+b+c&positions=learned&n_ctx=2", "tokens", "可学习位置只到 n_ctx = 2：第 3 个词元没有位置向量"),
        ("/?tokens=" + "x" * 10_001, "tokens", "位置 0 的词元长 10001 个字符，超过了上限 10000"),
    ],
)
def test_an_engine_refusal_is_said_in_the_readers_language(client, url, field, said):
    # these were English inside the Chinese page's error ("“mask_matrix” 有误：must be 2 × 2 (queries × keys)")
    err = soup(client.get(url + "&lang=zh")).select_one("#stage .error")
    assert f"“{field}”" in err.text and said in err.text, err.text
    assert said not in soup(client.get(url + "&lang=en")).select_one("#stage .error").text


def test_user_text_is_escaped(client):
    evil = '<script>alert(1)</script> "quoted" \u202eevil 🙂'
    r = client.get("/", params={"tokens": evil, "stage": "4", "cell": "weights.0.1.0"})
    assert r.status_code == 200
    assert "<script>alert(1)</script>" not in r.text
    page = soup(r)
    labels = [th.text for th in page.select("table[data-matrix=weights] tbody th")]
    assert labels[0] == "<script>alert(1)</script>"
    assert page.select("script[src]") and not [s for s in page.select("script") if not s.get("src")]


def test_padding_fields_left_over_from_another_mask_are_ignored(client):
    r = client.get("/?mask=causal&pad_positions=1&segment_ids=0,1")
    assert r.status_code == 200


def test_form_works_without_javascript(client):
    form = soup(client.get("/?stage=4&lang=zh")).select_one("form#controls")
    assert form["action"] == "/" and form["method"] == "get"
    names = {i["name"] for i in form.select("[name]")}
    assert {"tokens", "preset", "mask", "scale", "seed", "stage", "lang", "n_heads", "d_model"} <= names


def test_large_trace_shows_heatmaps_thumbnails_and_a_tile(client):
    tokens = " ".join(f"w{i}" for i in range(40))
    r = client.get(
        "/",
        params={"preset": "gpt2-small", "tokens": tokens, "stage": "4", "mask": "causal", "head": "2", "tile": "16,0"},
    )
    page = soup(r)
    assert r.status_code == 200
    thumbs = page.select(".thumbs img")
    assert len(thumbs) == 12
    png = client.get(thumbs[5]["src"])
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    tile = page.select_one(".tile table[data-matrix=weights][data-head='2']")
    first = tile.select_one("td")
    assert first["data-row"] == "16" and first["data-col"] == "0"
    window = client.get(page.select_one("#zoom")["data-window"] + "&row=16&col=0&rows=1&cols=40").json()
    assert float(first["data-value"]) == window["values"][0][0]
    assert len(page.select(".tile table.stats tbody tr")) == 16


def test_gpt2_small_1024_tokens_opens_all_heads_under_one_megabyte(client):
    tokens = " ".join(f"w{i % 101}" for i in range(1024))
    r = client.get("/", params={"preset": "gpt2-small", "tokens": tokens, "stage": "4", "mask": "causal"})
    assert r.status_code == 200
    page = soup(r)
    total = len(r.content)
    for img in page.select("img[src]"):
        total += len(client.get(img["src"]).content)
    assert len(page.select(".thumbs img")) == 12
    assert total < 1_000_000, total


def test_rope_gqa_and_positions_appear_in_the_projection_stage(client):
    page = soup(client.get("/?positions=rope&d_model=8&n_heads=4&n_kv_heads=2&head=3&lang=en"))
    names = [t["data-matrix"] for t in page.select("#stage .stage-data > .matrices table[data-matrix]")]
    assert names == ["x", "q", "k", "v", "q_rot", "k_rot"]
    assert page.select_one("table[data-matrix=k]")["data-head"] == "1"  # query head 3 reads K/V head 1
    absolute = soup(client.get("/?positions=sinusoidal&lang=en"))
    assert [t["data-matrix"] for t in absolute.select("#stage .stage-data > .matrices table")][:3] == [
        "embedding",
        "positions",
        "x",
    ]


def test_clicking_a_mask_cell_flips_it_into_a_custom_mask(client):
    page = soup(client.get("/?stage=3&mask=causal&lang=en"))
    link = page.select_one("table[data-matrix=mask] td[data-row='0'][data-col='2'] a[data-edit=mask]")
    q = parse_qs(urlparse(link["href"]).query)
    assert q["mask"] == ["custom"] and q["mask_matrix"][0].startswith("[[1,0,1,0,0],[1,1,0,0,0]")
    edited = soup(client.get(link["href"]))
    assert edited.select_one("table[data-matrix=mask] td[data-row='0'][data-col='2']")["data-value"] == "0.0"
    assert "by hand" in edited.select_one(".notice").text


def test_choosing_custom_in_the_form_starts_from_an_open_mask(client):
    r = client.get("/?stage=3&mask=custom&lang=en")
    assert r.status_code == 200
    cells = soup(r).select("table[data-matrix=mask] td")
    assert len(cells) == 5 * 5 and all(td["data-value"] == "0.0" for td in cells)  # the whole mask, every cell open


def test_cross_attention_labels_keys_with_the_source_tokens(client):
    page = soup(client.get("/?tokens=je+suis&kv_tokens=I+am+a+student&stage=4&lang=en"))
    cols = [th.text for th in page.select("table[data-matrix=weights] thead th")][1:]
    rows = [th.text for th in page.select("table[data-matrix=weights] tbody th")]
    assert cols == ["I", "am", "a", "student"] and rows == ["je", "suis"]


def test_document_leak_compare(client):
    page = soup(client.get("/?stage=4&mask=document&segment_ids=0,0,1,1,1&compare=leak&lang=en"))
    sides = page.select(".compare-view .side")
    assert [s["data-mask"] for s in sides] == ["causal", "document"]
    leak = cells(sides[0].select_one("table[data-matrix=weights]"))
    blocked = cells(sides[1].select_one("table[data-matrix=weights]"))
    assert float(leak[2][0]) > 0 and float(blocked[2][0]) == 0  # token 3 reads document 1 only when it leaks


def test_random_weight_heat_maps_say_so_and_link_a_real_model(client):
    toks = "+".join(f"w{i}" for i in range(30))  # past SMALL_TOKENS (24): heat maps
    page = BeautifulSoup(client.get(f"/?preset=gpt2-small&stage=4&lang=zh&tokens={toks}").text, "html.parser")
    note = page.select_one("[data-notice=random-weights]")
    assert note is not None and "随机" in note.get_text()
    link = note.select_one("a")
    if link is not None:  # SmolLM2 is installed by make
        assert "preset=smollm2" in link["href"] and client.get(link["href"]).status_code == 200


def test_compare_shows_the_current_stage_with_changed_cells_outlined(client):
    page = soup(client.get("/?stage=3&compare=mask&lang=en"))
    view = page.select_one(".compare-view")
    tables = view.select("table[data-matrix=masked]")
    assert len(tables) == 2  # stage 3 compares S′, not the softmax
    off, on = cells(tables[0]), cells(tables[1])
    assert off[0][1] != "-inf" and on[0][1] == "-inf"
    changed = [(td["data-row"], td["data-col"]) for td in tables[1].select("td.changed")]
    assert sorted(changed) == sorted((str(i), str(j)) for i in range(5) for j in range(5) if j > i)  # the 10 masked
    assert "10" in view.select_one(".compare-note").get_text()
    # The comparison comes first among the numbers (the stage's own matrices then stay hidden in presenter mode).
    assert str(page).index("compare-view") < str(page).index('class="matrices"')


def test_compare_stays_in_presenter_mode(client):
    page = soup(client.get("/?stage=4&compare=scale&present=1&lang=zh"))
    assert page.select_one(".compare-view table[data-matrix=weights]") is not None
    assert page.select_one("nav.toggles .compare a") is not None


def test_every_matrix_exports_a_labelled_svg_for_slides(client):
    page = soup(client.get("/?stage=3&lang=zh"))
    links = page.select("a[data-export=svg]")
    assert {a["href"].split("tensor=")[1].split("&")[0] for a in links} == {"mask", "masked"}
    for a in links:
        r = client.get(a["href"])
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        # drawn by matplotlib with its text kept as text: the tokens, each of the 25 cells' number (or −∞: the 10
        # above the causal diagonal), and the colour bar's ticks
        assert "猫" in r.text and len(re.findall(r"<text[^>]*>−∞</text>", r.text)) == 10
        assert len(re.findall(r"<text[^>]*>(?:-?\d\.\d\d|−∞)</text>", r.text)) >= 25
