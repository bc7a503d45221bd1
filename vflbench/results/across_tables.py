"""Conclusions across tables (``vflbench rank RESULTS``): a suite's methods ranked over its tables, as Demšar (2006)
ranks over datasets, and each method set against a reference method (the practitioner's yardstick, ``xgboost``).

Each table is scored on one metric, the yardstick's: AUPRC for a binary target; for more classes accuracy, or balanced
accuracy where the largest class holds 90% of the rows or more (accuracy cannot separate methods there); x 100.
Per condition (training x test missingness):

* **ranks**: per table each method's mean over seeds, ranked (1 = best, ties averaged); each method's mean rank over
  the tables where every ranked method ran; Friedman's test over those tables (scipy); a critical-difference diagram
  (autorank: Friedman and Nemenyi, :func:`vflbench.results.stats.critical_difference`) when there are 5+ tables;
* **against the reference**: per table the paired differences over seeds (every method shares a seed's split,
  partition and masks), a win or a loss when the paired test says p < 0.05 (:func:`vflbench.results.stats.paired_p`)
  and a tie otherwise; the win/tie/loss counts, and the median over tables of the mean gap in points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from .stats import ALPHA, MARGIN, decide, holm, paired_p, test_over_train

REFERENCE = "xgboost"


MAJORITY = 0.9  # a target whose largest class holds this share of the training rows: accuracy separates nothing


def scores(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, method, train, test, seed) with its table's metric: ``value`` x 100, and ``metric``
    (auprc where the table's target is binary, i.e. where AUPRC was recorded; for more classes balanced accuracy
    where the largest class holds MAJORITY of the rows or more (column ``majority``, from the manifests) and it was
    recorded; accuracy otherwise)."""
    df = df[df["status"].fillna("ok") == "ok"] if "status" in df else df
    if "epochs" in df and "epoch" not in df:
        df = df.rename(columns={"epochs": "epoch"})
    if "epoch" in df:  # a run's final evaluation only (budget rows are earlier epochs)
        last = df.groupby("run_id")["epoch"].transform("max")
        df = df[df["epoch"] == last]
    metric_of = table_metrics(df)
    df = with_wrong_blocks(df)
    screened = df[df["metric"] == df["dataset"].map(metric_of) + "@screen"].copy()  # --screen: a variant of its method
    screened["method"], screened["metric"] = screened["method"] + "+screen", screened["metric"].str[: -len("@screen")]
    keep = pd.concat([df[df["metric"] == df["dataset"].map(metric_of)], screened])
    sizes = [c for c in ("n_train", "n_test", "majority") if c in keep]  # n_test / n_train: the corrected t-test
    out = keep[["dataset", "method", "train_missing", "test_missing", "seed", "metric", "value", *sizes]].copy()
    out["value"] = out["value"].astype(float)
    return out.drop_duplicates(["dataset", "method", "train_missing", "test_missing", "seed"])


def table_metrics(df: pd.DataFrame) -> dict[str, str]:
    """Each table's metric: auprc where recorded (a binary target); balanced_accuracy where the largest class holds
    MAJORITY of the rows or more and it was recorded; accuracy otherwise."""
    recorded = df[df["value"].notna()].groupby("dataset")["metric"].agg(set)
    majority = df.groupby("dataset")["majority"].max() if "majority" in df else pd.Series(dtype=float)
    out = {}
    for d in df["dataset"].unique():
        has = recorded.get(d, set())
        if "auprc" in has:
            out[d] = "auprc"
        elif majority.get(d, 0.0) >= MAJORITY and "balanced_accuracy" in has:
            out[d] = "balanced_accuracy"
        else:
            out[d] = "accuracy"
    return out


def with_wrong_blocks(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of runs with blocks present but wrong (vflbench.data.wrong_blocks) name their condition by everything
    that made a block absent or wrong: ``train_missing`` and ``test_missing`` become ``mcar:0.2``, ``gauss:0.5:3``,
    ``mcar:0.2+permute:0.2`` ... (``none`` where nothing did). Other rows are as they were."""
    if "test_corrupt" not in df:
        return df
    df = df.copy()
    for side in ("train", "test"):
        parts = [df[f"{side}_missing"].astype(str)]
        parts += [df[f"{side}_{c}"].fillna("none").astype(str) for c in ("corrupt", "misalign") if f"{side}_{c}" in df]
        joined = ["+".join(v for v in vals if v != "none") or "none" for vals in zip(*parts, strict=True)]
        df[f"{side}_missing"] = joined
    return df


@dataclass
class Condition:
    train: str
    test: str
    means: pd.DataFrame  # tables x methods: the mean over seeds
    ranks: pd.Series  # method -> mean rank over the complete tables
    friedman_p: float
    tables: int  # tables where every method ran (the ranks' and the test's)
    versus: pd.DataFrame  # method -> wins, ties, losses, not_tested, median_gap, ... (against the reference)
    per_table: pd.DataFrame = None  # one row per method and table: gap, splits, p, p_holm, decision
    critical_difference: float = float("nan")  # Nemenyi's CD at alpha over the complete tables (3+ methods)
    absent: tuple = ()  # methods of the results with no run in this condition
    partial: dict = None  # method -> tables it misses in this condition (left out of the ranks' tables)


def nemenyi_cd(k: int, n: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical difference of mean ranks (Demšar 2006): q_alpha sqrt(k (k + 1) / (6 N)), q_alpha the
    studentized range quantile over sqrt(2), for k methods over N tables."""
    from scipy import stats

    if k < 2 or n < 1:
        return float("nan")
    q = float(stats.studentized_range.ppf(1 - alpha, k, np.inf)) / np.sqrt(2)
    return q * float(np.sqrt(k * (k + 1) / (6.0 * n)))


def condition(
    sc: pd.DataFrame, train: str, test: str, reference: str = REFERENCE, alpha: float = ALPHA, margin: float = MARGIN
) -> Condition:
    """One condition's ranks over the tables (Friedman, Nemenyi's CD) and each method against ``reference``: per
    table the corrected resampled t-test over the paired seeds (:func:`vflbench.results.stats.paired_p`), Holm over
    the tables, and a win or a loss only with a gap of at least ``margin`` points (:func:`~.stats.decide`); over the
    tables, the Wilcoxon signed-rank test of the tables' mean scores, Holm over the methods set against the
    reference."""
    from scipy import stats

    c = sc[(sc["train_missing"] == train) & (sc["test_missing"] == test)]
    means = c.pivot_table(index="dataset", columns="method", values="value", aggfunc="mean")
    complete = means.dropna(axis=0, how="any")
    ranks = complete.rank(axis=1, ascending=False).mean().sort_values()
    p = float("nan")
    if complete.shape[0] >= 2 and complete.shape[1] >= 3:
        p = float(stats.friedmanchisquare(*[complete[m].to_numpy() for m in complete.columns]).pvalue)
    cd = nemenyi_cd(complete.shape[1], complete.shape[0], alpha) if complete.shape[1] >= 3 else float("nan")
    absent = tuple(sorted(set(sc["method"]) - set(c["method"])))
    partial = {m: sorted(means.index[means[m].isna()]) for m in means.columns if means[m].isna().any()}
    per_table = _per_table(c, reference, margin, alpha)
    rows = []
    for m, g in per_table.groupby("method", sort=True) if len(per_table) else ():
        decided = g["decision"].value_counts()
        gaps = g["gap"].to_numpy()
        both = means[[m, reference]].dropna()
        w = float("nan")
        if len(both) >= 2 and not np.allclose(both[m] - both[reference], 0):
            w = float(stats.wilcoxon(both[m], both[reference]).pvalue)
        rows.append(
            {
                "method": m,
                "wins": int(decided.get("win", 0)),
                "ties": int(decided.get("tie", 0)),
                "losses": int(decided.get("loss", 0)),
                "median_gap": float(np.median(gaps)),
                "tables": len(g),
                "not_tested": int(decided.get("not tested", 0)),
                "min_gap": float(gaps.min()),
                "max_gap": float(gaps.max()),
                "wilcoxon_p": w,
            }
        )
    versus = pd.DataFrame(rows).set_index("method") if rows else pd.DataFrame()
    if len(versus):
        versus["wilcoxon_p_holm"] = holm(versus["wilcoxon_p"].tolist())
    return Condition(train, test, means, ranks, p, int(complete.shape[0]), versus, per_table, cd, absent, partial)


def _per_table(c: pd.DataFrame, reference: str, margin: float, alpha: float) -> pd.DataFrame:
    """Every method against ``reference`` on each table of one condition: mean gap over the paired seeds, the
    corrected resampled t-test's p, Holm over the tables (per method), and the decision."""
    rows = []
    for m in sorted(set(c["method"]) - {reference}):
        for ds, g in c.groupby("dataset"):
            a = g[g["method"] == m].set_index("seed")["value"]
            b = g[g["method"] == reference].set_index("seed")["value"]
            seeds = sorted(set(a.index) & set(b.index))
            if not seeds:
                continue
            ratio = test_over_train(g[g["method"].isin([m, reference])])
            pv, test = paired_p(a[seeds].to_numpy(), b[seeds].to_numpy(), ratio)
            gap = float((a[seeds] - b[seeds]).mean())
            rows.append({"method": m, "dataset": ds, "gap": gap, "splits": len(seeds), "test": test, "p": pv})
    out = pd.DataFrame(rows, columns=["method", "dataset", "gap", "splits", "test", "p"])
    out["p_holm"] = np.nan
    for _, g in out.groupby("method"):
        out.loc[g.index, "p_holm"] = holm(g["p"].tolist())
    out["decision"] = [
        decide(r.gap, r.p_holm, r.splits, margin, alpha) for r in out.itertuples()
    ]  # fmt: skip
    return out


def conditions(sc: pd.DataFrame, reference: str = REFERENCE) -> list[Condition]:
    pairs = sc[["train_missing", "test_missing"]].drop_duplicates().itertuples(index=False)
    return [condition(sc, tr, te, reference) for tr, te in sorted(pairs)]


def cost_rows(results: Path, manifests: list[dict] | None = None) -> pd.DataFrame:
    """One row per run of a sweep, from its manifests (run folders or gathered; ``manifests``: those already read):
    dataset, method, training, seed, wall seconds, peak RSS (GB) and ``pack`` (how many runs trained together). A
    packed run's manifest holds its whole pack's wall time: each run counts its share (the wall time over the pack's
    size), so a pack is summed once."""

    from .outputs import sweep_manifests

    mans = sweep_manifests(Path(results)) if manifests is None else manifests
    rows = [
        {
            "dataset": m["config"]["dataset"],
            "method": m["config"]["method"],
            "train_missing": m["config"].get("train_missing"),
            "seed": (m["config"].get("settings") or {}).get("seed", 0),
            "seconds": float(m["timings"].get("wall_s") or m["timings"].get("train_s", 0.0)) / _pack_size(m),
            "peak_rss_gb": float((m.get("memory") or {}).get("peak_rss_gb") or float("nan")),
            "pack": _pack_size(m),
        }
        for m in mans
    ]
    columns = ["dataset", "method", "train_missing", "seed", "seconds", "peak_rss_gb", "pack"]
    return pd.DataFrame(rows, columns=columns)


def _pack_size(manifest: dict) -> int:
    return max(1, int((manifest.get("pack") or {}).get("size") or 1))


def costs(
    results: Path, top: int = 5, manifests: list[dict] | None = None, datasets: list[str] | None = None
) -> tuple[dict, pd.DataFrame]:
    """What the sweep cost (``datasets``: on these tables only): the runs' summed wall seconds, the largest peak RSS,
    and the ``top`` costliest runs (dataset, method, training, seed, seconds, peak RSS)."""
    df = cost_rows(results, manifests)
    if datasets is not None:
        df = df[df["dataset"].isin(datasets)]
    if df.empty:
        return {"runs": 0}, df
    total = {
        "runs": len(df),
        "run_hours": round(float(df["seconds"].sum()) / 3600, 2),
        "peak_rss_gb": round(float(df["peak_rss_gb"].max()), 2),
    }
    return total, df.sort_values("seconds", ascending=False).head(top).reset_index(drop=True)


def report(
    results: Path,
    out: Path,
    reference: str = REFERENCE,
    display=lambda m: m,
    methods: list[str] | None = None,
    tables: list[str] | None = None,
) -> str:
    """Write ``ranks.csv``, ``versus_<reference>.csv`` (counts per method and condition),
    ``versus_<reference>_tables.csv`` (every table's gap, p, Holm p and decision), ``scores.csv`` and one
    critical-difference diagram per condition (three methods or more, five tables or more) under ``out``; return the
    Markdown of the ranks and of the comparison with the reference. ``tables``: only these datasets (e.g. the
    hold-out set, ranked apart from the tables that chose the defaults)."""
    from .loading import load_results
    from .stats import critical_difference

    sc = scores(with_train_rows(load_results(results), results))
    if methods:
        unknown = sorted(set(methods) - set(sc["method"]))
        if unknown:
            raise VFLBenchError(
                f"{results}: no run of {', '.join(unknown)}; its methods: {', '.join(sorted(set(sc['method'])))}."
            )
        sc = sc[sc["method"].isin([*methods, reference])]
    if tables is not None:
        sc = sc[sc["dataset"].isin(tables)]
        if sc.empty:
            raise VFLBenchError(f"{results}: no run on the tables asked for ({', '.join(tables)}).")
    if sc.empty:
        raise VFLBenchError(f"{results}: no finished run to rank.")
    if reference not in set(sc["method"]):
        raise VFLBenchError(f"{results}: no run of the reference method {reference!r}; give --reference METHOD.")
    out.mkdir(parents=True, exist_ok=True)
    sc.to_csv(out / "scores.csv", index=False)
    lines = [
        f"A win or a loss against {display(reference)} on a table: the corrected resampled t-test over the paired "
        f"seeds (Nadeau & Bengio 2003), Holm over the tables, p < {ALPHA}, and a mean gap of at least {MARGIN} "
        "points; otherwise a tie; one seed: not tested. Across tables: Wilcoxon signed-rank over the tables' means "
        "(Holm over the methods set against the reference), Friedman over every method and Nemenyi's critical "
        "difference (CD) of mean ranks.",
        "",
    ]
    lines += _metric_lines(sc)
    rank_rows, vs_rows, table_rows = [], [], []
    for cond in conditions(sc, reference):
        lines += _condition_lines(cond, reference, display)
        slug = f"train-{cond.train}_test-{cond.test}".replace(":", "").replace(".", "")
        complete = cond.means.dropna(axis=0, how="any")
        if cond.tables >= 5 and complete.shape[1] >= 3:
            complete.columns = [display(m) for m in complete.columns]
            critical_difference(complete, out / f"cd_{slug}")
            lines += [f"![critical differences, train {cond.train}, test {cond.test}](cd_{slug}.png)", ""]
        rank_rows += [
            {"train_missing": cond.train, "test_missing": cond.test, "method": m, "mean_rank": r, "tables": cond.tables,
             "critical_difference": cond.critical_difference}
            for m, r in cond.ranks.items()
        ]  # fmt: skip
        vs_rows += [
            {"train_missing": cond.train, "test_missing": cond.test, "method": m, **r.to_dict()}
            for m, r in cond.versus.iterrows()
        ]
        table_rows.append(cond.per_table.assign(train_missing=cond.train, test_missing=cond.test))
    lines += _cost_lines(results, display, tables)
    pd.DataFrame(rank_rows).to_csv(out / "ranks.csv", index=False)
    pd.DataFrame(vs_rows).to_csv(out / f"versus_{reference}.csv", index=False)
    per_table = pd.concat(table_rows) if table_rows else pd.DataFrame()
    lead = ["train_missing", "test_missing", "method", "dataset"]
    per_table[lead + [c for c in per_table.columns if c not in lead]].to_csv(
        out / f"versus_{reference}_tables.csv", index=False
    )
    text = "\n".join(lines)
    (out / "across_tables.md").write_text(text + "\n")
    return text


def _metric_lines(sc: pd.DataFrame) -> list[str]:
    """Which tables are scored by balanced accuracy, and which with a 90%+ majority still by accuracy (their runs did
    not record balanced accuracy: re-run them)."""
    if "majority" not in sc:
        return []
    maj = sc.groupby("dataset").agg(majority=("majority", "max"), metric=("metric", "first"))
    high = maj[(maj["majority"] >= MAJORITY) & (maj["metric"] != "auprc")]  # a binary target: AUPRC already
    lines = []
    for d, r in high.iterrows():
        if r.metric == "accuracy":
            lines.append(
                f"{d}: its largest class holds {100 * r.majority:.1f}% of the rows, so accuracy cannot separate the "
                "methods; its runs recorded no balanced accuracy (runs before 2026-11-29): re-run them."
            )
        else:
            lines.append(f"{d}: largest class {100 * r.majority:.1f}% of the rows: scored by {r.metric}.")
    return [*lines, ""] if lines else []


def _condition_lines(cond: Condition, reference: str, display) -> list[str]:
    lines = [f"### train {cond.train}, test {cond.test}: {cond.tables} tables with every method", ""]
    ranked = ", ".join(f"{display(m)} {r:.2f}" for m, r in cond.ranks.items())
    if len(cond.ranks) >= 3:
        lines.append(
            f"Mean rank (1 = best): {ranked}. Friedman p = {cond.friedman_p:.2g}; Nemenyi's CD = "
            f"{cond.critical_difference:.2f} (two mean ranks closer than this are not told apart)."
        )
    else:  # two methods: their ranks and the pairwise test below; no Friedman, no CD diagram
        lines.append(f"Mean rank (1 = best): {ranked}. Two methods: the pairwise tests below decide.")
    if cond.absent:
        lines.append(f"No run in this condition: {', '.join(display(m) for m in cond.absent)}.")
    for m, missing in (cond.partial or {}).items():
        lines.append(
            f"{display(m)} has no run on {len(missing)} table(s) ({', '.join(missing)}): those tables are left out of "
            "the ranks."
        )
    lines.append("")
    if not cond.versus.empty:
        lines.append(
            f"| method | wins / ties / losses against {display(reference)} | not tested | median gap (range), points "
            "| Wilcoxon p (Holm) | tables |"
        )
        lines.append("|---|---|---|---|---|---|")
        for m, r in cond.versus.sort_values("median_gap", ascending=False).iterrows():
            wtl = f"{int(r.wins)} / {int(r.ties)} / {int(r.losses)}"
            gap = f"{r.median_gap:+.1f} ({r.min_gap:+.1f} to {r.max_gap:+.1f})"
            wp = "-" if np.isnan(r.wilcoxon_p_holm) else f"{r.wilcoxon_p_holm:.2g}"
            lines.append(f"| {display(m)} | {wtl} | {int(r.not_tested)} | {gap} | {wp} | {int(r.tables)} |")
        lines.append("")
    return lines


def _cost_lines(results: Path, display, tables: list[str] | None = None) -> list[str]:
    total, costliest = costs(results, datasets=tables)
    on = f" on these {len(tables)} tables" if tables is not None else ""
    lines = [
        f"### Cost{on}: {total['runs']} runs, {total.get('run_hours', 0)} hours of run time summed, the largest "
        f"peak RSS {total.get('peak_rss_gb', 0)} GB",
        "",
    ]
    if len(costliest):
        lines.append("| costliest runs | method | training | seconds | peak RSS (GB) |")
        lines.append("|---|---|---|---|---|")
        for r in costliest.itertuples():
            lines.append(
                f"| {r.dataset} | {display(r.method)} | {r.train_missing} | {r.seconds:.0f} | {r.peak_rss_gb:.2f} |"
            )
        lines.append("")
    return lines


def with_train_rows(df: pd.DataFrame, results: Path) -> pd.DataFrame:
    """The results' rows with ``n_train`` (each run's training rows: the corrected t-test's n_test / n_train) and
    ``majority`` (its largest class's share of the training rows), from the manifests, where they are there."""
    if "run_id" not in df:
        return df
    from .outputs import sweep_manifests

    try:
        mans = sweep_manifests(Path(results))
    except (OSError, ValueError):
        return df
    data = {m["run_id"]: m.get("data") or {} for m in mans}
    counts = {r: d.get("train_class_counts") for r, d in data.items()}
    majority = {r: (max(c) / sum(c) if c and sum(c) else np.nan) for r, c in counts.items()}
    out = df.assign(majority=df["run_id"].map(majority))
    return (
        out if "n_train" in df else out.assign(n_train=df["run_id"].map({r: d.get("n_train") for r, d in data.items()}))
    )
