"""The demonstrations' requests and what they compute: permutation equivariance, RoPE's relativity, softmax in
half precision, and the √d_k charts. Shared by the JSON routes and the /demos page; `DemosView` is what the page
shows (its JSON face is the page's `.json` twin)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from engine import demos

from ..errors import clean
from ..render.charts import Chart, Series
from ..schemas import ASCII_NUMBER, FieldError, said
from ..web.state import AsciiInt
from ..web.view import View

Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e6, le=1e6)]


class DemosView(View):
    """Each demonstration's answer (as its /api/v1/demo route gives it), or its error in words; the √d_k data and
    charts; the page's sentences about each, in the reader's language."""

    template = "demos.html"
    blocks = ()
    kind = "demos"

    permutation: dict[str, Any] | None = None
    rope: dict[str, Any] | None = None
    softmax: dict[str, Any] | None = None
    scaling: dict[str, Any] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)  # demonstration → its error, in words
    texts: dict[str, str] = Field(default_factory=dict)  # demonstration → what the page says above its numbers
    notices: dict[str, str] = Field(default_factory=dict)  # demonstration → what to notice
    charts: dict[str, str] = Field(default_factory=dict, exclude=True)  # SVG, drawn from `scaling`
    json_url: str | None = None
    api_urls: dict[str, str] = Field(default_factory=dict)  # demonstration → its JSON route


class PermutationQuery(BaseModel):
    tokens: str = Field("猫 坐 在 垫子 上", max_length=2000, description="Space-separated, at most 16 tokens.")
    perm: str = Field("2,0,1,4,3", max_length=200, description="A reordering of 0..N−1, comma-separated.")
    seed: AsciiInt = Field(0, ge=0, le=2**63 - 1)


class RopeQuery(BaseModel):
    m: AsciiInt = Field(3, ge=0, le=100_000, description="The query's position.")
    n: AsciiInt = Field(7, ge=0, le=100_000, description="The key's position.")
    d_k: AsciiInt = Field(8, ge=2, le=1024, multiple_of=2)
    base: float = Field(10000.0, gt=1, le=1e9, allow_inf_nan=False)
    pairing: Literal["adjacent", "half"] = "adjacent"
    seed: AsciiInt = Field(0, ge=0, le=2**63 - 1)


class SoftmaxQuery(BaseModel):
    logits: str = Field("10,11,12", max_length=500, description="Comma-separated, at most 32 numbers.")
    dtype: Literal["float16", "bfloat16", "float32"] = "float16"


def permutation_of(q: PermutationQuery) -> dict[str, Any]:
    tokens = q.tokens.split()
    if not 1 <= len(tokens) <= 16:
        raise FieldError("tokens", said("demo_tokens"))
    parts = [p for p in q.perm.replace(" ", ",").split(",") if p]
    if not all(p.isascii() and p.isdigit() and len(p) <= 3 for p in parts):
        raise FieldError("perm", said("perm_digits"))
    perm = [int(p) for p in parts]
    if sorted(perm) != list(range(len(tokens))):
        raise FieldError("perm", said("perm_reorder", last=len(tokens) - 1))
    return demos.permutation(tokens, perm, q.seed)


def logits_of(q: SoftmaxQuery) -> list[float]:
    parts = [v for v in q.logits.replace(" ", ",").split(",") if v]
    if not all(ASCII_NUMBER.fullmatch(v) for v in parts):
        raise FieldError("logits", said("logits_numbers"))
    values = [float(v) for v in parts]
    if not 1 <= len(values) <= 32 or any(abs(v) > 1e6 or v != v for v in values):
        raise FieldError("logits", said("logits_range"))
    return values


def scaling_specs(data: dict[str, Any], t: Any) -> dict[str, Chart]:
    """The √d_k demonstration's three charts (their data and words), drawn inline on /demos and by matplotlib at
    /api/v1/demo/scaling.svg."""
    rows = data["rows"]
    d = [r["d_k"] for r in rows]
    labels = {"none": t("scale.none"), "sqrt_dk": t("scale.sqrt_dk"), "dk": t("scale.dk")}
    return {
        "variance": Chart(
            [Series(t("demo.sampled"), d, [r["var"] for r in rows]), Series("d_k", d, d, dashed=True)],
            t("demo.var_title"), "d_k", "Var(q·k)", x_log=True, y_log=True, chart_id="variance",
        ),
        "max": Chart(
            [Series(labels[k], d, [r[f"max_{k}"] for r in rows]) for k in labels],
            t("demo.max_title", n=data["n_keys"]), "d_k", t("max_weight"), x_log=True, chart_id="max",
        ),
        "entropy": Chart(
            [Series(labels[k], d, [r[f"entropy_{k}"] for r in rows]) for k in labels]
            + [Series(t("demo.uniform"), d, [data["uniform_entropy"]] * len(d), dashed=True)],
            t("demo.entropy_title", n=data["n_keys"]), "d_k", t("entropy"), x_log=True, chart_id="entropy",
        ),
    }  # fmt: skip


def scaling_charts(data: dict[str, Any], t: Any) -> dict[str, str]:
    """The three charts as the page draws them inline."""
    return {name: chart.svg() for name, chart in scaling_specs(data, t).items()}


DEMOS: tuple[tuple[str, type[BaseModel], Callable[[Any], dict[str, Any]]], ...] = (
    ("permutation", PermutationQuery, permutation_of),
    ("rope", RopeQuery, lambda r: demos.rope_relative(r.m, r.n, r.d_k, r.base, r.pairing, r.seed)),
    ("softmax", SoftmaxQuery, lambda r: demos.softmax_stability(logits_of(r), r.dtype)),
)


def run_demos(params: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """Each demonstration computed from the parameters it knows (its defaults for the rest), and each
    demonstration's error as (field, message): the page shows both, the JSON twin answers one or the other."""
    sections: dict[str, Any] = {}
    errors: dict[str, tuple[str, str]] = {}
    for name, model, run in DEMOS:
        try:
            sections[name] = run(model.model_validate({k: v for k, v in params.items() if k in model.model_fields}))
        except ValidationError as exc:
            e = clean(exc.errors(), "query")[0]
            errors[name] = (str(e["loc"][1]), e["msg"])  # its code kept: a page says it in its language
        except FieldError as exc:
            errors[name] = (exc.field, exc.message)
    return sections, errors
