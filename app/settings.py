"""Server settings, read from ATTENTION_LAB_* environment variables (and CLI flags) in one place."""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.spec import Limits

# Every integer size limit of the engine (engine.spec.Limits: max_tokens, max_d_model, ...) is a setting of the
# same name and default (ATTENTION_LAB_MAX_TOKENS, ...): a new limit there is a new setting here, with no edit.
LIMIT_SETTINGS = tuple(f.name for f in fields(Limits) if f.name.startswith("max_") and f.type in (int, "int"))
LimitSettings: Any = create_model(
    "LimitSettings",
    __base__=BaseSettings,
    **{name: (int, Field(Limits.__dataclass_fields__[name].default, ge=1)) for name in LIMIT_SETTINGS},  # type: ignore[call-overload]
)


class Settings(LimitSettings):
    model_config = SettingsConfigDict(env_prefix="ATTENTION_LAB_")

    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when PyTorch sees a GPU
    threads: int | None = Field(None, ge=1)  # torch intra-op threads; None keeps PyTorch's default
    checkpoint: str | None = None  # a Hugging Face GPT-2 directory, served as preset=checkpoint
    pretrained: bool = True  # offer minilm and smollm2 when their packages are installed
    # Your own models (`serve --model PATH [--name NAME]`): Hugging Face directories or .gguf files, separated by the
    # OS path separator; an entry NAME=PATH names its preset (default: the directory's or file's name).
    models: str | None = None
    max_model_mb: float = Field(8192, gt=0)  # a model whose float32 weights are larger is refused at start-up
    # max_tokens, max_long_tokens, max_d_model, ...: every integer `max_*` of engine.spec.Limits, from LimitSettings.
    max_decode_tokens: int = Field(256, ge=1)  # /api/v1/decode answers one row per step
    max_model_view_tokens: int = Field(64, ge=1)  # /api/v1/model_view traces every layer
    # /api/v1/generate: tokens generated per request, and continuations drawn per request (`samples`); each at most
    # what the request's schema takes (GenerateRequest: max_new_tokens ≤ 4096, samples ≤ 64), so that a configured
    # limit is the one a request meets (a larger one is refused at start-up, naming the setting)
    max_new_tokens: int = Field(64, ge=1, le=4096)
    max_samples: int = Field(8, ge=1, le=64)
    max_top_k: int = Field(1000, ge=1)  # /api/v1/generate: the largest top-k filter
    max_predict_tokens: int = Field(1024, ge=1)  # /api/v1/predict and /api/v1/logit_lens: input tokens
    max_rank_tokens: int = Field(256, ge=1)  # /api/v1/head_ranking: one forward pass per head, up to the position
    # /api/v1/head_ranking's expected cost, stated before it starts: token-layer passes, tokens × (L + H·L(L+1)/2)
    max_rank_cost: int = Field(1_100_000, ge=1)  # (SmolLM2: 4,215 a token, its 256 tokens fit)
    max_roles_tokens: int = Field(256, ge=1)  # /api/v1/head_roles: tokens of the text
    max_probe_n: int = Field(128, ge=2)  # /api/v1/head_roles: random tokens in each copy of the induction probe
    max_prune_tokens: int = Field(64, ge=1)  # /api/v1/prune: input tokens (two forward passes per head)
    max_patch_tokens: int = Field(32, ge=1)  # /api/v1/patch: tokens of each prompt (a run per layer, position, head)
    max_flow_tokens: int = Field(24, ge=1)  # /api/v1/attribution flow=true: tokens the flow reads (a max-flow each)
    max_errors: int = Field(50, ge=1)  # errors one 4xx answer lists; `omitted` counts the rest (app/errors.py)
    memory_budget_mb: float = Field(2048, gt=0)  # all computations in flight together, estimated before computing
    compute_wait_s: float = Field(10, ge=0)  # how long a request waits for budget before a 503
    large_request_mb: float = Field(64, ge=0)  # estimated bytes above which a request is "large" work
    max_large_concurrent: int = Field(2, ge=1)  # large computations at once; the others wait on the event loop
    max_large_queued: int = Field(32, ge=0)  # large requests waiting; past it, 503 at once
    max_heavy_per_client: int = Field(1, ge=0)  # heavy requests of one client address at once (0: no cap); a URL
    # already being computed for anyone is free (a class on one address opening the teacher's view shares it)
    queue_wait_s: float = Field(30, ge=0)  # how long large or heavy work waits for a slot before a 503
    cache_mb: float = Field(512, ge=0)  # byte-bounded LRU of computed traces
    response_cache_mb: float = Field(64, ge=0)  # finished GET answers (JSON, .npz, PNG), keyed by their URL
    arena_mb: float = Field(256, ge=0)  # freed large stage tensors kept mapped for the next trace (engine/arena.py)
    draw_ahead_traces: int = Field(8, ge=0)  # large traces whose heat maps are drawn ahead in the background; 0: off
    json_limit_mb: float = Field(32, gt=0)  # larger JSON answers get 413 and a pointer to the .npz
    body_limit_mb: float = Field(8, gt=0)  # request bodies
    send_timeout_s: float = Field(30, gt=0)  # a client that takes no part of an answer for this long is dropped
    max_query_kb: float = Field(32, gt=0)  # a longer URL query gets a 414 that says so (uvicorn's own limit is ~64 KB)
    # The address students open (QR code in presenter mode), e.g. http://lab.school.example; when unset, a
    # loopback address is replaced by this machine's LAN address.
    public_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    # The address `serve --host` listens on (set by the CLI): on a loopback one, no phone reaches the LAN address,
    # and presenter mode says so instead of printing an address that refuses every student.
    bind_host: str | None = None
    # Live rooms (a class following the teacher). In memory by default; with several workers or machines, in Redis.
    redis_url: str | None = Field(None, pattern=r"^(redis|rediss|unix)://\S+$")  # serve --redis URL
    workers: int = Field(1, ge=1)  # set by `serve --workers`: rooms need Redis when it is above 1
    max_rooms: int = Field(500, ge=1)  # rooms open at once (a new one past it gets 503)
    max_followers: int = Field(1000, ge=1)  # event streams per room
    room_idle_s: float = Field(4 * 3600, gt=0)  # a room with no teacher action and no follower expires
    room_keepalive_s: float = Field(10, gt=0)  # a comment on every quiet stream; a gone client is noticed by then
    room_joins_per_minute: int = Field(600, ge=1)  # event streams and joins per client address (a class shares one)
    room_answers_per_minute: int = Field(30, ge=1)  # answers per student
    room_creates_per_minute: int = Field(120, ge=1)  # rooms started per client address (scripts start many)
    room_max_per_address: int = Field(20, ge=1)  # rooms open at once that one client address started
    room_unknown_codes_per_minute: int = Field(30, ge=1)  # lookups of codes that do not exist, per client address
    room_answers_per_address_per_poll: int = Field(200, ge=1)  # students answering one poll from one address
    room_answers_per_address_per_minute: int = Field(600, ge=1)  # answers per client address (a class shares one)
    # How long a one-time link that pairs the teacher's phone stays valid.
    room_pair_s: float = Field(120, gt=0, le=3600)
    room_max_devices: int = Field(4, ge=1, le=64)  # devices paired with one room's teacher at once (phones, tablets)
    # /train: tiny GPTs trained on the server, each in a process of its own (docs/train.md)
    train_max_running: int = Field(1, ge=1)  # runs training at once (one is right for 2 cores)
    train_max_queued: int = Field(2, ge=0)  # runs waiting for the trainer; past it, 503 with Retry-After
    train_max_kept: int = Field(8, ge=1)  # runs kept for their pages and exports (the oldest finished one dropped)
    train_max_steps: int = Field(5000, ge=1)  # steps one run may ask for
    train_max_wall_s: float = Field(300, gt=0)  # a run still training after this long is stopped
    # Live runs (queued or running) of one client address at once, across every worker (0: no cap); past it, 503.
    train_max_per_client: int = Field(0, ge=0)
    # With --redis, runs train in queue workers (`attention-lab worker`): one that has not renewed a run's lease for
    # this long (it died, or lost Redis) has the run reported failed, with a message.
    train_lease_s: float = Field(15, gt=0)
    # app/export: a page's figures (GET /api/v1/figure). A heat map past this many cells is averaged over k × k blocks;
    # a page with more figures than figure_max_panels is refused (422 naming `page`); at most figure_max_labels labels
    # per axis (every k-th beyond).
    figure_max_cells: int = Field(65536, ge=16)
    figure_max_panels: int = Field(12, ge=1)
    figure_max_labels: int = Field(64, ge=2)

    def limits(self) -> Limits:
        """The engine's Limits: every one that is a setting, and the memory budget in bytes."""
        given = {name: getattr(self, name) for name in LIMIT_SETTINGS}
        return Limits(**given, memory_budget_bytes=int(self.memory_budget_mb * 2**20))


@lru_cache
def get_settings() -> Settings:
    return Settings()
