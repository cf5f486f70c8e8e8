"""One field list (#21): a request field declared once, with its metadata, in app/schemas.py's request model, reaches
the GET parser, the form, the URL state, the CLI and `Spec.summary` with no other edit; one error type."""

from __future__ import annotations

import json
from dataclasses import fields, make_dataclass
from types import SimpleNamespace

import pytest
from pydantic import Field, create_model

from app import schemas, templating
from app.cli import _parser, main, request_query
from app.schemas import AttentionRequest, FieldError, from_query, lab_field, query_parameters, request_fields
from app.settings import LIMIT_SETTINGS, Settings
from app.web.state import DEPENDS, NOT_IN_URL, url_fields
from engine.spec import Limits, Spec, SpecError, make_decode_spec, make_spec


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[AttentionRequest]:
    """A new request field, `temperature`, added as the issue's three edits would: the field with its metadata in
    the request model (here a subclass put in its place), and the engine (make_spec takes it, the Spec keeps it).
    The catalogues' label is the third edit; t() falls back to the key."""
    fake_model = create_model(
        "AttentionRequest",
        __base__=AttentionRequest,
        temperature=(
            float | None,
            Field(
                None,
                gt=0,
                description="Divide the scores by it.",
                json_schema_extra=lab_field(depends=("mask", "causal")),
            ),
        ),
    )
    monkeypatch.setattr(schemas, "AttentionRequest", fake_model)
    fake_spec = make_dataclass("FakeSpec", [("temperature", float, 1.0)], bases=(Spec,), frozen=True)

    def make(*, temperature: float | None = None, **kw: object) -> Spec:
        spec = make_spec(**kw)  # type: ignore[arg-type]
        kept = {f.name: getattr(spec, f.name) for f in fields(Spec)}
        return fake_spec(**kept, temperature=1.0 if temperature is None else temperature)  # type: ignore[no-any-return]

    monkeypatch.setattr(schemas, "make_spec", make)
    return fake_model  # type: ignore[no-any-return]


def test_a_new_field_reaches_the_get_parser_the_openapi_query_and_the_summary(fake: type[AttentionRequest]) -> None:
    body = from_query({"tokens": "a b c", "temperature": "0.5", "mask": "causal"}, None, fake)
    assert body["temperature"] == 0.5  # a number, as a POST would carry it
    spec = fake.model_validate(body).to_spec(Limits(), "cpu")
    assert spec.summary()["temperature"] == 0.5
    assert "temperature" in [p["name"] for p in query_parameters(fake)]
    f = request_fields(fake)["temperature"]
    assert (f.kind, f.depends, f.form) == ("number", ("mask", "causal"), "more")
    assert "temperature" in url_fields(fake)


def test_a_new_field_reaches_the_form(fake: type[AttentionRequest]) -> None:
    kinds, groups = templating.field_kinds(), templating.form_fields()
    assert kinds["temperature"] == "number" and "temperature" in groups["more"]
    html = templating.TEMPLATES.env.from_string(
        '{% from "_controls.html" import group_fields with context %}{{ group_fields("more", spec) }}'
    ).render(
        state=SimpleNamespace(get=lambda k, d="": {"temperature": "0.5"}.get(k, d)),
        spec=None,
        t=lambda key, **kw: key,
        field_kinds=kinds,
        form_fields=groups,
    )
    assert '<input name="temperature" type="number" step="any" value="0.5">' in html


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
    assert {"x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "stages", "heads", "decimals",
                          "dtype"} == NOT_IN_URL  # fmt: skip
    assert schemas.LIST_FIELDS == ("token_ids", "pad_positions", "segment_ids", "stages", "heads")


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
