"""A request's text as a decoder's sequence, for every view that runs a loaded decoder over a text (the prediction
views, the head views): the model checked, the text tokenised once through the engine's `make_spec`, BOS/EOS added
as asked, and the count held to the view's own limit — the one a refusal states; which loaded models are decoders
(`generators`) and how a predicted token is labelled next to the text's own pieces (`top_labels`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from engine import predict as P
from engine.models import Model
from engine.spec import SpecError, make_spec

from ..lab import Lab
from ..schemas import FieldError, said


def generators(models: Mapping[str, Any]) -> list[str]:
    """The causal language models the lab can decode with: every loaded decoder."""
    return [name for name, m in models.items() if getattr(m, "generates", False)]


TAIL = 4  # context tokens a candidate is read after: a UTF-8 character has at most 4 bytes, a piece at least 1


def top_labels(
    model: Model, ids: list[int], labels: list[str], context: int, top_ids: tuple[int, ...] | list[int]
) -> list[str]:
    """The candidates of the step predicted from `ids[:context]`, labelled as the text labels its pieces: the token
    that was chosen exactly as the text shows it (猫₁ when the next piece finishes 猫); any other as if it came next,
    after the context's last pieces (猫₂ when it finishes a character the context began; bytes that begin a
    character it does not finish as ⟨e7⟩). Never U+FFFD, which `decode` gives for a piece of a character."""
    chosen = ids[context] if context < len(ids) else None
    tail = list(ids[max(0, context - TAIL) : context])
    return [labels[context] if t == chosen else model.labels([*tail, t])[-1] for t in top_ids]


# The request fields every view that reads a text through a loaded decoder takes (the prediction and head views):
# `preset: Preset = DECODER`, `text: InputText = None`.
DECODER = "smollm2"
Preset = Annotated[
    str,
    Field(
        max_length=64,
        description="A causal language model this server loaded (smollm2, checkpoint, or one given with --model).",
    ),
]
InputText = Annotated[str | None, Field(max_length=65_536, description="The text, for the model's own tokenizer.")]


@dataclass(frozen=True)
class Text:
    """A request's model and sequence: for teacher forcing, inputs = seq[:-1] and targets = seq[1:]."""

    preset: str  # the model's name on this server
    model: Model
    seq: tuple[int, ...]
    labels: tuple[str, ...]  # of seq
    text_start: int = 0  # where the text begins in seq: past its first special tokens (a BOS put before it)

    @property
    def inputs(self) -> tuple[int, ...]:
        return self.seq[:-1]


# The views that read a text through a loaded decoder, each refusal a catalogue message of its own (locales/errors.json):
# a decoder asked for (the loaded ones named, or none on this server) and a Pre-LN one asked for.
Views = Literal["predictions", "heads", "attributions"]
REFUSALS: dict[str, tuple[str, str, str]] = {
    "predictions": ("predictions_need_decoder", "predictions_no_decoder", "predictions_post_ln"),
    "heads": ("head_views_need_decoder", "head_views_no_decoder", "head_views_post_ln"),
    "attributions": ("attributions_need_decoder", "attributions_no_decoder", "attributions_post_ln"),
}


def decoder(lab: Lab, preset: str, views: Views = "predictions", pre_ln: bool = False) -> Model:
    """The loaded causal language model `preset` (a Pre-LN one when `pre_ln`), or a 422 naming `preset`, said by
    `views`' own codes (never English words filled into a message: a Chinese page says it all in Chinese)."""
    models: Mapping[str, Model] = lab.models
    need, none, post_ln = REFUSALS[views]
    if preset not in models or not getattr(models[preset], "generates", False):
        names = ", ".join(generators(models))
        raise FieldError("preset", said(need, names=names) if names else said(none))
    model = models[preset]
    if pre_ln and model.arch.placement != "pre":
        raise FieldError("preset", said(post_ln, preset=preset))
    return model


def text_of(req: Any, lab: Lab, max_tokens: int, eos: bool, counted: Literal["inputs", "tokens"] = "inputs",
            least: int = 2, views: Views = "predictions", pre_ln: bool = False, model: Model | None = None) -> Text:  # fmt: skip
    """The request's `text` or `token_ids` as a sequence ([BOS] text [EOS] as asked), checked: a decoder this server
    loaded (or the `model` the caller checked: an encoder), at least `least` tokens, and at most `max_tokens` (and
    the model's context) of what the view `counted` — its inputs (teacher forcing: every token but the last) or
    every token."""
    model = decoder(lab, req.preset, views, pre_ln) if model is None else model
    if req.text is None and req.token_ids is None:
        raise FieldError("text", said("text_given"))
    field = "token_ids" if req.token_ids is not None else "text"
    room = min(max_tokens, model.info.n_ctx)
    try:
        spec = make_spec(text=req.text, token_ids=req.token_ids, preset=req.preset, layer=0, models=lab.models,
                         device=lab.device, limits=lab.long_limits)  # fmt: skip
    except SpecError as e:  # past even a long context's bound (the engine's code, never its English): this view's
        if e.field == field and getattr(e.message, "code", None) in ("too_many_tokens_whole", "too_many_tokens_window"):
            if req.token_ids is not None:  # ids are counted as given ("the text is longer" named no text)
                seq = P.sequence(model, req.token_ids, req.bos, eos)
                n = len(seq) - 1 if counted == "inputs" else len(seq)
                raise FieldError(field, said(f"{counted}_here", room=room, n=n)) from None
            raise FieldError(field, said(f"{counted}_longer", room=room)) from None
        raise
    seq = P.sequence(model, spec.token_ids, req.bos, eos)
    if len(seq) < least:
        if least == 2 and counted == "inputs":
            raise FieldError(field, said("two_inputs"))
        raise FieldError(field, said("two_tokens" if least == 2 else "one_token"))
    n = len(seq) - 1 if counted == "inputs" else len(seq)
    if n > room:
        raise FieldError(field, said(f"{counted}_here", room=room, n=n))
    return Text(req.preset, model, tuple(seq), tuple(model.labels(list(seq))), model.specials_first(seq))
