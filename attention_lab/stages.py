"""`trace(...)`, `Client` and `Stages`: the lab's stage Views outside the server (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.attention.view import LabQuery, LabView, stage_fields
from app.render.payload import OPTIONS
from app.schemas import AttentionRequest
from app.templating import translator
from app.web.notebook import render_views
from engine.spec import STAGES, Limits


@dataclass(frozen=True)
class Stages:
    """The five stages of one trace, each the lab's `LabView`; `trace` is the engine's Trace when computed here
    (None when the views came from a server)."""

    views: tuple[LabView, ...]
    lang: str = "en"
    trace: Any = None

    def __getitem__(self, key: str | int) -> LabView:
        """A stage by key (`"softmax"`) or by its 1-based number, as the lab counts them."""
        if isinstance(key, int):
            return self.views[key - 1]
        for v in self.views:
            if v.key == key:
                return v
        raise KeyError(f"no stage {key!r}; one of {', '.join(v.key for v in self.views)}")

    def __iter__(self) -> Iterator[LabView]:
        return iter(self.views)

    def __len__(self) -> int:
        return len(self.views)

    def to_json(self) -> dict[str, Any]:
        return {"stages": [v.to_json() for v in self.views]}

    def _repr_json_(self) -> dict[str, Any]:
        return self.to_json()

    def _repr_html_(self) -> str:
        first = self.views[0]
        title = " ".join(first.tokens) if len(first.tokens) <= 24 else f"{len(first.tokens)} tokens"
        return render_views(self.views, self.lang, title=f"{(first.summary or {}).get('preset', '')} · {title}")


def trace(tokens: str | list[str] | None = None, *, head: int = 0, lang: str = "en", device: str = "cpu",
          limits: Limits | None = None, **fields: Any) -> Stages:  # fmt: skip
    """Compute one trace here (the engine, no server) and return its five stage Views. Bad input raises the
    engine's `SpecError` (or pydantic's `ValidationError`) naming the field, as the API's 422 does."""
    from engine import compute

    req = AttentionRequest.model_validate({"tokens": tokens, **fields} if tokens is not None else fields)
    spec = req.to_spec(limits or Limits(), device)
    computed = compute(spec)
    state = LabQuery.of({}, "/")
    t = translator(lang)
    views = tuple(LabView(**stage_fields(computed, key, head, state, t)) for key in STAGES)
    return Stages(views, lang, computed)


class Client:
    """A small typed client of a running lab's JSON (httpx): the same Views as `trace`, computed by the server."""

    def __init__(self, url: str = "http://127.0.0.1:8000", timeout: float = 120.0, lang: str = "en") -> None:
        import httpx

        self.lang = lang
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)

    def view(self, path: str = "/", **params: Any) -> dict[str, Any]:
        """Any page's JSON face (`/`, `/block`, `/model`, …) for the page's own URL parameters."""
        query = {k: _param(v) for k, v in params.items() if v is not None}
        response = self.http.get(path, params=query | {"lang": self.lang}, headers={"Accept": "application/json"})
        if response.status_code >= 400:
            raise LabError(response.status_code, response.json().get("message", response.text))
        data: dict[str, Any] = response.json()
        return data

    def stage(self, stage: str | int = "projection", **params: Any) -> LabView:
        """One stage of the lab, as the page shows it."""
        return LabView.from_json(self.view("/", stage=stage, **params))

    def trace(self, tokens: str | list[str] | None = None, **params: Any) -> Stages:
        """The five stages of one trace (five requests; the server computes the trace once and caches it)."""
        if tokens is not None:
            params["tokens"] = tokens
        return Stages(tuple(self.stage(key, **params) for key in STAGES), self.lang)

    def attention(self, **fields: Any) -> dict[str, Any]:
        """The API's full trace (POST /api/v1/attention): every tensor of the stages asked for."""
        import orjson

        body = orjson.dumps(fields, option=OPTIONS)
        response = self.http.post("/api/v1/attention", content=body, headers={"Content-Type": "application/json"})
        if response.status_code >= 400:
            raise LabError(response.status_code, response.json().get("message", response.text))
        data: dict[str, Any] = response.json()
        return data

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LabError(Exception):
    """A lab's refusal: its status and the message naming the field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _param(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) if all(isinstance(v, str) for v in value) else ",".join(map(str, value))
    return str(value)
