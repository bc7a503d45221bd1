"""Conclusions across tables (``vflbench rank RESULTS``): a suite's methods ranked over its tables, as Demšar (2006)
ranks over datasets, and each method set against a reference method (the practitioner's yardstick, ``xgboost``).

Each table is scored on one metric, the yardstick's: AUPRC for a binary target, accuracy otherwise (both x 100).
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
from .stats import ALPHA, paired_p

REFERENCE = "xgboost"


def scores(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, method, train, test, seed) with its table's metric: ``value`` x 100, and ``metric``
    (auprc where the table's target is binary, i.e. where AUPRC was recorded; accuracy otherwise)."""
    df = df[df["status"].fillna("ok") == "ok"] if "status" in df else df
    if "epochs" in df and "epoch" not in df:
        df = df.rename(columns={"epochs": "epoch"})
    if "epoch" in df:  # a run's final evaluation only (budget rows are earlier epochs)
        last = df.groupby("run_id")["epoch"].transform("max")
        df = df[df["epoch"] == last]
    binary = df[df["metric"] == "auprc"].groupby("dataset")["value"].apply(lambda v: v.notna().any())
    metric_of = {d: ("auprc" if binary.get(d, False) else "accuracy") for d in df["dataset"].unique()}
    df = with_wrong_blocks(df)
    screened = df[df["metric"] == df["dataset"].map(metric_of) + "@screen"].copy()  # --screen: a variant of its method
    screened["method"], screened["metric"] = screened["method"] + "+screen", screened["metric"].str[: -len("@screen")]
    keep = pd.concat([df[df["metric"] == df["dataset"].map(metric_of)], screened])
    out = keep[["dataset", "method", "train_missing", "test_missing", "seed", "metric", "value"]].copy()
    out["value"] = out["value"].astype(float)
    return out.drop_duplicates(["dataset", "method", "train_missing", "test_missing", "seed"])


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
    versus: pd.DataFrame  # method -> wins, ties, losses, median_gap, tables (against the reference)


def condition(sc: pd.DataFrame, train: str, test: str, reference: str = REFERENCE, alpha: float = ALPHA) -> Condition:
    from scipy import stats

    c = sc[(sc["train_missing"] == train) & (sc["test_missing"] == test)]
    means = c.pivot_table(index="dataset", columns="method", values="value", aggfunc="mean")
    complete = means.dropna(axis=0, how="any")
    ranks = complete.rank(axis=1, ascending=False).mean().sort_values()
    p = float("nan")
    if complete.shape[0] >= 2 and complete.shape[1] >= 3:
        p = float(stats.friedmanchisquare(*[complete[m].to_numpy() for m in complete.columns]).pvalue)
    rows = []
    for m in sorted(set(c["method"]) - {reference}):
        w = t = lo = 0
        gaps = []
        for _, g in c.groupby("dataset"):
            a = g[g["method"] == m].set_index("seed")["value"]
            b = g[g["method"] == reference].set_index("seed")["value"]
            seeds = sorted(set(a.index) & set(b.index))
            if not seeds:
                continue
            diff = float((a[seeds] - b[seeds]).mean())
            gaps.append(diff)
            pv, _ = paired_p(a[seeds].to_numpy(), b[seeds].to_numpy())
            if len(seeds) >= 2 and pv < alpha:
                w, lo = w + (diff > 0), lo + (diff < 0)
            else:
                t += 1
        rows.append(
            {
                "method": m,
                "wins": w,
                "ties": t,
                "losses": lo,
                "median_gap": float(np.median(gaps)) if gaps else float("nan"),
                "tables": len(gaps),
            }
        )
    versus = pd.DataFrame(rows).set_index("method") if rows else pd.DataFrame()
    return Condition(train, test, means, ranks, p, int(complete.shape[0]), versus)


def conditions(sc: pd.DataFrame, reference: str = REFERENCE) -> list[Condition]:
    pairs = sc[["train_missing", "test_missing"]].drop_duplicates().itertuples(index=False)
    return [condition(sc, tr, te, reference) for tr, te in sorted(pairs)]


def costs(results: Path, top: int = 5) -> tuple[dict, pd.DataFrame]:
    """What the sweep cost, from its runs' manifests (run folders or gathered): the runs' summed wall seconds, the
    largest peak RSS, and the ``top`` costliest runs (dataset, method, training, seconds, peak RSS)."""

    from .outputs import sweep_manifests

    mans = sweep_manifests(Path(results))
    rows = [
        {
            "dataset": m["config"]["dataset"],
            "method": m["config"]["method"],
            "train_missing": m["config"].get("train_missing"),
            "seed": (m["config"].get("settings") or {}).get("seed", 0),
            "seconds": float(m["timings"].get("wall_s") or m["timings"].get("train_s", 0.0)),
            "peak_rss_gb": float((m.get("memory") or {}).get("peak_rss_gb") or float("nan")),
        }
        for m in mans
    ]
    df = pd.DataFrame(rows)
    if df.empty:
        return {"runs": 0}, df
    total = {
        "runs": len(df),
        "run_hours": round(float(df["seconds"].sum()) / 3600, 2),
        "peak_rss_gb": round(float(df["peak_rss_gb"].max()), 2),
    }
    return total, df.sort_values("seconds", ascending=False).head(top).reset_index(drop=True)


def report(
    results: Path, out: Path, reference: str = REFERENCE, display=lambda m: m, methods: list[str] | None = None
) -> str:
    """Write ``ranks.csv``, ``versus_<reference>.csv``, ``scores.csv`` and one critical-difference diagram per
    condition under ``out``; return the Markdown of the ranks and of the comparison with the reference."""
    from .loading import load_results
    from .stats import critical_difference

    sc = scores(load_results(results))
    if methods:
        unknown = sorted(set(methods) - set(sc["method"]))
        if unknown:
            raise VFLBenchError(
                f"{results}: no run of {', '.join(unknown)}; its methods: {', '.join(sorted(set(sc['method'])))}."
            )
        sc = sc[sc["method"].isin([*methods, reference])]
    if sc.empty:
        raise VFLBenchError(f"{results}: no finished run to rank.")
    if reference not in set(sc["method"]):
        raise VFLBenchError(f"{results}: no run of the reference method {reference!r}; give --reference METHOD.")
    out.mkdir(parents=True, exist_ok=True)
    sc.to_csv(out / "scores.csv", index=False)
    lines, rank_rows, vs_rows = [], [], []
    for cond in conditions(sc, reference):
        tag = f"train {cond.train}, test {cond.test}"
        ranked = ", ".join(f"{display(m)} {r:.2f}" for m, r in cond.ranks.items())
        lines.append(f"### {tag}: {cond.tables} tables with every method")
        lines.append("")
        lines.append(f"Mean rank (1 = best): {ranked}. Friedman p = {cond.friedman_p:.2g}.")
        lines.append("")
        if not cond.versus.empty:
            lines.append(
                f"| method | wins / ties / losses against {display(reference)} | median gap (points) | tables |"
            )
            lines.append("|---|---|---|---|")
            for m, r in cond.versus.sort_values("median_gap", ascending=False).iterrows():
                wtl = f"{int(r.wins)} / {int(r.ties)} / {int(r.losses)}"
                lines.append(f"| {display(m)} | {wtl} | {r.median_gap:+.1f} | {int(r.tables)} |")
            lines.append("")
        slug = f"train-{cond.train}_test-{cond.test}".replace(":", "").replace(".", "")
        if cond.tables >= 5:
            complete = cond.means.dropna(axis=0, how="any")
            complete.columns = [display(m) for m in complete.columns]
            paths, _ = critical_difference(complete, out / f"cd_{slug}")
            lines.append(f"![critical differences, {tag}](cd_{slug}.png)")
            lines.append("")
        rank_rows += [
            {"train_missing": cond.train, "test_missing": cond.test, "method": m, "mean_rank": r, "tables": cond.tables}
            for m, r in cond.ranks.items()
        ]
        vs_rows += [
            {"train_missing": cond.train, "test_missing": cond.test, "method": m, **r.to_dict()}
            for m, r in cond.versus.iterrows()
        ]
    total, costliest = costs(results)
    lines.append(
        f"### Cost: {total['runs']} runs, {total.get('run_hours', 0)} hours of run time summed, the largest peak RSS "
        f"{total.get('peak_rss_gb', 0)} GB"
    )
    lines.append("")
    if len(costliest):
        lines.append("| costliest runs | method | training | seconds | peak RSS (GB) |")
        lines.append("|---|---|---|---|---|")
        for r in costliest.itertuples():
            lines.append(
                f"| {r.dataset} | {display(r.method)} | {r.train_missing} | {r.seconds:.0f} | {r.peak_rss_gb:.2f} |"
            )
        lines.append("")
    pd.DataFrame(rank_rows).to_csv(out / "ranks.csv", index=False)
    pd.DataFrame(vs_rows).to_csv(out / f"versus_{reference}.csv", index=False)
    text = "\n".join(lines)
    (out / "across_tables.md").write_text(text + "\n")
    return text
