"""The shape of the web layer, checked: one field list, one kernel, no route module leaning on another, catalogues
that agree, and a JSON twin for every page."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.schemas import AttentionRequest, BlockRequest
from app.templating import LANGS, MESSAGES
from app.web.state import url_fields
from engine import STAGES

APP = Path(__file__).resolve().parents[3] / "app"
KERNEL = ("web", "render", "lab")  # what every feature may use: the page kernel, drawing, the compute service
FEATURES = sorted(p for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").is_file() and p.name not in KERNEL)
# Every module of every feature, whatever its name: a feature may split itself into as many modules as it likes.
FEATURE_MODULES = sorted(p for f in FEATURES for p in f.rglob("*.py"))
# The modules that declare routes: a feature's pages and API, and the app's own few.
ROUTE_MODULES = sorted(
    p for p in [*FEATURE_MODULES, APP / "health.py", APP / "docs.py"] if "APIRouter(" in p.read_text(encoding="utf-8")
)


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """(module as written, with leading dots; names) for every `from … import …` in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        ("." * node.level + (node.module or ""), [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    ]


def resolve(path: Path, module: str) -> Path | None:
    """The file a `from <module> import …` in `path` names, when it is a module of app/."""
    level = len(module) - len(module.lstrip("."))
    if level == 0:
        if not module.startswith("app."):
            return None
        base, parts = APP.parent, module.split(".")
    else:
        base, parts = path.parent, module.lstrip(".").split(".") if module.lstrip(".") else []
        for _ in range(level - 1):
            base = base.parent
    target = base.joinpath(*parts)
    return target.with_suffix(".py") if target.with_suffix(".py").is_file() else None


@pytest.mark.parametrize("path", FEATURE_MODULES, ids=lambda p: str(p.relative_to(APP)))
def test_no_feature_imports_another(path: Path) -> None:
    """A feature's modules import the kernel (app/web, app/render), the app's shared modules and their own feature;
    never another feature, and never a module that declares routes but their own feature's."""
    assert len(FEATURES) >= 11 and len(ROUTE_MODULES) >= 20
    feature = next(f for f in FEATURES if f in path.parents)
    for module, _ in imports_of(path):
        target = resolve(path, module)
        if target is None:
            continue
        inside = next((f for f in FEATURES if f in target.parents), None)
        if inside is not None and inside != feature:
            raise AssertionError(f"{path.relative_to(APP)} reaches into another feature: {module}")
        if inside is None:
            assert target not in ROUTE_MODULES, f"{path.relative_to(APP)} imports the route module {module}"


def test_the_kernel_imports_no_feature() -> None:
    """app/web and app/render stand under every feature, so they name none (a lazy import inside a function too)."""
    for kernel in KERNEL:
        for path in sorted((APP / kernel).rglob("*.py")):
            for module, _ in imports_of(path):
                target = resolve(path, module)
                if target is not None:
                    assert not any(f in target.parents for f in FEATURES), f"{path.relative_to(APP)} imports {module}"


@pytest.mark.parametrize("path", sorted(APP.rglob("*.py")), ids=lambda p: str(p.relative_to(APP)))
def test_no_private_name_is_imported_across_modules(path: Path) -> None:
    for module, names in imports_of(path):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{path.relative_to(APP)} imports private {private} from {module}"


def form_names(client: TestClient, url: str) -> set[str]:
    page = BeautifulSoup(client.get(url).text, "html.parser")
    return {el["name"] for el in page.select("form#controls [name]")}


VARIANTS = ["", "mask=padding", "mask=document", "mask=sliding_window&window=2", "mask=prefix_lm&prefix=1",
            "mask=custom", "positions=learned", "positions=rope", "preset=smollm2", "preset=minilm"]  # fmt: skip
PAGE_ONLY = {"lang", "stage", "present", "hide"}  # the page's own view parameters, not request fields


def test_the_lab_form_and_the_request_model_have_the_same_fields(client: TestClient) -> None:
    """Every request field a URL can carry has an input on the lab's form, and every input is a request field."""
    names = set().union(*(form_names(client, f"/?{q}") for q in VARIANTS)) - PAGE_ONLY
    assert names == set(url_fields(AttentionRequest))


@pytest.mark.parametrize(("path", "model"), [("/block", BlockRequest), ("/decode", AttentionRequest)])
def test_other_forms_only_carry_request_fields(client: TestClient, path: str, model: type) -> None:
    names = set().union(*(form_names(client, f"{path}?{q}") for q in ("", "positions=rope"))) - PAGE_ONLY
    assert names and names <= set(url_fields(model)) | {"prefill"}


def test_both_catalogues_hold_the_same_keys_and_placeholders() -> None:
    assert set(MESSAGES) == set(LANGS)
    for lang in LANGS:  # the data files are what a translator edits
        on_disk = json.loads((APP / "web" / "locales" / f"{lang}.json").read_text(encoding="utf-8"))
        assert on_disk == MESSAGES[lang]
    assert MESSAGES["en"].keys() == MESSAGES["zh"].keys()
    for key, text in MESSAGES["en"].items():
        assert re.findall(r"{(\w+)", text) == re.findall(r"{(\w+)", MESSAGES["zh"][key]) or set(
            re.findall(r"{(\w+)", text)
        ) == set(re.findall(r"{(\w+)", MESSAGES["zh"][key])), key


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/embed",
        "/block",
        "/decode",
        "/demos",
        "/params",
        "/lessons",
        "/lessons/five-stages",
        "/model",
        "/tiles",
        "/generate",
    ],
)
def test_every_page_links_a_json_twin_that_answers(client: TestClient, url: str) -> None:
    page = BeautifulSoup(client.get(url + "?lang=zh").text, "html.parser")
    link = page.select_one('link[rel=alternate][type="application/json"]')
    assert link is not None, url
    twin = client.get(link["href"])
    assert twin.status_code == 200, (link["href"], twin.text[:200])
    assert twin.headers["content-type"].startswith("application/json")
    assert twin.json()


def test_the_lesson_twin_holds_the_steps_the_page_shows(client: TestClient) -> None:
    page = BeautifulSoup(client.get("/lessons/five-stages?lang=zh").text, "html.parser")
    twin = client.get(page.select_one('link[rel=alternate][type="application/json"]')["href"]).json()
    steps = page.select(".lesson-step")
    assert len(steps) == len(twin["steps"]) > 0
    for li, step in zip(steps, twin["steps"], strict=True):
        assert li.select_one("[data-open]")["href"] == step["url"]
        assert step["question"] in li.get_text()


def test_the_demos_twin_equals_the_demo_routes(client: TestClient) -> None:
    q = "tokens=a+b+c&perm=2,0,1&m=2&n=5&logits=1,2,300"
    both = client.get(f"/api/v1/demo/all?{q}").json()
    assert both["permutation"] == client.get(f"/api/v1/demo/permutation?{q}").json()
    assert both["rope"] == client.get(f"/api/v1/demo/rope?{q}").json()
    assert both["softmax"] == client.get(f"/api/v1/demo/softmax?{q}").json()
    bad = client.get("/api/v1/demo/all?perm=0,0")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "perm"]


def test_choice_fields_offer_the_request_models_values(client: TestClient) -> None:
    page = BeautifulSoup(client.get("/?lang=en").text, "html.parser")
    options = [o["value"] for o in page.select("select[name=positions] option")]
    schema = AttentionRequest.model_json_schema()["properties"]["positions"]
    assert options == [v for o in schema["anyOf"] for v in o.get("enum", [])]


def test_every_stage_a_page_shows_has_one_registered_presentation() -> None:
    from app.render.stages import REGISTRY
    from engine import STAGES, make_spec
    from engine.block import make_block_spec

    keys = set(STAGES)
    for placement in ("pre", "post"):
        keys |= set(make_block_spec(make_spec(), placement=placement).order)
    assert keys == set(REGISTRY)


def test_every_url_field_has_a_label_in_both_catalogues() -> None:
    for name in url_fields(AttentionRequest):
        assert name in MESSAGES["en"] and name in MESSAGES["zh"], name


def test_a_new_request_field_appears_on_the_form_without_a_template_edit(client: TestClient, monkeypatch) -> None:
    """A field new to the request model (here faked into the derived field list) and its catalogue label: the
    lab's form renders it by its kind."""
    from app.templating import TEMPLATES

    kinds = dict(TEMPLATES.env.globals["field_kinds"]) | {"temperature": "number"}
    monkeypatch.setitem(TEMPLATES.env.globals, "field_kinds", kinds)
    for lang, label in (("en", "Temperature"), ("zh", "温度")):
        monkeypatch.setitem(MESSAGES[lang], "temperature", label)
    page = BeautifulSoup(client.get("/?lang=zh&seed=97531").text, "html.parser")
    box = page.select_one("form#controls input[name=temperature]")
    assert box is not None and box["type"] == "number" and "温度" in box.parent.get_text()


# Names a Chinese page keeps in Latin letters: models, tensors, parameters, API routes, units and code.
LATIN_OK = set(
    [
        "English",
        "JSON",
        "host",
        "make",
        "run",
        "HOST",
        "public",
        "url",  # the command lines of the loopback warning
        "MAX_RANK_COST",  # the setting the ranking's stated cost is held to, by its name
        "NumPy",
        "Python",  # the language of the "Show code" snippets, by its name
        "npz",
        "Softmax",
        "softmax",
        "SmolLM",
        "SmolLM2",
        "MiniLM",
        "GPT",
        "LayerNorm",
        "RMSNorm",
        "layernorm",
        "rmsnorm",
        "GELU",
        "gelu",
        "SwiGLU",
        "swiglu",
        "SiLU",
        "FFN",
        "RoPE",
        "rope",
        "GQA",
        "MQA",
        "KV",
        "cache",
        "API",
        "SDPA",
        "scaled_dot_product_attention",
        "torch",
        "PyTorch",
        "nats",
        "Pre",
        "LN",
        "Post",
        "SVG",
        "Concat",
        "head",
        "exp",
        "max",
        "log",
        "LM",
        "prefix",
        "prefill",
        "cpu",
        "cuda",
        "NaN",
        "Var",
        "dtype",
        "float",
        "bfloat",
        "permutation",
        "scaling",
        "small",
        "medium",
        "large",
        "llama",
        "gpt",
        "lm_head",
        "input",
        "n_ctx",
        "n_kv_heads",
        "d_model",
        "d_k",
        "d_ff",
        "w_q",
        "w_k",
        "w_v",
        "w_o",
        "w_up",
        "w_down",
        "a_ij",
        "v_j",
        "a_t",
        "o_t",
        "q_t",
        "W_Q",
        "W_K",
        "W_V",
        "W_O",
        "head0",
        "v_0",
        "ln1",
        "fp16",
        "bfloat16",
        "float16",
        "float32",
        "gpt2",
        "CSV",
        # The prediction pages: "logit" is kept in Latin letters in Chinese ML writing, as softmax is ("逻辑" is
        # "logic", a mistranslation); BOS and EOS are the tokens' names.
        "Logit",
        "BOS",
        "CPU",
        "Instruct",  # SmolLM2-135M-Instruct: the model's name
        "EOS",
        # The sampling filters keep their names (top-k, top-p, min-p) in Chinese ML writing, as transformers' own
        # parameters do (#45: the /generate page's settings).
        "Top",
        "Min",
    ]
)
ZH_PAGES = ["/?stage=1", "/?stage=3", "/?stage=4", "/?stage=5", "/?stage=2&present=1", "/block", "/decode?step=1",
            "/demos", "/params", "/lessons", "/lessons/five-stages", "/?stage=3&lesson=five-stages&step=3", "/r", "/generate?max_new_tokens=3", "/sinks?text=猫坐在垫子上",
            "/predict", "/predict?heads=1.0&replace_at=6&replace_id=42", "/lens?cell=29.3"]  # fmt: skip


@pytest.mark.parametrize("url", ZH_PAGES)
def test_chinese_pages_hold_no_english_ui_strings(client: TestClient, url: str) -> None:
    page = BeautifulSoup(client.get(url + ("&" if "?" in url else "?") + "lang=zh").text, "html.parser")
    for el in page.select("script, style, math, table[data-matrix], code, .axis, svg, .tok"):  # .tok: a model's text
        el.decompose()
    words = set(re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", page.get_text(" ")))
    assert words <= LATIN_OK, sorted(words - LATIN_OK)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("d_model=5&n_heads=2", "不能被"),
        ("stage=9", "未知的阶段"),
        ("head=3", "不存在"),
        ("mask=padding&pad_positions=9", "超出了"),
        ("seed=abc", "应为整数"),
        ("preset=smollm2&layer=40", "层编号"),
    ],
)
def test_errors_on_chinese_pages_are_in_chinese(client: TestClient, query: str, words: str) -> None:
    page = BeautifulSoup(client.get(f"/?lang=zh&{query}").text, "html.parser")
    shown = page.select_one(".error").get_text(" ")
    assert words in shown, shown
    names = {"n_heads", "d_model", "stage", "head", "seed", "layer", "pad_positions", "smollm2", *STAGES}
    assert not {w for w in re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", shown)} - LATIN_OK - names, shown
    # The API keeps its English words: scripts match on them.
    api = client.get(f"/api/v1/attention?{query}")
    assert api.status_code == 200 or words not in api.text


# An engine refusal as a page shows it in Chinese (the lab, /block, /decode, /params): each was English after the
# field's name (“n_kv_heads” 有误：must divide n_heads 1 (1 is MQA, 1 is plain MHA), got 3) before it was coded.
ENGINE_REFUSALS = [
    ("/?tokens=a+b&n_kv_heads=3", "n_kv_heads", "必须能整除 n_heads 1（1 是 MQA，1 是普通的 MHA），收到的是 3"),
    ("/?kv_tokens=c+d&positions=rope", "positions", "这里的 RoPE 只用于自注意力：交叉注意力没有共同的位置"),
    ("/?kv_tokens=c+d&mask=causal", "mask", "交叉注意力读取另一个序列：请用 none, padding 或 custom"),
    ("/decode?mask=sliding_window", "mask", "带 KV 缓存的解码是因果的（或选 none，看看为什么必须是因果的）"),
    ("/block?d_ff=99999999", "d_ff", "必须在 1 到 16384 之间（或 0，表示 4·d_model），收到的是 99999999"),
    ("/block?kv_tokens=a+b", "kv_tokens", "解码器块只对自身做注意力；交叉注意力请用注意力计算"),
    ("/params?n_kv_heads=5", "n_layer", "不选预设时必须给出"),
    ("/params?preset=gpt2-small&n_kv_heads=5", "n_kv_heads", "必须能整除 n_heads 12（0 表示等于 n_heads），收到的是 5"),
]


# The app's own refusals alike (“perm” 有误：must reorder 0..4, each once); /demos also said pydantic's in English.
APP_REFUSALS = [
    ("/demos?perm=1,1,1", "perm", "必须是 0..4 的一个排列，每个数恰好出现一次"),
    ("/demos?logits=abc", "logits", "必须是用逗号分隔的数字，例如 10, -2.5 或 1e3"),
    ("/demos?m=abc", "m", "必须是用数字 0-9 写成的整数"),  # the ASCII-digits rule (AsciiInt), as every integer
    ("/train?run=nope", "run", "没有训练运行 'nope'（已结束的运行只在新运行允许时保留）"),
    ("/cross?run=nope", "run", "没有训练运行 'nope'"),
    ("/model?preset=toy", "preset", "模型视图只用于预训练模型："),
    ("/sinks?preset=toy", "preset", "注意力汇聚是训练过的模型的习惯：请选择"),
    ("/generate?top_k=99999", "top_k", "至多为 1000，不能是 99999"),
    ("/heads?probe_n=9999", "probe_n", "这里至多为 128，收到的是 9999"),
    ("/attribution?position=999", "position", "没有 999"),
    # the head views named the view in English words joined into the message (app/web/sequence.py `decoder`)
    ("/heads?preset=toy", "preset", "头视图需要因果语言模型：smollm2"),
    ("/patch?preset=toy", "preset", "头视图需要因果语言模型：smollm2"),
    ("/model?ablate=[x", "ablate", "每个头写成 L<层> H<头>（例如 L1 H0, L16 H0），或者把头对写成 JSON（[[1, 0]]）"),
    # a zh walk of every form with a bad value in each field found these still English
    ("/architectures?minilm=abc", "MiniLM 的头（层.头）（minilm）", "必须写成 层.头，例如 3.0；收到的是 'abc'"),
    ("/demos?d_k=3", "d_k", "应为 2 的倍数"),  # pydantic's multiple_of
]


@pytest.mark.parametrize(
    ("page", "api", "said", "english"),
    [
        ("/predict?preset=toy", "/api/v1/predict?preset=toy&text=ab", "预测需要因果语言模型：此服务器上没有",
         "predictions need a causal language model: none on this server"),
        ("/generate?preset=toy", "/api/v1/generate?preset=toy&text=a", "生成需要因果语言模型：此服务器上没有",
         "generation needs a causal language model: none on this server"),
        ("/patch?preset=toy", "/api/v1/patch?preset=toy&clean=a&corrupted=b", "头视图需要因果语言模型：此服务器上没有",
         "the head views need a causal language model: none on this server"),
    ],
)  # fmt: skip
def test_no_decoder_on_this_server_is_said_in_chinese(page: str, api: str, said: str, english: str) -> None:
    """A server without a causal language model (no pretrained models) says so in the page's language: the words
    "none on this server" were filled into the Chinese sentence. The API keeps its English, byte for byte."""
    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(pretrained=False))) as bare:
        shown = BeautifulSoup(bare.get(page + "&lang=zh").text, "html.parser").select_one(".error").get_text(" ")
        assert "“preset”" in shown and said in shown and "none" not in shown, shown
        r = bare.get(api)
        assert r.status_code == 422 and r.json()["detail"][0]["msg"] == english, r.text


@pytest.mark.parametrize(("url", "field", "said"), ENGINE_REFUSALS + APP_REFUSALS)
def test_a_refusal_is_a_chinese_sentence_on_a_chinese_page(client: TestClient, url: str, field: str, said: str) -> None:
    shown = BeautifulSoup(client.get(url + "&lang=zh").text, "html.parser").select_one(".error").get_text(" ")
    assert f"“{field}”" in shown and said in shown, shown
    sentence = shown.partition("有误：")[2]
    assert not re.search(r"[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,}){2,}", sentence), sentence  # no English run of words
    # the English page (and the API) keep the English
    english = BeautifulSoup(client.get(url + "&lang=en").text, "html.parser").select_one(".error").get_text(" ")
    assert said not in english and not re.search(r"[\u4e00-\u9fff]", english), english


def test_every_coded_message_is_a_chinese_sentence() -> None:
    """Each code's Chinese (locales/errors.json "zh") is written in Chinese: no two English words in a row outside
    its placeholders (names, values and choices stay as the API spells them), where every English template has."""
    import string

    from app.schemas.fields import APP_ENGLISH
    from app.templating import ERROR_CODES
    from engine.errors import ENGLISH

    def literal(template: str) -> str:
        return "".join(text for text, *_ in string.Formatter().parse(template))

    english_run = re.compile(r"[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,})+")
    codes = {**ENGLISH, **APP_ENGLISH}
    for code in codes:
        zh = ERROR_CODES["zh"][code]
        assert re.search(r"[\u4e00-\u9fff]", zh) and not english_run.search(literal(zh)), (code, zh)
    # the check has reach: it catches the English of nearly every code (not "give 1 to 16 tokens")
    caught = [code for code, english in codes.items() if english_run.search(literal(english))]
    assert len(caught) > 0.9 * len(codes), sorted(set(codes) - set(caught))


def test_every_coded_error_has_its_translation_with_the_same_parameters() -> None:
    import string

    from app.schemas import said
    from app.schemas.fields import APP_ENGLISH
    from app.templating import ERROR_CODES, ERRORS, error_message
    from engine.errors import ENGLISH, Message

    def names(template: str) -> set[str]:
        return {field for _, field, _, _ in string.Formatter().parse(template) if field}

    zh = ERROR_CODES["zh"]
    assert set(ENGLISH) <= set(zh), set(ENGLISH) - set(zh)  # every engine message is said in Chinese
    for code, english in ENGLISH.items():
        assert names(zh[code]) == names(english), code
    assert set(APP_ENGLISH) <= set(zh), set(APP_ENGLISH) - set(zh)  # every app message too
    for code, english in APP_ENGLISH.items():
        assert code not in ENGLISH and names(zh[code]) == names(english), code
    assert {c for c in zh if c not in ENGLISH and c not in APP_ENGLISH} == {c for c in zh if c.startswith("pydantic.")}
    assert set(ERRORS) == {"en", "zh"}  # no message is translated by matching its English (#43)
    message = Message("not_divisible", d_model=5, n_heads=2)
    assert error_message(message, "zh") == "d_model 5 不能被 n_heads 2 整除" and error_message(message, "en") == message
    assert message == "d_model 5 is not divisible by n_heads 2"  # the API's English, unchanged
    head = said("head_syntax", value="'L1'")
    assert head == "write each head as L<layer> H<head>, e.g. L1 H0, L16 H0; got 'L1'" and head.code == "head_syntax"
    assert error_message(head, "zh") == "每个头写成 L<层> H<头>，例如 L1 H0, L16 H0（第 1 层第 0 个头）；收到的是 'L1'"
    assert error_message("something new", "zh") == "something new"
