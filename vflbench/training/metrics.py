"""Metric rules (LASER-VFL Appendix D and the authors' code; see METRICS.md).

Inputs are the concatenated per-predictor outputs of a method over the test set:
``preds``/``valid`` ``[P, n]``, optional positive-class ``scores`` ``[P, n]``, and ``counted`` ``[n]``.

* accuracy (%): each counted sample earns the mean correctness of the predictors that answer for it
  (LASER heads in O, Local models in O; exactly one for Combinatorial/SVFL/Ensemble/PlugVFL).
* F1: computed per predictor over the samples it answers, then combined by the method's rule:
  ``per_predictor_mean`` (LASER: unweighted mean over the K clients), ``per_predictor_nonzero``
  (Local, Combinatorial: mean over predictors whose F1 is not 0, i.e. the ones used), ``single``.
  Binary tasks use the positive class; multi-class tasks use macro-F1.
* AUPRC (binary tasks): average precision of the positive-class score, combined like F1.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, f1_score

from ..core.errors import VFLBenchError

F1_RULES = ("per_predictor_mean", "per_predictor_nonzero", "single")


def accuracy(preds: np.ndarray, valid: np.ndarray, counted: np.ndarray, y: np.ndarray) -> float:
    correct = (preds == y[None, :]) & valid
    n_valid = valid.sum(0)
    use = counted & (n_valid > 0)
    if not use.any():
        return float("nan")
    credit = correct.sum(0)[use] / n_valid[use]
    return 100.0 * float(credit.mean())


def _combine(values: list[float], rule: str) -> float:
    if rule not in F1_RULES:
        raise VFLBenchError(f"Unknown F1 rule '{rule}'. Choices: {', '.join(F1_RULES)}.")
    vals = [v for v in values if not np.isnan(v)]
    if rule == "per_predictor_nonzero":
        vals = [v for v in vals if v != 0.0]
    if not vals:
        return 0.0 if rule != "single" else float("nan")
    return float(np.mean(vals))


def f1(preds, valid, counted, y, rule: str, n_classes: int, positive_class: int | None = 1) -> float:
    per = []
    for p in range(preds.shape[0]):
        m = valid[p] & counted
        if not m.any():
            per.append(float("nan") if rule != "per_predictor_mean" else 0.0)
            continue
        if n_classes == 2:
            per.append(
                f1_score(
                    y[m],
                    preds[p, m],
                    pos_label=positive_class if positive_class is not None else 1,
                    average="binary",
                    zero_division=0,
                )
            )
        else:
            per.append(f1_score(y[m], preds[p, m], labels=np.arange(n_classes), average="macro", zero_division=0))
    return _combine(per, rule)


def auprc(scores, valid, counted, y, rule: str, positive_class: int | None = 1) -> float:
    pos = positive_class if positive_class is not None else 1
    per = []
    for p in range(scores.shape[0]):
        m = valid[p] & counted
        yy = y[m] == pos
        if not m.any() or yy.all() or not yy.any():
            per.append(float("nan"))
            continue
        per.append(average_precision_score(yy, scores[p, m]))
    return _combine(per, "single" if rule == "per_predictor_nonzero" else rule)


def compute_metrics(
    preds, valid, scores, counted, y, *, rule: str, n_classes: int, positive_class: int | None
) -> dict[str, float]:
    out = {
        "accuracy": accuracy(preds, valid, counted, y),
        "f1": 100.0 * f1(preds, valid, counted, y, rule, n_classes, positive_class),
        "n_counted": int((counted & valid.any(0)).sum()),
        "n_test": int(len(y)),
    }
    if scores is not None and n_classes == 2:
        out["auprc"] = 100.0 * auprc(scores, valid, counted, y, rule, positive_class)
    return out
