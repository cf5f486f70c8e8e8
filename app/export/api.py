"""The export API: any page's figure (SVG, PDF, PNG), its code (the lab's client or plain torch), its notebook and
its citation, each from the page's URL (`page=<path and query>`), read from the page's JSON twin (app/export/twin.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ValidationError

from ..errors import field_error
from ..schemas import ERRORS, FieldError, query_model
from ..templating import negotiate, translator
from ..web.provenance import model_path
from ..web.sequence import DECODER, InputText, Preset, text_of
from . import cite, twin
from . import code as snippets
from . import notebook as notebooks
from .figure import FORMATS, NoFigure, TooLarge, draw, panels

TAG = {"name": "export", "description": "Take a page with you: its figures, code, notebook and citation."}
router = APIRouter(prefix="/api/v1", tags=["export"], responses=ERRORS)

# Every page has a permalink to cite; figures, code and notebooks cover the pages with numbers (twin.PAGE_PATHS).
ALL_PAGES = (*twin.PAGE_PATHS, "/decode", "/generate", "/tiles", "/demos", "/params", "/patch", "/models", "/lessons",
             "/train")  # fmt: skip

PageParam = Annotated[
    str,
    Query(max_length=16384, description="A lab page's path and query, e.g. `/?tokens=cat+sat+on&stage=4`",
          examples=["/?tokens=cat+sat+on&stage=4"]),
]  # fmt: skip


def install(app: FastAPI) -> None:
    """The export routes and their tag (main.py includes them with this one call)."""
    app.openapi_tags = [*(app.openapi_tags or []), TAG]
    app.include_router(router)


async def page_of(request: Request, page: str, paths: tuple[str, ...] = twin.PAGE_PATHS) -> twin.Page | Response:
    try:
        return await twin.fetch(request.app, page, paths)
    except twin.BadPage as e:
        return field_error("query", "page", str(e), e.status)


def caption(p: twin.Page) -> str:
    """The page's settings, for a figure's caption: what the user chose (the URL) and what the page ran."""
    summary = p.summary
    keys = ("preset", "mask", "scale", "positions", "layer", "seed")
    ran = [f"{k}={summary[k]}" for k in keys if summary.get(k) not in (None, "", [])]
    chosen = [f"{k}={v}" for k, v in p.query if k not in ("tokens", "text", "lang") and f"{k}={v}" not in ran]
    for key, name in (("key", "stage"), ("head", "head")):
        if p.twin.get(key) is not None and not any(c.startswith(f"{name}=") for c in chosen):
            chosen.append(f"{name}={p.twin[key]}")
    return " · ".join(["Attention Lab", p.path, *ran, *chosen])


def _flat(block: dict[str, object]) -> dict[str, str]:
    """The provenance block as text fields, for a figure's metadata."""
    out = {k: str(v) for k, v in block.items() if k != "files"}
    for f in block.get("files", []) or []:  # type: ignore[attr-defined]
        out[f"sha256 {f['name']}"] = f["sha256"]
    return out


@router.get(
    "/figure",
    summary="A page's figure(s) as SVG, PDF or PNG, drawn by matplotlib",
    response_class=Response,
    responses={200: {"content": {m: {} for m in FORMATS.values()}}},
)
async def figure(request: Request, page: PageParam, format: Literal["svg", "pdf", "png"] = "svg") -> Response:
    """The heat maps, head grids and curves of the page at `page` (its JSON twin's numbers), with a title, token
    labels, a colour bar and the page's settings as the caption: viridis for weights, RdBu centred at 0 for scores,
    −∞ hatched. Bounded by FIGURE_MAX_CELLS (a larger heat map is averaged over blocks), FIGURE_MAX_PANELS and
    FIGURE_MAX_LABELS."""
    p = await page_of(request, page)
    if isinstance(p, Response):
        return p
    try:
        spec = panels(p.twin)
    except NoFigure as e:
        return field_error("query", "page", str(e))
    settings = request.app.state.settings
    try:
        body = await run_in_threadpool(
            draw, spec, format, caption(p), p.lang, max_cells=settings.figure_max_cells,
            max_panels=settings.figure_max_panels, max_labels=settings.figure_max_labels,
            metadata=_flat(await provenance_of(request, p)),
        )  # fmt: skip
    except TooLarge as e:
        return field_error("query", "page", f"{e} ({e.setting.upper()})")
    return Response(body, media_type=FORMATS[format], headers=named(p, "." + format))


def file_name(path: str, suffix: str) -> str:
    """What a download of the page at `path` is saved as: `attention-lab-<page><suffix>` (the lab's page is `lab`).
    Never a module's name: a snippet saved as `torch.py` would be imported by its own `import torch`."""
    return "attention-lab-" + (path.strip("/").replace("/", "-") or "lab") + suffix


def named(p: twin.Page, suffix: str, how: str = "inline") -> dict[str, str]:
    return {"Content-Disposition": f'{how}; filename="{file_name(p.path, suffix)}"'}


CodeKind = Literal["lab", "torch"]


def model_files(request: Request, p: twin.Page) -> tuple[str, str | None] | None:
    """A real model's files as transformers reads them: (directory, None) or (directory, the GGUF file's name)."""
    path = model_path(request.app.state.lab, preset_of(p))
    if path is None:
        return None
    return (str(path.parent), path.name) if path.is_file() else (str(path), None)


def preset_of(p: twin.Page) -> str:
    return str(p.summary.get("preset") or p.twin.get("preset") or p.params.get("preset") or "")


class LensText(BaseModel):
    """The fields of /api/v1/logit_lens's request that name its sequence (app/predict/request.py `LensRequest`,
    another feature's: not imported here), with the same defaults."""

    preset: Preset = DECODER
    text: InputText = None
    token_ids: list[int] | None = None
    bos: bool = True


async def ids_of(request: Request, p: twin.Page) -> list[int] | None:
    """A logit lens page's token ids as the lab tokenised them (its View shows the tokens, not their ids): its
    sequence read as /api/v1/logit_lens reads it (`text_of`, tokenising only), from the page's query, or the text
    its View shows when its URL names none (the API has no default text). Not asked of the API itself: that is a
    heavy request, refused (429) while the same address's other export of the page still computes (the "Show code"
    panel asks for both snippets at once). /model's: its text through the model's own tokenizer, as the page's
    request reads it (`make_spec`)."""
    if p.path == "/model":
        return await run_in_threadpool(model_ids, request, p)
    if p.path != "/lens":
        return None
    query = {k: v for k, v in p.query if k in ("preset", "text", "token_ids", "bos")}
    if "text" not in query and "token_ids" not in query and p.twin.get("text"):
        query["text"] = str(p.twin["text"])  # a first visit's text, the page's language's (its View's)
    lab = request.app.state.lab
    try:
        req = query_model(LensText).model_validate(query)
        t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, False, "tokens", 1)
    except (ValidationError, FieldError):
        return None
    return list(t.seq)


def model_ids(request: Request, p: twin.Page) -> list[int] | None:
    from engine.spec import make_spec

    params = p.params
    try:
        ids = json.loads("[" + params["token_ids"].strip("[]") + "]") if params.get("token_ids") else None
        spec = make_spec(text=params.get("text") if ids is None else None, token_ids=ids, preset=preset_of(p),
                         layer=0, models=request.app.state.lab.models)  # fmt: skip
    except ValueError:  # a SpecError too: the page itself would have refused it
        return None
    return list(spec.token_ids or ())


def comments_in(request: Request, p: twin.Page) -> snippets.T:
    """The snippets' comments in the page's language: its URL's `lang`, else the reader's (Accept-Language: the page
    that asks for its code in its "Show code" panel is shown to the same browser)."""
    return translator(negotiate(p.params.get("lang"), request.headers.get("accept-language")))


@router.get(
    "/code",
    summary="Python that prints a page's numbers: the lab's client, or plain torch",
    response_class=Response,
    responses={200: {"content": {"text/x-python": {}}}},
)
async def code(request: Request, page: PageParam, kind: CodeKind = "lab") -> Response:
    """A short runnable snippet generated from the page's state (its JSON twin): `kind=lab` with the lab's package
    (`attention_lab`), `kind=torch` recomputing the page's numbers with plain torch (and transformers for a real
    model). It prints every matrix the page shows. Asked by htmx (the page's "Show code" panel), it comes as
    escaped HTML. Its comments are in the page's language."""
    p = await page_of(request, page)
    if isinstance(p, Response):
        return p
    t = comments_in(request, p)
    try:
        if kind == "lab":
            text = snippets.lab_snippet(p, str(request.base_url).rstrip("/"), t)
        else:
            text = snippets.torch_snippet(p, model_files(request, p), await ids_of(request, p), t)
    except snippets.NoCode as e:
        return field_error("query", "kind" if kind == "torch" and p.path in ("/", "/embed") else "page", str(e))
    if request.headers.get("hx-request"):
        return HTMLResponse(f'<code class="language-python">{escape(text)}</code>')
    return Response(text, media_type="text/x-python; charset=utf-8", headers=named(p, f"-{kind}.py"))


def base_url(request: Request) -> str:
    public = request.app.state.settings.public_url
    return (public or str(request.base_url)).rstrip("/")


async def provenance_of(request: Request, p: twin.Page) -> dict[str, object]:
    path = model_path(request.app.state.lab, preset_of(p))
    return await run_in_threadpool(cite.provenance, p, base_url(request) + p.url, path)


CITE_TYPES = {"bibtex": "application/x-bibtex", "csl": "application/vnd.citationstyles.csl+json",
              "json": "application/json", "html": "text/html"}  # fmt: skip
CITE_SUFFIX = {"bibtex": ".bib", "csl": "-csl.json", "json": "-provenance.json"}  # a download's name (html: the panel)


@router.get(
    "/cite",
    summary="Cite a page: its permalink and provenance as BibTeX, CSL-JSON or JSON",
    response_class=Response,
    responses={200: {"content": {m: {} for m in CITE_TYPES.values()}}},
)
async def cite_page(
    request: Request, page: PageParam, format: Literal["bibtex", "csl", "json", "html"] = "bibtex"
) -> Response:
    """The page's permalink plus provenance: the lab's version, the model's name and the sha256 of its weights files
    (computed once per file), the date. `json` is the provenance block itself; `html` the page's "Cite" panel."""
    p = await page_of(request, page, ALL_PAGES)
    if isinstance(p, Response):
        return p
    block = await provenance_of(request, p)
    text = {"bibtex": cite.bibtex, "csl": cite.csl, "html": cite.html, "json": lambda b: json.dumps(b, indent=2)}[
        format
    ](block)
    headers = named(p, CITE_SUFFIX[format]) if format in CITE_SUFFIX else None
    return Response(text, media_type=CITE_TYPES[format] + ("; charset=utf-8" if format != "json" else ""),
                    headers=headers)  # fmt: skip


@router.get(
    "/notebook",
    summary="A page as a Jupyter notebook: its settings, code, numbers and figure",
    response_class=Response,
    responses={200: {"content": {"application/x-ipynb+json": {}}}},
)
async def notebook(request: Request, page: PageParam) -> Response:
    """The page as an `.ipynb` (nbformat 4, validated): its settings, the code that prints its numbers (the lab's
    package and plain torch, where the page has them) with the numbers as their output, its figure and its
    provenance."""
    p = await page_of(request, page)
    if isinstance(p, Response):
        return p

    def maybe(fn: Callable[[], str]) -> str | None:
        try:
            return fn()
        except snippets.NoCode:
            return None

    t = comments_in(request, p)
    lab_code = maybe(lambda: snippets.lab_snippet(p, base_url(request), t))
    ids = await ids_of(request, p)
    torch_code = maybe(lambda: snippets.torch_snippet(p, model_files(request, p), ids, t))
    settings = request.app.state.settings
    try:
        png: bytes | None = await run_in_threadpool(
            draw, panels(p.twin), "png", caption(p), p.lang, max_cells=settings.figure_max_cells,
            max_panels=settings.figure_max_panels, max_labels=settings.figure_max_labels,
        )  # fmt: skip
    except (NoFigure, TooLarge):
        png = None
    block = await provenance_of(request, p)
    nb = await run_in_threadpool(notebooks.build, p, base_url(request) + p.url, lab_code, torch_code, png, block)
    import nbformat

    return Response(
        nbformat.writes(nb), media_type="application/x-ipynb+json", headers=named(p, ".ipynb", "attachment")
    )
