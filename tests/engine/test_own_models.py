"""Bring your own model: tiny random models of every supported architecture, built here with transformers and
loaded by the lab from local files, give transformers' numbers (every layer's and head's attention, the logits,
the greedy tokens); a GGUF written from the same weights gives them too; a bad file is a start-up error; every page
and API takes a loaded model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from engine import make_spec
from engine.generate import generate
from engine.models import ModelError, load, registry
from engine.tracing import compute
from tests.conftest import make_client
from tests.own_models import build, write_gguf

pytest.importorskip("transformers")

ARCHS = ("gpt2", "llama", "mistral", "qwen2", "gemma", "bert")
TEXT = "The cat sat on the mat. 猫坐在垫子上 and the dog sat on the log again"
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    root = tmp_path_factory.mktemp("own")
    out = {arch: build(arch, root / f"tiny-{arch}", seed=i) for i, arch in enumerate(ARCHS)}
    out["llama3"] = build("llama", root / "tiny-llama3", seed=7, rope_scaling=LLAMA3)
    out["bf16"] = build("llama", root / "tiny-bf16", seed=8, dtype=torch.bfloat16)
    out["sharded"] = build("qwen2", root / "tiny-sharded", seed=9, max_shard_size="20KB")
    path, ref = out["llama"]
    out["gguf"] = (write_gguf(path, ref, root / "tiny-gguf.gguf"), ref)
    return out


def same_numbers(model, reference, text: str = TEXT) -> None:  # type: ignore[no-untyped-def]
    ids = model.tokenize(text)
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    models = {model.name: model}
    for layer in range(model.info.n_layer):
        t = compute(make_spec(text=text, preset=model.name, layer=layer, models=models), model)
        assert list(t.spec.token_ids) == ids
        torch.testing.assert_close(t.softmax.weights, out.attentions[layer][0], rtol=0, atol=1e-4)
        assert t.checks.max_abs_diff_vs_sdpa < 1e-4
    if not model.decoder:
        for layer in range(model.info.n_layer + 1):
            torch.testing.assert_close(model.hidden(ids, layer), out.hidden_states[layer][0], rtol=1e-4, atol=1e-4)
        return
    torch.testing.assert_close(model.logits(ids), out.logits[0], rtol=0, atol=1e-4)
    ours = generate(model, tuple(ids), 8, model.info.n_layer - 1)
    with torch.no_grad():
        theirs = reference.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids) :].tolist()
    assert [s.token_id for s in ours.steps] == theirs[: len(ours.steps)] and len(ours.steps) == len(theirs)


@pytest.mark.parametrize("arch", [*ARCHS, "llama3", "bf16", "sharded", "gguf"])
def test_every_layer_head_logit_and_greedy_token_equals_transformers(built, arch: str) -> None:
    path, reference = built[arch]
    model = load(path)
    same_numbers(model, reference)
    parameters = reference.num_parameters() - (32 * 32 + 32 if arch == "bert" else 0)  # BERT's pooler is unused
    assert model.parameters == parameters and model.nbytes == 4 * parameters


def test_the_architecture_is_read_from_the_config(built) -> None:
    m = {a: load(built[a][0]) for a in (*ARCHS, "llama3", "gguf")}
    assert m["mistral"].info.default_mask == "sliding_window" and m["mistral"].info.window == 5
    assert (
        m["gemma"].info.ffn == "geglu" and m["bert"].info.placement == "post" and m["bert"].info.default_mask == "none"
    )
    assert m["llama"].info.rope_pairing == "half" and m["gguf"].info.rope_pairing == "adjacent"
    assert m["llama3"].info.rope_factors[-1] == 8.0 and m["llama"].info.rope_factors == ()
    assert m["gguf"].name == "tiny-gguf" and m["gpt2"].name == "tiny-gpt2"
    assert m["llama"].loaded and m["llama"].checked  # read into memory it owns and checked at start-up (#36)


def test_the_parameter_counter_agrees(built) -> None:
    from engine.params import ModelShape, count

    gpt2, llama = load(built["gpt2"][0]), load(built["llama"][0])
    a = gpt2.arch
    assert count(ModelShape(a.n_layer, a.d_model, a.n_heads, a.vocab, a.n_ctx, d_ff=a.d_ff))["total"] == gpt2.parameters
    b = llama.arch
    shape = ModelShape(b.n_layer, b.d_model, b.n_heads, b.vocab, 0, "swiglu", b.d_ff, tied_embeddings=False,
                       bias=False, n_kv_heads=b.n_kv_heads, norm="rmsnorm", learned_positions=False)  # fmt: skip
    assert count(shape)["total"] == llama.parameters


def test_a_quantised_gguf_loads_and_stays_close(built, tmp_path: Path) -> None:
    path, reference = built["llama"]
    model = load(write_gguf(path, reference, tmp_path / "q8.gguf", "Q8_0"))
    ids = model.tokenize(TEXT)
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]
    assert float((model.logits(ids) - theirs).abs().max()) < 0.5  # 8-bit weights: close, not equal
    import gguf

    w = reference.model.layers[1].mlp.up_proj.weight.detach().numpy()  # (48, 32): rows of 32, one Q8_0 block each
    q8 = gguf.GGMLQuantizationType.Q8_0
    exact = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8))
    torch.testing.assert_close(model.tensors()["layers.1.mlp.up_proj.weight"], exact, rtol=0, atol=0)


# -- start-up errors --------------------------------------------------------------------------------------------


def copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def refused(path: Path, *words: str) -> str:
    with pytest.raises(ModelError) as err:
        load(path)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    with pytest.raises(ModelError):  # the server refuses to start with it
        make_client(models=str(path), pretrained=False)
    return message


def test_a_missing_file(tmp_path: Path, built) -> None:
    refused(tmp_path / "nowhere", "nowhere", "not found")
    d = copy_model(built["llama"][0], tmp_path / "m")
    (d / "model.safetensors").unlink()
    refused(d, "model.safetensors", "not found")
    (tmp_path / "notes.txt").write_text("hi")
    refused(tmp_path / "notes.txt", "notes.txt", "gguf")


def test_a_wrong_dtype(tmp_path: Path, built) -> None:
    from safetensors.torch import load_file, save_file

    d = copy_model(built["llama"][0], tmp_path / "m")
    t = load_file(str(d / "model.safetensors"))
    t["model.layers.0.self_attn.q_proj.weight"] = t["model.layers.0.self_attn.q_proj.weight"].long()
    save_file(t, str(d / "model.safetensors"))
    refused(d, "model.safetensors", "model.layers.0.self_attn.q_proj.weight", "I64", "F32, F16, BF16")


def test_a_truncated_safetensors(tmp_path: Path, built) -> None:
    d = copy_model(built["gpt2"][0], tmp_path / "m")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) - 100])
    refused(d, "model.safetensors", "truncated")
    g = tmp_path / "cut.gguf"
    g.write_bytes(built["gguf"][0].read_bytes()[:5000])
    refused(g, "cut.gguf", "truncated")


def test_an_unknown_model_type(tmp_path: Path, built) -> None:
    d = copy_model(built["gpt2"][0], tmp_path / "m")
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(c | {"model_type": "t5"}))
    message = refused(d, "config.json", "model_type", "'t5'")
    assert "gpt2, llama, mistral, qwen2, gemma, bert" in message


def test_a_config_that_contradicts_its_weights(tmp_path: Path, built) -> None:
    d = copy_model(built["llama"][0], tmp_path / "m")
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(c | {"num_key_value_heads": 4}))
    refused(d, "k_proj.weight", "shape [16, 32]", "[32, 32]")
    (d / "config.json").write_text(json.dumps(c | {"num_hidden_layers": 4}))
    refused(d, "layers.3", "missing")
    (d / "config.json").write_text(json.dumps(c | {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}))
    refused(d, "config.json", "rope_scaling", "default, llama3")


def test_a_model_over_max_model_mb_is_refused_with_its_size(built) -> None:
    path = built["llama"][0]
    with pytest.raises(ModelError, match=r"42,464 parameters take 0 MB in float32, over MAX_MODEL_MB = 0"):
        registry([(path, None)], max_model_mb=0.01)
    with pytest.raises(ModelError, match="MAX_MODEL_MB"):
        make_client(models=str(path), max_model_mb=0.01, pretrained=False)


def test_names_come_from_the_path_or_are_given(built) -> None:
    a, b = built["llama"][0], built["gguf"][0]
    models = registry([(a, None), (b, "mine")])
    assert list(models) == ["tiny-llama", "mine"]
    with pytest.raises(ModelError, match="already taken"):
        registry([(a, None), (b, "tiny-llama")])
    with pytest.raises(ModelError, match="not a preset name"):
        registry([(a, "bad name")])


# -- the server -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(built):  # type: ignore[no-untyped-def]
    paths = [str(built[a][0]) for a in (*ARCHS, "gguf")]
    with make_client(models=os.pathsep.join([*paths, f"named={built['bf16'][0]}"]), pretrained=False) as c:
        yield c


def test_the_models_api_lists_what_is_loaded(api, built) -> None:
    body = api.get("/api/v1/models").json()
    rows = {m["name"]: m for m in body["models"]}
    assert set(rows) == {*(f"tiny-{a}" for a in ARCHS), "tiny-gguf", "named"}
    for m in rows.values():
        assert {"name", "architecture", "n_layer", "n_heads", "n_kv_heads", "d_model", "vocab", "n_ctx", "parameters",
                "bytes", "source"} <= set(m)  # fmt: skip
    llama = rows["tiny-llama"]
    assert (llama["architecture"], llama["n_layer"], llama["n_heads"], llama["n_kv_heads"], llama["d_model"]) == (
        "llama", 3, 4, 2, 32)  # fmt: skip
    assert llama["parameters"] == built["llama"][1].num_parameters() and llama["bytes"] == 4 * llama["parameters"]
    assert llama["source"] == built["llama"][0].name and rows["tiny-gguf"]["source"] == "tiny-gguf.gguf"  # no paths


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_models_page_in_both_languages(api, lang: str) -> None:
    r = api.get("/models", params={"lang": lang})
    assert r.status_code == 200, r.text
    for name in ("tiny-gemma", "tiny-bert", "named"):
        assert f'data-model="{name}"' in r.text
    assert ("Loaded models" if lang == "en" else "已加载的模型") in r.text


@pytest.mark.parametrize("name", [*(f"tiny-{a}" for a in ARCHS), "tiny-gguf"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_takes_a_loaded_model(api, name: str, lang: str) -> None:
    decoder = name != "tiny-bert"
    pages = [
        ("/", {"preset": name, "text": "The cat sat", "layer": 2, "stage": 4}),
        ("/", {"preset": name, "text": "The cat sat", "layer": 1, "stage": 1}),
        ("/block", {"preset": name, "text": "The cat sat", "layer": 1}),
        ("/model", {"preset": name, "text": "The cat sat on the mat"}),
        ("/sinks", {"preset": name, "text": "The cat sat on the mat", "layer": 1}),
    ]
    if decoder:
        pages.append(("/generate", {"preset": name, "text": "The cat", "max_new_tokens": 3}))
    for path, params in pages:
        r = api.get(path, params=params | {"lang": lang})
        assert r.status_code == 200 and "error" not in r.headers.get("x-lab-error", ""), (path, r.text[:2000])
        assert r.headers.get("x-lab-error") is None, (path, r.headers.get("x-lab-error"))


def test_every_api_takes_a_loaded_model(api, built) -> None:
    path, reference = built["mistral"]
    model = load(path)
    ids = model.tokenize(TEXT)
    r = api.post("/api/v1/attention", json={"preset": "tiny-mistral", "token_ids": ids, "layer": 2,
                                           "stages": ["softmax"]})  # fmt: skip
    assert r.status_code == 200, r.text
    with torch.no_grad():
        want = reference(torch.tensor([ids]), output_attentions=True).attentions[2][0]
    torch.testing.assert_close(torch.tensor(r.json()["stages"][0]["tensors"]["weights"]), want, rtol=0, atol=1e-4)
    assert r.json()["spec"]["mask"] == "sliding_window" and r.json()["spec"]["window"] == 5
    g = api.post("/api/v1/generate", json={"preset": "tiny-qwen2", "text": "The cat", "max_new_tokens": 4})
    assert g.status_code == 200 and len(g.json()["generated"]) >= 1, g.text
    assert api.post("/api/v1/generate", json={"preset": "tiny-bert", "text": "x"}).status_code == 422
    v = api.get("/api/v1/model_view", params={"preset": "tiny-gemma", "text": "The cat sat"})
    assert v.status_code == 200 and v.json()["layers"] == 3
    b = api.get("/api/v1/block", params={"preset": "tiny-gemma", "text": "The cat", "layer": 1})
    assert b.status_code == 200 and b.json()["spec"]["ffn"] == "geglu", b.text
    long = api.get("/api/v1/attention/window", params={"preset": "tiny-llama", "text": TEXT, "layer": 1,
                                                       "stage": "softmax", "head": 1, "rows": 2, "cols": 4})  # fmt: skip
    assert long.status_code == 200, long.text


def test_the_existing_presets_are_instances_of_the_registry() -> None:
    from engine.models import Model
    from engine.pretrained import MiniLM, SmolLM2

    for found in (MiniLM.find(), SmolLM2.find()):
        assert found is None or isinstance(found, Model)


def test_the_cli_passes_models_and_names_to_the_server(built, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli import model_setting

    a, b = built["llama"][0], built["gguf"][0]
    assert model_setting([[str(a), None], [str(b), "mine"]]) == os.pathsep.join([str(a), f"mine={b}"])
