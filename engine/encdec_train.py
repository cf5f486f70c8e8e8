"""Train the tiny encoder–decoder from its seed, as engine/train.py trains the GPT: the same events (step, eval,
snapshot, end), the same cancel between steps, the same numbers for the same config.

A snapshot (at log-spaced steps) reads the model on one held-out pair, the probe: every layer's cross-attention
weights (H, N_dec, N_enc), the decoder's causal self-attention and the encoder's, the last layer's cross-attention
stages (Q, K, V, scores, mask, softmax, weighted sum) and what the model writes for it greedily; and, on the held-out
pairs, the exact-match accuracy of greedy decoding. For `reverse` it also scores the alignment: per layer and head,
the mean weight a decoder position puts on the mirrored source position (decoder row i, source column n − 1 − i)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .encdec import EPS, EncDecConfig, Kept, forward, greedy, init_params, loss_of
from .encdec_tasks import BOS, EOS, PAD, Task, make_task
from .sources import seed_of
from .train import snapshot_steps

Event = Callable[[str, dict[str, Any]], None]
EVAL_PAIRS = 64
STAGES = ("q", "k", "v", "raw", "scaled", "mask", "masked", "weights", "heads", "output")  # kept per snapshot


def task_of(c: EncDecConfig) -> Task:
    return make_task(c.task, c.seed, c.length, c.symbols, c.max_number, c.direction)


def mirror_scores(cross: list[torch.Tensor], n: int) -> list[list[float]]:
    """Per layer and head, the mean over decoder rows i < n of the weight on source column n − 1 − i (cross:
    per layer (H, N_dec, N_enc) for one pair whose source has n real tokens)."""
    rows = torch.arange(n)
    return [[round(float(w[h, rows, n - 1 - rows].mean()), 4) for h in range(w.shape[0])] for w in cross]


@dataclass
class EncDecSnapshot:
    step: int
    eval_loss: float
    accuracy: float  # held-out exact match, greedy
    alignment: list[list[float]] | None  # reverse: per layer and head, the mean weight on the mirrored position
    output: list[str]  # what the model writes for the probe, greedily
    weights: dict[str, Any] = field(default_factory=dict)  # cross, decoder, encoder (per layer) and stages (lists)


@dataclass
class EncDecRun:
    """An encoder–decoder run's numbers, filled in as it trains (the GPT's `Run`, for this model)."""

    config: EncDecConfig
    labels: list[str]  # token id → its word, character or symbol
    probe: list[str]  # the probe's source tokens (without padding)
    target: list[str] = field(default_factory=list)  # the probe's target tokens
    status: str = "running"  # queued | running | done | cancelled | failed
    step: int = 0
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)  # at each snapshot
    snapshots: list[EncDecSnapshot] = field(default_factory=list)
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        last = self.snapshots[-1] if self.snapshots else None
        return {"config": asdict(self.config), "status": self.status, "step": self.step, "steps": self.config.steps,
                "loss": self.loss, "eval_steps": self.eval_steps, "eval_loss": self.eval_loss,
                "accuracy": last.accuracy if last else None,
                "alignment": last.alignment if last else None}  # fmt: skip

    def apply(self, kind: str, d: dict[str, Any]) -> None:
        if kind == "step":
            self.loss.append(d["loss"])
            self.step = d["step"]
        elif kind == "eval":
            self.eval_steps.append(d["step"])
            self.eval_loss.append(d["loss"])
        elif kind == "snapshot":
            self.accuracy.append(d["accuracy"])
            self.snapshots.append(EncDecSnapshot(d["step"], d["eval_loss"], d["accuracy"], d["alignment"],
                                                 d["output"], d.get("weights", {})))  # fmt: skip
        elif kind == "end":
            self.status = d["status"]


def new_run(c: EncDecConfig, status: str = "running") -> EncDecRun:
    task = task_of(c)
    src, tgt = task.probe()
    return EncDecRun(c, task.vocab, src, tgt, status=status)


def _strip(ids: list[int]) -> list[int]:
    return ids[: ids.index(EOS)] if EOS in ids else ids


@torch.no_grad()
def accuracy(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, tgt: torch.Tensor) -> float:
    """The share of pairs whose greedy decoding, up to its <eos>, is the target exactly."""
    out = greedy(c, p, src, tgt.shape[1] - 1).tolist()
    want = [[i for i in row[1:] if i != PAD] for row in tgt.tolist()]
    return sum(_strip(o) == _strip(w) for o, w in zip(out, want, strict=True)) / len(want)


@torch.no_grad()
def read_probe(c: EncDecConfig, p: dict[str, torch.Tensor], task: Task) -> dict[str, Any]:
    """The probe through the model: its attention weights, the last layer's cross stages, its greedy output."""
    src_tokens, tgt_tokens = task.probe()
    src, tgt = task.encode([(src_tokens, tgt_tokens)])
    src, n_dec = src.to(c.device), len(tgt_tokens) + 1
    kept = Kept([], [], [])
    forward(c, p, src, tgt[:, :n_dec].to(c.device), kept)

    def listed(t: torch.Tensor) -> Any:
        return t[0].float().cpu().round(decimals=4).tolist()

    cross = [k["weights"][0].float().cpu() for k in kept.cross]
    out = _strip(greedy(c, p, src, task.n_tgt - 1)[0].tolist())
    stages = {name: listed(kept.cross[-1][name]) for name in STAGES}
    # the source's padding mask, the same for every decoder row: 0, or −∞ (null in JSON) on a <pad> column
    stages["mask"] = [0.0 if m == 0 else None for m in stages["mask"][0][0]]
    stages["masked"] = [[[None if m == float("-inf") else m for m in row] for row in h] for h in stages["masked"]]
    return {
        "alignment": mirror_scores(cross, len(src_tokens)) if c.task == "reverse" else None,
        "output": [task.vocab[i] for i in out],
        "weights": {
            "cross": [listed(k["weights"]) for k in kept.cross],
            "decoder": [listed(k["weights"]) for k in kept.decoder],
            "encoder": [listed(k["weights"]) for k in kept.encoder],
            "stages": stages,
        },
    }


def train(c: EncDecConfig, on_event: Event | None = None, cancel: threading.Event | None = None,
          run: EncDecRun | None = None) -> EncDecRun:  # fmt: skip
    """Train `c` from its seed; `on_event(kind, data)` hears each step, held-out loss and snapshot; `cancel` set
    stops it between steps (status cancelled). Same config, same numbers."""
    task = task_of(c)
    run = run or new_run(c)
    tell = on_event or (lambda kind, d: None)
    p = init_params(c, len(task.vocab), task.n_src, task.n_tgt)
    for t in p.values():
        t.requires_grad_(True)
    decay = [t for t in p.values() if t.dim() == 2]
    rest = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=c.lr, betas=(0.9, 0.98))  # fmt: skip
    g = torch.Generator().manual_seed(seed_of("encdec-data", c.seed))
    held_src, held_tgt = (t.to(c.device) for t in task.encode(task.held_pairs(EVAL_PAIRS)))
    snaps = set(snapshot_steps(c.steps, c.n_snapshots))
    warmup = min(20, c.steps)

    def tell_all(kind: str, d: dict[str, Any]) -> None:
        run.apply(kind, d)
        tell(kind, d)

    def observe(step: int) -> None:
        with torch.no_grad():
            held = round(float(loss_of(c, p, held_src, held_tgt)), 5)
        tell_all("eval", {"step": step, "loss": held})
        if step in snaps:
            acc = round(accuracy(c, p, held_src, held_tgt), 4)
            tell_all("snapshot", {"step": step, "eval_loss": held, "accuracy": acc} | read_probe(c, p, task))

    observe(0)
    for step in range(1, c.steps + 1):
        if cancel is not None and cancel.is_set():
            tell_all("end", {"status": "cancelled", "step": run.step})
            break
        for group in opt.param_groups:
            group["lr"] = c.lr * min(1.0, step / warmup)
        src, tgt = task.batch(g, c.batch)
        loss = loss_of(c, p, src.to(c.device), tgt.to(c.device))
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
def export(run: EncDecRun, directory: str | Path) -> Path:
    """The run as a folder: model.safetensors (the `transformer.*` tensors are torch's own `nn.Transformer` state
    dict, norm_first=True, batch_first=True, GELU, no dropout; beside them the embeddings, the learned positions and
    the output head) and config.json (the run's config, the vocabulary, and nn.Transformer's arguments)."""
    from safetensors.torch import save_file

    c = run.config
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    layout = {"d_model": c.d_model, "nhead": c.n_heads, "num_encoder_layers": c.n_layer,
              "num_decoder_layers": c.n_layer, "dim_feedforward": 4 * c.d_model, "dropout": 0.0,
              "activation": "gelu", "batch_first": True, "norm_first": True, "layer_norm_eps": EPS}  # fmt: skip
    config = {"architecture": "torch.nn.Transformer", "nn_transformer": layout, "vocab": run.labels,
              "pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "attention_lab_train": asdict(c)}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    tensors = {k: v.detach().cpu().float().contiguous() for k, v in sorted(run.params.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


MAX_EXPORT_MB = 64.0  # an exported encoder–decoder's weights: the largest config (4 + 4 blocks, d 128) is ~7 MB


def load_export(directory: str | Path, max_mb: float = MAX_EXPORT_MB) -> EncDecRun:
    """A folder `export` wrote, loaded back as a finished run (its config, vocabulary, probe and weights; no curve):
    what a preset of the server serves. Every tensor is checked against the shapes its config makes (a folder
    edited by hand is a ValueError naming what is wrong, never a half-loaded model)."""
    from safetensors import safe_open

    from .encdec import make_config

    root = Path(directory)
    config_path, weights_path = root / "config.json", root / "model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise ValueError(f"{root}: no {path.name}")
    if weights_path.stat().st_size > max_mb * 2**20:
        raise ValueError(f"{weights_path.name}: over {max_mb:g} MB")
    try:
        meta = json.loads(config_path.read_text())
        c = make_config(**(meta["attention_lab_train"] | {"device": "cpu"}))  # served on the CPU, wherever trained
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"config.json: not an encoder–decoder export ({e})") from None
    run = new_run(c, "done")
    if meta.get("vocab") != run.labels:
        raise ValueError("config.json: its vocab is not the task's")
    task = task_of(c)
    want = {k: tuple(v.shape) for k, v in init_params(c, len(task.vocab), task.n_src, task.n_tgt).items()}
    with safe_open(str(weights_path), framework="pt") as f:
        names = set(f.keys())
        if names != set(want):
            missing, extra = sorted(set(want) - names), sorted(names - set(want))
            raise ValueError(f"model.safetensors: missing {missing[:3]}, unexpected {extra[:3]}")
        params = {k: f.get_tensor(k).float() for k in sorted(want)}
    for k, t in params.items():
        if tuple(t.shape) != want[k] or not torch.isfinite(t).all():
            raise ValueError(f"model.safetensors: {k} is {tuple(t.shape)} (want {want[k]}) or not finite")
    run.params = params
    run.step = c.steps
    return run
