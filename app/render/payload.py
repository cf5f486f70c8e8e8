"""A trace as the API's JSON (orjson; −∞ becomes null) or as a NumPy .npz archive."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response

from .arrays import Traced, element_count, stage_arrays

OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """orjson, not FastAPI's encoder: NumPy arrays go out directly and −∞ becomes null."""
    body = data if isinstance(data, bytes) else orjson.dumps(data, option=OPTIONS)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class TooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes over {limit}")
        self.size = size
        self.limit = limit


def min_numbers(spec: Any, stages: tuple[str, ...], n_heads: int) -> int:
    """A lower bound on the numbers an answer holds, from the request's sizes alone (an attention Spec, or a
    BlockSpec): known before anything is computed, so an answer sure to be too large is refused at once."""
    attn = getattr(spec, "attn", spec)
    n, d, dk = attn.n_tokens, attn.d_model, attn.d_k
    m = len(attn.kv_tokens) or n
    ff = getattr(spec, "ff", d)
    per_stage = {
        "projection": n * d + n_heads * n * dk,
        "scores": 2 * n_heads * n * m,
        "mask": n * m + n_heads * n * m,
        "softmax": n_heads * n * m,
        "weighted_sum": n_heads * n * dk + 2 * n * d,
        "ffn_hidden": n * min(d, ff),
    }
    return sum(per_stage.get(key, n * d) for key in stages)


def document(trace: Traced, stages: tuple[str, ...], heads: tuple[int, ...], decimals: int | None) -> dict[str, Any]:
    spec = trace.summary() | {"stages": list(stages), "heads": list(heads), "decimals": decimals}
    return {
        "spec": spec,
        "tokens": list(trace.tokens),
        "text_start": spec.get("text_start", 0),  # where the text begins in tokens (after a [CLS] or a BOS)
        "stages": [
            {"index": i, "key": key, "tensors": arrays}
            for i, key, arrays in stage_arrays(trace, stages, heads, decimals)
        ],
        "checks": trace.check_values(),
    }


def to_json(trace: Traced, stages: tuple[str, ...], heads: tuple[int, ...], decimals: int | None, limit: int) -> bytes:
    """The JSON body, or TooLarge; refused before any work when even a lower bound passes `limit`."""
    estimate = 2 * element_count(trace, stages, heads)  # no number is shorter than "0,"
    if estimate > limit:
        raise TooLarge(estimate, limit)
    body = orjson.dumps(document(trace, stages, heads, decimals), option=OPTIONS)
    if len(body) > limit:
        raise TooLarge(len(body), limit)
    return body


def to_npz(trace: Traced, stages: tuple[str, ...], heads: tuple[int, ...], prefixed: bool = False) -> bytes:
    """Every selected tensor under its API name (x, q, …, output), or `stage.name` when `prefixed`, plus `tokens`.
    −∞ stays −∞."""
    arrays: dict[str, np.ndarray] = {"tokens": np.array(trace.tokens)}
    for _, key, stage in stage_arrays(trace, stages, heads):
        for name, a in stage.items():  # a name two stages share (a block's input) is prefixed by its stage
            arrays[f"{key}.{name}" if prefixed or name in arrays else name] = a
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()
