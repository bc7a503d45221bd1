"""Ordered target statistics (Prokhorenkova et al., "CatBoost: unbiased boosting with categorical features", 2018):
a categorical column read as the smoothed mean label of its level, where a training row sees only the rows before it
in one random order (no row sees its own label, so the statistic does not leak the target), and a prediction row
sees every training row. ``gbdt --method-opt categorical=target`` uses it."""

from __future__ import annotations

import numpy as np
import pandas as pd


def ordered_target_statistics(
    levels: np.ndarray,
    y: np.ndarray,
    order: np.ndarray,
    classes: list[int],
    prior: list[float],
    prior_weight: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For rows with integer ``levels`` and labels ``y``, visited in ``order`` (a permutation of the rows): each row's
    statistic per class k in ``classes``, (the number of earlier rows of its level labelled k + a * prior_k) /
    (the number of earlier rows of its level + a), with ``prior`` the classes' shares (of the whole training set)
    and a = ``prior_weight``.
    Returns (the statistics, rows x classes; the per-level label counts, levels x classes; the per-level counts),
    the last two for :func:`level_statistics`. Vectorised: a grouped cumulative sum over the rows in order."""
    levels, y = np.asarray(levels, dtype=np.int64), np.asarray(y)
    size = int(levels.max(initial=0)) + 1
    hit = np.stack([(y == k).astype(np.float64) for k in classes], 1)
    prior = np.asarray(prior, dtype=np.float64)
    frame = pd.DataFrame(hit[order], columns=range(len(classes)))
    grouped = frame.groupby(levels[order], sort=False)
    before = grouped.cumcount().to_numpy(np.float64)[:, None]
    earlier = grouped.cumsum().to_numpy() - hit[order]
    stats = np.empty_like(hit)
    stats[order] = (earlier + prior_weight * prior) / (before + prior_weight)
    sums = np.stack([np.bincount(levels, weights=hit[:, i], minlength=size) for i in range(len(classes))], 1)
    return stats, sums, np.bincount(levels, minlength=size).astype(np.float64)


def level_statistics(
    levels: np.ndarray, sums: np.ndarray, counts: np.ndarray, prior: list[float], prior_weight: float = 1.0
) -> np.ndarray:
    """A prediction row's statistic per class from every training row of its level: (label count + a * prior) /
    (count + a); a level training never saw reads as the prior."""
    levels = np.asarray(levels, dtype=np.int64)
    prior = np.asarray(prior, dtype=np.float64)
    out = np.tile(prior, (len(levels), 1))
    known = levels < len(counts)
    lv = levels[known]
    out[known] = (sums[lv] + prior_weight * prior) / (counts[lv, None] + prior_weight)
    return out
