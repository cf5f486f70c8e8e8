"""The prediction views computed through the lab's compute service, and their JSON documents: teacher forcing with
interventions (/api/v1/predict), the logit lens (/api/v1/logit_lens) and a ranking of the heads by their effect on
one prediction (/api/v1/head_ranking). The engine is engine/predict.py."""

from __future__ import annotations

from typing import Any

from engine import predict as P
from engine.models import Model

from ..lab import Lab
from ..render.predicted import top_labels
from ..schemas import FieldError
from ..web.knockouts import intervention
from ..web.sequence import Text, text_of
from .request import LensRequest, PredictRequest, RankRequest


def forward_cost(model: Model, n: int, passes: int = 2) -> int:
    """Estimated bytes of teacher-forced passes: (N, vocab) log-probabilities, a layer's activations, the weights."""
    a = model.arch
    return passes * 3 * n * a.vocab * 4 + 6 * n * max(a.d_ff, a.d_model) * 4 + a.n_heads * n * min(n, 256) * 4


# -- /api/v1/predict -----------------------------------------------------------------------------------------------


async def predict_of(req: PredictRequest, lab: Lab, key: str | None) -> tuple[Text, P.Intervention, P.Prediction]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, req.eos)
    iv = intervention(req, t.model)
    n = len(t.inputs)
    replace = None
    if req.replace is not None:
        if req.replace.position >= n:
            raise FieldError("replace", f"position: the inputs have positions 0..{n - 1}, not {req.replace.position}")
        if req.replace.token_id >= t.model.arch.vocab:
            raise FieldError("replace", f"token_id: {t.model.name}'s vocabulary has ids 0..{t.model.arch.vocab - 1}")
        replace = (req.replace.position, req.replace.token_id)
    if req.loss_from >= n:
        raise FieldError("loss_from", f"the inputs have positions 0..{n - 1}: nothing would be scored")
    compute_key = (req.preset, t.seq, iv, req.loss_from, replace, req.top)

    def work(progress: Any) -> P.Prediction:
        return P.predict(t.model, t.seq, iv, req.loss_from, replace, req.top, progress)

    pred, _ = await lab.compute("predict", compute_key, forward_cost(t.model, n), work, progress=key)
    return t, iv, pred


async def pair_of(req: PredictRequest, other_text: str, lab: Lab, key: str | None) -> tuple[Text, Text, P.Pair]:
    """The request's text and a second one (`other_text`, read as the field `compare_text`) under the same switches,
    position by position: two prompts side by side."""
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, req.eos)
    other = req.model_copy(update={"text": other_text, "token_ids": None, "replace": None})
    try:
        t2 = await lab.off_loop(req.preset, text_of, other, lab, lab.settings.max_predict_tokens, req.eos)
    except FieldError as e:
        raise FieldError("compare_text", e.message) from None
    iv = intervention(req, t.model)
    compute_key = ("pair", req.preset, t.seq, t2.seq, iv, req.loss_from, req.top)

    def work(progress: Any) -> P.Pair:
        return P.predict_pair(t.model, t.seq, t2.seq, iv, req.loss_from, req.top, progress)

    cost = forward_cost(t.model, max(len(t.seq), len(t2.seq)))
    pair, _ = await lab.compute("predict", compute_key, cost, work, progress=key)
    return t, t2, pair


def labelled_top(model: Model, ids: list[int], labels: list[str], i: int, s: P.Scored) -> list[dict[str, Any]]:
    """The most likely tokens at input position i, labelled as the text labels its pieces."""
    names = top_labels(model, ids, labels, i + 1, s.top_ids)
    return [{"token": name, "token_id": t, "p": p} for name, t, p in zip(names, s.top_ids, s.top_probs, strict=True)]


def switches_json(iv: P.Intervention) -> dict[str, Any]:
    return {"ablate": [list(p) for p in iv.ablate], "ablate_mode": "mean" if iv.mean else "zero",
            "mask_off_layers": list(iv.mask_off), "drop_sink_layers": list(iv.drop_sink)}  # fmt: skip


def predict_document(t: Text, iv: P.Intervention, pred: P.Prediction) -> dict[str, Any]:
    run, before = pred.run, pred.before
    ids = [*run.inputs, t.seq[-1]]
    labels = list(t.labels)
    if pred.replaced is not None:
        labels = t.model.labels(ids)
    base_ids, base_labels = list(t.seq), list(t.labels)
    replaced = None
    if pred.replaced is not None:
        replaced = {"position": pred.replaced[0], "token_id": pred.replaced[1], "token": labels[pred.replaced[0]]}
    positions = []
    for i, s in enumerate(run.positions):
        row: dict[str, Any] = {
            "position": i, "input": labels[i], "input_id": run.inputs[i], "target": labels[i + 1],
            "target_id": run.targets[i], "scored": i >= run.loss_from, "p_target": s.p_target, "loss": s.loss,
            "rank": s.rank, "top": labelled_top(t.model, ids, labels, i, s),
        }  # fmt: skip
        if before is not None:
            b = before.positions[i]
            row["before"] = {"p_target": b.p_target, "loss": b.loss, "rank": b.rank,
                             "top": labelled_top(t.model, base_ids, base_labels, i, b)}  # fmt: skip
            if before.targets[i] != run.targets[i]:  # a replaced token is the previous position's target too
                row["before"] |= {"target": base_labels[i + 1], "target_id": before.targets[i]}
            row["kl"] = pred.kl[i]
            row["max_abs_diff"] = pred.max_abs_diff[i]
        positions.append(row)
    return {
        "preset": t.preset,
        "tokens": labels[:-1],
        "targets": labels[1:],  # of the text as run: a replaced input is also its previous position's target
        "token_ids": list(run.inputs),
        "target_ids": list(run.targets),
        "bos": t.model.bos_id if t.seq[0] == t.model.bos_id else None,
        "loss_from": run.loss_from,
        "positions": positions,
        "mean_loss": run.mean_loss,
        "perplexity": run.perplexity,
        "switches": switches_json(iv),
        "replace": replaced,
        "before": None
        if before is None
        else {
            "mean_loss": before.mean_loss,
            "perplexity": before.perplexity,
            "what": "the same switches on the unreplaced text"
            if pred.replaced is not None
            else "the same text without the switches",
        },
    }


# -- /api/v1/logit_lens ----------------------------------------------------------------------------------------------


async def lens_of(req: LensRequest, lab: Lab, key: str | None) -> tuple[Text, P.Intervention, P.Lens]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, False, "tokens", 1)
    # the lens reads the text as it is (one token is enough): with bos, the sequence's last token is an input too
    iv = intervention(req, t.model)
    inputs = t.seq
    compute_key = (req.preset, inputs, iv, req.top)

    def work(progress: Any) -> P.Lens:
        return P.lens(t.model, inputs, iv, req.top, progress)

    a = t.model.arch
    cost = forward_cost(t.model, len(inputs), 1) + a.n_layer * len(inputs) * a.d_model * 4
    lens, _ = await lab.compute("lens", compute_key, cost, work, progress=key)
    return t, iv, lens


def lens_document(t: Text, iv: P.Intervention, lens: P.Lens) -> dict[str, Any]:
    model, ids, labels = t.model, list(t.seq), list(t.labels)
    names: dict[tuple[int, int], str] = {}  # a token is often among the top at many layers of one position

    def name(i: int, tok: int) -> str:
        if (i, tok) not in names:
            names[i, tok] = top_labels(model, ids, labels, i + 1, [tok])[0]
        return names[i, tok]

    def read(lens: P.Lens) -> dict[str, Any]:
        top_ids, top_p, p_final = lens.top_ids.tolist(), lens.top_probs.tolist(), lens.p_final.tolist()
        return {
            "final": [name(i, tok) for i, tok in enumerate(lens.final_ids)],
            "final_ids": list(lens.final_ids),
            "first_top1": list(lens.first_top1),
            "layers": [
                [
                    {
                        "top": [
                            {"token": name(i, tok), "token_id": tok, "p": p} for tok, p in zip(ti, tp, strict=True)
                        ],
                        "p_final": pf,
                    }
                    for i, (ti, tp, pf) in enumerate(zip(top_ids[li], top_p[li], p_final[li], strict=True))
                ]
                for li in range(len(top_ids))
            ],
        }

    before = None if lens.before is None else read(lens.before)
    return {
        "preset": t.preset,
        "tokens": labels,
        "token_ids": ids,
        **read(lens),
        "switches": switches_json(iv),
        "before": before,
        "changed": []
        if lens.before is None
        else [i for i, (a, b) in enumerate(zip(lens.final_ids, lens.before.final_ids, strict=True)) if a != b],
    }


# -- /api/v1/head_ranking ----------------------------------------------------------------------------------------


async def ranking_of(req: RankRequest, lab: Lab, key: str | None) -> tuple[Text, P.Ranking]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_rank_tokens, False)
    n = len(t.seq)
    position = n - 2 if req.position is None else req.position
    limit = n - 1 if req.target_id is not None else n - 2
    if position > limit:
        raise FieldError("position", f"positions 0..{limit} have {'a place' if req.target_id else 'a next token'} "
                         f"in this text, not {position}")  # fmt: skip
    target = t.seq[position + 1] if req.target_id is None else req.target_id
    if target >= t.model.arch.vocab:
        raise FieldError("target_id", f"{t.model.name}'s vocabulary has ids 0..{t.model.arch.vocab - 1}")
    compute_key = (req.preset, t.seq[: position + 1], position, target, req.ablate_mode)
    a = t.model.arch

    def work(progress: Any) -> P.Ranking:
        return P.rank_heads(t.model, t.seq, position, target, req.ablate_mode == "mean", progress=progress)

    cost = forward_cost(t.model, position + 1, 1) + a.n_layer * (position + 1) * a.d_model * 4
    ranking, _ = await lab.compute("rank", compute_key, cost, work, progress=key)
    return t, ranking


def ranking_document(t: Text, r: P.Ranking, mode: str) -> dict[str, Any]:
    ids, labels = list(t.seq), list(t.labels)
    return {
        "preset": t.preset,
        "tokens": labels[: r.position + 1],
        "position": r.position,
        "target": top_labels(t.model, ids, labels, r.position + 1, [r.target])[0],
        "target_id": r.target,
        "ablate_mode": mode,
        "loss": r.loss,
        "heads": [{"layer": i, "head": h, "loss": loss, "delta": loss - r.loss} for i, h, loss in r.heads],
    }
