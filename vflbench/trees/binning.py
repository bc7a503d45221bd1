"""Histogram binning of a party's own columns, on its own rows, before the first tree (XGBoost's ``hist``, FATE's and
SecretFlow's SecureBoost): no message is needed, and the cuts equal those of a central binning of the joined table
on the values that are present. Two binnings (:data:`BINNINGS`), both without sample weights (a feature party holds
no labels, so it cannot weight its values by class):

- ``quantile``: for feature j with at most ``max_bin`` distinct present values the cuts are the midpoints between
  consecutive values; otherwise the exact quantiles at 1/B .. (B-1)/B of the present values, duplicates dropped.
- ``sketch``: XGBoost's own quantile sketch of the present values (``QuantileDMatrix``'s cuts, without its bounds
  below the minimum and above the maximum): the cut sets of the ``gbdt`` reference, up to the class weights with
  which XGBoost weighs its sketch there.

A value's bin is the number of cuts at or below it: ``bin(x) = #{t : c_t <= x}``, so candidate split t sends
``x < c_t`` left (XGBoost's "value < split"). A missing cell (NaN, or a block the party does not hold) has the code
``max_bin``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Cuts:
    """Per feature its cuts ``values[j, :n_cuts[j]]`` (ascending; +inf beyond ``n_cuts[j]``) and the bin count B."""

    values: np.ndarray  # [d, B - 1] float64
    n_cuts: np.ndarray  # [d] int
    max_bin: int

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
            c = np.searchsorted(self.values[j, : self.n_cuts[j]], col, side="right")
            c[np.isnan(col)] = self.max_bin
            out[:, j] = c
        return out

    def threshold(self, j: int, t: int) -> float:
        """The value of candidate split ``t`` (1-based: rows with ``x < value`` go left) of feature ``j``."""
        return float(self.values[j, t - 1])


def fit_cuts(x: np.ndarray, max_bin: int, binning: str = "quantile") -> Cuts:
    """The cuts of every column of ``x`` [n, d] from its present (non-NaN) values, by the named binning."""
    if not 2 <= max_bin <= 65_535:
        raise ValueError(f"max_bin must be in [2, 65535], got {max_bin}")
    if binning not in BINNINGS:
        raise ValueError(f"unknown binning {binning!r}; known: {', '.join(BINNINGS)}")
    return BINNINGS[binning](np.asarray(x, dtype=np.float64), int(max_bin))


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
    if x.shape[0] == 0:
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
