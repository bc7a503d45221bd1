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

from .errors import VFLBenchError

F1_RULES = ("per_predictor_mean", "per_predictor_nonzero", "single")
# every run's test metrics, in points (x 100); balanced accuracy where the target has more than two classes
METRICS = ("accuracy", "f1", "auprc", "balanced_accuracy")


def _credit(preds: np.ndarray, valid: np.ndarray, counted: np.ndarray, y: np.ndarray):
    """(each scored sample's credit: the mean correctness of the predictors that answer it, which samples are scored:
    counted and answered by one predictor or more)."""
    correct = (preds == y[None, :]) & valid
    n_valid = valid.sum(0)
    use = counted & (n_valid > 0)
    return correct.sum(0)[use] / np.maximum(n_valid[use], 1), use


def accuracy(preds: np.ndarray, valid: np.ndarray, counted: np.ndarray, y: np.ndarray) -> float:
    credit, use = _credit(preds, valid, counted, y)
    return 100.0 * float(credit.mean()) if use.any() else float("nan")


def balanced_accuracy(preds: np.ndarray, valid: np.ndarray, counted: np.ndarray, y: np.ndarray) -> float:
    """Accuracy's credit (each counted sample the mean correctness of the predictors that answer it) averaged within
    each true class, then over the classes present (%): scikit-learn's ``balanced_accuracy_score`` for one answering
    predictor a sample. A 90%-majority target scored by accuracy cannot tell methods apart; this can."""
    credit, use = _credit(preds, valid, counted, y)
    if not use.any():
        return float("nan")
    yu = y[use]
    return 100.0 * float(np.mean([credit[yu == c].mean() for c in np.unique(yu)]))


def _combine(values: list[float], rule: str) -> float:
    if rule not in F1_RULES:
        raise VFLBenchError(f"Unknown F1 rule '{rule}'. Choices: {', '.join(F1_RULES)}.")
    vals = [v for v in values if not np.isnan(v)]
    if rule == "per_predictor_nonzero":
        vals = [v for v in vals if v != 0.0]
    if not vals:
        return 0.0 if rule != "single" else float("nan")
    return float(np.mean(vals))


def f1_score(y: np.ndarray, pred: np.ndarray, labels: list[int]) -> float:
    """F1 of ``labels`` (one: binary, its positive class; several: their unweighted mean, macro-F1), zero where a
    label is neither true nor predicted. The arithmetic of scikit-learn's ``f1_score(..., zero_division=0)``
    (2 tp / (true + predicted) in float64, then ``np.nanmean``) without importing it at every run's start:
    ``tests/test_metrics.py`` checks the two equal bit for bit."""
    f = np.empty(len(labels), dtype=np.float64)
    for i, c in enumerate(labels):
        t, p = y == c, pred == c
        tp, denom = float(np.sum(t & p)), float(np.sum(t)) + float(np.sum(p))
        f[i] = 2.0 * tp / denom if denom != 0 else 0.0
    return float(np.nanmean(f))


def average_precision_score(y_true: np.ndarray, score: np.ndarray) -> float:
    """Average precision (the step integral of the precision-recall curve) of binary truth ``y_true`` and scores:
    the arithmetic of scikit-learn's ``average_precision_score`` (thresholds at the distinct scores, float64
    counts), bit for bit (``tests/test_metrics.py``), without its import."""
    order = np.argsort(-np.asarray(score), kind="stable")
    s, t = np.asarray(score)[order], np.asarray(y_true)[order].astype(np.float64)
    idx = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tps = np.cumsum(t, dtype=np.float64)[idx]
    fps = 1 + idx.astype(np.float64) - tps
    ps = tps + fps
    precision = np.where(ps != 0, np.divide(tps, ps, out=np.zeros_like(tps), where=ps != 0), 0.0)
    recall = tps / tps[-1]
    precision = np.concatenate((np.flip(precision), [1.0]))
    recall = np.concatenate((np.flip(recall), [0.0]))
    return float(max(0.0, -np.sum(np.diff(recall) * precision[:-1])))


def f1(preds, valid, counted, y, rule: str, n_classes: int, positive_class: int | None = 1) -> float:
    per = []
    for p in range(preds.shape[0]):
        m = valid[p] & counted
        if not m.any():
            per.append(float("nan") if rule != "per_predictor_mean" else 0.0)
            continue
        if n_classes == 2:
            per.append(f1_score(y[m], preds[p, m], [positive_class if positive_class is not None else 1]))
        else:
            per.append(f1_score(y[m], preds[p, m], list(range(n_classes))))
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
    if n_classes > 2:
        out["balanced_accuracy"] = balanced_accuracy(preds, valid, counted, y)
    return out
