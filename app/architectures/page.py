"""The page /architectures: encoder-only, decoder-only and encoder–decoder side by side on one input (their masks,
the same attentions in real weights, what a position reads, their objectives). The View is built in
app/architectures/view.py; the real models are the lab's (`lab.models`: MiniLM, SmolLM2) and the newest finished
encoder–decoder run of /train (`app.state.train`). Deferred, as /heads is: SmolLM2's first use reads and
dequantises its weights, so a browser gets the page's shell at once and its progress meanwhile. Measured on the
2-core dev machine: the shell 0.07 s, the first page of a fresh server 5.0 s (SmolLM2's weights), then 0.02-0.11 s
for any other input or head (SmolLM2 at layer 29 included), a page asked for again 0.002 s (the page cache)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from engine.encdec_train import EncDecRun

from ..errors import clean
from ..lab import Lab, get_lab
from ..lab.keys import request_key
from ..schemas import FieldError
from ..web.page import lab_url, language, query_of, serve
from ..web.state import PageQuery
from .view import (
    REAL,
    ArchitecturesQuery,
    ArchitecturesView,
    encdec_patterns,
    head_at,
    mask_families,
    real_pattern,
    words_of,
)

router = APIRouter(include_in_schema=False)
KEYS = tuple(k for k in ArchitecturesQuery.model_fields if k not in PageQuery.model_fields)  # its own
# Each language's default words; the Chinese ones are all in MiniLM's WordPiece vocabulary (bert-base-uncased's, which
# has about 240 CJK characters: 猫 坐 在 垫 are not among them, and read as [UNK]).
EXAMPLES = {"en": "the cat sat on the mat", "zh": "天 上 有 月 和 星"}
LABELS = {"text": "architectures.text", "pad": "architectures.pad", "pos": "architectures.pos"} | {
    k: f"architectures.head.{k}" for k in ("minilm", "smollm2", "encdec")
}  # each field's label in the form


async def newest_run(request: Request) -> Any:
    """The newest finished encoder–decoder run with its weights (None when there is none)."""
    runs = request.app.state.train
    done = [j for j in await runs.all() if isinstance(j.run, EncDecRun) and j.status == "done"]
    for job in reversed(done):
        job = await runs.get(job.id)  # with its weights (a queue's run reads them from Redis)
        if job is not None and job.run.params:
            return job
    return None


@router.get("/architectures", response_class=HTMLResponse)
async def architectures_page(
    request: Request,
    lab: Annotated[Lab, Depends(get_lab)],
    state: Annotated[PageQuery, Depends(query_of(PageQuery, "/architectures", KEYS))],
) -> Response:
    job = await newest_run(request)
    progress = request_key(request)

    async def build(ctx: dict[str, Any]) -> ArchitecturesView:
        """The View; a refused field named on the page by the label the user sees and its URL key (the JSON
        face's 422 by the key alone, as the API's)."""
        try:
            return await computed(ctx)
        except ValidationError as exc:
            e = clean(exc.errors(), "query")[0]
            field, message = str(e["loc"][1]), e["msg"]
        except FieldError as exc:
            field, message = exc.field, exc.message
        label = ctx["t"](LABELS[field]) if field in LABELS else None
        shown = ctx["t"]("architectures.field", label=label, name=field) if label and ctx["html"] else field
        raise FieldError(shown, message) from None

    async def computed(ctx: dict[str, Any]) -> ArchitecturesView:
        t, lang = ctx["t"], ctx["lang"]
        given = {k: v for k, v in state.params.items() if k in KEYS}
        given.setdefault("text", EXAMPLES.get(lang, EXAMPLES["en"]))  # the page's language's own words
        q = ArchitecturesQuery.model_validate(given)
        words = words_of(q)
        text = " ".join(words)
        tokens, target, families = mask_families(q, words, t)
        for family in families[:2]:
            name = REAL[family.name]
            model = lab.models.get(name)
            if model is None:
                family.missing = t("architectures.real.not_loaded", model=family.model)
                continue
            at = head_at(name, getattr(q, name), model.arch.n_layer, model.arch.n_heads, t)
            n = len(text.split()) * 4 + 4  # a bound on its tokens, for the cost
            cost = 4 * n * n * model.arch.n_heads * 2 + 6 * n * max(model.arch.d_ff, model.arch.d_model) * 4

            def work(_: Any, model: Any = model, at: tuple[int, int] = at) -> Any:
                return real_pattern(model, text, at, q.pos, t)

            got, _ = await lab.compute("architectures", (name, text, at, q.pos, lang), cost, work,
                                                progress=progress)  # fmt: skip
            url = lab_url(name, got.ids, at[0], at[1], lang, state.present, text)  # the same head on the lab's stages
            family.real.append(dataclasses.replace(got.patterns[0], lab_url=url))
        ed = families[2]
        if job is None:
            ed.missing = t("architectures.real.no_run")
        else:
            c = job.run.config
            at = head_at("encdec", q.encdec, c.n_layer, c.n_heads, t)
            key = (job.id, tuple(words), at, q.pos, lang)
            done, _ = await lab.compute("architectures_encdec", key, 1 << 20,
                                        lambda _: encdec_patterns(job, words, at, q.pos, t))  # fmt: skip
            ed.real.extend(done.patterns)
            ed.note = t("architectures.real.run", run=job.id, task=c.task, steps=c.steps) + " " + (
                t("architectures.real.input") if done.read_input else t("architectures.real.probe"))  # fmt: skip
        heads = {k: "{}.{}".format(*getattr(q, k)) for k in (*REAL.values(), "encdec")}
        values = {"text": text, "pad": q.pad, "pos": q.pos} | heads
        return ArchitecturesView(tokens=tokens, target=target, pos=q.pos, families=families, values=values,
                                 run=job.id if job is not None else None)  # fmt: skip

    shows = f"run:{job.id if job is not None else ''}|models:{','.join(sorted(lab.models))}"
    example = EXAMPLES.get(language(request), EXAMPLES["en"])  # the form's text when the URL names none
    return await serve(request, "architectures.html", state, build, blocks=(), deferred=True, shows=shows,
                       example=example)  # fmt: skip
