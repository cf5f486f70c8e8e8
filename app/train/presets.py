"""Finished runs served as presets of the running server: `train-<id>` on every page and API that takes a preset
(the lab's stages, the model view, the prediction and training views, the head roles), without exporting and
restarting.

A run's weights are written as the Hugging Face directory its export is (engine/train.py `export`), in a folder the
server owns, and loaded by the same loader and checks as `serve --model` (engine/models `load`); the lab serves it
(`Lab.add_model`). Bounded as the runs are: when the run is dropped (the oldest past TRAIN_MAX_KEPT) its preset
goes with it (`Lab.remove_model`, the kept answers that name it, its folder), and a request naming it is refused
like any unknown preset: a 422 naming `preset`.

An encoder–decoder run (engine/encdec*.py) is no family the lab's model loader reads: it is exported as its own
folder (`nn.Transformer` state dict + config, engine/encdec_train.py `export`), loaded back from that folder
(`load_export`, which checks every tensor) and served by the same name to /cross (`/cross?preset=train-<id>` and its
JSON twin), listed in /api/v1/presets (`Lab.encdec_presets`) and dropped with its run as a GPT preset is."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.encdec_train import EncDecRun, load_export
from engine.encdec_train import export as export_encdec
from engine.models import ModelError, load
from engine.train import Run, export

from ..web.page import forget_pages, forget_preset

if TYPE_CHECKING:
    from ..lab import Lab

log = logging.getLogger(__name__)


def preset_of(run_id: str) -> str:
    """The preset name of a run (ids are URL-safe; the prefix makes it begin with a letter, as names must)."""
    return f"train-{run_id}"


class Presets:
    def __init__(self, lab: Lab, responses: Any, max_model_mb: float) -> None:
        self.lab, self.responses, self.max_model_mb = lab, responses, max_model_mb
        self._dir: tempfile.TemporaryDirectory[str] | None = None  # removed with the process at the latest
        self._lock = threading.Lock()
        self.encdec: dict[str, EncDecRun] = {}  # the encoder–decoder presets, as loaded back from their folders

    def _root(self) -> Path:
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.TemporaryDirectory(prefix="attention-lab-runs-")
            return Path(self._dir.name)

    def add(self, run_id: str, run: Run | EncDecRun) -> tuple[str | None, str]:
        """Serve the finished run as a preset: (its name, "") or (None, why not)."""
        name = preset_of(run_id)
        if name in self.lab.models or name in self.encdec:  # served already: its folder is in use
            return name, ""
        path = self._root() / name
        try:
            if isinstance(run, EncDecRun):
                self._add_encdec(name, export_encdec(run, path))
            else:
                export(run, path)
                self.lab.add_model(load(path, name, self.max_model_mb))
        except (ModelError, ValueError, OSError) as e:
            shutil.rmtree(path, ignore_errors=True)
            log.warning("attention-lab: run %s is not served as a preset: %s", run_id, e)
            return None, str(e)
        forget_pages(self.responses)  # a page kept before offers the presets of then
        return name, ""

    def _add_encdec(self, name: str, path: Path) -> None:
        served = load_export(path, self.max_model_mb)  # the folder read back, not the run's own tensors
        c = served.config
        with self._lock:
            self.encdec = {**self.encdec, name: served}
            self.lab.encdec_presets = {**self.lab.encdec_presets, name: {
                "arch": "encoder-decoder", "task": c.task, "direction": c.direction if c.task == "numbers" else None,
                "d_model": c.d_model, "n_heads": c.n_heads, "d_k": c.d_k, "n_layer": c.n_layer,
                "vocab": len(served.labels), "steps": c.steps, "page": f"/cross?preset={name}"}}  # fmt: skip

    def remove(self, name: str) -> None:
        """The preset gone: from the lab's models, from the kept answers that name it, and its folder."""
        with self._lock:
            self.encdec = {k: v for k, v in self.encdec.items() if k != name}
            self.lab.encdec_presets = {k: v for k, v in self.lab.encdec_presets.items() if k != name}
        self.lab.remove_model(name)
        forget_preset(self.responses, name)
        forget_pages(self.responses)
        if self._dir is not None:
            shutil.rmtree(Path(self._dir.name) / name, ignore_errors=True)
