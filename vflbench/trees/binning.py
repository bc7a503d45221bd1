"""Histogram binning of a party's own columns, on its own rows, before the first tree (XGBoost's ``hist``, FATE's and
SecretFlow's SecureBoost): no message is needed, and the cuts equal those of a central binning of the joined table
on the values that are present. Two binnings (:data:`BINNINGS`), both without sample weights (a feature party holds
no labels, so it cannot weight its values by class):

- ``quantile``: for feature j with at most ``max_bin`` distinct present values the cuts are the midpoints between
  consecutive values; otherwise the exact quantiles at 1/B .. (B-1)/B of the present values, duplicates dropped.
- ``sketch`` (the default): XGBoost's own quantile sketch of the present values (``QuantileDMatrix``'s cuts,
  without its bounds below the minimum and above the maximum): the cut sets of the ``gbdt`` reference, up to the class
  weights with which XGBoost weighs its sketch there. As in XGBoost, the cuts depend on the order of the rows (a party
  bins its rows in the aligned order) and are approximate beyond ``max_bin`` distinct values.

A value's bin is the number of cuts at or below it: ``bin(x) = #{t : c_t <= x}``, so candidate split t sends
``x < c_t`` left (XGBoost's "value < split"). A missing cell (NaN, or a block the party does not hold) has the code
``max_bin``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# the binning of `secureboost` and of the central algorithm unless one is named: the cut sets of the `gbdt` reference
# as nearly as a feature party can propose them (docs/TREES.md, "Binning")
DEFAULT_BINNING = "sketch"


@dataclass
class Cuts:
    """Per feature its cuts ``values[j, :n_cuts[j]]`` (ascending; +inf beyond ``n_cuts[j]``) and the bin count B.

    A categorical column j (an embedded column's codes, code 0 a missing cell) has no cuts: its bins are levels,
    ``levels[j]`` (ascending) in bins 0 .. L-1, and with ``other[j]`` the levels beyond the B - 1 most frequent share
    the last bin; a level seen in neither is a missing cell. Its ``n_cuts`` is its bins less one (the candidates of
    a partition split, whose left side is a set of bins: vflbench.trees.booster.best_splits)."""

    values: np.ndarray  # [d, B - 1] float64
    n_cuts: np.ndarray  # [d] int
    max_bin: int
    levels: dict[int, np.ndarray] = field(default_factory=dict)  # categorical column -> its levels with a bin
    other: dict[int, bool] = field(default_factory=dict)  # categorical column -> whether its last bin is "other"

    @property
    def missing(self) -> int:
        """The code of a missing cell."""
        return self.max_bin

    def codes(self, x: np.ndarray) -> np.ndarray:
        """``x`` [n, d] (NaN = missing) as bin codes [n, d] (uint8 up to 255 bins, else uint16; missing = B)."""
        x = np.asarray(x, dtype=np.float64)
        dtype = np.uint8 if self.max_bin < 255 else np.uint16
        out = np.empty(x.shape, dtype=dtype)
        for j in range(x.shape[1]):
            col = x[:, j]
            if j in self.levels:
                lv = self.levels[j]
                at = np.minimum(np.searchsorted(lv, col), max(len(lv) - 1, 0))
                found = (lv[at] == col) if len(lv) else np.zeros(len(col), dtype=bool)
                c = np.where(found, at, len(lv) if self.other.get(j) else self.max_bin)
                c[np.isnan(col) | (col == 0)] = self.max_bin
            else:
                c = np.searchsorted(self.values[j, : self.n_cuts[j]], col, side="right")
                c[np.isnan(col)] = self.max_bin
            out[:, j] = c
        return out

    @property
    def categorical(self) -> np.ndarray:
        """[d] bool: which columns are binned by level."""
        out = np.zeros(len(self.n_cuts), dtype=bool)
        out[list(self.levels)] = True
        return out

    def threshold(self, j: int, t: int) -> float:
        """The value of candidate split ``t`` (1-based: rows with ``x < value`` go left) of feature ``j``."""
        return float(self.values[j, t - 1])


def fit_cuts(x: np.ndarray, max_bin: int, binning: str = DEFAULT_BINNING, categorical=(), cat_bins: int = 0) -> Cuts:
    """The cuts of every column of ``x`` [n, d] from its present (non-NaN) values, by the named binning, in at most
    ``max_bin`` bins; the ``categorical`` columns (codes, 0 a missing cell) by level, in at most ``cat_bins`` bins
    (0: ``max_bin``). The cuts' ``max_bin`` is the wider of ``max_bin`` and ``cat_bins``: the code of a missing cell."""
    if not 2 <= max_bin <= 65_535:
        raise ValueError(f"max_bin must be in [2, 65535], got {max_bin}")
    if binning not in BINNINGS:
        raise ValueError(f"unknown binning {binning!r}; known: {', '.join(BINNINGS)}")
    x = np.asarray(x, dtype=np.float64)
    categorical = sorted(int(j) for j in categorical)
    numeric = [j for j in range(x.shape[1]) if j not in set(categorical)]
    part = BINNINGS[binning](x[:, numeric], int(max_bin))
    width = max(int(max_bin), int(cat_bins))  # every party's codes the same width: the label party's histograms
    cat_bins = int(cat_bins or max_bin)
    cuts = Cuts(np.full((x.shape[1], width - 1), np.inf), np.zeros(x.shape[1], dtype=np.int64), width)
    cuts.values[numeric, : max_bin - 1], cuts.n_cuts[numeric] = part.values, part.n_cuts
    max_bin = cat_bins
    for j in categorical:
        col = x[:, j]
        col = col[~np.isnan(col) & (col != 0)]
        lv, counts = np.unique(col, return_counts=True)
        other = len(lv) > max_bin
        if other:  # the B - 1 most frequent levels (ties: the lower code) keep a bin; the rest share the last
            keep = np.lexsort((lv, -counts))[: max_bin - 1]
            lv = np.sort(lv[keep])
        cuts.levels[j], cuts.other[j] = lv, bool(other)
        cuts.n_cuts[j] = max(len(lv) + int(other) - 1, 0)
    return cuts


def quantile_cuts(x: np.ndarray, max_bin: int) -> Cuts:
    """Midpoints between the present values up to ``max_bin`` of them, else their exact quantiles."""
    d = x.shape[1]
    values = np.full((d, max_bin - 1), np.inf)
    n_cuts = np.zeros(d, dtype=np.int64)
    qs = np.arange(1, max_bin) / max_bin
    for j in range(d):
        col = x[:, j]
        col = col[~np.isnan(col)]
        if col.size == 0:
            continue
        uniq = np.unique(col)
        if uniq.size <= max_bin:
            c = (uniq[:-1] + uniq[1:]) / 2.0
        else:
            c = np.unique(np.quantile(col, qs, method="linear"))
            c = c[c > uniq[0]]  # a cut at or below the minimum leaves its left side empty
        values[j, : c.size] = c
        n_cuts[j] = c.size
    return Cuts(values, n_cuts, int(max_bin))


def sketch_cuts(x: np.ndarray, max_bin: int) -> Cuts:
    """XGBoost's quantile sketch of the present values (unweighted; the same cuts for any thread count)."""
    import xgboost as xgb  # the trees extra's library; imported here so that `quantile` runs without it

    d = x.shape[1]
    values = np.full((d, max_bin - 1), np.inf)
    n_cuts = np.zeros(d, dtype=np.int64)
    if x.shape[0] == 0 or d == 0:
        return Cuts(values, n_cuts, int(max_bin))
    ptr, cut_values = xgb.QuantileDMatrix(x, missing=np.nan, max_bin=max_bin, nthread=1).get_quantile_cut()
    present = ~np.isnan(x)
    for j in range(d):
        if not present[:, j].any():
            continue
        col = x[present[:, j], j]
        c = cut_values[ptr[j] : ptr[j + 1]].astype(np.float64)
        c = c[(c > col.min()) & (c <= col.max())]  # XGBoost's bounds below the minimum and above the maximum
        values[j, : c.size] = c
        n_cuts[j] = c.size
    return Cuts(values, n_cuts, int(max_bin))


BINNINGS = {"quantile": quantile_cuts, "sketch": sketch_cuts}
