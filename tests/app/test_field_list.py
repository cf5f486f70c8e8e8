"""One field list (#21): a request field declared once, with its metadata, in its request model (app/schemas/), reaches
the GET parser, the form, the URL state, the CLI and `Spec.summary` with no other edit; one error type.

The engine owns its vocabularies (#31): the mask kinds, each kind's parameters and every choice are written once in
the engine, and a new mask parameter is four edits (the `mask_param` fixture makes them)."""

from __future__ import annotations

import json
import sys
from dataclasses import fields, make_dataclass
from types import SimpleNamespace

import pytest
from bs4 import BeautifulSoup
from pydantic import Field, create_model

from app import schemas, templating
from app.cli import _parser, main, request_query
from app.schemas import (
    AttentionRequest,
    BlockRequest,
    DecodeRequest,
    FieldError,
    query_model,
    query_parameters,
    request_fields,
    request_models,
)
from app.schemas.fields import LabField
from app.settings import LIMIT_SETTINGS, Settings
from app.templating import MESSAGES
from app.web.state import DEPENDS, url_fields
from engine import masks, reference
from engine import spec as engine_spec
from engine.spec import (
    DTYPES,
    MASKS,
    PAIRINGS,
    POSITIONS,
    SCALES,
    STAGES,
    Limits,
    Spec,
    SpecError,
    make_decode_spec,
    make_spec,
)
from engine.tracing import compute
from tests.conftest import make_client


def put_request_model(monkeypatch: pytest.MonkeyPatch, model: type[AttentionRequest]) -> None:
    """The request model replaced where it is read: app.schemas (the form, the CLI) and its own module (to_spec)."""
    monkeypatch.setattr(schemas, "AttentionRequest", model)
    monkeypatch.setattr(request_models, "AttentionRequest", model)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[AttentionRequest]:
    """A new request field, `temperature`, added as the issue's three edits would: the field with its metadata in
    the request model (here a subclass put in its place), and the engine (make_spec takes it, the Spec keeps it).
    The catalogues' label is the third edit (made where a page is rendered: a missing one is a KeyError)."""
    fake_model = create_model(
        "AttentionRequest",
        __base__=AttentionRequest,
        temperature=(
            float | None,
            LabField(None, "Divide the scores by it.", gt=0, depends=("mask", "causal")),
        ),
    )
    put_request_model(monkeypatch, fake_model)
    fake_spec = make_dataclass("FakeSpec", [("temperature", float, 1.0)], bases=(Spec,), frozen=True)

    def make(*, temperature: float | None = None, **kw: object) -> Spec:
        spec = make_spec(**kw)  # type: ignore[arg-type]
        kept = {f.name: getattr(spec, f.name) for f in fields(Spec)}
        return fake_spec(**kept, temperature=1.0 if temperature is None else temperature)  # type: ignore[no-any-return]

    monkeypatch.setattr(request_models, "make_spec", make)
    return fake_model  # type: ignore[no-any-return]


def test_a_new_field_reaches_the_get_parser_the_openapi_query_and_the_summary(fake: type[AttentionRequest]) -> None:
    req = query_model(fake).model_validate({"tokens": "a b c", "temperature": "0.5", "mask": "causal"})
    assert req.temperature == 0.5 and isinstance(req, fake)  # a number, as a POST would carry it
    spec = req.to_spec(Limits(), "cpu")
    assert spec.summary()["temperature"] == 0.5
    assert "temperature" in [p["name"] for p in query_parameters(fake)]
    f = request_fields(fake)["temperature"]
    assert (f.kind, f.depends, f.form) == ("number", ("mask", "causal"), "more")
    assert "temperature" in url_fields(fake)


def imported_with(monkeypatch: pytest.MonkeyPatch, model: type[AttentionRequest]) -> None:
    """What importing the app with `model` as its request model would have made: every module's name for the model
    and its URL fields (the pages' keys, read at import), and the templates' field globals."""
    keys = url_fields(AttentionRequest)
    for module in [m for name, m in sys.modules.items() if name.startswith("app.")]:
        for name, value in list(vars(module).items()):
            if value is AttentionRequest:
                monkeypatch.setattr(module, name, model)
            elif isinstance(value, tuple) and value == keys:
                monkeypatch.setattr(module, name, url_fields(model))
    monkeypatch.setitem(templating.TEMPLATES.env.globals, "field_kinds", templating.field_kinds())
    monkeypatch.setitem(templating.TEMPLATES.env.globals, "form_fields", templating.form_fields())


def test_a_new_field_reaches_the_form(fake: type[AttentionRequest], monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab page itself, as a browser gets it: the new field's input, its kind's type, the URL's value and its
    label from each catalogue (the third edit: a missing label is a KeyError, not the key)."""
    kinds, groups = templating.field_kinds(), templating.form_fields()
    assert kinds["temperature"] == "number" and "temperature" in groups["more"]
    imported_with(monkeypatch, fake)
    labels = {"en": "Temperature", "zh": "温度"}
    for lang, label in labels.items():
        monkeypatch.setitem(MESSAGES[lang], "temperature", label)
    with make_client() as client:
        for lang, label in labels.items():
            page = client.get("/", params={"tokens": "a b c", "mask": "causal", "temperature": "0.5", "lang": lang})
            assert page.status_code == 200, page.text[-2000:]
            inputs = BeautifulSoup(page.text, "html.parser").select('form input[name="temperature"]')
            assert [(i.get("type"), i.get("step"), i.get("value")) for i in inputs] == [("number", "any", "0.5")]
            assert inputs[0].parent.name == "label" and inputs[0].parent.get_text(strip=True) == label


def test_a_new_field_reaches_the_cli(fake: type[AttentionRequest], capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["trace", "a b c", "--temperature", "0.5"])
    assert request_query(args) == {"temperature": "0.5"}
    assert main(["trace", "a b c", "--temperature", "0.5", "--stage", "scores", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["temperature"] == 0.5


def test_the_cli_offers_every_request_field() -> None:
    trace = next(a for a in _parser()._subparsers._group_actions[0].choices.items() if a[0] == "trace")[1]  # type: ignore[union-attr]
    options = {o for a in trace._actions for o in a.option_strings}
    for name in request_fields(AttentionRequest):
        if name not in ("tokens", "stages"):  # the positional sequence, and --stage
            assert "--" + name.replace("_", "-") in options


def test_the_cli_is_causal_by_default_like_the_lab(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "猫 坐 在 垫子 上", "--stage", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "mask causal" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("猫 │"))
    assert row.split("│")[1].split() == ["1.0000", "0.0000", "0.0000", "0.0000", "0.0000"]


def test_the_cli_takes_positions_gqa_and_mask_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["trace", "a b c d", "--d-model", "8", "--n-heads", "2", "--n-kv-heads", "1", "--positions", "rope",
            "--rope-base", "500", "--mask", "sliding_window", "--window", "2", "--stage", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    spec = json.loads(capsys.readouterr().out)["spec"]
    assert (spec["n_kv_heads"], spec["positions"], spec["rope_base"], spec["window"]) == (1, "rope", 500.0, 2)
    assert main(["trace", "a b c", "--mask", "custom", "--mask-matrix", "[[1,0,0],[1,1,0],[0,1,1]]", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["mask_matrix"][2] == [0, 1, 1]
    assert main(["trace", "a b", "--window", "2"]) == 2 and "window" in capsys.readouterr().err
    assert main(["trace", "a b", "--seed", "x"]) == 2 and "seed" in capsys.readouterr().err


def test_depends_and_the_url_fields_derive_from_the_metadata() -> None:
    assert DEPENDS == {
        "pad_positions": ("mask", "padding"),
        "segment_ids": ("mask", "document"),
        "window": ("mask", "sliding_window"),
        "prefix": ("mask", "prefix_lm"),
        "mask_matrix": ("mask", "custom"),
        "rope_pairing": ("positions", "rope"),
        "rope_base": ("positions", "rope"),
        "n_ctx": ("positions", "learned"),
    }
    not_in_url = {n for m in (BlockRequest, DecodeRequest) for n, f in request_fields(m).items() if f.form is None}
    assert {"x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "stages", "heads", "decimals",
                          "dtype"} == not_in_url  # fmt: skip
    assert schemas.LIST_FIELDS == ("token_ids", "pad_positions", "segment_ids", "stages", "heads")


def test_a_misspelt_field_option_is_refused() -> None:
    """A lab option's typo (`limt`) fails at import instead of vanishing from x-lab (pydantic only warns)."""
    field = LabField(None, "x", ge=0, limit="max_tokens")
    assert field.json_schema_extra == {"x-lab": {"form": "more", "limit": "max_tokens"}}
    with pytest.raises(TypeError, match="limt"):
        LabField(None, "x", ge=0, limt="max_tokens")


def test_settings_limits_derive_from_the_engine_limits() -> None:
    limits = Limits()
    for name in LIMIT_SETTINGS:
        assert Settings.model_fields[name].default == getattr(limits, name)
    assert {"max_tokens", "max_long_tokens", "max_d_model", "max_heads"} <= set(LIMIT_SETTINGS)
    assert Settings(max_tokens=7, max_heads=3).limits() == Limits(max_tokens=7, max_heads=3)


def test_one_error_type_and_the_cross_field_rules_in_the_engine() -> None:
    assert FieldError is SpecError
    with pytest.raises(SpecError) as err:
        make_decode_spec(prefill=9, tokens="a b c", max_tokens=8)
    assert err.value.field == "prefill"
    with pytest.raises(SpecError) as err:
        make_decode_spec(tokens="a b c", mask="padding")
    assert err.value.field == "mask"
    from engine.block import make_block_spec

    info = SimpleNamespace(norm="layernorm", ffn="gelu", placement="post", gelu="exact", d_ff=16, eps=1e-12)
    with pytest.raises(SpecError) as err:
        make_block_spec(make_spec(), placement="pre", model=info)
    assert err.value.field == "placement"
    block = make_block_spec(make_spec(), model=info)
    assert (block.placement, block.gelu, block.d_ff, block.eps) == ("post", "exact", 16, 1e-12)


@pytest.fixture
def mask_param(monkeypatch: pytest.MonkeyPatch) -> type[AttentionRequest]:
    """A new parameter of a mask, `sinks` (StreamingLLM's sliding window, which keeps the first `sinks` tokens
    readable), added as the four edits would add it; nothing else is touched."""
    window = masks.KINDS["sliding_window"]

    def check(value: object, sizes: masks.Sizes) -> int:
        if value is not None and not (isinstance(value, int) and 0 <= value <= sizes.n):
            raise SpecError("sinks", f"must be between 0 and {sizes.n}")
        return 0 if value is None else value

    # 1. engine/masks.py: the parameter in its kind's entry, with its check, and its use in the kind's rule.
    kind = masks.Kind(
        lambda g, window, sinks: g.causal & ((g.i - g.j < window) | (g.j < sinks)),
        (*window.params, masks.Param("sinks", check)),
    )
    monkeypatch.setitem(masks.KINDS, "sliding_window", kind)
    # 2. engine/spec.py: the Spec field that keeps it (a subclass put in its place).
    fake_spec = make_dataclass("FakeSpec", [("sinks", int, 0)], bases=(Spec,), frozen=True)
    monkeypatch.setattr(engine_spec, "Spec", fake_spec)
    # 3. app/schemas/request_models.py: the request field, with no metadata (which mask it goes with is the engine's).
    fake_model = create_model(
        "AttentionRequest",
        __base__=AttentionRequest,
        sinks=(int | None, Field(None, ge=0, description="mask=sliding_window: the first tokens, always read.")),
    )
    put_request_model(monkeypatch, fake_model)
    # 4. engine/reference.py: the independent definition the trace's check compares against.
    real = reference.readable

    def readable(spec: Spec, device: object = "cpu") -> object:
        allow = real(spec, device)  # type: ignore[arg-type]
        if spec.mask == "sliding_window":
            j = allow.new_ones(allow.shape).cumsum(1) - 1  # key index of each cell
            i = allow.new_ones(allow.shape).cumsum(0) - 1
            allow = allow | ((j < spec.sinks) & (j <= i))  # type: ignore[attr-defined]
        return allow

    monkeypatch.setattr(reference, "readable", readable)
    # The catalogues' label would be a fifth, optional edit: t() falls back to the key.
    return fake_model


def test_a_new_mask_parameter_is_checked_and_traced_by_the_engine(mask_param: type[AttentionRequest]) -> None:
    query = {"tokens": "a b c d e", "mask": "sliding_window", "window": "1", "sinks": "1"}
    req = query_model(mask_param).model_validate(query)
    assert req.sinks == 1  # an integer, as a POST would carry it
    spec = req.to_spec(Limits(), "cpu")
    assert spec.summary()["sinks"] == 1
    t = compute(spec)
    weights = t.softmax.weights[0]  # (N, N): query i reads itself and the first token only
    assert [[bool(w > 0) for w in row] for row in weights.tolist()] == [
        [j in (0, i) for j in range(5)] for i in range(5)
    ]
    assert t.checks.max_abs_diff_vs_sdpa < 1e-5  # the reference agrees
    with pytest.raises(SpecError) as err:
        make_spec("a b c", mask="causal", sinks=1)
    assert (err.value.field, err.value.message) == ("sinks", "is only used with mask=sliding_window")
    with pytest.raises(SpecError) as err:
        make_spec("a b c", mask="sliding_window", window=1, sinks=9)
    assert err.value.field == "sinks"


def test_a_new_mask_parameter_reaches_the_api_the_form_and_the_cli(
    mask_param: type[AttentionRequest], capsys: pytest.CaptureFixture[str]
) -> None:
    f = request_fields(mask_param)["sinks"]
    assert (f.kind, f.depends, f.form) == ("integer", ("mask", "sliding_window"), "more")
    lab = mask_param.model_json_schema()["properties"]["sinks"]["x-lab"]
    assert lab == {"form": "more", "depends": ["mask", "sliding_window"]}  # /openapi.json says which mask
    assert "sinks" in [p["name"] for p in query_parameters(mask_param)]
    assert "sinks" in url_fields(mask_param) and "sinks" in templating.form_fields(mask_param)["more"]
    assert main(["trace", "a b c d", "--mask", "sliding_window", "--window", "1", "--sinks", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["sinks"] == 1
    assert main(["trace", "a b c", "--sinks", "1"]) == 2 and "sinks" in capsys.readouterr().err


def test_the_choices_are_the_engines() -> None:
    """Each choice is written once, in the engine: the request models' enums, the form's <select>s and the query
    parameters are made from it."""
    props = BlockRequest.model_json_schema()["properties"]
    enum = {name: next(o for o in props[name].get("anyOf", [props[name]]) if "enum" in o)["enum"]
            for name in ("mask", "positions", "rope_pairing", "scale", "dtype")}  # fmt: skip
    assert enum == {"mask": list(MASKS), "positions": list(POSITIONS), "rope_pairing": list(PAIRINGS),
                    "scale": list(SCALES), "dtype": list(DTYPES)}  # fmt: skip
    assert props["stages"]["anyOf"][0]["items"]["enum"] != list(STAGES)  # a block's stages are its own
    assert AttentionRequest.model_json_schema()["properties"]["stages"]["anyOf"][0]["items"]["enum"] == list(STAGES)
    assert tuple(masks.KINDS) == MASKS
    for name in ("mask", "positions", "rope_pairing", "scale"):
        assert templating.CHOICES[name] == enum[name]
    assert {n: ("mask", k) for n, k in masks.param_kinds().items()} == {
        n: d for n, d in DEPENDS.items() if d[0] == "mask"
    }
