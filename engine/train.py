"""Train a tiny GPT from nothing, in front of the class: the data, the loop, the samples, the heads as they learn.

The model is the lab's own decoder, made trainable: `block.normalise` and `block.feed_forward` for the norms and the
MLP, `positions.rotate` for RoPE, and the attention written as the lab shows it (QKᵀ/√d_k, the causal mask, softmax
over keys, A V). Its tensors are named and laid out as a family the lab loads (engine/models/families.py): learned
positions make a GPT-2 (LayerNorm, GELU, biases, Conv1D (in, out) weights); RoPE makes a Llama (RMSNorm, SwiGLU, no
biases, nn.Linear (out, in) weights, Hugging Face's rotate_half pairing). So `export` only writes the tensors down,
and `serve --model` reads the run back with the same logits.

Two tasks. `repeat`: n random tokens, then the same n again: the first half cannot be predicted (ln V nats per token),
the second only by copying, which takes an induction head (a previous-token head in one layer, a head in a later
one that looks for the token after the current token's earlier occurrence, Olsson et al. 2022): the loss sits on a
plateau, then falls at once (the phase change). `text`: characters of a text shipped with Python (the standard
library's own docstrings, `stdlib_text`), with samples drawn as it learns.

The induction score of a head is the mean, over the second copy's queries i, of its weight A[i, i − n + 1] on a fixed
probe (n random tokens twice), read at log-spaced steps. The training loss is taken under the run's own mask; the
held-out loss always under the causal mask, as generation must run: with the mask off the first falls far lower
(each position reads the answer) and the second is worse (the cheat).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .block import BlockWeights, feed_forward, normalise
from .device import CPU
from .errors import Message, SpecError
from .positions import rotate
from .sources import seed_of

TASKS = ("repeat", "text")
POSITIONS = ("learned", "rope")
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # the repeat task's token labels
EPS = 1e-5
STD = 0.02
TEXT_MODULES = ("json", "argparse", "collections", "textwrap", "string", "re", "functools", "itertools", "pathlib",
                "dataclasses", "random", "statistics", "fractions", "decimal", "heapq", "bisect", "csv", "shutil",
                "logging", "unittest", "datetime", "calendar", "difflib", "inspect", "typing", "enum", "abc")  # fmt: skip


@dataclass(frozen=True)
class TrainConfig:
    task: str = "repeat"  # repeat | text
    n_layer: int = 2  # 1-4
    n_heads: int = 2  # 1-4
    d_model: int = 64  # 32-128, a multiple of n_heads (and of 2·n_heads with RoPE)
    mlp: bool = False  # attention-only (False) or each block with its MLP (4·d_model wide)
    positions: str = "rope"  # rope (a Llama: the induction head forms in a few hundred steps) | learned (a GPT-2)
    causal: bool = True  # False: the mask-off cheat (each position may read the tokens after it)
    steps: int = 1000  # optimiser steps
    batch: int = 32  # sequences per step
    lr: float = 3e-3  # AdamW's learning rate (constant after a short warm-up)
    weight_decay: float = 0.01  # AdamW's decoupled weight decay
    seed: int = 0  # initial weights, batches, probe and samples all derive from it
    n_repeat: int = 16  # repeat: random tokens per half (sequences of 2n)
    vocab: int = 64  # repeat: how many kinds of token (at most 64)
    context: int = 64  # text: characters per training sequence
    eval_every: int = 25  # steps between held-out losses
    n_snapshots: int = 12  # log-spaced steps at which the heads are read on the probe
    sample_chars: int = 120  # text: characters generated at each snapshot
    device: str = "cpu"  # cpu | cuda

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_ctx(self) -> int:
        return 2 * self.n_repeat if self.task == "repeat" else self.context

    @property
    def family(self) -> str:
        return "gpt2" if self.positions == "learned" else "llama"


LIMITS = {"n_layer": (1, 4), "n_heads": (1, 4), "d_model": (32, 128), "steps": (1, 20000), "batch": (1, 256),
          "n_repeat": (2, 32), "vocab": (4, len(ALPHABET)), "context": (8, 256), "eval_every": (1, 10000),
          "n_snapshots": (2, 40), "sample_chars": (0, 1000)}  # fmt: skip


def make_config(**given: Any) -> TrainConfig:
    """A TrainConfig from keyword choices; a choice out of range is a SpecError naming it."""
    known = TrainConfig.__dataclass_fields__
    for name in given:
        if name not in known:
            raise SpecError(name, Message("unknown_setting", known=", ".join(known)))
    c = TrainConfig(**given)
    for name, choices in (("task", TASKS), ("positions", POSITIONS), ("device", ("cpu", "cuda"))):
        if getattr(c, name) not in choices:
            raise SpecError(
                name, Message("unknown_choice", kind=name, value=getattr(c, name), choices=", ".join(choices))
            )
    for name, (low, high) in LIMITS.items():
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SpecError(name, Message("integer_range", low=low, high=high, value=value))
    if c.d_model % (c.n_heads * (2 if c.positions == "rope" else 1)):
        raise SpecError("d_model", Message("heads_divide_rope", d_model=c.d_model, n_heads=c.n_heads))
    for name in ("lr", "weight_decay"):
        value = getattr(c, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1):
            raise SpecError(name, Message("unit_number", value=value))
    if c.lr <= 0:
        raise SpecError("lr", Message("above_zero"))
    if c.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", Message("no_cuda"))
    return c


def stdlib_text(limit: int = 200_000) -> str:
    """A text that ships with Python: the docstrings of some standard-library modules and their public members,
    printable ASCII and newlines only (nothing fetched, nothing copied into the repository)."""
    import importlib
    import inspect

    parts: list[str] = []
    for name in TEXT_MODULES:
        module = importlib.import_module(name)
        docs = [inspect.getdoc(module)] + [inspect.getdoc(getattr(module, n, None)) for n in sorted(vars(module))
                                            if not n.startswith("_") and getattr(module, n, None) is not None
                                            and getattr(getattr(module, n), "__module__", None) == name]  # fmt: skip
        parts += [d for d in docs if d]
    text = "\n\n".join(parts)
    return "".join(ch for ch in text if ch == "\n" or " " <= ch <= "~")[:limit]


# -- the model ----------------------------------------------------------------------------------------------------
def init_params(c: TrainConfig, vocab: int) -> dict[str, torch.Tensor]:
    """Every tensor, by the name the exported family gives it: weights N(0, 0.02²), biases 0, norm gains 1."""
    g = torch.Generator().manual_seed(seed_of("train", c.seed))
    d, ff = c.d_model, 4 * c.d_model

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=CPU) * STD

    p: dict[str, torch.Tensor] = {}
    if c.family == "gpt2":
        p |= {"transformer.wte.weight": randn(vocab, d), "transformer.wpe.weight": randn(c.n_ctx, d)}
        for i in range(c.n_layer):
            h = f"transformer.h.{i}."
            p |= {h + "ln_1.weight": torch.ones(d), h + "ln_1.bias": torch.zeros(d),
                  h + "attn.c_attn.weight": randn(d, 3 * d), h + "attn.c_attn.bias": torch.zeros(3 * d),
                  h + "attn.c_proj.weight": randn(d, d), h + "attn.c_proj.bias": torch.zeros(d)}  # fmt: skip
            if c.mlp:
                p |= {h + "ln_2.weight": torch.ones(d), h + "ln_2.bias": torch.zeros(d),
                      h + "mlp.c_fc.weight": randn(d, ff), h + "mlp.c_fc.bias": torch.zeros(ff),
                      h + "mlp.c_proj.weight": randn(ff, d), h + "mlp.c_proj.bias": torch.zeros(d)}  # fmt: skip
        p |= {"transformer.ln_f.weight": torch.ones(d), "transformer.ln_f.bias": torch.zeros(d)}
    else:
        p["model.embed_tokens.weight"] = randn(vocab, d)
        for i in range(c.n_layer):
            h = f"model.layers.{i}."
            p |= {h + "input_layernorm.weight": torch.ones(d)}
            p |= {h + f"self_attn.{n}_proj.weight": randn(d, d) for n in "qkvo"}
            if c.mlp:
                p |= {h + "post_attention_layernorm.weight": torch.ones(d), h + "mlp.gate_proj.weight": randn(ff, d),
                      h + "mlp.up_proj.weight": randn(ff, d), h + "mlp.down_proj.weight": randn(d, ff)}  # fmt: skip
        p["model.norm.weight"] = torch.ones(d)
    p["lm_head.weight"] = randn(vocab, d)
    return {k: v.to(c.device) for k, v in p.items()}


def forward(c: TrainConfig, p: dict[str, torch.Tensor], ids: torch.Tensor, causal: bool,
            keep: list[torch.Tensor] | None = None) -> torch.Tensor:  # fmt: skip
    """Logits (B, T, V) of token ids (B, T); with `keep`, each layer's attention weights (B, H, T, T) appended."""
    b, t = ids.shape
    h, dk, gpt2 = c.n_heads, c.d_k, c.family == "gpt2"
    norm = "layernorm" if gpt2 else "rmsnorm"
    x = (
        p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][:t]
        if gpt2
        else p["model.embed_tokens.weight"][ids]
    )
    future = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu_(1)
    pos = torch.arange(t, device=ids.device)
    for i in range(c.n_layer):
        pre = f"transformer.h.{i}." if gpt2 else f"model.layers.{i}."
        if gpt2:
            a = normalise(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], norm, EPS)
            q, k, v = (a @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]).split(c.d_model, dim=-1)
        else:
            a = normalise(x, p[pre + "input_layernorm.weight"], None, norm, EPS)
            q, k, v = (a @ p[pre + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = (m.view(b, t, h, dk).transpose(1, 2) for m in (q, k, v))  # (B, H, T, d_k)
        if not gpt2:
            q, k = rotate(q, pos, 10000.0, "half"), rotate(k, pos, 10000.0, "half")
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)  # (B, H, T, T)
        if causal:
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if keep is not None:
            keep.append(weights.detach())
        heads = (weights @ v).transpose(1, 2).reshape(b, t, c.d_model)  # (B, T, d)
        if gpt2:
            x = x + heads @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
        else:
            x = x + heads @ p[pre + "self_attn.o_proj.weight"].T
        if c.mlp:
            x = x + _mlp(p, pre, x, gpt2).view(b, t, c.d_model)
    if gpt2:
        x = normalise(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], norm, EPS)
    else:
        x = normalise(x, p["model.norm.weight"], None, norm, EPS)
    return x @ p["lm_head.weight"].T


def _mlp(p: dict[str, torch.Tensor], pre: str, x: torch.Tensor, gpt2: bool) -> torch.Tensor:
    """The block's feed-forward, the lab's own (`block.feed_forward`): GPT-2's GELU (tanh) or Llama's SwiGLU."""
    flat = x.reshape(-1, x.shape[-1])
    if gpt2:
        w = BlockWeights(ln1_w=p[pre + "ln_1.weight"], ln1_b=None, ln2_w=p[pre + "ln_2.weight"],
                         ln2_b=p[pre + "ln_2.bias"], w_up=p[pre + "mlp.c_fc.weight"],
                         w_down=p[pre + "mlp.c_proj.weight"], b_up=p[pre + "mlp.c_fc.bias"],
                         b_down=p[pre + "mlp.c_proj.bias"])  # fmt: skip
        return feed_forward(normalise(flat, w.ln2_w, w.ln2_b, "layernorm", EPS), w, "gelu", "tanh")[1]
    w = BlockWeights(ln1_w=p[pre + "input_layernorm.weight"], ln1_b=None,
                     ln2_w=p[pre + "post_attention_layernorm.weight"], ln2_b=None,
                     w_up=p[pre + "mlp.up_proj.weight"].T, w_down=p[pre + "mlp.down_proj.weight"].T,
                     w_gate=p[pre + "mlp.gate_proj.weight"].T)  # fmt: skip
    return feed_forward(normalise(flat, w.ln2_w, None, "rmsnorm", EPS), w, "swiglu", "tanh")[1]


# -- the data -----------------------------------------------------------------------------------------------------
@dataclass
class Data:
    """Where batches come from: random repeats, or windows of a text's characters (train: its first 90%)."""

    c: TrainConfig
    chars: str = ""  # text: the vocabulary, one character per token id
    train_ids: torch.Tensor | None = None
    held_ids: torch.Tensor | None = None

    @property
    def vocab(self) -> int:
        return self.c.vocab if self.c.task == "repeat" else len(self.chars)

    def labels(self) -> list[str]:
        return list(ALPHABET[: self.c.vocab]) if self.c.task == "repeat" else list(self.chars)

    def batch(self, g: torch.Generator, n: int, held: bool = False) -> torch.Tensor:
        """(n, T + 1) token ids: inputs are [:, :-1], targets [:, 1:]."""
        c = self.c
        if c.task == "repeat":  # period L from n/2 to n, so no head can find the copy by its position alone
            first = torch.randint(0, c.vocab, (n, c.n_repeat), generator=g, device=CPU)
            period = torch.full((n,), c.n_repeat) if held else self.periods(g, n)  # held out: n tokens twice
            cols = torch.arange(c.n_ctx, device=CPU)[None, :] % period[:, None]  # (n, 2n)
            return first.gather(1, cols)
        ids = self.held_ids if held else self.train_ids
        assert ids is not None
        starts = torch.randint(0, len(ids) - c.context - 1, (n,), generator=g, device=CPU)
        return torch.stack([ids[s : s + c.context + 1] for s in starts.tolist()])

    def periods(self, g: torch.Generator, n: int) -> torch.Tensor:
        low = max(2, self.c.n_repeat // 2)
        return torch.randint(low, self.c.n_repeat + 1, (n,), generator=g, device=CPU)

    def probe(self) -> torch.Tensor:
        """(1, 2n − 1): n tokens twice (the last dropped, as in training), the same for every snapshot of a seed."""
        c = self.c
        g = torch.Generator().manual_seed(seed_of("train-probe", c.seed))
        n = c.n_repeat if c.task == "repeat" else min(16, c.context // 2)
        half = torch.rand(1, self.vocab, generator=g, device=CPU).argsort(1)[:, :n]
        return torch.cat([half, half], dim=1)[:, :-1]


def make_data(c: TrainConfig, text: str | None = None) -> Data:
    if c.task == "repeat":
        return Data(c)
    text = text if text is not None else stdlib_text()
    chars = "".join(sorted(set(text)))
    ids = torch.tensor([chars.index(ch) for ch in text], dtype=torch.long, device=CPU)
    cut = int(len(ids) * 0.9)
    if cut < c.context + 2 or len(ids) - cut < c.context + 2:
        raise SpecError("context", Message("text_too_short", n=len(ids), context=c.context))
    return Data(c, chars, ids[:cut], ids[cut:])


def induction_scores(weights: list[torch.Tensor], n: int) -> list[list[float]]:
    """Per layer and head, the mean over queries i = n … 2n − 2 of A[i, i − n + 1] (weights (1, H, T, T))."""
    t = weights[0].shape[-1]
    rows = torch.arange(n, t)
    return [[round(float(a[0, head, rows, rows - n + 1].mean()), 4) for head in range(a.shape[1])] for a in weights]


def snapshot_steps(steps: int, count: int) -> list[int]:
    """0 and `steps`, and log-spaced steps between (distinct, rising)."""
    out = {0, steps}
    for j in range(count - 1):
        out.add(min(steps, round(math.exp(math.log(steps) * (j + 1) / (count - 1)))))
    return sorted(out)


# -- the run ------------------------------------------------------------------------------------------------------
@dataclass
class Snapshot:
    step: int
    induction: list[list[float]]  # (layers, heads): each head's induction score on the probe
    weights: list[torch.Tensor]  # per layer (H, T, T): the heads' attention weights on the probe
    eval_loss: float  # held-out, causal
    sample: str = ""  # text: what the model writes from the held-out prompt


@dataclass
class Run:
    """A run's numbers, filled in as it trains (read them from another thread: lists only grow)."""

    config: TrainConfig
    labels: list[str]  # token id → what it stands for
    probe: list[int]  # the probe's token ids
    status: str = "running"  # running | done | cancelled
    step: int = 0
    loss: list[float] = field(default_factory=list)  # per step: the training batch's loss under the run's own mask
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)  # held-out, under the causal mask (as generation runs)
    eval_first: list[float] = field(default_factory=list)  # repeat: held-out loss on the first copy's targets
    eval_second: list[float] = field(default_factory=list)  # repeat: … on the second copy's (copyable) targets
    eval_own: list[float] = field(default_factory=list)  # held-out, under the run's own mask
    snapshots: list[Snapshot] = field(default_factory=list)
    phase_change: int | None = None  # repeat: first step whose second-half loss is under half the first half's
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "status": self.status, "step": self.step,
                "steps": self.config.steps, "loss": self.loss, "eval_steps": self.eval_steps,
                "eval_loss": self.eval_loss, "eval_first": self.eval_first, "eval_second": self.eval_second,
                "eval_own": self.eval_own, "phase_change": self.phase_change,
                "best_induction": self.best_induction()}  # fmt: skip

    def apply(self, kind: str, d: dict[str, Any]) -> None:
        """Record one event of the run (the loop records its own this way; a copy elsewhere replays them)."""
        if kind == "step":
            self.loss.append(d["loss"])
            self.step = d["step"]
        elif kind == "eval":
            self.eval_steps.append(d["step"])
            self.eval_loss.append(d["loss"])
            self.eval_own.append(d["own"])
            if d.get("first") is not None:
                self.eval_first.append(d["first"])
                self.eval_second.append(d["second"])
            self.phase_change = d.get("phase_change")
        elif kind == "snapshot":
            weights = [torch.tensor(w) for w in d["weights"]]
            self.snapshots.append(Snapshot(d["step"], d["induction"], weights, d["eval_loss"], d.get("sample", "")))
        elif kind == "end":
            self.status = d["status"]

    def best_induction(self) -> float | None:
        if not self.snapshots:
            return None
        return max(max(row) for row in self.snapshots[-1].induction)


Event = Callable[[str, dict[str, Any]], None]


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none").view(
        targets.shape
    )


@torch.no_grad()
def evaluate(c: TrainConfig, p: dict[str, torch.Tensor], held: torch.Tensor, causal: bool = True) -> dict[str, float]:
    """The held-out loss (mean nats per target), and for `repeat` the first and second copies' apart."""
    per = _loss(forward(c, p, held[:, :-1], causal), held[:, 1:])  # (n, T)
    out = {"loss": float(per.mean())}
    if c.task == "repeat":
        n = c.n_repeat
        # target j is token j + 1: the second copy's tokens after its first (j ≥ n) are the ones copying predicts
        out |= {"first": float(per[:, :n].mean()), "second": float(per[:, n:].mean())}
    return out


@torch.no_grad()
def sample(c: TrainConfig, p: dict[str, torch.Tensor], prompt: list[int], n: int, seed: int) -> list[int]:
    """`n` tokens after `prompt`, drawn at temperature 0.8 with a seeded generator, always under the causal mask."""
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    for _ in range(n):
        window = torch.tensor([ids[-c.n_ctx :]], dtype=torch.long, device=c.device)
        logits = forward(c, p, window, True)[0, -1].float().cpu() / 0.8
        ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g)))
    return ids[len(prompt) :]


def train(c: TrainConfig, on_event: Event | None = None, cancel: threading.Event | None = None,
          text: str | None = None, run: Run | None = None) -> Run:  # fmt: skip
    """Train `c` from its seed; `on_event(kind, data)` hears each step, held-out loss and snapshot; `cancel` set
    stops it between steps (status cancelled). Same config, same numbers."""
    data = make_data(c, text)
    probe = data.probe()
    run = run or Run(c, data.labels(), probe[0].tolist())
    tell = on_event or (lambda kind, d: None)
    p = init_params(c, data.vocab)
    for t in p.values():
        t.requires_grad_(True)
    decay = [t for t in p.values() if t.dim() == 2]
    rest = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=c.lr, betas=(0.9, 0.98))  # fmt: skip
    g = torch.Generator().manual_seed(seed_of("train-data", c.seed))
    held = data.batch(torch.Generator().manual_seed(seed_of("train-held", c.seed)), 64, held=True).to(c.device)
    prompt = held[0, :16].tolist()
    snaps = set(snapshot_steps(c.steps, c.n_snapshots))
    warmup = min(20, c.steps)

    def tell_all(kind: str, d: dict[str, Any]) -> None:
        run.apply(kind, d)
        tell(kind, d)

    def observe(step: int) -> None:
        ev = evaluate(c, p, held)
        own = ev if c.causal else evaluate(c, p, held, False)
        first, second = ev.get("first"), ev.get("second")
        phase = run.phase_change
        if c.causal and phase is None and first is not None and second is not None and second < 0.5 * first:
            phase = step
        tell_all("eval", {"step": step, "loss": round(ev["loss"], 5), "own": round(own["loss"], 5),
                          "first": None if first is None else round(first, 5),
                          "second": None if second is None else round(second, 5), "phase_change": phase})  # fmt: skip
        if step in snaps:
            keep: list[torch.Tensor] = []
            with torch.no_grad():
                forward(c, p, probe.to(c.device), c.causal, keep)
            n = (probe.shape[1] + 1) // 2
            text_out = ""
            if c.task == "text" and c.sample_chars:
                drawn = sample(c, p, prompt, c.sample_chars, seed_of("s", c.seed, step))
                text_out = "".join(data.chars[i] for i in drawn)
            weights = [w[0].float().cpu().round(decimals=4).tolist() for w in keep]
            tell_all("snapshot", {"step": step, "induction": induction_scores(keep, n), "weights": weights,
                                  "eval_loss": run.eval_loss[-1], "sample": text_out})  # fmt: skip

    observe(0)
    for step in range(1, c.steps + 1):
        if cancel is not None and cancel.is_set():
            tell_all("end", {"status": "cancelled", "step": run.step})
            break
        for group in opt.param_groups:
            group["lr"] = c.lr * min(1.0, step / warmup)
        batch = data.batch(g, c.batch).to(c.device)
        loss = _loss(forward(c, p, batch[:, :-1], c.causal), batch[:, 1:]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tell_all("step", {"step": step, "loss": round(float(loss.detach()), 5)})
        if step % c.eval_every == 0 or step in snaps:
            observe(step)
    else:
        tell_all("end", {"status": "done", "step": run.step})
    run.params = {k: v.detach().cpu() for k, v in p.items()}
    return run


# -- the export ---------------------------------------------------------------------------------------------------
def export_tensors(run: Run) -> dict[str, torch.Tensor]:
    """The run's tensors as its family stores them; an attention-only run gets an MLP of zeros (it adds nothing:
    GELU's or SwiGLU's output times a zero matrix), since both families' blocks have one."""
    c, p = run.config, dict(run.params)
    d, ff = c.d_model, 4 * c.d_model
    for i in range(c.n_layer):
        if c.mlp:
            break
        if c.family == "gpt2":
            h = f"transformer.h.{i}."
            p |= {h + "ln_2.weight": torch.ones(d), h + "ln_2.bias": torch.zeros(d),
                  h + "mlp.c_fc.weight": torch.zeros(d, ff), h + "mlp.c_fc.bias": torch.zeros(ff),
                  h + "mlp.c_proj.weight": torch.zeros(ff, d), h + "mlp.c_proj.bias": torch.zeros(d)}  # fmt: skip
        else:
            h = f"model.layers.{i}."
            p |= {h + "post_attention_layernorm.weight": torch.ones(d), h + "mlp.gate_proj.weight": torch.zeros(ff, d),
                  h + "mlp.up_proj.weight": torch.zeros(ff, d), h + "mlp.down_proj.weight": torch.zeros(d, ff)}  # fmt: skip
    return {k: v.detach().cpu().float().contiguous() for k, v in sorted(p.items())}


def export_config(run: Run) -> dict[str, Any]:
    c, vocab = run.config, len(run.labels)
    common = {"vocab_size": vocab, "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None,
              "torch_dtype": "float32", "attention_lab_train": asdict(c)}  # fmt: skip
    if c.family == "gpt2":
        return common | {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": c.n_layer,
                         "n_head": c.n_heads, "n_embd": c.d_model, "n_inner": 4 * c.d_model, "n_positions": c.n_ctx,
                         "layer_norm_epsilon": EPS, "activation_function": "gelu_new", "resid_pdrop": 0.0,
                         "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # fmt: skip
    return common | {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": c.n_layer,
                     "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_heads, "hidden_size": c.d_model,
                     "intermediate_size": 4 * c.d_model, "max_position_embeddings": c.n_ctx, "rms_norm_eps": EPS,
                     "rope_theta": 10000.0, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}  # fmt: skip


def export_tokenizer(labels: list[str]) -> str:
    """A character-level tokenizer.json: one token per character, no merges."""
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.BPE({ch: i for i, ch in enumerate(labels)}, []))
    tok.decoder = decoders.Fuse()
    return str(tok.to_str())


def export(run: Run, directory: str | Path) -> Path:
    """A Hugging Face directory of the run: config.json, model.safetensors, tokenizer.json (`serve --model` reads
    it, and transformers' AutoModelForCausalLM)."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(export_config(run), indent=2) + "\n")
    save_file(export_tensors(run), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "tokenizer.json").write_text(export_tokenizer(run.labels))
    return out
