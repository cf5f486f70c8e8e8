"""The two models a training run may train, told apart in one place: the decoder-only GPT (engine/train.py, the
default) and the encoder–decoder (engine/encdec*.py, `"arch": "encoder-decoder"`). A run's config, as its JSON
says it, names its arch (the GPT's has none); everything else in app/train asks here which one it holds."""

from __future__ import annotations

from typing import Any

from engine.encdec import EncDecConfig
from engine.encdec_train import EncDecRun
from engine.train import Run, TrainConfig

ENCDEC = "encoder-decoder"
AnyConfig = TrainConfig | EncDecConfig
AnyRun = Run | EncDecRun


def is_encdec(config: AnyConfig | dict[str, Any]) -> bool:
    arch = config.get("arch") if isinstance(config, dict) else getattr(config, "arch", None)
    return arch == ENCDEC


def config_of(d: dict[str, Any]) -> AnyConfig:
    """A run's config from its JSON (`asdict` of either)."""
    if is_encdec(d):
        from engine.encdec import make_config as encdec_config

        return encdec_config(**d)
    from engine.train import make_config

    return make_config(**d)


def new_run(config: AnyConfig, status: str = "queued", text: str | None = None) -> AnyRun:
    """A run not yet trained: its labels and probe (the task's own errors raised here, before it is queued)."""
    if isinstance(config, EncDecConfig):
        from engine.encdec_train import new_run as encdec_run

        return encdec_run(config, status)
    from engine.train import make_data

    data = make_data(config, text)
    return Run(config, data.labels(), data.probe()[0].tolist(), status=status)


def run_of(config: dict[str, Any], labels: list[Any], probe: list[Any], status: str) -> AnyRun:
    """A run as a Redis hash keeps it: its config, labels, probe and status."""
    c = config_of(config)
    if isinstance(c, EncDecConfig):
        run = new_run(c, status)
        run.labels, run.probe = labels, probe
        return run
    return Run(c, labels, probe, status=status)


def train(config: dict[str, Any], on_event: Any, cancel: Any) -> AnyRun:
    """Train a run's config (in the run's own process)."""
    c = config_of(config)
    if isinstance(c, EncDecConfig):
        from engine.encdec_train import train as encdec_train

        return encdec_train(c, on_event, cancel)
    from engine.train import train as gpt_train

    return gpt_train(c, on_event, cancel)


def snapshots_state(run: AnyRun) -> list[dict[str, Any]]:
    """The snapshots as GET /api/v1/train/{id} shows them: the GPT's induction scores and samples; the
    encoder–decoder's accuracy, alignment, greedy output and the probe's cross-attention weights per layer."""
    if isinstance(run, EncDecRun):
        return [{"step": s.step, "eval_loss": s.eval_loss, "accuracy": s.accuracy, "alignment": s.alignment,
                 "output": s.output, "cross": s.weights.get("cross", [])} for s in run.snapshots]  # fmt: skip
    return [{"step": s.step, "induction": s.induction, "eval_loss": s.eval_loss, "sample": s.sample}
            for s in run.snapshots]  # fmt: skip
