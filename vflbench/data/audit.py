"""The leakage audit of a table (``vflbench audit``): three screens a referee runs before trusting a benchmark
(Kapoor & Narayanan 2023, "Leakage and the reproducibility crisis in ML-based science").

* **Each column alone.** Every source column the models read (its one-hot columns together) predicts the target by
  itself: a small gradient-boosted tree (scikit-learn's ``HistGradientBoostingClassifier``, depth 3, 30 rounds),
  3-fold stratified cross-validation on the training rows (a sample of at most ``sample`` rows), scored by AUROC: for
  a binary target its AUROC, for more classes the largest one-vs-rest AUROC (a column that singles out one class, such
  as a lab turnaround only an invalid test has, shows there; the class is named), beside the accuracy's lift over
  the majority class, (accuracy - majority) / (1 - majority). A column is *flagged* when it predicts far above the
  rest: AUROC 0.75 or more with at least twice the next column's margin over chance (0.5), or 0.97 or more (a near
  copy of the label). Several strong columns of one kind (a firm's size in sales, capital and employees) flag none:
  a benchmark's signal, not a leak; the rule looks for the column that stands apart. A column recorded after the
  outcome, or a proxy of the label, shows here.
* **Entities.** A column whose levels repeat (50 levels or more, 2 rows a level or more on average) and whose rows of
  one level share their target: each training row predicted by the most frequent target of the *other* rows of its
  level (leave one out). Flagged when that beats the majority rate by 0.3 of the remaining error or more: under a
  row-wise split the entity sits on both sides, and a model can memorise it. The fix is a grouped split (the table's
  ``group:``), or a reason the test rows are the same entities again.
* **Duplicates.** The share of test rows whose encoded features equal a training row's.

A flag is a question, not a verdict: each flagged column gets one sentence in its table's YAML (``audit:``, column ->
verdict: dropped, grouped, or kept and why), and ``results/audit`` lists the screens with the verdicts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

AUROC_ALONE, AUROC_APART = 0.97, 0.75  # flagged alone at this AUROC, or at this one with twice the next margin
ENTITY_LEVELS, ENTITY_ROWS, ENTITY_LIFT = 50, 2.0, 0.3


def _one_column_score(x: np.ndarray, y: np.ndarray, n_classes: int, majority: float, seed: int):
    """(AUROC, the class it is about (None for a binary target), accuracy lift over the majority), cross-validated."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(n_splits=3, shuffle=True, random_state=seed)
    proba = np.zeros((len(y), n_classes))
    for tr, te in folds.split(x, y):
        model = HistGradientBoostingClassifier(max_depth=3, max_iter=30, early_stopping=False, random_state=seed)
        model.fit(x[tr], y[tr])
        proba[np.ix_(te, model.classes_)] = model.predict_proba(x[te])
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
    out["next_alone"], out["flag_alone"] = _flag_alone(out["alone"].to_numpy())
    out["flag_entity"] = out["entity_lift"].fillna(-1) >= ENTITY_LIFT
    facts = {
        "rows_train": int(len(data.y_train)),
        "rows_test": int(len(data.y_test)),
        "classes": int(data.n_classes),
        "majority": majority,
        "metric_alone": "auroc" if data.n_classes == 2 else "largest one-vs-rest auroc",
        "duplicate_test_rows": duplicate_share(np.asarray(data.x_train), np.asarray(data.x_test)),
    }
    return out, facts


def _flag_alone(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the best other column's AUROC, flagged): far above the rest, at the lower bar with at least twice the next
    column's margin over chance, or at the near-copy bar whatever the rest."""
    nxt = np.array([np.delete(score, i).max() if len(score) > 1 else 0.5 for i in range(len(score))])
    apart = (score >= AUROC_APART) & (score - 0.5 >= 2 * np.maximum(nxt - 0.5, 0.0))
    return nxt, apart | (score >= AUROC_ALONE)


def duplicate_share(x_train: np.ndarray, x_test: np.ndarray) -> float:
    """The share of test rows whose features equal some training row's, exactly."""
    if len(x_test) == 0:
        return 0.0
    a, b = np.ascontiguousarray(x_train), np.ascontiguousarray(x_test)
    row = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    return float(np.isin(b.view(row).ravel(), a.view(row).ravel()).mean())
