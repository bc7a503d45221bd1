"""CatBoost's ordered target statistics (gbdt --method-opt categorical=target) against a plain loop over the rows."""

from __future__ import annotations

import numpy as np

from vflbench.trees.target_statistics import level_statistics, ordered_target_statistics


def _loop(levels, y, order, classes, prior, a):
    """The definition, row by row: what the rows before this one in the order, of its level, say of each class."""
    out = np.zeros((len(y), len(classes)))
    seen: dict[int, list[int]] = {}
    for r in order:
        earlier = seen.setdefault(int(levels[r]), [])
        for i, k in enumerate(classes):
            out[r, i] = (sum(1 for e in earlier if y[e] == k) + a * prior[i]) / (len(earlier) + a)
        earlier.append(r)
    return out


def test_ordered_statistics_are_the_earlier_rows_of_the_level_and_never_the_row_itself():
    rng = np.random.default_rng(3)
    for classes in ([1], [0, 1, 2]):
        n = 400
        levels = rng.integers(0, 30, n)
        y = rng.integers(0, len(classes) if len(classes) > 1 else 2, n)
        order = rng.permutation(n)
        prior = [float(np.mean(y == k)) for k in classes]
        stats, sums, counts = ordered_target_statistics(levels, y, order, classes, prior, 1.0)
        np.testing.assert_allclose(stats, _loop(levels, y, order, classes, prior, 1.0), rtol=0, atol=1e-12)
        first = order[np.unique(levels[order], return_index=True)[1]]  # each level's first row: the prior alone
        np.testing.assert_allclose(stats[first], np.tile(prior, (len(first), 1)))
        # flipping a row's own label leaves its own statistic unchanged (it never sees itself)
        y2 = y.copy()
        r = order[-1]
        y2[r] = (y[r] + 1) % max(2, len(classes))
        s2, _, _ = ordered_target_statistics(levels, y2, order, classes, prior, 1.0)
        np.testing.assert_array_equal(s2[r], stats[r])
        # prediction reads every training row of the level; a level never seen reads as the prior
        test = np.array([levels[0], 99])
        got = level_statistics(test, sums, counts, prior, 1.0)
        mates = levels == levels[0]
        want = [(np.sum(y[mates] == k) + prior[i]) / (mates.sum() + 1.0) for i, k in enumerate(classes)]
        np.testing.assert_allclose(got[0], want)
        np.testing.assert_allclose(got[1], prior)
