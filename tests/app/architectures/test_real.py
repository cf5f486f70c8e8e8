"""/architectures on real weights (#47): the input through MiniLM and SmolLM2 as the lab loads them, a chosen layer and
head held to transformers' own eager attentions (1e-4); the causal pattern exactly 0 above the diagonal, the
bidirectional one not; the encoder–decoder's patterns from the newest finished run (its encoder and decoder
self-attention recomputed here from the exported weights, its cross-attention N_dec × N_src with the padding
unread), and with no run a page that says so and how to start one; en and zh."""

from __future__ import annotations

import io
import math
import zipfile

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from engine.pretrained import MiniLM, SmolLM2
from tests.app.train.test_encdec import TINY, events_until_end

TEXT = "the cat sat on the mat"
minilm, smollm2 = MiniLM.find(), SmolLM2.find()
needs_models = pytest.mark.skipif(minilm is None or smollm2 is None, reason="make test installs both packages")


@pytest.fixture(scope="module")
def real_client():
    with TestClient(create_app(Settings())) as c:
        yield c


@pytest.fixture(scope="module")
def bert():
    transformers = pytest.importorskip("transformers")
    return transformers.BertModel.from_pretrained(str(minilm.path), attn_implementation="eager").eval()


def family(view: dict, name: str) -> dict:
    return next(f for f in view["families"] if f["name"] == name)


@needs_models
@pytest.mark.parametrize(("text", "minilm_head", "smollm2_head"), [
    (TEXT, (0, 0), (0, 1)), (TEXT, (3, 7), (2, 4)), ("猫 坐 在 垫子 上", (5, 11), (1, 8)),
])  # fmt: skip
def test_the_patterns_are_transformers_eager_attentions(real_client: TestClient, bert, llama, text: str,
                                                        minilm_head: tuple[int, int],
                                                        smollm2_head: tuple[int, int]) -> None:  # fmt: skip
    q = {"text": text, "minilm": "{}.{}".format(*minilm_head), "smollm2": "{}.{}".format(*smollm2_head)}
    view = real_client.get("/architectures.json", params=q).json()
    for name, model, reference, (layer, head) in (("encoder_only", minilm, bert, minilm_head),
                                                  ("decoder_only", smollm2, llama, smollm2_head)):  # fmt: skip
        (p,) = family(view, name)["real"]
        ids = model.tokenize(text)
        assert p["rows"] == [f"{i}:{w}" for i, w in enumerate(model.labels(ids))]  # the model's own tokens
        assert (p["layer"], p["head"]) == (layer, head)
        with torch.no_grad():
            want = reference(torch.tensor([ids]), output_attentions=True).attentions[layer][0, head]
        got = torch.tensor(p["weights"], dtype=torch.float64)
        torch.testing.assert_close(got, want.double(), rtol=0, atol=1e-4)
        assert p["lab_url"].startswith("/?preset=" + model.name) and f"layer={layer}&head={head}" in p["lab_url"]


@needs_models
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_causal_zeros_and_bidirectional_full_rows(real_client: TestClient, lang: str) -> None:
    view = real_client.get(f"/architectures.json?lang={lang}&pos=1").json()
    (bi,) = family(view, "encoder_only")["real"]
    (causal,) = family(view, "decoder_only")["real"]
    b, c = np.array(bi["weights"]), np.array(causal["weights"])
    assert np.allclose(b.sum(1), 1, atol=1e-5) and np.allclose(c.sum(1), 1, atol=1e-5)
    upper = np.triu(np.ones_like(c, dtype=bool), 1)
    assert (c[upper] == 0).all() and causal["above"] == 0  # the mask's zeros, exactly, in real weights
    assert (b > 0).all() and bi["above"] > 0.01  # every row reads every token, later ones too
    row = causal["row"]
    assert causal["zeros"] == c.shape[1] - 1 - row and bi["zeros"] == 0
    assert [w for _, w in causal["reads"]] == sorted(c[row][c[row] > 0], reverse=True)[: len(causal["reads"])]
    soup = BeautifulSoup(real_client.get(f"/architectures?lang={lang}").text, "html.parser")
    assert soup.select_one("[data-real='encoder'][data-model='minilm'] svg")
    assert soup.select_one("[data-real='decoder'][data-model='smollm2'] svg")
    assert float(soup.select_one("[data-real='decoder']")["data-above"]) == 0
    assert "WordPiece" in soup.text  # each model's own tokens, said


@needs_models
def test_the_chinese_default_is_in_minilms_vocabulary_and_unknown_words_are_said(real_client: TestClient) -> None:
    """The zh page's default words are all MiniLM tokens (猫 坐 在 垫子 上 read as four [UNK]); a typed text MiniLM
    lacks is drawn still, with a note saying how many of its tokens are [UNK] (SmolLM2's byte pieces have none)."""
    view = real_client.get("/architectures.json?lang=zh").json()
    (bi,) = family(view, "encoder_only")["real"]
    assert bi["unknown"] == 0 and not [r for r in bi["rows"] if r.endswith("[UNK]")], bi["rows"]
    assert [r.split(":", 1)[1] for r in bi["rows"][1:-1]] == view["tokens"][: len(bi["rows"]) - 2]  # one per word
    soup = BeautifulSoup(real_client.get("/architectures?lang=zh").text, "html.parser")
    assert not soup.select("[data-unknown]")
    for lang, said in (("en", "4 of these tokens are [UNK]"), ("zh", "其中 4 个词元是 [UNK]")):
        r = real_client.get("/architectures", params={"lang": lang, "text": "猫 坐 在 垫子 上"})
        soup = BeautifulSoup(r.text, "html.parser")
        (note,) = soup.select("[data-real='encoder'] [data-unknown]")
        assert note["data-unknown"] == "4" and said in note.text, note.text
        assert not soup.select("[data-real='decoder'] [data-unknown]")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(pretrained=False, train_max_steps=3000))) as c:
        yield c


def layer0_self_attention(p: dict, ids: list[int], prefix: str, embed: str, pos: str, causal: bool,
                          pad: list[bool], heads: int, head: int) -> np.ndarray:  # fmt: skip
    """Layer 0's self-attention weights of one head, from the exported tensors alone (numpy, float64)."""
    w = {k: v.double().numpy() for k, v in p.items()}
    x = w[embed][ids] + w[pos][: len(ids)]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    a = (x - mu) / np.sqrt(var + 1e-5) * w[prefix + "norm1.weight"] + w[prefix + "norm1.bias"]
    d = a.shape[1]
    dk = d // heads
    inw, inb = w[prefix + "self_attn.in_proj_weight"], w[prefix + "self_attn.in_proj_bias"]
    q = (a @ inw[:d].T + inb[:d])[:, head * dk : (head + 1) * dk]
    k = (a @ inw[d : 2 * d].T + inb[d : 2 * d])[:, head * dk : (head + 1) * dk]
    s = q @ k.T / math.sqrt(dk)
    s[:, np.array(pad)] = -np.inf
    if causal:
        s[np.triu(np.ones_like(s, dtype=bool), 1)] = -np.inf
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_the_encoder_decoder_of_the_newest_run(client: TestClient) -> None:
    none = client.get("/architectures.json").json()
    ed = family(none, "encoder_decoder")
    assert ed["real"] == [] and "/cross" in ed["missing"] and "/api/v1/train" in ed["missing"]
    soup = BeautifulSoup(client.get("/architectures?lang=zh").text, "html.parser")
    assert "还没有训练完成的编码器–解码器" in soup.select_one("#family-encoder_decoder [data-missing]").text
    assert len(soup.select(".arch-mask svg")) == 5  # the masks are drawn still

    run_id = client.post("/api/v1/train", json=TINY | {"steps": 120}).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    with zipfile.ZipFile(io.BytesIO(client.get(f"/api/v1/train/{run_id}/export").content)) as z:
        from safetensors.torch import load

        (name,) = [n for n in z.namelist() if n.endswith("model.safetensors")]
        p = load(z.read(name))
    vocab = ["<pad>", "<bos>", "<eos>", *"ABCDEF"]
    for text, reads_input in (("the cat sat", False), ("A B C D", True)):
        view = client.get("/architectures.json", params={"text": text, "encdec": "0.1", "pos": 2}).json()
        ed = family(view, "encoder_decoder")
        assert view["run"] == run_id and ed["missing"] == "" and run_id in ed["note"]
        enc, dec, cross = ed["real"]
        assert [x["name"] for x in ed["real"]] == ["encoder", "decoder", "cross"]
        src = [r.split(":", 1)[1] for r in enc["rows"]]
        tgt = [r.split(":", 1)[1] for r in dec["rows"]]
        if reads_input:
            assert src[:4] == ["A", "B", "C", "D"] and "input" in ed["note"]
        else:
            assert "not in its task's vocabulary" in ed["note"]
        pad = [s == "<pad>" for s in src]
        assert len(src) == 5 and tgt[0] == "<bos>"  # TINY's longest source: 5
        e, d, c = (np.array(x["weights"]) for x in (enc, dec, cross))
        np.testing.assert_allclose(e, layer0_self_attention(p, [vocab.index(s) for s in src],
                                   "transformer.encoder.layers.0.", "src_embed.weight", "src_pos.weight", False, pad,
                                   2, 1), atol=1e-5)  # fmt: skip
        np.testing.assert_allclose(d, layer0_self_attention(p, [vocab.index(s) for s in tgt],
                                   "transformer.decoder.layers.0.", "tgt_embed.weight", "tgt_pos.weight", True,
                                   [False] * len(tgt), 2, 1), atol=1e-5)  # fmt: skip
        assert c.shape == (len(tgt), len(src)) and np.allclose(c.sum(1), 1, atol=1e-5)
        assert (c[:, pad] == 0).all() and (e[:, pad] == 0).all()  # the padding is never read
        assert (d[np.triu(np.ones_like(d, dtype=bool), 1)] == 0).all() and dec["above"] == 0
        assert (c[:, ~np.array(pad)] > 0).all()  # cross-attention: no causal mask, every real source token read
