"""A page's main figures drawn by matplotlib from its JSON twin: SVG and PDF for print, PNG at 2× for slides.

The twin (`/<page>.json?…`) is the only input: `panels(twin)` reads the heat maps, grids and curves a page shows out
of it (a lab matrix is `{rows, cols, values, scale, bound}` wherever it appears; /heads' and /model's head grids;
/lens' layers × positions; /predict's loss per position), and `draw` lays them out with a title, axes, token labels,
a colour bar and the page's settings in a caption. Colour scales are the page's: viridis for weights (0 → 1),
ColorBrewer's RdBu for scores centred at 0 (negative blue, positive red, as app/render/heatmap.py draws), −∞ (a
masked score, or a weight the mask set to 0) hatched grey.

Every title is in the page's language, from the catalogue (app/web/locales): the page's name (`nav.<view>`), the
model (`preset.<name>`), the stage (`stage.<key>`, the block's `bstage.<key>`), each matrix's name
(`export.fig.name.<name>`), the head, the role or statistic of a head grid.

The drawing is app/render/figure.py's (matplotlib, imported only when a figure is drawn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..render.figure import FORMATS, Curves, Figure, Heat, TooLarge, cjk_font, draw, words_of
from ..templating import LANGS, MESSAGES, translator

__all__ = ["FORMATS", "NoFigure", "TooLarge", "cjk_font", "draw", "panels"]


class NoFigure(ValueError):
    """The page shows no figure this module draws (its twin has no matrix, grid or curve)."""


def _matrix(m: dict[str, Any], title: str, ylabel: str = "query", xlabel: str = "key") -> Heat:
    raw = m["values"]
    values = np.array([[np.nan if v is None else float(v) for v in row] for row in raw], dtype=np.float64)
    hatched = np.isnan(values)
    if m.get("masked"):
        hatched |= np.array(m["masked"], dtype=bool)
    cols = [str(c) for c in m["cols"]]
    if xlabel == "key" and cols and all(c.isdigit() for c in cols):  # a vector's dimensions, not tokens
        xlabel = "feature"
    return Heat(title, [str(r) for r in m["rows"]], cols, values, hatched, m.get("scale") or "diverging",
                m.get("bound"), ylabel, xlabel)  # fmt: skip


def _is_matrix(m: Any) -> bool:
    return isinstance(m, dict) and all(k in m for k in ("rows", "cols", "values")) and isinstance(m["values"], list)


class Say:
    """The catalogue of the page's language, with what a title falls back to where it has no entry."""

    def __init__(self, lang: str) -> None:
        self.lang = lang if lang in LANGS else "en"
        self.t: Callable[..., str] = translator(self.lang)

    def __call__(self, key: str, default: str, **values: object) -> str:
        return self.t(key, **values) if key in MESSAGES[self.lang] else default

    def name(self, name: str) -> str:
        """A matrix's name (`weights`, `ffn_hidden`) in words: its own entry, else the block stage it is."""
        return self(f"export.fig.name.{name}", self(f"bstage.{name}", name))


def _title(m: dict[str, Any], say: Say) -> str:
    label, name = str(m.get("label") or ""), str(m.get("name") or "")
    head = m.get("head")
    named = say.name(name) if name else ""
    if label == name or not label:
        parts = [named]
    else:
        parts = [say.t("matrix.named", label=label, name=named) if named else label]
    if head is not None:
        parts.append(say.t("export.fig.head", head=head))
    shape = m.get("shape")
    if shape:
        parts.append(str(shape))
    return " · ".join(p for p in parts if p)


def panels(twin: dict[str, Any]) -> Figure:
    """The figure(s) a page shows, read from its JSON twin alone."""
    view = str(twin.get("view", ""))
    say = Say(str(twin.get("lang") or "en"))
    words = words_of(say.lang)
    fig = Figure(_figure_title(twin, say))
    mats = twin.get("matrices")
    if isinstance(mats, list):
        fig.panels += [_matrix(m, _title(m, say)) for m in mats if _is_matrix(m)]
    large = twin.get("large")
    if not fig.panels and isinstance(large, dict) and _is_matrix(large.get("tile")):
        fig.panels.append(_matrix(large["tile"], _title(large["tile"], say)))
    if view in ("heads", "model") and isinstance(twin.get("grid"), list):
        fig.panels.append(_grid(twin, words, say))
    if view == "heads" and isinstance(twin.get("weights"), list) and twin.get("chosen"):
        probe = (twin.get("probe") or {}).get("tokens") or []
        layer, head = twin["chosen"]
        w = twin["weights"]
        labels = [str(t) for t in probe] if len(probe) == len(w) else [str(i) for i in range(len(w))]
        m = {"rows": labels, "cols": labels, "values": w, "scale": "sequential"}
        fig.panels.append(_matrix(m, say.t("export.fig.layer_head", layer=layer, head=head)))
    if view == "heads" and isinstance(twin.get("probe_loss"), dict):
        ys = twin["probe_loss"].get("positions") or []
        fig.panels.append(
            Curves(words["per_position"], [str(i) for i in range(len(ys))], [("loss", ys)], ylabel="loss")
        )
    if view == "lens" and isinstance(twin.get("rows"), list) and twin["rows"]:
        fig.panels += _lens(twin, words)
    if view == "predict" and isinstance(twin.get("columns"), list):
        cols = [c for c in twin["columns"] if c.get("scored")]
        x = [f"{c['input']}→{c['target']}" for c in cols]
        fig.panels.append(Curves(words["loss_title"], x, [("loss", [float(c["loss"]) for c in cols])], ylabel="loss"))
        fig.panels.append(Curves(words["p_target"], x, [("p", [float(c["p_target"]) for c in cols])], log=True))
    if not fig.panels:
        raise NoFigure(f"the page {view or '?'} shows no heat map, grid or curve")
    return fig


def _figure_title(twin: dict[str, Any], say: Say) -> str:
    """The page's name, its model and its stage, in the page's language: "Lab · toy (d = 4, 1 head) · Softmax"."""
    view = str(twin.get("view", ""))
    summary: dict[str, Any] = twin["summary"] if isinstance(twin.get("summary"), dict) else {}
    preset = str(summary.get("preset") or twin.get("preset") or "")
    stage = str(twin.get("key") or "")
    stage_name = say(f"stage.{stage}", say(f"bstage.{stage}", stage)) if stage else ""
    parts = [say(f"nav.{view}", view) if view else "", say(f"preset.{preset}", preset) if preset else "", stage_name]
    return " · ".join(p for p in parts if p)


def _grid(twin: dict[str, Any], words: dict[str, str], say: Say) -> Heat:
    grid = twin["grid"]
    values = [[float(c["value"]) if isinstance(c, dict) else float(c) for c in row] for row in grid]
    n_heads = max((len(r) for r in values), default=0)
    role, stat = twin.get("role"), twin.get("stat")
    title = say(f"heads.role.{role}", str(role)) if role else say(f"model.stat.{stat}", str(stat)) if stat else "heads"
    m = {"rows": [str(i) for i in range(len(values))], "cols": [str(j) for j in range(n_heads)], "values": values,
         "scale": "sequential"}  # fmt: skip
    heat = _matrix(m, f"{title} · {words['grid']}", ylabel="layer", xlabel="head")
    heat.vmax = None
    return heat


def _lens(twin: dict[str, Any], words: dict[str, str]) -> list[Heat | Curves]:
    rows = twin["rows"]
    tokens = [str(t) for t in twin.get("tokens") or []]
    start = int(twin.get("start") or 0)
    n_pos = len(rows[0])
    cols = tokens[start : start + n_pos] if len(tokens) >= start + n_pos else [str(i) for i in range(n_pos)]
    values = [[float(cell["p_final"]) for cell in row] for row in rows]
    m = {"rows": [str(i) for i in range(len(rows))], "cols": cols, "values": values, "scale": "sequential"}
    heat = _matrix(m, words["lens"], ylabel="layer", xlabel="position")
    series = [(cols[j], [values[i][j] for i in range(len(rows))]) for j in range(n_pos)]
    return [heat, Curves(words["lens_curves"], [str(i) for i in range(len(rows))], series, xlabel="layer")]
