"""A generation request, validated like every other (the prompt through the lab's own spec rules), computed once
per (model, prompt, length, layer) and kept in a byte-bounded memo, and its JSON document."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.generate import Generation, generate
from engine.models import Model
from engine.spec import Limits, Spec, make_spec

from ..lab import Lab
from ..render.arrays import to_numpy
from ..render.cells import MatrixView
from ..render.predicted import generators, top_labels
from ..schemas import RETURNED, FieldError, LabField
from ..web.view import View


@dataclass(frozen=True)
class GenerateView(View):
    """Step `step` of a generation, as /generate shows it: the text so far (`prompt`, `generated`, labelled as the
    model's pieces; `written`, as a reader reads it), the token predicted there and from how much context (`title`), the five candidates it weighed
    (`top`, most likely first), the KV cache it read (`size` says it in words) and where every head of `layer` looked
    (`attention`, one row per head)."""

    template = "generate.html"
    kind = "generate"

    text: str = ""  # the prompt as typed ("" when given as token ids)
    max_new_tokens: int = 0
    layer: int = 0
    n_layer: int = 0
    step: int = 1
    n_steps: int = 0
    token_id: int = 0
    n_context: int = 0  # tokens in the cache when this step's token was predicted
    prompt: list[str] | None = None
    generated: list[str] | None = None
    # The text as a reader reads it: (text, first step, last step), a character the tokenizer split into byte
    # pieces written once (我, not 我₁ 我₂); the prompt's runs have steps 0.
    written: list[tuple[str, int, int]] | None = None
    title: str = ""
    top: list[tuple[str, float]] | None = None
    kv_bytes_per_token: int = 0
    cache_bytes: int = 0
    size: str = ""
    stopped_at_eos: bool = False
    notice: str | None = None  # at the last step, when the model ended the text itself
    attention: MatrixView | None = None
    # Links.
    json_url: str | None = None
    first_url: str | None = None
    prev_url: str | None = None
    next_url: str | None = None
    step_urls: list[tuple[int, str]] | None = None


class GenerateRequest(BaseModel):
    """A prompt for a causal language model, how many tokens to generate greedily, and the layer to watch."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: str = Field("smollm2", max_length=64, description="A causal language model this server loaded: smollm2.")
    text: str | None = Field(None, max_length=4000, description="The prompt, for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="The prompt as token ids instead.")
    max_new_tokens: int = Field(16, ge=1, le=4096, description="Tokens to generate (the server's cap applies: 64).")
    layer: int | None = Field(
        None, ge=0, le=4096, description="The layer whose attention is returned (default: the last)."
    )
    decimals: int | None = LabField(None, "Round the attention weights.", ge=0, le=8, **RETURNED)


def generation_spec(req: GenerateRequest, limits: Limits, device: str, models: Mapping[str, Any],
                    max_new: int) -> tuple[Spec, int]:  # fmt: skip
    """The prompt as a Spec (its tokens, ids and limits checked by make_spec) and the layer to watch."""
    if req.preset not in models or not getattr(models[req.preset], "generates", False):
        names = ", ".join(generators(models)) or "none on this server"
        raise FieldError("preset", f"generation needs a causal language model: {names}")
    info = models[req.preset].info
    layer = info.n_layer - 1 if req.layer is None else req.layer
    if not 0 <= layer < info.n_layer:
        raise FieldError("layer", f"{req.preset} has layers 0..{info.n_layer - 1}, not {layer}")
    if req.max_new_tokens > max_new:
        raise FieldError("max_new_tokens", f"at most {max_new} tokens per request, not {req.max_new_tokens}")
    if req.text is None and req.token_ids is None:
        raise FieldError("text", "give the prompt as text or token_ids")
    spec = make_spec(text=req.text, token_ids=req.token_ids, preset=req.preset, layer=layer, models=models,
                     device=device, limits=limits)  # fmt: skip
    room = min(limits.max_tokens, info.n_ctx)
    if spec.n_tokens + req.max_new_tokens > room:
        field = "token_ids" if req.token_ids is not None else "text"
        raise FieldError(field, f"prompt ({spec.n_tokens} tokens) + max_new_tokens must fit {room} tokens")
    return spec, layer


def cost(spec: Spec, max_new: int, info: Any) -> int:
    """Estimated bytes: the KV cache, the prompt's attention scores in one layer, the weights' working set."""
    n = spec.n_tokens + max_new
    kv = 2 * info.n_layer * (info.n_kv_heads or info.n_heads) * (info.d_model // info.n_heads) * n * 4
    return kv + 3 * info.n_heads * spec.n_tokens * n * 4 + 8 * info.d_model * info.d_ff * 4


async def run(lab: Lab, req: GenerateRequest, key: str | None) -> tuple[Spec, int, Generation]:
    """The request's prompt as a Spec (the tokenizer off the event loop), the layer watched, and the generation
    (from the server's cache when it ran before), token by token for /api/v1/progress."""
    spec, layer = await lab.off_loop(req.preset, generation_spec, req, lab.limits, lab.device, lab.models,
                                     lab.settings.max_new_tokens)  # fmt: skip
    model = lab.models[spec.preset]

    def work(progress: Any) -> Generation:
        return generate(model, spec.token_ids, req.max_new_tokens, layer, progress=progress)

    done = (spec.preset, spec.token_ids, req.max_new_tokens, layer)
    result, _ = await lab.compute(
        "generate", done, cost(spec, req.max_new_tokens, model.info), work, progress=key, unit="tokens"
    )
    return spec, layer, result


def document(model: Model, spec: Spec, g: Generation, decimals: int | None) -> dict[str, Any]:
    ids = list(g.prompt_ids) + [s.token_id for s in g.steps]
    labels = model.labels(ids)  # byte pieces of one character are named together (猫₁ 猫₂ 猫₃)
    n = len(g.prompt_ids)
    tok = model.tokenizer()

    return {
        "preset": spec.preset,
        "layer": g.layer,
        "tokens": labels[:n],
        "token_ids": list(g.prompt_ids),
        "text": tok.decode([s.token_id for s in g.steps]),
        "stopped_at_eos": g.stopped_at_eos,
        "kv_cache_bytes_per_token": g.kv_bytes_per_token,
        "generated": [
            {
                "token_id": s.token_id,
                "token": labels[n + i],
                "top": [
                    [label, p]
                    for label, p in zip(top_labels(model, ids, labels, s.context, s.top_ids), s.top_probs, strict=True)
                ],
                "context": s.context,
                "kv_cache_bytes": s.context * g.kv_bytes_per_token,
                "attention": None if s.attention is None else to_numpy(s.attention, decimals),
            }
            for i, s in enumerate(g.steps)
        ],
    }
