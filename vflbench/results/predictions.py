"""A run's test predictions, one answer per test sample and test setting (``vflbench run --save-model`` writes
``predictions.csv``; ``vflbench serve`` answers with the same rule, so a served prediction can be checked against the
saved one).

A method with one predictor answers with it (its prediction and its positive-class score). A method with one
predictor per party (LASER-VFL's heads, Local's parties) answers with all of its valid predictors: for two classes
the mean of their positive-class scores, predicted positive from 0.5; for more classes their vote (ties to the
lowest class). A sample that no predictor answers for
(every block missing) is predicted -1 with no score.
"""

from __future__ import annotations

import numpy as np

COLUMNS = ("row", "test_missing", "predicted", "score", "predictors")


def answers(
    preds: np.ndarray, valid: np.ndarray, scores: np.ndarray | None, n_classes: int, positive: int | None = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(predicted [B], score [B] (NaN without one), predictors [B])`` from per-predictor ``preds``, ``valid`` [P, B]
    and ``scores`` [P, B] (positive-class scores, two classes) or None."""
    valid = np.asarray(valid, dtype=bool)
    n = valid.sum(0)
    if preds.shape[0] == 1:  # one predictor: its own answer
        score = np.full(valid.shape[1], np.nan) if scores is None else np.asarray(scores[0], dtype=np.float64)
        return np.where(n > 0, preds[0], -1), np.where(n > 0, score, np.nan), n
    if scores is not None and n_classes == 2:
        s = np.where(valid, scores, 0.0).sum(0) / np.maximum(n, 1)
        pos = 1 if positive is None else int(positive)
        pred = np.where(s >= 0.5, pos, 1 - pos)
        return np.where(n > 0, pred, -1), np.where(n > 0, s, np.nan), n
    votes = np.zeros((n_classes, valid.shape[1]), dtype=np.int64)
    for p in range(preds.shape[0]):
        np.add.at(votes, (np.clip(preds[p], 0, n_classes - 1), np.arange(valid.shape[1])), valid[p].astype(np.int64))
    pred = votes.argmax(0)
    score = (
        np.full(valid.shape[1], np.nan) if scores is None else np.where(valid, scores, 0.0).sum(0) / np.maximum(n, 1)
    )
    return np.where(n > 0, pred, -1), np.where(n > 0, score, np.nan), n
