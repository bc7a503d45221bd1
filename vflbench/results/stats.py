"""Which differences in a table are real: paired tests over seeds against each condition's best method,
Holm-corrected over the table, with 95% confidence intervals (``vflbench table --stats``), and the
critical-difference ranking across datasets and conditions (``vflbench plot cd``).

Every method of a sweep shares its seed's split, partition and masks (the named streams of
:mod:`vflbench.core.rng`), so the seeds pair the methods: a method is compared with the condition's best on
the seeds both ran. The test is scipy's paired t-test (``ttest_rel``) below 6 pairs and the Wilcoxon
signed-rank test (``wilcoxon``) from 6 on (with 5 or fewer pairs the signed-rank test cannot reach
p < 0.05 two-sided); the p-values of one table (one dataset and metric) are Holm-corrected together
(statsmodels' ``multipletests``). A method is *best* (the highest mean), *tied* with the best (Holm
p >= alpha) or *worse* (Holm p < alpha). The intervals are t intervals of each method's mean over its
seeds. The critical-difference diagram is autorank's (Friedman with Nemenyi's post-hoc test on the
conditions' means)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError

ALPHA = 0.05
WILCOXON_FROM = 6  # pairs: the signed-rank test from here on, the paired t-test below


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The t interval of the mean of ``values`` (a point when there is one value)."""
    from scipy import stats

    v = np.asarray(values, float)
    m = float(v.mean())
    if len(v) < 2:
        return m, m
    half = float(stats.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return m - half, m + half


def paired_p(a: np.ndarray, b: np.ndarray) -> tuple[float, str]:
    """Two-sided p-value of the paired difference ``a - b`` (seeds aligned) and the test's name."""
    from scipy import stats

    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) < 2:
        return float("nan"), "none (one seed)"
    if np.allclose(d, 0):
        return 1.0, "identical"
    if len(d) >= WILCOXON_FROM:
        return float(stats.wilcoxon(a, b).pvalue), "wilcoxon"
    if np.allclose(d, d[0]):  # a constant nonzero difference: the t statistic is infinite
        return 0.0, "paired t"
    return float(stats.ttest_rel(a, b).pvalue), "paired t"


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment (statsmodels), NaN kept where there was no test."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p, float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=ALPHA, method="holm")[1]
    return out.tolist()


def compare(raw: pd.DataFrame, agg: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``agg`` (one row per dataset, metric, method, train and test; :func:`vflbench.results.report.aggregate`) with
    ``ci_low``/``ci_high``, the paired test against the condition's best (``test``, ``n_pairs``, ``p``,
    ``p_holm``; Holm over each dataset and metric) and ``verdict`` (best | tied | worse | untested)."""
    rows = []
    for _, r in agg.iterrows():
        h = raw[
            (raw["dataset"] == r["dataset"])
            & (raw["metric"] == r["metric"])
            & (raw["method"] == r["method"])
            & (raw["train_missing"] == r["train_missing"])
            & (raw["test_missing"] == r["test_missing"])
        ].drop_duplicates(subset=["seed"], keep="last")
        rows.append(h.set_index("seed")["value"].astype(float))
    out = agg.copy().reset_index(drop=True)
    lo, hi = zip(*(t_interval(s.to_numpy()) for s in rows), strict=True) if rows else ((), ())
    out["ci_low"], out["ci_high"] = list(lo), list(hi)
    out["test"], out["n_pairs"], out["p"] = "", 0, np.nan
    out["verdict"] = ""
    for _, g in out.groupby(["dataset", "metric", "train_missing", "test_missing"], sort=False):
        best = g["mean"].idxmax()
        out.loc[best, "verdict"] = "best"
        for i in g.index:
            if i == best:
                continue
            both = rows[i].index.intersection(rows[best].index)
            p, test = paired_p(rows[best][both].to_numpy(), rows[i][both].to_numpy())
            out.loc[i, ["p", "test", "n_pairs"]] = [p, test, len(both)]
    out["p_holm"] = np.nan
    for _, g in out.groupby(["dataset", "metric"], sort=False):
        out.loc[g.index, "p_holm"] = holm(g["p"].tolist())
    untested = out["p_holm"].isna() & (out["verdict"] != "best")
    out.loc[untested, "verdict"] = "untested"
    out.loc[~untested & (out["verdict"] != "best"), "verdict"] = np.where(
        out.loc[~untested & (out["verdict"] != "best"), "p_holm"] < alpha, "worse", "tied"
    )
    return out


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
        pre + "Significantly best (every other method worse, paired test over seeds, Holm over the table, "
        f"alpha {ALPHA}): " + ", ".join(parts) + ".",
        pre + "Cells: mean [95% t interval]; = tied with the best, ↓ significantly worse, ? untested (one seed).",
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
