"""Short runnable snippets that print a page's numbers, generated from the page's JSON twin (never written per page).

- `lab`: the lab's own package. A random preset (toy, gpt2-small) is computed in-process by `attention_lab.trace`
  with the page's request fields; a real model's page is read from a running lab by `attention_lab.Client`.
- `torch`: an independent recomputation. For a random preset the engine only draws the inputs (the tokens' seeded
  vectors and the seeded weights, engine/sources.py) and plain torch does every stage: Q, K, V, QKᵀ, the scale, the
  mask (built from its rule here), softmax, A V, W_O. For a real model, transformers' own implementation (eager
  attention, float32) gives the layer's and head's weights.

Each snippet prints every matrix the page shows, one name line and then its rows (`-inf` where masked), so that a
test can run it and hold its numbers to the page's twin. Its comments and docstrings are in the page's language (the
catalogues' `export.code.c.*`, through `t`); its code is the same in every language.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..templating import translator
from .twin import Page

T = Callable[..., str]  # a catalogue's translator (app/templating.py): the snippet's comments in the page's language
ENGLISH = translator("en")


def c(t: T, key: str, **values: Any) -> str:
    """A comment or docstring line of a snippet, from the catalogues (`export.code.c.<key>`)."""
    return t("export.code.c." + key, **values)


TORCH_NAMES = ("x", "q", "k", "v", "raw", "scaled", "mask", "masked", "weights", "heads", "concat", "output")
REQUEST_SKIP = {"tokens", "text", "token_ids", "stages", "heads", "decimals", "x", "w_q", "w_k", "w_v", "w_o", "b_q",
                "b_k", "b_v", "b_o"}  # fmt: skip

SHOW = '''def show(name, rows):
    """{doc}"""
    print(name)
    for row in rows:
        print(" ".join("-inf" if v is None or v == float("-inf") else f"{{v:.6f}}" for v in row))
'''


def show(t: T) -> str:
    """The snippets' `show`, its docstring in the page's language."""
    return SHOW.format(doc=c(t, "show"))


class NoCode(ValueError):
    """This page's state has no snippet of this kind (the message says which pages do)."""


def _header(p: Page, kind: str, how: str, t: T) -> str:
    return f'"""Attention Lab: {p.url}\n{how}\n{c(t, "generated", kind=kind)}"""\n'


def _request_fields(p: Page) -> dict[str, Any]:
    """The page's request fields, typed: as the page ran them (its summary) where the summary holds them, else
    the URL's text read as JSON where it is (numbers, lists), else the text."""
    from ..schemas import AttentionRequest

    fields = set(AttentionRequest.model_fields) - REQUEST_SKIP
    out: dict[str, Any] = {}
    summary = p.summary
    for key, value in p.query:
        if key not in fields:
            continue
        if key in summary and summary[key] is not None:
            out[key] = summary[key]
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _random(p: Page) -> bool:
    return bool(p.twin.get("random_weights")) or p.summary.get("preset") in ("toy", "gpt2-small")


# What each page prints: its main numbers, as (name, a Python expression over `view`, the page's View as JSON).
# The lab's pages (/, /embed, /block, /sinks) print every matrix they show; the others the numbers they plot.
PRINTS: dict[str, tuple[tuple[str, str], ...]] = {
    "lens": (("p_final", "[[cell['p_final'] for cell in row] for row in view['rows']]"),),
    "predict": (("loss", "[[c['loss'] for c in view['columns'] if c['scored']]]"),
                ("p_target", "[[c['p_target'] for c in view['columns'] if c['scored']]]")),
    "heads": (("weights", "view['weights']"),),
    "model": (("grid", "[[c['value'] if isinstance(c, dict) else c for c in row] for row in view['grid']]"),),
}  # fmt: skip
MATRICES = 'for m in view["matrices"]:\n    show(m["name"], m["values"])\n'


def printed(view: dict[str, Any]) -> dict[str, list[list[float | None]]]:
    """What a page's snippets print, read from its View (its JSON twin): the tests' and the notebook's numbers."""
    if isinstance(view.get("matrices"), list):
        return {m["name"]: m["values"] for m in view["matrices"]}
    if isinstance(view.get("large"), dict):
        tile = view["large"]["tile"]
        return {tile["name"]: tile["values"]}
    # The same expressions the snippet prints (constants of this module): what the page shows, read from its View.
    return {name: eval(expr, {}, {"view": view}) for name, expr in PRINTS.get(str(view.get("view")), ())}


def _prints(p: Page, t: T) -> str:
    if isinstance(p.twin.get("matrices"), list):
        return MATRICES
    if isinstance(p.twin.get("large"), dict):
        return f'tile = view["large"]["tile"]  # {c(t, "window")}\nshow(tile["name"], tile["values"])\n'
    lines = PRINTS.get(str(p.twin.get("view")))
    if not lines:
        raise NoCode(f"the page {p.path} shows no numbers a snippet prints")
    return "".join(f"show({name!r}, {expr})\n" for name, expr in lines)


def lab_snippet(p: Page, base_url: str, t: T = ENGLISH) -> str:
    if p.path in ("/", "/embed") and not p.twin.get("key"):
        raise NoCode("kind=lab needs the lab's stage (its page shows one)")
    head = int(p.twin.get("head") or 0)
    if p.path in ("/", "/embed") and _random(p):
        key = p.twin["key"]
        tokens = list(p.twin.get("tokens") or [])
        fields = _request_fields(p)
        args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        body = (
            "from attention_lab import trace\n\n" + show(t) + "\n\n"
            f"stages = trace({tokens!r}, head={head}{', ' + args if args else ''})  # {c(t, 'no_server')}\n"
            f"view = stages[{key!r}].to_json()  # {c(t, 'view')}\n"
        )
        how = c(t, "lab_trace")
    else:
        params = {k: v for k, v in p.query if k != "lang"}
        # A first visit's text is its language's: the client asks in the page's language (its own `lang`).
        named = {"text", "token_ids", "tokens"} & set(p.params)
        client = (
            f"{base_url!r}, lang={p.params['lang']!r}"
            if not named and p.params.get("lang", "en") != "en"
            else repr(base_url)
        )
        if p.twin.get("key"):
            params.setdefault("stage", p.twin["key"])
        body = (
            "from attention_lab import Client\n\n" + show(t) + "\n\n"
            f"lab = Client({client})  # {c(t, 'running')}\n"
            f"view = lab.view({p.path!r}, **{params!r})  # {c(t, 'view_json')}\n"
        )
        how = c(t, "lab_client")
    return _header(p, "lab", how, t) + "\n" + body + _prints(p, t)


def torch_snippet(p: Page, model_files: tuple[str, str | None] | None, ids: list[int] | None = None,
                  t: T = ENGLISH) -> str:  # fmt: skip
    """`ids`: the page's token ids as the lab tokenised them (a real model's page that names none in its View); `t`
    the page's language's translator (its comments)."""
    real = None if _random(p) else model_files
    if not _random(p) and model_files is None:
        raise NoCode(f"kind=torch knows no files for the model {p.summary.get('preset') or p.twin.get('preset')!r}")
    if p.path == "/lens" and real:
        return _torch_lens(p, real, ids or [], t)
    if p.path == "/predict" and real:
        return _torch_predict(p, real, t)
    if p.path in ATTENTIONS and real:
        return ATTENTIONS[p.path](p, real, ids or [], t)
    if p.path not in ("/", "/embed", "/block") or not p.twin.get("key"):
        raise NoCode(
            "kind=torch covers the lab's pages (/, /embed), /block, /sinks, /heads, /model, /lens and /predict"
        )
    mats = p.twin.get("matrices")
    if not isinstance(mats, list) or not mats:
        raise NoCode("kind=torch prints the matrices of a page that shows them (a trace small enough for numbers)")
    if p.path == "/block":
        if real:  # a real model's block shows heat maps, no numbers (`small` is false): nothing to print
            raise NoCode("kind=torch covers /block's random presets")
        return _torch_random(p, [m["name"] for m in mats], t, block=True)
    if _random(p):
        return _torch_random(p, [m["name"] for m in mats], t)
    assert real is not None
    return _torch_real(p, real, t)


def _torch_random(p: Page, names: list[str], t: T, block: bool = False) -> str:
    s = p.summary
    if s.get("positions", "none") != "none" or s.get("kv_tokens") or s.get("explicit"):
        raise NoCode("kind=torch covers random presets without positions, cross-attention or explicit numbers")
    if block and (s.get("placement") != "pre" or s.get("ffn") != "gelu"):
        raise NoCode("kind=torch covers /block's pre-norm GELU block (GPT-2's)")
    known = (*TORCH_NAMES, *BLOCK_NAMES) if block else TORCH_NAMES
    unknown = [n for n in names if n not in known]
    if unknown:
        raise NoCode(f"kind=torch does not recompute {', '.join(unknown)}")
    tokens = tuple(p.twin.get("tokens") or ())
    head = int(p.twin.get("head") or 0)
    n_heads, n_kv = int(s["n_heads"]), int(s.get("n_kv_heads") or s["n_heads"])
    rule = _mask_rule(str(s.get("mask", "none")), s)
    divisor = {"sqrt_dk": "d_k ** 0.5", "none": "1.0", "dk": "float(d_k)"}[str(s.get("scale", "sqrt_dk"))]
    shown = {
        "x": "x", "q": "q[head]", "k": "k[head_kv]", "v": "v[head_kv]", "raw": "raw[head]", "scaled": "scaled[head]",
        "mask": "mask", "masked": "masked[head]", "weights": "weights[head]", "heads": "per_head[head]",
        "concat": "concat", "output": "output",
    }  # fmt: skip
    if block:
        shown |= {"input": "x_in", "ln1": "ln1", "residual1": "residual1", "ln2": "ln2", "pre_activation": "pre",
                  "ffn_hidden": "ffn_hidden", "ffn_out": "ffn_out"}  # fmt: skip
        if p.twin.get("key") == "output":
            shown["output"] = "block_output"
    prints = "".join(f"show({n!r}, {shown[n]}.tolist())\n" for n in names)
    how = c(t, "torch_random")
    if block:
        inputs = _BLOCK_IN.format(d_ff=int(s.get("d_ff") or 0), norm=s.get("norm"), eps=float(s.get("eps") or 1e-5),
                                  embed=c(t, "embed"), gains=c(t, "block_weights"),
                                  rows=c(t, "norm", norm=s.get("norm")), prenorm=c(t, "prenorm"))  # fmt: skip
        outputs = _BLOCK_OUT.format(gelu="tanh" if s.get("gelu") == "tanh" else "none", residual=c(t, "residual"))
    else:
        inputs, outputs = f"x = embed(tokens, seed, d_model)  # {c(t, 'embed')}\n", ""
    return _header(p, "torch", how, t) + (
        "\nimport torch\n\n"
        + ("from engine.block import random_block_weights\n" if block else "")
        + "from engine.sources import embed, random_weights\n\n"
        + show(t)
        + "\n\n"
        f"tokens = {tokens!r}\n"
        f"seed, d_model, n_heads, n_kv_heads = {int(s['seed'])}, {int(s['d_model'])}, {n_heads}, {n_kv}\n"
        f"init_std, bias, head = {float(s['init_std'])!r}, {bool(s['bias'])}, {head}\n"
        "n, d_k = len(tokens), d_model // n_heads\n"
        f"head_kv = head // (n_heads // n_kv_heads)  # {c(t, 'gqa')}\n"
        + inputs
        + f"w = random_weights(seed, d_model, init_std, bias, n_kv_heads * d_k)  # {c(t, 'weights')}\n\n\n"
        "def split(t, h):  # (N, h·d_k) -> (h, N, d_k)\n"
        "    return t.view(n, h, d_k).transpose(0, 1)\n\n\n"
        f"def linear(t, weight, b):  # {c(t, 'linear')}\n"
        "    return t @ weight + (b if b is not None else 0)\n\n\n"
        "q = split(linear(x, w.w_q, w.b_q), n_heads)\n"
        "k = split(linear(x, w.w_k, w.b_k), n_kv_heads)\n"
        "v = split(linear(x, w.w_v, w.b_v), n_kv_heads)\n"
        "group = n_heads // n_kv_heads\n"
        "k_all, v_all = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)\n"
        "raw = q @ k_all.transpose(-1, -2)  # QKᵀ\n"
        f"scaled = raw / ({divisor})  # {c(t, 'scale', scale=s.get('scale'))}\n"
        "i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]\n"
        f"allowed = {rule}  # {c(t, 'mask', mask=s.get('mask'))}\n"
        "mask = torch.zeros(n, n).masked_fill(~allowed, float('-inf'))\n"
        "masked = scaled + mask\n"
        f"weights = torch.softmax(masked, dim=-1).nan_to_num(0.0)  # {c(t, 'masked_row')}\n"
        "per_head = weights @ v_all  # A V, (H, N, d_k)\n"
        "concat = per_head.transpose(0, 1).reshape(n, d_model)\n"
        "output = linear(concat, w.w_o, w.b_o)  # W_O\n\n" + outputs + prints
    )


BLOCK_NAMES = ("input", "ln1", "residual1", "ln2", "pre_activation", "ffn_hidden", "ffn_out")
_BLOCK_IN = """x_in = embed(tokens, seed, d_model)  # {embed}
b = random_block_weights(seed, d_model, {d_ff}, {norm!r}, 'gelu', bias, init_std)  # {gains}
eps = {eps!r}


def norm(t, gain, shift):  # {rows}
    if shift is None:  # RMSNorm
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * gain
    mu = t.mean(-1, keepdim=True)
    return (t - mu) / torch.sqrt(((t - mu) ** 2).mean(-1, keepdim=True) + eps) * gain + shift


ln1 = norm(x_in, b.ln1_w, b.ln1_b)  # {prenorm}
x = ln1
"""
_BLOCK_OUT = """residual1 = x_in + output  # {residual}
ln2 = norm(residual1, b.ln2_w, b.ln2_b)
pre = linear(ln2, b.w_up, b.b_up)  # (N, d_ff)
ffn_hidden = torch.nn.functional.gelu(pre, approximate={gelu!r})
ffn_out = linear(ffn_hidden, b.w_down, b.b_down)
block_output = residual1 + ffn_out

"""


def _mask_rule(kind: str, s: dict[str, Any]) -> str:
    causal = "(j <= i)"
    if kind == "none":
        return "torch.ones(n, n, dtype=torch.bool)"
    if kind == "causal":
        return causal
    if kind == "sliding_window":
        return f"{causal} & (i - j < {int(s['window'])})"
    if kind == "prefix_lm":
        return f"{causal} | (j < {int(s['prefix'])})"
    if kind == "padding":
        return f"~torch.isin(j, torch.tensor({list(s['pad_positions'])!r})).expand(n, n)"
    if kind == "document":
        return f"{causal} & (torch.tensor({list(s['segment_ids'])!r})[:, None] == torch.tensor({list(s['segment_ids'])!r})[None, :])"
    if kind == "custom":
        return f"torch.tensor({[[bool(v) for v in r] for r in s['mask_matrix']]!r})"
    raise NoCode(f"kind=torch does not build the mask {kind!r}")


def _torch_real(p: Page, files: tuple[str, str | None], t: T) -> str:
    s = p.summary
    path, gguf = files
    ids = list(s.get("token_ids") or [])
    if not ids:
        raise NoCode("kind=torch needs the page's token ids (its summary has none)")
    layer, head = int(s.get("layer") or 0), int(p.twin.get("head") or 0)
    loader = f"{path!r}, gguf_file={gguf!r}, " if gguf else f"{path!r}, "
    how = c(t, "torch_real", layer=layer, head=head)
    return _header(p, "torch", how, t) + (
        "\nimport torch\nfrom transformers import AutoModel\n\n" + show(t) + "\n\n"
        f"model = AutoModel.from_pretrained({loader}attn_implementation='eager', dtype=torch.float32).eval()\n"
        f"ids = torch.tensor([{ids!r}])\n"
        "with torch.no_grad():\n"
        "    out = model(ids, output_attentions=True)\n"
        f"show('weights', out.attentions[{layer}][0, {head}].tolist())\n"
    )


def _loader(files: tuple[str, str | None], t: T) -> str:
    path, gguf = files
    where = f"{path!r}, gguf_file={gguf!r}, " if gguf else f"{path!r}, "
    return (
        "from transformers import AutoModelForCausalLM\n\n" + show(t) + "\n\n"
        f"model = AutoModelForCausalLM.from_pretrained({where}attn_implementation='eager', dtype=torch.float32).eval()\n"
        "layers = model.model.layers\n"
    )


def _switches(p: Page) -> tuple[list[list[int]], bool]:
    sw = p.twin.get("switches") or {}
    if sw.get("mask_off_layers") or sw.get("drop_sink_layers"):
        raise NoCode("kind=torch covers knock-outs (ablate), not the mask or sink switches")
    return [list(map(int, pair)) for pair in sw.get("ablate") or []], sw.get("ablate_mode") == "mean"


KNOCK = """knocked = {knocked!r}  # {pairs}
d_head = model.config.hidden_size // model.config.num_attention_heads


def knock_out(layer):
    def hook(module, args):  # {o_proj}
        x = args[0].clone()
        for l, h in knocked:
            if l == layer:
                part = x[..., h * d_head:(h + 1) * d_head]
                x[..., h * d_head:(h + 1) * d_head] = {replace}
        return (x,)
    return hook


for i, block in enumerate(layers):
    block.self_attn.o_proj.register_forward_pre_hook(knock_out(i))
"""
MEAN = "part.cumsum(-2) / torch.arange(1, part.shape[-2] + 1).unsqueeze(-1)"


def _knock(knocked: list[list[int]], mean: bool, t: T) -> str:
    if not knocked:
        return ""
    pairs = c(t, "knocked", how=c(t, "knock_mean" if mean else "knock_zero"))
    return KNOCK.format(knocked=knocked, pairs=pairs, o_proj=c(t, "o_proj"), replace=MEAN if mean else "0.0") + "\n"


def _torch_lens(p: Page, files: tuple[str, str | None], ids: list[int], t: T) -> str:
    if not ids:
        raise NoCode("kind=torch needs the page's token ids")
    knocked, mean = _switches(p)
    start = int(p.twin.get("start") or 0)
    n_pos = len((p.twin.get("rows") or [[]])[0])
    return _header(p, "torch", c(t, "torch_lens"), t) + (
        "\nimport torch\n" + _loader(files, t) + _knock(knocked, mean, t) +
        f"streams = []  # {c(t, 'streams')}\n"
        "for block in layers:\n"
        "    block.register_forward_hook(lambda m, a, out: streams.append(out[0] if isinstance(out, tuple) else out))\n"
        f"ids = torch.tensor([{ids!r}])\n"
        "with torch.no_grad():\n"
        "    model(ids)\n"
        "    probs = [torch.softmax(model.lm_head(model.model.norm(x[0])).double(), -1) for x in streams]\n"
        f"final = probs[-1].argmax(-1)  # {c(t, 'final')}\n"
        f"p_final = [p.gather(1, final[:, None])[:, 0][{start}:{start + n_pos}].tolist() for p in probs]\n"
        "show('p_final', p_final)\n"
    )  # fmt: skip


def _torch_predict(p: Page, files: tuple[str, str | None], t: T) -> str:
    cols = [c for c in p.twin.get("columns") or [] if c.get("scored")]
    every = p.twin.get("columns") or []
    if not cols or any(c.get("replaced_from") is not None for c in every):
        raise NoCode("kind=torch covers /predict's scored positions without replaced tokens")
    knocked, mean = _switches(p)
    inputs = [int(c["input_id"]) for c in every]
    scored = [(i, int(c["target_id"])) for i, c in enumerate(every) if c.get("scored")]
    how = c(t, "torch_predict_knocked" if knocked else "torch_predict")
    return _header(p, "torch", how, t) + (
        "\nimport torch\n" + _loader(files, t) + _knock(knocked, mean, t) +
        f"ids = torch.tensor([{inputs!r}])\n"
        f"scored = {scored!r}  # {c(t, 'scored')}\n"
        "with torch.no_grad():\n"
        "    logp = torch.log_softmax(model(ids).logits[0].double(), -1)\n"
        "show('loss', [[-logp[i, t].item() for i, t in scored]])\n"
        "show('p_target', [[logp[i, t].exp().item() for i, t in scored]])\n"
    )  # fmt: skip


def _attentions(p: Page, files: tuple[str, str | None], ids: list[int], how: str, then: str, t: T) -> str:
    """transformers' own attention weights of every layer (eager attention, float32) for `ids`, then `then`."""
    if not ids:
        raise NoCode("kind=torch needs the page's token ids")
    path, gguf = files
    loader = f"{path!r}, gguf_file={gguf!r}, " if gguf else f"{path!r}, "
    return _header(p, "torch", c(t, "torch_attentions") + "\n" + how, t) + (
        "\nimport torch\nfrom transformers import AutoModel\n\n" + show(t) + "\n\n"
        f"model = AutoModel.from_pretrained({loader}attn_implementation='eager', dtype=torch.float32).eval()\n"
        f"ids = torch.tensor([{ids!r}])\n"
        "with torch.no_grad():\n"
        f"    attentions = model(ids, output_attentions=True).attentions  # {c(t, 'per_layer')}\n" + then
    )


def _torch_heads(p: Page, files: tuple[str, str | None], _ids: list[int], t: T) -> str:
    """/heads: the chosen head's weights on the page's induction probe (the page rounds them to 4 decimals)."""
    probe = p.twin.get("probe") or {}
    chosen = p.twin.get("chosen")
    if not chosen or not p.twin.get("weights"):
        raise NoCode("kind=torch prints /heads' chosen head on the probe (the page shows none)")
    layer, head = (int(x) for x in chosen)
    how = c(t, "torch_heads", n=probe.get("n"), layer=layer, head=head)
    return _attentions(p, files, list(probe.get("token_ids") or []), how,
                       f"show('weights', attentions[{layer}][0, {head}].tolist())\n", t)  # fmt: skip


STAT = {  # /model's statistics (engine/model_view.py), over a layer's weights `a` (heads, N, N) in float64; each
    # one's words are the catalogues' export.code.c.stat.<name>
    "entropy": "-(a * torch.where(a > 0, a.log(), torch.zeros_like(a))).sum(-1).mean(-1)",
    "sink": "a[:, 1:, 0].mean(-1) if n > 1 else torch.zeros(len(a))",
    "previous": "a.diagonal(-1, -2, -1).mean(-1) if n > 1 else torch.zeros(len(a))",
    "self": "a.diagonal(0, -2, -1).mean(-1)",
}


def _torch_model(p: Page, files: tuple[str, str | None], ids: list[int], t: T) -> str:
    """/model: one statistic of every layer and head (the clean run: knock-outs show beside it, not in it)."""
    stat = str(p.twin.get("stat") or "entropy")
    if stat not in STAT or not p.twin.get("grid"):
        raise NoCode(f"kind=torch prints /model's grid of {', '.join(STAT)}")
    how = c(t, "torch_model", stat=stat)
    then = (
        "n = ids.shape[1]\ngrid = []\nfor layer in attentions:\n    a = layer[0].double()\n"
        f"    values = {STAT[stat]}  # {c(t, 'stat.' + stat)}\n    grid.append(values.tolist())\nshow('grid', grid)\n"
    )
    return _attentions(p, files, ids, how, then, t)


def _torch_sinks(p: Page, files: tuple[str, str | None], _ids: list[int], t: T) -> str:
    """/sinks: the layer's head weights A, and A′ without the sink (key 0 dropped for queries 1…, renormalised)."""
    names = [m["name"] for m in p.twin.get("matrices") or []]
    if not names or set(names) - {"weights", "dropped"}:
        raise NoCode("kind=torch prints /sinks' weights with and without the sink (a text short enough for numbers)")
    layer, head = int(p.summary.get("layer") or p.twin.get("layer") or 0), int(p.twin.get("head") or 0)
    how = c(t, "torch_sinks", layer=layer, head=head)
    then = (
        f"a = attentions[{layer}][0, {head}].double()\n"
        f"dropped = a.clone()\ndropped[1:, 0] = 0.0  # {c(t, 'sink_query0')}\n"
        "total = dropped.sum(-1, keepdim=True)\n"
        f"dropped = dropped / torch.where(total > 0, total, torch.ones_like(total))  # {c(t, 'sink_zero')}\n"
        + "".join(f"show({n!r}, {'a' if n == 'weights' else 'dropped'}.tolist())\n" for n in names)
    )
    return _attentions(p, files, list(p.summary.get("token_ids") or []), how, then, t)


ATTENTIONS = {"/heads": _torch_heads, "/model": _torch_model, "/sinks": _torch_sinks}  # a real model's weights
