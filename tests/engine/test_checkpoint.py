"""A real GPT-2 checkpoint: every layer's softmax weights and hidden states against transformers' GPT-2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.settings import Settings
from engine import make_spec
from engine.block import compute_block, make_block_spec
from engine.checkpoint import GPT2Checkpoint
from engine.tracing import compute
from tests.conftest import make_client
from tests.gpt2_checkpoint import build

SENTENCES = ["The cat sat on the mat.", "猫坐在垫子上。", "Attention is a weighted average."]


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def reference(ckpt_dir):
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2Model.from_pretrained(str(ckpt_dir), attn_implementation="eager")
    model.eval()
    return model


@pytest.fixture(scope="module")
def model(ckpt_dir):
    return GPT2Checkpoint(ckpt_dir)


@pytest.mark.parametrize("text", SENTENCES)
def test_every_layer_matches_transformers(model, reference, text):
    ids = model.tokenize(text)
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for layer in range(model.info.n_layer):
        spec = make_spec(text=text, preset="checkpoint", layer=layer, models={"checkpoint": model})
        assert list(spec.token_ids) == ids and spec.mask == "causal"
        t = compute(spec, model)
        torch.testing.assert_close(t.softmax.weights, out.attentions[layer][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(
            model.hidden(spec.token_ids, layer), out.hidden_states[layer][0], rtol=1e-4, atol=1e-4
        )
        b = compute_block(make_block_spec(spec, eps=model.info.eps), model)
        ours = b.stages["output"]["output"]
        if layer + 1 == model.info.n_layer:  # transformers applies ln_f to its last hidden state; so do we here
            with torch.no_grad():
                ours = reference.ln_f(ours)
        torch.testing.assert_close(ours, out.hidden_states[layer + 1][0], rtol=1e-4, atol=1e-4)
        assert b.max_abs_diff_vs_reference < 1e-4


def test_weights_are_split_from_conv1d_without_transpose(model):
    w = model.attention_weights(1)
    c_attn = model.tensors()["h.1.attn.c_attn.weight"]
    d = model.info.d_model
    assert w.w_q.shape == (d, d)
    torch.testing.assert_close(w.w_v, c_attn[:, 2 * d :])


def test_api_serves_the_checkpoint(ckpt_dir, reference):
    with make_client(checkpoint=str(ckpt_dir)) as c:
        presets = c.get("/api/v1/presets").json()["presets"]
        assert presets["checkpoint"]["n_layer"] == 2 and presets["checkpoint"]["pretrained"]
        r = c.get(
            "/api/v1/attention",
            params={"preset": "checkpoint", "text": "The cat sat on the mat.", "layer": 1, "stages": "softmax"},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        ids = body["spec"]["token_ids"]
        with torch.no_grad():
            att = reference(torch.tensor([ids]), output_attentions=True).attentions[1][0].numpy()
        np.testing.assert_allclose(np.array(body["stages"][0]["tensors"]["weights"]), att, rtol=1e-4, atol=1e-5)
        assert body["spec"]["layer"] == 1 and body["spec"]["mask"] == "causal"
        assert "".join(body["tokens"]).replace(" ", "").replace("␣", "") == "Thecatsatonthemat."
        by_ids = c.post(
            "/api/v1/attention", json={"preset": "checkpoint", "token_ids": ids, "layer": 1, "stages": ["softmax"]}
        ).json()
        assert by_ids["stages"] == body["stages"]
        block = c.get("/api/v1/block", params={"preset": "checkpoint", "text": "猫坐在垫子上", "layer": 0})
        assert block.status_code == 200 and block.json()["spec"]["norm"] == "layernorm"
        page = c.get("/", params={"preset": "checkpoint", "text": "The cat sat", "layer": 1, "stage": 4})
        assert page.status_code == 200 and 'data-matrix="weights"' in page.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"preset": "checkpoint", "layer": 2}, "layer"),
        ({"preset": "checkpoint", "token_ids": [999999]}, "token_ids"),
        ({"preset": "checkpoint", "tokens": ["a", "b"]}, "tokens"),
        ({"preset": "checkpoint", "d_model": 64}, "d_model"),
        ({"preset": "checkpoint", "x": [[0.0] * 24]}, "x"),
        ({"preset": "checkpoint", "text": "a b", "token_ids": [1]}, "text"),
        ({"preset": "checkpoint", "text": "word " * 100}, "text"),
        ({"preset": "toy", "layer": 1}, "layer"),
        ({"preset": "checkpoint", "path": "/etc"}, "path"),
    ],
)
def test_checkpoint_errors_name_the_field(ckpt_dir, body, field):
    with make_client(checkpoint=str(ckpt_dir)) as c:
        r = c.post("/api/v1/attention", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][1] == field


def test_block_options_of_a_pretrained_model_cannot_be_changed(ckpt_dir):
    with make_client(checkpoint=str(ckpt_dir)) as c:
        r = c.get("/api/v1/block", params={"preset": "checkpoint", "norm": "rmsnorm"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == "norm"


def test_without_a_checkpoint_the_preset_is_unknown(client):
    r = client.get("/api/v1/attention", params={"preset": "checkpoint"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == "preset"


def test_settings_reject_a_directory_without_a_model(tmp_path):
    from engine.checkpoint import CheckpointError

    with pytest.raises(CheckpointError):
        make_client(checkpoint=str(tmp_path))
    assert Settings(device="cpu").checkpoint is None
