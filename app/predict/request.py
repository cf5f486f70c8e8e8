"""The prediction views' requests (/api/v1/predict, /api/v1/logit_lens, /api/v1/head_ranking and their pages):
the fields, and how a page's form (ticked boxes, heads written `L1 H0, L16 H0`, a token given by its text) becomes
one of them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from urllib.parse import urlencode

from fastapi import Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from engine.errors import Message
from engine.models import Model

from ..lab import Lab
from ..schemas import MAX_ITEMS, FieldError, LabField, query_model, said
from ..web.knockouts import LAYERS, Knockouts, form_ablate, layer_list
from ..web.page import Refused
from ..web.sequence import DECODER, InputText, Preset, decoder, generators
from ..web.state import Digits, Flag, PageQuery, Q, digits, refused, show

IDS = Field(None, max_length=65_536, description="The text as token ids instead (a view's own limit applies: "
            "MAX_PREDICT_TOKENS, MAX_RANK_TOKENS).")  # fmt: skip
BOS = Field(True, description="Begin the training sequence with the model's BOS token (when it defines one).")
EOS = Field(True, description="End it with the model's EOS token (when it defines one): the last target.")


class Switches(Knockouts):
    """The interventions every prediction view takes."""

    mask_off_layers: Annotated[list[int], Field(max_length=MAX_ITEMS)] | Literal["all"] | None = LabField(
        None, "Layers whose causal mask is removed (every query reads every key). " + LAYERS, kind="list"
    )
    drop_sink_layers: Annotated[list[int], Field(max_length=MAX_ITEMS)] | Literal["all"] | None = LabField(
        None, "Layers where no query but the first reads position 0 (the attention sink). " + LAYERS, kind="list"
    )

    _lists = field_validator("mask_off_layers", "drop_sink_layers", mode="before")(layer_list)


class Replace(BaseModel):
    """One input token replaced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    position: int = Field(ge=0, le=1_000_000, description="The input position (0 is the first).")
    token_id: int = Field(ge=0, le=10_000_000, description="The token id put there.")


class PredictRequest(Switches):
    """A text, teacher-forced through a decoder, with interventions and a loss mask."""

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = IDS
    bos: bool = BOS
    eos: bool = EOS
    loss_from: int = Field(0, ge=0, le=1_000_000, description="The first scored position: positions before it "
                           "count in no loss (a loss mask, as SFT scores only the answer); attention is unchanged.")  # fmt: skip
    replace: Replace | None = LabField(None, "Put token_id at input position `position` (the leakage proof): the "
                                       "run is compared with the unreplaced text under the same switches.",
                                       kind="json")  # fmt: skip
    top: int = Field(5, ge=1, le=20, description="Most likely tokens listed per position.")


class LensRequest(Switches):
    """A text through a decoder, each layer's residual stream read through the final norm and the unembedding."""

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = IDS
    bos: bool = BOS
    top: int = Field(3, ge=1, le=10, description="Most likely tokens listed per layer and position.")


class RankRequest(BaseModel):
    """One prediction, and every head ranked by how much knocking it out changes it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = IDS
    bos: bool = BOS
    position: int | None = Field(None, ge=0, le=1_000_000, description="The input position whose prediction is "
                                 "scored (default: the last with a target in the text).")  # fmt: skip
    target_id: int | None = Field(None, ge=0, le=10_000_000, description="The token scored (default: the text's "
                                  "next token).")  # fmt: skip
    ablate_mode: Literal["zero", "mean"] = Field("zero", description="How each head is knocked out.")


# -- the form's words as the API's fields -------------------------------------------------------------------------

DEFAULT_TEXT = {"en": "The cat sat on the mat.", "zh": "我喜欢苹果"}
SWITCH_KEYS = ("ablate", "ablate_mode", "mask_off_layers", "drop_sink_layers")
LENS_KEYS = ("preset", "text", "token_ids", "bos", *SWITCH_KEYS)


def position(raw: Any) -> int:
    """A position's number (the text's tokens count from 0), or `bos` (-1): the BOS, before position 0."""
    return -1 if str(raw).strip().lower() == "bos" else digits(raw, 0)


def lens_cell(raw: Any) -> tuple[int, int]:
    """`layer.position` (`29.bos`: the BOS; each checked against the lens's layers and positions once they are
    known)."""
    if not isinstance(raw, str):
        return raw
    layer, dot, where = raw.partition(".")
    if not dot:
        raise refused(said("layer_position", value=show(raw, 30)))
    return digits(layer, 0), position(where)


class PredictQuery(PageQuery):
    """/predict's view: the position looked at (default: where a replaced token enters, the largest change, or the
    last), the head ranking asked for (`rank=1`), a second prompt beside the first. `form=1` marks a submitted form
    (an unticked box sends nothing, so there an absent bos/eos means "off"). The form's heads to knock out are
    `ablate` (`L1 H0`: layer 1, head 0; `1.0` as older links wrote it), once spelled `heads`."""

    ALIASES: ClassVar[dict[str, str]] = {"heads": "ablate"}
    FORM: ClassVar[tuple[str, ...]] = ("replace_at", "replace_id", "replace_token")  # the API's `replace`

    pos: Annotated[int, BeforeValidator(position)] | None = None  # -1: the BOS
    rank: Flag = False
    form: str = ""
    compare_text: str = ""
    replace_at: Digits(0, 1_000_000) | None = None  # type: ignore[valid-type]
    replace_id: Digits(0, 10_000_000) | None = None  # type: ignore[valid-type]


PREDICT_KEYS = ("preset", "text", "token_ids", "bos", "eos", "loss_from", *SWITCH_KEYS, *PredictQuery.FORM)


class LensQuery(PageQuery):
    """/lens's view: the first position of the window drawn (default: the chosen cell's window, else the first),
    the chosen cell (`layer.position`), and `form=1` as on /predict."""

    ALIASES: ClassVar[dict[str, str]] = {"heads": "ablate"}

    start: Digits(None) | None = None  # type: ignore[valid-type]
    cell: Annotated[tuple[int, int], BeforeValidator(lens_cell)] | None = None
    form: str = ""


# -- the form's words as the API's fields -------------------------------------------------------------------------

FLAGS = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}


def state_of(request: Request, path: str, keys: tuple[str, ...], query: type[Q]) -> Q:
    """The page's query; a submitted form's unticked boxes become explicit `0`s (and `form` is dropped)."""
    state = query.of(request.query_params, path, keys)
    if "replace_token" in state.params:  # a token's own spaces count (" dog" is not "dog"): kept as typed
        state.params["replace_token"] = request.query_params["replace_token"]
    if state.params.pop("form", None) is not None:
        for name in ("bos", "eos"):
            if name in keys:
                state.params.setdefault(name, "0")
    return state


def form(lab: Lab, state: PageQuery, lang: str) -> dict[str, Any]:
    """What /predict and /lens draw whatever their View says: the models their form offers (every decoder), and a
    first visit's text in the page's language (the form's `prompt`)."""
    named = state.get("text") or state.get("token_ids")
    return {"presets": generators(lab.models), "prompt": "" if named else DEFAULT_TEXT[lang]}


def token_of(model: Model, text: str) -> tuple[int, int]:
    """The first token of `text` through the model's tokenizer (past a BOS the tokenizer adds), and how many."""
    ids = model.tokenize(text)
    if ids and len(ids) > 1 and ids[0] == model.bos_id:
        ids = ids[1:]
    if not ids:
        raise FieldError("replace_token", said("no_token"))
    return ids[0], len(ids)


async def request_body(
    state: PageQuery, prompt: Mapping[str, str], lab: Lab, model_cls: type[BaseModel]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The API request body of the page's state, and what the page says about how it read it (`replaced_by`: a
    token given by text)."""
    names = [n for n in ("preset", "text", "token_ids", "loss_from", "ablate_mode", "mask_off_layers",
                         "drop_sink_layers") if n in model_cls.model_fields]  # fmt: skip
    raw = {n: state.get(n) for n in names if state.get(n)} | dict(prompt)
    body = query_model(model_cls).model_validate(raw).model_dump(exclude_unset=True)  # the text read, once
    if heads := form_ablate(state.get("ablate"), state.spelled.get("ablate", "ablate")):
        body["ablate"] = heads
    for name in ("bos", "eos"):
        if name in model_cls.model_fields and (flag := state.get(name)):
            if flag.lower() not in FLAGS:
                raise FieldError(name, said("flag", value=show(flag, 30)))
            body[name] = FLAGS[flag.lower()]
    replaced: dict[str, Any] = {}
    if body.get("loss_from"):  # the page's number; the API counts the sequence (the BOS first, when there is one)
        body["loss_from"] += bos_offset(lab, body)
    if "replace" not in model_cls.model_fields or not isinstance(state, PredictQuery):
        return body, replaced
    at, by_id, by_text = state.get("replace_at"), state.get("replace_id"), state.get("replace_token")
    if not (at or by_id or by_text):
        return body, replaced
    if not at:
        raise FieldError("replace_at", said("replace_at"))
    where = state.replace_at or 0  # given (`at`), so read
    if by_id and by_text:
        raise FieldError("replace_token", said("replace_both"))
    if by_id:
        token = state.replace_id
    elif by_text:
        model = decoder(lab, str(body.get("preset", "smollm2")))
        token, n = await lab.off_loop(model.name if model.name in lab.models else None, token_of, model, by_text)
        replaced = {"text": by_text, "n": n}
    else:
        raise FieldError("replace_id", said("replace_none"))
    body["replace"] = {"position": where + bos_offset(lab, body), "token_id": token}
    return body, replaced


def bos_offset(lab: Lab, body: Mapping[str, Any]) -> int:
    """Where the page's position 0 lies in the sequence the API computes on: 1 past the BOS the view puts first
    (or that the token ids begin with), else 0. The page numbers the text's tokens; the API, the sequence's."""
    model = decoder(lab, str(body.get("preset", "smollm2")))
    ids = body.get("token_ids") or []
    return 1 if model.bos_id is not None and (body.get("bos", True) or ids[:1] == [model.bos_id]) else 0


@contextmanager
def page_fields(state: PageQuery) -> Iterator[None]:
    """The API's field names as the form's: `ablate` as the user spelled it, `replace` as replace_at/replace_id."""
    try:
        yield
    except FieldError as e:
        if e.field == "ablate" and "ablate" in state.spelled:
            raise FieldError(state.spelled["ablate"], e.message) from None
        if e.field == "replace":
            which, _, rest = e.message.partition(": ")
            name = {"position": "replace_at", "token_id": "replace_id"}.get(which)
            raise FieldError(name or "replace_at", rest if name else e.message) from None
        raise


Req = TypeVar("Req", bound=BaseModel)
Run = TypeVar("Run")


async def read_page(state: PageQuery, lab: Lab, key: str, ctx: dict[str, Any], model_cls: type[Req],
                    compute: Callable[[Req, Lab, str], Awaitable[Run]]
                    ) -> tuple[Req, Run, dict[str, str], dict[str, Any]]:  # fmt: skip
    """What both prediction pages start with: the page's state as the API's request `model_cls` (a first visit's
    text in the page's language, as `form` writes it in the form), validated, and `compute`'s answer to it; a
    refused field named as the form names it, and a text too long for the view refused with the windows of it the
    page offers (the error's `shown`). Returns the request, the answer, the prompt used and what the page says about
    how it read the form (`request_body`)."""
    prompt = {} if state.get("text") or state.get("token_ids") else {"text": DEFAULT_TEXT[ctx["lang"]]}
    with page_fields(state):
        body, replaced = await request_body(state, prompt, lab, model_cls)
        req = model_cls.model_validate(body)
        try:
            return req, await compute(req, lab, key), prompt, replaced
        except FieldError as e:  # a text longer than the view reads: offer a window of it (first or last part)
            if (room := too_long(e)) is not None:
                offer = await lab.off_loop(body.get("preset", "smollm2"), windows, state, req, lab, room, ctx["t"])
                raise Refused(e.field, e.message, {"windows": offer}) from None
            raise


def too_long(e: FieldError) -> int | None:
    """The view's limit when `e` refuses a text for its length ("at most 1024 input tokens here, …": its code)."""
    m = e.message
    if isinstance(m, Message) and m.code in LONG and e.field in ("text", "token_ids"):
        return int(m.params["room"])
    return None


LONG = ("inputs_here", "tokens_here", "inputs_longer", "tokens_longer")  # web/sequence.py's codes for a long text


WINDOW_MARGIN = 8  # tokens kept free of the limit: BOS and EOS, and a text cut mid-word that tokenises a little longer


def windows(state: PageQuery, req: Any, lab: Lab, room: int, t: Any) -> dict[str, Any]:
    """Links to the first and the last part of a text too long for the view, each within its limit, and what each
    leaves out: the text cut at token boundaries (decoded, or the ids themselves when the view was given ids)."""
    model = decoder(lab, req.preset)
    ids = list(req.token_ids) if req.token_ids is not None else model.tokenize(req.text or "")
    if req.token_ids is None and ids and ids[0] == model.bos_id:
        ids = ids[1:]
    keep = max(1, min(room, model.info.n_ctx) - WINDOW_MARGIN)
    cut = len(ids) - keep
    links = []
    for kind, part in (("last", ids[-keep:]), ("first", ids[:keep])):
        if req.token_ids is not None:
            url = state.url(token_ids=",".join(map(str, part)), pos=None, start=None, cell=None, rank=None)
        else:  # a character the cut split is dropped at the edge (decode writes U+FFFD for its piece)
            text = str(model.tokenizer().decode(part)).strip("\ufffd")
            url = state.url(text=text, pos=None, start=None, cell=None, rank=None)
        links.append({"kind": kind, "url": url, "label": t(f"window.{kind}", n=keep, cut=cut)})
    return {"total": len(ids), "room": room, "keep": keep, "cut": cut, "links": links,
            "said": t("window.said", total=len(ids), room=room)}  # fmt: skip


def api_url(path: str, req: BaseModel) -> str:
    """The API's GET URL for a validated request: every field that differs from its default."""
    items = []
    for name, info in type(req).model_fields.items():
        value = getattr(req, name)
        if value is None or value == info.default:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, BaseModel):
            text = json.dumps(value.model_dump(), separators=(",", ":"))
        elif name == "ablate":
            text = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, list):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        items.append((name, text))
    return f"{path}?{urlencode(items)}"
