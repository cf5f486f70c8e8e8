"""The lab's comparison, large and long views are typed (#31): the JSON twin is written from them, and
`LabView.from_json` (pydantic's `model_validate`, led by the annotations) rebuilds the same types, so a view read
back writes the same JSON and reads back equal."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.attention.view import (
    CompareAsk,
    ComparedCells,
    ComparedMaps,
    DifferenceBar,
    HeatSide,
    LabView,
    LargeView,
    LongView,
)
from app.render.cells import MatrixView, RowStats
from app.render.stages import CellSide, SideSpec
from tests.conftest import make_client

TOKENS = " ".join(f"w{i}" for i in range(40))  # past 24 tokens: heat maps


def round_trip(client: Any, **params: str) -> LabView:
    r = client.get("/.json", params=params)
    assert r.status_code == 200, r.text[:300]
    data = r.json()
    v = LabView.from_json(data)
    again = v.to_json()
    assert {k: again[k] for k in data if k in again} == {k: data[k] for k in again if k in data}
    assert LabView.from_json(again) == v  # read back from its own JSON: equal values
    return v


def test_a_comparison_reads_back_as_its_type(client: Any) -> None:
    ask = round_trip(client, stage="softmax", compare="text")
    assert ask.compare == CompareAsk("text")
    cells = round_trip(client, stage="softmax", compare="text", compare_text="the dog sat on a rug")
    assert isinstance(cells.compare, ComparedCells) and cells.compare.kind == "text"
    side = cells.compare.sides[0]
    assert isinstance(side, CellSide) and isinstance(side.matrix, MatrixView) and isinstance(side.spec, SideSpec)
    assert side.stats is not None and isinstance(side.stats[0], RowStats) and isinstance(side.spec.tokens, tuple)
    assert isinstance(cells.compare.overlap, tuple) and cells.compare.changed > 0
    scores = round_trip(client, stage="scores", compare="scale")
    assert isinstance(scores.compare, ComparedCells) and scores.compare.sides[0].stats is None
    maps = round_trip(client, preset="gpt2-small", tokens=TOKENS, stage="softmax", compare="mask")
    assert isinstance(maps.compare, ComparedMaps) and maps.compare.large
    assert all(isinstance(s, HeatSide) for s in maps.compare.sides)
    assert isinstance(maps.compare.difference.colorbar, DifferenceBar) and maps.compare.rows_changed == 39


def test_a_large_view_reads_back_as_its_type(client: Any) -> None:
    v = round_trip(client, preset="gpt2-small", tokens=TOKENS + " x y z", stage="softmax", tile="16,16")
    assert isinstance(v.large, LargeView) and v.large.tile_range == (16, 31, 16, 31)
    assert v.large.tile.extra == {"row0": "16", "col0": "16"} and not v.large.tile.links
    assert v.large.tile_stats is not None and isinstance(v.large.tile_stats[0][1], RowStats)
    assert isinstance(v.large.thumbs[0], tuple) and isinstance(v.large.color_urls[0], tuple)


def test_a_long_view_reads_back_as_its_type(smollm2: Any) -> None:
    text = " ".join(["The teacher reads the first token before lunch."] * 8)
    with make_client(max_tokens=40, max_long_tokens=800) as c:
        v = round_trip(c, preset="smollm2", text=text, layer="3", stage="softmax")
    assert isinstance(v.long, LongView) and isinstance(v.large, LargeView)
    assert v.long.prev_layer is not None and all(isinstance(f, tuple) for f in v.long.layer_fields)


@pytest.mark.parametrize("params", [{}, {"stage": "softmax"}])
def test_a_small_view_has_no_large_or_long_part(client: Any, params: dict[str, str]) -> None:
    v = round_trip(client, **params)
    assert v.large is None and v.long is None and v.compare is None
    assert v.matrices and all(isinstance(m, MatrixView) for m in v.matrices) and isinstance(v.tokens, tuple)


def test_json_the_view_does_not_hold_is_refused_not_skipped(client: Any) -> None:
    data = client.get("/.json").json()
    with pytest.raises(ValidationError, match="colour"):
        LabView.from_json(data | {"colour": "red"})  # a misspelt or newer field is not silently dropped
    with pytest.raises(TypeError, match="block"):
        LabView.from_json(data | {"view": "block"})
