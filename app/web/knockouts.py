"""The knock-out vocabulary every view that runs a decoder with heads removed shares (the prediction views, the
model view): the request fields, the form's spelling of them (`ablate=L1 H0, L16 H0`: layer 1 head 0; `1.0`, as older
links wrote it, still read), and the engine's
`Intervention` they become, checked against the model's layers and heads (a 422 naming the field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, ValidationError

from engine import predict as P
from engine.models.families import Model

from ..schemas import MAX_ITEMS, FieldError, LabField, query_model, said
from .state import PageQuery, parse_heads, refused

LAYERS = 'A list of layers (0 is the first), or "all".'


def layer_list(value: Any) -> Any:
    """A query's `mask_off_layers=all` or `=0,3` (text items) as the JSON a POST carries; anything else that is not
    a list of integers or "all" is refused in one sentence (not pydantic's two, one per branch of the union)."""
    if isinstance(value, list):
        if value == ["all"]:
            return "all"
        value = [int(v) if isinstance(v, str) and v.isascii() and v.lstrip("-").isdigit() else v for v in value]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return value
    elif value is None or value == "all":
        return value
    raise refused(said("layer_list"))


class Knockouts(BaseModel):
    """Heads knocked out of a forward pass: the prediction views and the model view take them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ablate: list[Annotated[list[int], Field(max_length=2)]] | None = LabField(
        None, "Heads to knock out, as [layer, head] pairs: their output is replaced before W_O (see ablate_mode).",
        kind="json", max_length=MAX_ITEMS)  # fmt: skip
    ablate_mode: Literal["zero", "mean"] = Field(
        "zero", description="zero: the head's output becomes 0; mean: at position t, the head's mean output over "
        "positions 0…t (no future token leaks in).")  # fmt: skip


def layers_of(value: list[int] | str | None, n_layer: int) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # "all" (the model refuses any other text)
        return tuple(range(n_layer))
    return tuple(sorted(set(value)))


def intervention(req: Knockouts, model: Model) -> P.Intervention:
    """The request's switches, checked against the model's layers and heads (422 naming the field). A request
    that takes only `Knockouts` (the model view) changes no mask and no sink."""
    for pair in req.ablate or []:
        if len(pair) != 2:
            raise FieldError("ablate", said("pair_entry", pair=pair))
    a = model.arch
    iv = P.Intervention(
        ablate=tuple(sorted({(p[0], p[1]) for p in req.ablate or []})), mean=req.ablate_mode == "mean",
        mask_off=layers_of(getattr(req, "mask_off_layers", None), a.n_layer),
        drop_sink=layers_of(getattr(req, "drop_sink_layers", None), a.n_layer),
    )  # fmt: skip
    iv.check(a.n_layer, a.n_heads)  # a SpecError naming the field, its message coded
    return iv


def head_name(layer: int, head: int) -> str:
    """One head as the pages write it: L1 H0 (layer 1, head 0), never 1.0, which reads as a decimal."""
    return f"L{layer} H{head}"


def heads_text(pairs: Any) -> str:
    """Heads as the forms and the switches' words write them: `L1 H0, L16 H0`."""
    return ", ".join(head_name(p[0], p[1]) for p in pairs)


def heads_typed(raw: str) -> str:
    """A form's heads as typed, written back the pages' way (`1.0` from an older link shows as `L1 H0`); text that
    reads as no heads stays as typed, for its error to name."""
    if not raw or raw.lstrip().startswith("["):
        return raw
    try:
        return heads_text(parse_heads(raw))
    except FieldError:
        return raw


def form_ablate(raw: str, name: str = "ablate") -> list[list[int]]:
    """A page's heads to knock out as the API's `ablate` pairs: as the form writes them (`L1 H0, L16 H0`; `1:0`, or
    `1.0` as older links did) or as the API's GET does (`[[1, 0], [16, 0]]`); an error names the key typed."""
    if raw.lstrip().startswith("["):
        try:
            return PAIRS.validate_json(raw)
        except ValidationError:
            raise FieldError(name, said("heads_or_pairs")) from None
    return parse_heads(raw, name)


PAIRS = TypeAdapter(list[Annotated[list[StrictInt], Field(min_length=2, max_length=2)]])  # [[1, 0], [16, 0]]


Req = TypeVar("Req", bound=BaseModel)


def form_request(state: PageQuery, model: type[Req], given: Mapping[str, str] | None = None) -> Req:
    """The page's state as the API's request `model`: the query's fields (`given` over them), the heads to knock
    out as the form writes them (`form_ablate`, an error naming the key typed)."""
    raw = state.get("ablate")
    ablate = form_ablate(raw, state.spelled.get("ablate", "ablate")) if raw else None
    fields = {k: v for k, v in state.api_params().items() if k != "ablate"} | dict(given or {})
    return query_model(model).model_validate(fields | ({"ablate": ablate} if ablate else {}))
