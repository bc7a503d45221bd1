"""Which differences in a table are real: paired tests over seeds (splits) against each condition's best method,
Holm-corrected over the table, with a practical margin and 95% confidence intervals (``vflbench table --stats``),
and the critical-difference ranking across datasets and conditions (``vflbench plot cd``).

Every method of a sweep shares its seed's split, partition and masks (the named streams of
:mod:`vflbench.core.rng`), so the seeds pair the methods: a method is compared with the condition's best on
the seeds both ran. The test is the corrected resampled t-test of Nadeau & Bengio (2003, Machine Learning 52;
Bouckaert & Frank 2004): over R paired differences d, t = mean(d) / sqrt((1/R + n_test/n_train) var(d)), R - 1
degrees of freedom. The plain paired t-test ignores that repeated splits share rows and is anti-conservative; on a
split that does not move with the seed the correction is conservative. A gap counts only when it is both
significant and practical (a region of practical equivalence, Benavoli et al. 2017, JMLR 18): a mean gap inside
+-``MARGIN`` points (x 100) is a tie however consistent it is, and a constant gap (no variance: the test is
undefined) is decided by the margin alone. One seed is *not tested*, never a tie. The p-values of one table (one
dataset and metric) are Holm-corrected together (statsmodels' ``multipletests``). A method is *best* (the
highest mean), *tied* with the best or *worse* (Holm p < alpha and at least ``MARGIN`` below). The intervals are t
intervals of each method's mean over its seeds. The critical-difference diagram is autorank's (Friedman with
Nemenyi's post-hoc test on the conditions' means; three methods or more)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError

ALPHA = 0.05
MARGIN = 0.5  # points (metric x 100): a mean gap inside +-MARGIN is a tie, however consistent (practical equivalence)
TEST_OVER_TRAIN = 0.25  # n_test / n_train where a result does not say (an 80/20 split)


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The t interval of the mean of ``values`` (a point when there is one value)."""
    from scipy import stats

    v = np.asarray(values, float)
    m = float(v.mean())
    if len(v) < 2:
        return m, m
    half = float(stats.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return m - half, m + half


def paired_p(a: np.ndarray, b: np.ndarray, test_over_train: float = TEST_OVER_TRAIN) -> tuple[float, str]:
    """Two-sided p-value of the paired difference ``a - b`` (seeds aligned) by the corrected resampled t-test
    (Nadeau & Bengio 2003): t = mean(d) / sqrt((1/R + n_test/n_train) var(d, ddof=1)), R - 1 degrees of freedom;
    and the test's name. One pair: NaN ("none (one seed)"). No variance: the test is undefined, p is 0 for a nonzero
    constant gap and 1 for none, and :func:`decide`'s margin settles it."""
    from scipy import stats

    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) < 2:
        return float("nan"), "none (one seed)"
    if np.allclose(d, 0, rtol=0, atol=1e-12):
        return 1.0, "identical"
    if np.allclose(d, d[0], rtol=0, atol=1e-12):  # the t statistic is infinite: the margin decides
        return 0.0, "constant gap"
    if not test_over_train > 0:
        raise VFLBenchError(f"n_test / n_train must be positive, got {test_over_train}.")
    t = d.mean() / np.sqrt((1 / len(d) + test_over_train) * d.var(ddof=1))
    return float(2 * stats.t.sf(abs(t), len(d) - 1)), "corrected t"


def decide(gap: float, p_holm: float, n: int, margin: float = MARGIN, alpha: float = ALPHA) -> str:
    """A paired comparison's verdict: ``win`` when the mean gap is at least ``margin`` points and the (Holm) p below
    ``alpha``, ``loss`` symmetrically, ``tie`` otherwise; ``not tested`` with fewer than two seeds."""
    if n < 2 or np.isnan(p_holm):
        return "not tested"
    if p_holm < alpha and abs(gap) >= margin:
        return "win" if gap > 0 else "loss"
    return "tie"


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment (statsmodels), NaN kept where there was no test."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p, float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=ALPHA, method="holm")[1]
    return out.tolist()


def compare(raw: pd.DataFrame, agg: pd.DataFrame, alpha: float = ALPHA, margin: float = MARGIN) -> pd.DataFrame:
    """``agg`` (one row per dataset, metric, method, train and test; :func:`vflbench.results.report.aggregate`) with
    ``ci_low``/``ci_high``, the paired test against the condition's best (``test``, ``n_pairs``, ``p``,
    ``p_holm``; Holm over each dataset and metric) and ``verdict`` (best | tied | worse | untested): worse needs Holm
    p < ``alpha`` and a gap of at least ``margin`` points (a metric in [0, 1] is read x 100)."""
    rows, ratios = [], []
    for _, r in agg.iterrows():
        h = raw[
            (raw["dataset"] == r["dataset"])
            & (raw["metric"] == r["metric"])
            & (raw["method"] == r["method"])
            & (raw["train_missing"] == r["train_missing"])
            & (raw["test_missing"] == r["test_missing"])
        ].drop_duplicates(subset=["seed"], keep="last")
        rows.append(h.set_index("seed")["value"].astype(float))
        ratios.append(test_over_train(h))
    out = agg.copy().reset_index(drop=True)
    lo, hi = zip(*(t_interval(s.to_numpy()) for s in rows), strict=True) if rows else ((), ())
    out["ci_low"], out["ci_high"] = list(lo), list(hi)
    out["test"], out["n_pairs"], out["p"], out["gap"] = "", 0, np.nan, np.nan
    out["verdict"] = ""
    for _, g in out.groupby(["dataset", "metric", "train_missing", "test_missing"], sort=False):
        best = g["mean"].idxmax()
        out.loc[best, "verdict"] = "best"
        for i in g.index:
            if i == best:
                continue
            both = rows[i].index.intersection(rows[best].index)
            p, test = paired_p(rows[best][both].to_numpy(), rows[i][both].to_numpy(), ratios[i])
            out.loc[i, ["p", "test", "n_pairs"]] = [p, test, len(both)]
            gap = float((rows[best][both] - rows[i][both]).mean()) if len(both) else float("nan")
            out.loc[i, "gap"] = gap
    out["p_holm"] = np.nan
    for _, g in out.groupby(["dataset", "metric"], sort=False):
        out.loc[g.index, "p_holm"] = holm(g["p"].tolist())
    untested = out["p_holm"].isna() & (out["verdict"] != "best")
    out.loc[untested, "verdict"] = "untested"
    rest = ~untested & (out["verdict"] != "best")
    margins = out.loc[rest, "metric"].map(lambda m: margin if in_points(m) else 0.0)
    worse = (out.loc[rest, "p_holm"] < alpha) & (out.loc[rest, "gap"] >= margins)
    out.loc[rest, "verdict"] = np.where(worse, "worse", "tied")
    return out


def in_points(metric: str) -> bool:
    """A metric recorded in points (x 100: accuracy, F1, AUPRC and their validation, screened and exact variants),
    where the practical margin applies; other metrics (bytes, epsilons, attack scores) are compared without one."""
    from ..core.metrics import METRICS

    base = str(metric).split("@", 1)[0]
    base = base[4:] if base.startswith("val_") else base
    return base in METRICS


def test_over_train(rows: pd.DataFrame) -> float:
    """n_test / n_train of a method's runs where the rows say (``n_test`` and ``n_train`` columns), else
    :data:`TEST_OVER_TRAIN`: the corrected t-test's share of the training rows that a test set adds."""
    if "n_test" in rows and "n_train" in rows:
        r = pd.to_numeric(rows["n_test"], errors="coerce") / pd.to_numeric(rows["n_train"], errors="coerce")
        r = r[np.isfinite(r) & (r > 0)]
        if len(r):
            return float(r.median())
    return TEST_OVER_TRAIN


def verdict_lines(g: pd.DataFrame, fmt: str) -> list[str]:
    """Per method: in how many conditions it is significantly best (best, and every other method
    significantly worse), and in how many it is best or tied with the best."""
    from .verdicts import display, method_order

    conds = list(g.groupby(["train_missing", "test_missing"], sort=False))
    parts = []
    for m in method_order(g["method"]):
        wins = ties = 0
        for _, c in conds:
            r = c[c["method"] == m]
            if r.empty:
                continue
            v = r.iloc[0]["verdict"]
            others = c[c["method"] != m]["verdict"]
            if v == "best" and (others == "worse").all():
                wins += 1
            elif v in ("best", "tied"):
                ties += 1
        parts.append(f"{display(m)} {wins}/{len(conds)} ({ties} more best or tied, not significantly)")
    pre = "" if fmt == "md" else "% "
    return [
        pre + "Significantly best (every other method worse: corrected resampled t-test over seeds, Holm over the "
        f"table, alpha {ALPHA}, and at least {MARGIN} points behind): " + ", ".join(parts) + ".",
        pre + f"Cells: mean [95% t interval]; = tied with the best (not significant, or within {MARGIN} points), "
        "↓ significantly worse, ? untested (one seed).",
    ]


def stats_cell(r, fmt: str) -> str:
    mark = {"best": "", "tied": " =", "worse": " ↓", "untested": " ?"}.get(r["verdict"], "")
    txt = f"{r['mean']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]{mark}"
    if r["verdict"] == "best":
        txt = f"**{txt}**" if fmt == "md" else f"\\textbf{{{txt}}}"
    return txt


def critical_difference(conditions: pd.DataFrame, out: Path, alpha: float = ALPHA) -> tuple[list[Path], str]:
    """``conditions``: one row per condition (dataset x train x test), one column per method (its mean over
    seeds). Friedman + Nemenyi (autorank) and its critical-difference diagram as PNG and PDF; returns the
    paths and autorank's one-paragraph report."""
    import matplotlib

    matplotlib.use("Agg")
    import contextlib
    import io

    import matplotlib.pyplot as plt
    from autorank import autorank, create_report, plot_stats

    data = conditions.dropna(axis=1, how="any")
    if data.shape[1] < 2:
        raise VFLBenchError("A critical-difference diagram compares at least two methods over the same conditions.")
    if data.shape[0] < 5:
        raise VFLBenchError(
            f"A critical-difference diagram needs at least 5 conditions (datasets x settings; autorank's minimum); "
            f"these results have {data.shape[0]}. Give more results folders."
        )
    with contextlib.redirect_stdout(io.StringIO()):
        res = autorank(data, alpha=alpha, verbose=False, force_mode="nonparametric", order="descending")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        create_report(res)
    ax = plot_stats(res, allow_insignificant=True)
    fig = ax.get_figure() if ax is not None else plt.gcf()
    paths = []
    for ext in (".png", ".pdf"):
        p = out.with_suffix(ext)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, bbox_inches="tight", dpi=150)
        paths.append(p)
    plt.close(fig)
    return paths, buf.getvalue().strip()
