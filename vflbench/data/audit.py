"""The leakage audit of a table (``vflbench audit``): three screens a referee runs before trusting a benchmark
(Kapoor & Narayanan 2023, "Leakage and the reproducibility crisis in ML-based science").

* **Each column alone.** Every source column the models read (its one-hot columns together) predicts the target by
  itself: its values binned (each distinct value where there are 64 or fewer, else 32 quantile bins: a depth-5 tree on
  one column, in effect), each bin's class frequencies from the other folds of a 3-fold stratified cross-validation
  on the training rows (a sample of at most ``sample`` rows), scored by AUROC: for a binary target its AUROC, for
  more classes the largest one-vs-rest AUROC (a column that singles out one class, such as a lab turnaround only an
  invalid test has, shows there; the class is named), beside the accuracy's lift over the majority class,
  (accuracy - majority) / (1 - majority). A column is *flagged* when it predicts far above the rest: AUROC 0.75 or
  more with at least twice the next column's margin over chance (0.5), or, for a binary target, 0.97 or more (a near
  copy of the label). Several strong columns of one kind (a firm's size in sales, capital and employees) flag none:
  a benchmark's signal, not a leak; the rule looks for the column that stands apart. A column recorded after the
  outcome, or a proxy of the label, shows here.
* **Entities.** A column whose levels repeat (50 levels or more, 2 rows a level or more on average) and whose rows of
  one level share their target: each training row predicted by the most frequent target of the *other* rows of its
  level (leave one out). Flagged when that beats the majority rate by 0.3 of the remaining error or more, and by 0.25
  more than the column's value predicts as a quantity (its binned accuracy lift above): the level names the entity,
  not an amount (a discrete measurement, such as hours worked, is not flagged). Under a row-wise split the entity
  sits on both sides, and a model can memorise it. The fix is a grouped split (the table's
  ``group:``), or a reason the test rows are the same entities again.
* **Duplicates.** The share of test rows whose encoded features equal a training row's.

A flag is a question, not a verdict: each flagged column gets one sentence in its table's YAML (``audit:``, column ->
verdict: dropped, grouped, or kept and why), and ``results/audit`` lists the screens with the verdicts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

AUROC_ALONE, AUROC_APART = 0.97, 0.75  # flagged alone at this AUROC, or at this one with twice the next margin
ENTITY_LEVELS, ENTITY_ROWS, ENTITY_LIFT, ENTITY_OVER = 50, 2.0, 0.3, 0.25


BINS = 32  # a numeric column's quantile bins (a tree of depth 5 on one column, in effect)


def column_codes(x: np.ndarray) -> np.ndarray:
    """One column's values (several encoded columns: one source's one-hot columns) as integer codes: each distinct row
    of a few values (64 or fewer), else the column's quantile bin (``BINS``)."""
    if x.shape[1] > 1 or len(np.unique(x[:, 0])) <= 64:
        return np.unique(x, axis=0, return_inverse=True)[1].ravel()
    edges = np.unique(np.quantile(x[:, 0], np.linspace(0, 1, BINS + 1)[1:-1]))
    return np.searchsorted(edges, x[:, 0], side="right")


def _one_column_score(x: np.ndarray, y: np.ndarray, n_classes: int, majority: float, seed: int):
    """(AUROC, the class it is about (None for a binary target), accuracy lift over the majority), cross-validated:
    3 stratified folds, each held-out row given its code's class frequencies on the other folds (add-one smoothed)."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    codes = column_codes(x)
    n_codes = int(codes.max()) + 1
    proba = np.zeros((len(y), n_classes))
    for tr, te in StratifiedKFold(n_splits=3, shuffle=True, random_state=seed).split(codes, y):
        counts = np.zeros((n_codes, n_classes))
        np.add.at(counts, (codes[tr], y[tr]), 1.0)
        counts += np.bincount(y[tr], minlength=n_classes) / len(tr)  # add-one, spread as the classes' prior
        proba[te] = counts[codes[te]] / counts[codes[te]].sum(1, keepdims=True)
    acc = float((proba.argmax(1) == y).mean())
    lift = (acc - majority) / (1 - majority) if majority < 1 else 0.0
    if n_classes == 2:
        return float(roc_auc_score(y, proba[:, 1])), None, lift
    per = [roc_auc_score(y == c, proba[:, c]) if 0 < (y == c).sum() < len(y) else 0.5 for c in range(n_classes)]
    return float(max(per)), int(np.argmax(per)), lift


def entity_accuracy(levels: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out accuracy of predicting a row's class by the most frequent class among the other rows of its level
    (the overall majority class where its level has no other row; ties to the lowest class)."""
    _, inv = np.unique(levels, return_inverse=True)
    n_classes = int(y.max()) + 1
    counts = np.zeros((inv.max() + 1, n_classes))
    np.add.at(counts, (inv, y), 1)
    others = counts[inv]
    others[np.arange(len(y)), y] -= 1
    pred = others.argmax(1)
    alone = others.sum(1) == 0
    pred[alone] = np.bincount(y, minlength=n_classes).argmax()
    return float((pred == y).mean())


def audit_dataset(data, sample: int = 20_000, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """One row per source column of ``data`` (a loaded :class:`~vflbench.data.datasets.base.Dataset`): ``alone``
    (AUROC; 3+ classes: the largest one-vs-rest AUROC, of class ``alone_class``), ``alone_lift``, ``next_alone``,
    ``flag_alone``; for a repeated-level column ``levels``,
    ``rows_per_level``, ``entity_accuracy``, ``entity_lift``, ``flag_entity``. And the table's facts: rows, classes,
    majority share, duplicate test rows."""
    rng = np.random.default_rng(seed)
    X, y = np.asarray(data.x_train), np.asarray(data.y_train)
    if len(y) > sample:
        pick = np.sort(rng.choice(len(y), size=sample, replace=False))
        X, y = X[pick], y[pick]
    counts = np.bincount(y, minlength=data.n_classes)
    majority = float(counts.max() / counts.sum())
    sources = list(getattr(data, "feature_sources", None) or data.feature_names or [f"x{i}" for i in range(X.shape[1])])
    rows = []
    for src in dict.fromkeys(sources):
        cols = [i for i, s in enumerate(sources) if s == src]
        x = X[:, cols].astype(np.float64)
        auroc, cls, lift = _one_column_score(x, y, data.n_classes, majority, seed)
        row = {"column": src, "encoded_columns": len(cols), "alone": auroc, "alone_class": cls, "alone_lift": lift}
        if len(cols) == 1:
            levels = x[:, 0]
            n_levels = len(np.unique(levels))
            row.update(levels=n_levels, rows_per_level=len(levels) / max(n_levels, 1))
            if n_levels >= ENTITY_LEVELS and row["rows_per_level"] >= ENTITY_ROWS:
                acc = entity_accuracy(levels, y)
                row.update(entity_accuracy=100 * acc, entity_lift=(acc - majority) / (1 - majority))
        rows.append(row)
    out = pd.DataFrame(rows)
    for c in ("levels", "rows_per_level", "entity_accuracy", "entity_lift"):
        if c not in out:
            out[c] = np.nan
    out["next_alone"], out["flag_alone"] = _flag_alone(out["alone"].to_numpy(), data.n_classes == 2)
    memorised = out["entity_lift"].fillna(-1) - out["alone_lift"].clip(lower=0)
    out["flag_entity"] = (out["entity_lift"].fillna(-1) >= ENTITY_LIFT) & (memorised >= ENTITY_OVER)
    facts = {
        "rows_train": int(len(data.y_train)),
        "rows_test": int(len(data.y_test)),
        "classes": int(data.n_classes),
        "majority": majority,
        "metric_alone": "auroc" if data.n_classes == 2 else "largest one-vs-rest auroc",
        "duplicate_test_rows": duplicate_share(np.asarray(data.x_train), np.asarray(data.x_test)),
    }
    return out, facts


def _flag_alone(score: np.ndarray, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the best other column's AUROC, flagged): far above the rest, at the lower bar with at least twice the next
    column's margin over chance, or (a binary target) at the near-copy bar whatever the rest. With many classes one
    column often singles out one class (a spectral band, one spoken letter): only standing apart flags it there."""
    nxt = np.array([np.delete(score, i).max() if len(score) > 1 else 0.5 for i in range(len(score))])
    apart = (score >= AUROC_APART) & (score - 0.5 >= 2 * np.maximum(nxt - 0.5, 0.0))
    return nxt, apart | ((score >= AUROC_ALONE) & binary)


def duplicate_share(x_train: np.ndarray, x_test: np.ndarray) -> float:
    """The share of test rows whose features equal some training row's, exactly."""
    if len(x_test) == 0:
        return 0.0
    a, b = np.ascontiguousarray(x_train), np.ascontiguousarray(x_test)
    row = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    return float(np.isin(b.view(row).ravel(), a.view(row).ravel()).mean())
