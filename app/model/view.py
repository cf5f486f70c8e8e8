"""The model view's request, its computation (every layer and head of a pretrained model, summarised) as a typed
result (`Summarised`: what /api/v1/model_view writes, by pydantic, and what the page reads) and `ModelView`,
what the /model page shows (its JSON face is the page's `.json` twin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field, InstanceOf, SerializerFunctionWrapHandler, model_serializer
from pydantic.dataclasses import dataclass as pydantic_dataclass

from engine.model_view import one_pass_stats, traced_stats
from engine.predict import NONE
from engine.spec import Spec, make_spec

from ..lab import Lab, Progress
from ..schemas import FieldError, said
from ..web.knockouts import Knockouts, intervention
from ..web.view import View


@dataclass(frozen=True)
class HeadLink:
    """One head of the grid, or of a list of heads: its statistic (or distance), a link into the lab at that layer
    and head, and a link to this page with that head chosen (the heads most like it)."""

    layer: int
    head: int
    value: float
    url: str
    like_url: str = ""
    cls: str = ""  # the grid cell's colour class


@dataclass(frozen=True)
class ChosenHead:
    layer: int
    head: int
    url: str
    note: str  # what the distance is
    like: tuple[HeadLink, ...] = ()  # the most similar heads, nearest first; `value` is the distance
    knock_url: str = ""  # this page with the head knocked out: the clean run beside the run without it
    roles_url: str = ""  # the head's roles on /heads (a decoder's: previous token, sink, duplicate, induction)


@dataclass(frozen=True)
class ModelCompare:
    """A second run through the same model, beside the first: another text, or the same text with heads knocked out
    (`knocked`; then A is the clean run). Its grid, with the heads whose statistic moved by more than `threshold`
    marked `changed` (on both grids), and the heads that moved most (`value`: B − A)."""

    text: str
    tokens: tuple[str, ...]
    grid: tuple[tuple[HeadLink, ...], ...]
    changed: int
    threshold: float
    most_changed: tuple[HeadLink, ...]
    knocked: tuple[tuple[int, int], ...] = ()  # B is the same text with these heads knocked out (A: none)
    knocked_mode: str = ""  # zero or mean


class ModelView(View):
    """Every layer × head of a pretrained model, one statistic at a time: the grid, the heads ranked by it, and the
    heads most like a chosen one. Links are URLs of this page with one thing changed, or into the lab."""

    template = "model.html"
    blocks = ()
    kind = "model"
    own_present_toggle = True

    spec: InstanceOf[Spec] | None = Field(None, exclude=True)  # the footer's device
    preset: str = ""
    tokens: tuple[str, ...] = ()
    layers: int = 0
    heads: int = 0
    stat: str = "entropy"
    explain: str = ""
    scale_ticks: tuple[str, ...] = ()  # the grids' colour bar: 0, half and the top of the colour scale (ln N or 1)
    grid: tuple[tuple[HeadLink, ...], ...] = ()  # [layer][head]
    ranked: tuple[HeadLink, ...] = ()  # the ten lowest entropies, or the ten highest of another statistic
    chosen: ChosenHead | None = None
    stat_urls: tuple[tuple[str, str], ...] = ()
    compare: ModelCompare | None = None  # a second text side by side (`compare_text`)
    compare_close_url: str | None = None
    json_url: str | None = None
    present_url: str | None = None  # presenter mode on, or off (`present=1`: the projector's layout)
    can_knock: bool = False  # the form offers knocking heads out (a decoder read in one pass)
    heads_text: str = ""  # the heads knocked out, as the pages write them (L1 H0)


class ModelViewRequest(Knockouts):
    """A pretrained model and the text (or token ids) to run through every layer; heads knocked out of the pass
    (`ablate`, a causal decoder's one-pass view), so the layers above show what their absence changes."""

    preset: str = Field("smollm2", max_length=64, description="A pretrained model this server loaded (minilm, smollm2, "
                        "checkpoint).")  # fmt: skip
    # A long context's text (up to MAX_LONG_TOKENS tokens: some 20,000 characters of English) fits; the tokens are
    # what is limited, below.
    text: str | None = Field(None, max_length=65_536, description="Text for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="Token ids instead of text.")


def view_spec(req: ModelViewRequest, lab: Lab) -> Spec:
    """The request's model and tokens. A model the view can read in one pass (SmolLM2) takes up to
    MAX_LONG_TOKENS; the others trace each layer whole, up to MAX_MODEL_VIEW_TOKENS."""
    models = lab.models
    if req.preset not in models:
        names = ", ".join(models)
        raise FieldError("preset", said("model_view_models", names=names) if names else said("model_view_none"))
    one_pass = getattr(models[req.preset], "one_pass_view", False)
    max_tokens = lab.limits.max_long_tokens if one_pass else lab.settings.max_model_view_tokens
    spec = make_spec(text=req.text, token_ids=req.token_ids, preset=req.preset, layer=0, models=models,
                     device=lab.device, limits=lab.long_limits)  # fmt: skip
    if spec.n_tokens > max_tokens:
        field = "token_ids" if req.token_ids is not None else "text"
        code = "model_view_one_pass" if one_pass else "model_view_whole"
        raise FieldError(field, said(code, limit=max_tokens, n=spec.n_tokens))
    return spec


Stats = dict[str, float]  # one head's four statistics by name (engine/model_view.py STATS)


@dataclass(frozen=True)
class Pass:
    """One pass's statistics, `[layer][head]`, as the lab's cache keeps them: a statistic, a head or a layer
    picked on /model is the same pass, drawn again without computing it again."""

    stats: tuple[tuple[Stats, ...], ...]

    @property
    def nbytes(self) -> int:
        return 512 * sum(map(len, self.stats))  # a dict of four floats per head, about


@pydantic_dataclass(frozen=True)
class Summarised:
    """/api/v1/model_view's answer, and what /model draws: the four statistics of every head (`stats[layer][head]`,
    engine/model_view.py), with the heads knocked out of the pass (`ablate`, named in the JSON only when there are)."""

    preset: str
    tokens: tuple[str, ...]
    layers: int
    heads: int
    stats: tuple[tuple[Stats, ...], ...]
    ablate: tuple[tuple[int, int], ...] = ()
    ablate_mode: str = "zero"

    @model_serializer(mode="wrap")
    def _named(self, write: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A pass with nothing knocked out has no ablate and no ablate_mode in its JSON."""
        data: dict[str, Any] = write(self)
        return data if self.ablate else {k: v for k, v in data.items() if k not in ("ablate", "ablate_mode")}

    def grid(self, stat: str) -> tuple[tuple[float, ...], ...]:
        """One statistic of every head, [layer][head]."""
        return tuple(tuple(s[stat] for s in row) for row in self.stats)


async def model_view_of(req: ModelViewRequest, lab: Lab, key: str | None = None) -> tuple[Spec, Summarised]:
    """The statistics of every layer and head: one pass with the statistics summed block by block (SmolLM2), or
    each layer's whole trace through the server's cache (MiniLM, a GPT-2 checkpoint)."""
    spec = await lab.off_loop(req.preset, view_spec, req, lab)  # the tokenizer off the event loop
    model = lab.models[spec.preset]
    iv = NONE
    if req.ablate:
        if not getattr(model, "one_pass_view", False):
            raise FieldError("ablate", said("ablate_encoder", model=req.preset))
        iv = intervention(req, model)
    # Through the lab's one compute path, cached by what the numbers depend on (the model, the tokens, the heads
    # knocked out), so the page's statistic, layer and head pick from one pass; its own bytes held by no reservation
    # of the whole: each layer's trace holds its own (through the trace cache), the one pass a block at a time.
    # Watched: when the client goes away the pass stops at its next layer (Cancelled).
    done = (spec.preset, tuple(spec.token_ids), iv)
    if getattr(model, "one_pass_view", False):

        def one_pass(progress: Progress | None) -> Pass:  # layer by layer, for /api/v1/progress
            return Pass(tuple(map(tuple, one_pass_stats(model, spec.token_ids, iv=iv, progress=progress))))

        stats, _ = await lab.compute("model_view", done, 0, one_pass, progress=key)
    else:

        def layers(check: Progress | None) -> Pass:
            def layer(s: Spec) -> Any:
                if check is not None:
                    check(0, 0)
                return lab.run(lab.trace_work(s))[0]

            return Pass(tuple(map(tuple, traced_stats(spec, model.info.n_layer, layer))))

        stats, _ = await lab.compute("model_view", done, 0, layers)
    return spec, Summarised(spec.preset, spec.tokens, model.info.n_layer, spec.n_heads, stats.stats,
                            iv.ablate, "mean" if iv.mean else "zero")  # fmt: skip
