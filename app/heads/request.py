"""The requests of the head views: /api/v1/head_roles (what each head does), /api/v1/prune (which heads can go) and
/api/v1/patch (where the answer lives), and their pages' own view parameters."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.heads import KINDS, METRICS, ROLES

from ..web.knockouts import Knockouts
from ..web.sequence import DECODER, InputText, Preset
from ..web.state import Choice, Digits, HeadCell, PageQuery

IDS = Field(None, max_length=4096, description="The text as token ids instead.")
BOS = Field(True, description="Begin the text with the model's BOS token (when it defines one).")
Role = Literal["previous_token", "sink", "duplicate_token", "induction"]
Metric = Literal["logit_diff", "prob"]
assert set(Role.__args__) == set(ROLES) and set(Metric.__args__) == set(METRICS)  # type: ignore[attr-defined]

CLEAN = "The Eiffel Tower is in the city of"
CORRUPTED = "The Colosseum is in the city of"


class RolesRequest(Knockouts):
    """A text and the induction probe through a decoder: every head's role scores. Heads in `ablate` are knocked
    out of a second run of the probe (its loss beside the plain one); the scores are the plain model's."""

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = IDS
    bos: bool = BOS
    probe_n: int = Field(32, ge=2, le=100_000, description="Random tokens in each copy of the induction probe "
                         "(BOS, n tokens, the same n again); at most the server's max_probe_n.")  # fmt: skip
    seed: int = Field(0, ge=0, le=2**31 - 1, description="The seed the probe's tokens are drawn with.")
    top: int = Field(10, ge=1, le=100, description="Heads listed per role, highest score first.")


class PruneRequest(BaseModel):
    """A text teacher-forced through a decoder: every head ranked by its single knock-out, then removed
    cumulatively, least important first."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = IDS
    bos: bool = BOS
    eos: bool = Field(True, description="End the training sequence with the model's EOS token: the last target.")
    loss_from: int = Field(0, ge=0, le=1_000_000, description="The first scored position (a loss mask).")
    ablate_mode: Literal["zero", "mean"] = Field("zero", description="How the heads are knocked out: zero, or "
                                                  "each head's running mean over positions 0…t.")  # fmt: skip
    rise: float = Field(0.05, ge=0, le=10, description="The loss rise, as a fraction of the plain loss, that "
                        "`can_go` allows (0.05: 5 %).")  # fmt: skip


class PatchRequest(BaseModel):
    """A clean and a corrupted prompt of the same token length: every activation of the corrupted run replaced,
    one at a time, by the clean run's."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: Preset = DECODER
    clean: str = Field(CLEAN, min_length=1, max_length=4096, description="The clean prompt.")
    corrupted: str = Field(CORRUPTED, min_length=1, max_length=4096, description="The corrupted prompt: as many "
                           "tokens as the clean one.")  # fmt: skip
    bos: bool = BOS
    answer: int | None = Field(None, ge=0, le=10_000_000, description="The answer token id (default: the clean "
                               "prompt's prediction).")  # fmt: skip
    wrong: int | None = Field(None, ge=0, le=10_000_000, description="The other token of logit_diff (default: "
                              "the corrupted prompt's prediction, or its second when both predict the answer).")  # fmt: skip
    metric: Metric = Field("logit_diff", description="logit_diff: logit[answer] − logit[wrong] at the last "
                           "position; prob: the answer's probability there.")  # fmt: skip


# -- the pages' own view parameters ------------------------------------------------------------------------------


class HeadsQuery(PageQuery):
    """/heads's view: the role shown on the grid, the head whose probe weights are drawn (layer.head), the
    pruning curve asked for (`prune=1`), the number of top induction heads knocked out (`knock`)."""

    role: Choice(ROLES) = "induction"  # type: ignore[valid-type]
    head: HeadCell | None = None
    knock: Digits(None) | None = None  # type: ignore[valid-type]
    prune: str = ""


class PatchQuery(PageQuery):
    """/patch's view: the grid shown and the chosen cell (layer.position, or layer.head on the head grid)."""

    grid: Choice((*KINDS, "head")) = "resid_pre"  # type: ignore[valid-type]
    cell: HeadCell | None = None
