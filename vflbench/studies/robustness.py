"""results/robustness/summary.md: blocks present but wrong (corrupted, misaligned) beside missing ones, on the suite's
tables, and screening a suspect block as missing (issue "blocks that are present but wrong").

Each sub-folder is one sweep (``clean``: experiments/robustness.yaml, trained with clean blocks; ``trained``:
experiments/robustness_trained.yaml, trained at rate 0.2 of every kind). A sub-folder named ``BASE-SUFFIX`` joins
``BASE``'s section: the same grid for a method whose options re-key its runs (``clean-false1``:
experiments/robustness_false.yaml, FALSE-VFL-I supervised), ranked with the others and costed on its own line.
The report reads each run's seven *pure* test settings (every block; MCAR, Gaussian corruption at severity 3 and
permutation misalignment, each at 0.2 and 0.5 alone) through the project's ranking
(:mod:`vflbench.results.across_tables`: a table's metric, mean over seeds, ranks over tables, Friedman) and answers:

1. **Does the ranking under missing blocks carry over to wrong blocks?** Spearman's rho between the methods' mean
   ranks under MCAR at a rate and under corruption (misalignment) at the same rate, with its p-value, and the method
   ranked first under each.
2. **What does screening as missing gain or cost?** Per method, the paired gap screened minus plain (points), its
   median over tables and a Wilcoxon signed-rank test over the tables' means, on clean test blocks and on wrong ones,
   and how well the score finds the wrong blocks (median AUROC over tables).
3. **Which method degrades most gracefully?** Per method, its level with every block (median score over tables, mean
   rank), the median over tables of the drop from every block to each wrong setting at rate 0.5, and their mean; a
   Wilcoxon signed-rank test over tables of each method's per-table mean drop against the most graceful method's.

and the cost: the runs' summed hours and the largest peak RSS (:func:`vflbench.results.across_tables.costs`).

    vflbench sweep experiments/robustness.yaml --out results/robustness/clean --workers 2
    vflbench report results/robustness
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..results.across_tables import condition, costs, scores
from ..results.loading import load_results
from ..results.outputs import is_sweep_folder
from .registry import register

KINDS = {"missing": "mcar:{r}", "corrupted": "gauss:{r}:3", "misaligned": "permute:{r}"}
RATES = ("0.2", "0.5")
TRAINED = {"clean": "none", "trained": "mcar:0.2+gauss:0.2:3+permute:0.2"}


def _fmt(v: float, d: int = 1) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:+.{d}f}"


def _spearman(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    from scipy import stats

    common = sorted(set(a.index) & set(b.index))
    if len(common) < 3:
        return float("nan"), float("nan")
    r = stats.spearmanr(a[common].to_numpy(), b[common].to_numpy())
    return float(r.statistic), float(r.pvalue)


def _carry_over(sc: pd.DataFrame, train: str) -> list[str]:
    plain = sc[~sc["method"].str.endswith("+screen")]
    lines = [
        "| rate | kind | tables | first | Spearman rho with the ranks under MCAR at the same rate | p |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in RATES:
        base = condition(plain, train, KINDS["missing"].format(r=r))
        for kind in ("missing", "corrupted", "misaligned"):
            c = condition(plain, train, KINDS[kind].format(r=r))
            if c.ranks.empty:
                continue
            rho, p = _spearman(base.ranks, c.ranks) if kind != "missing" else (1.0, 0.0)
            lines.append(
                f"| {r} | {kind} | {c.tables} | {c.ranks.index[0]} ({c.ranks.iloc[0]:.2f}) | "
                f"{rho:.2f} | {'-' if kind == 'missing' else f'{p:.2g}'} |"
            )
    return lines


def _screening(sc: pd.DataFrame, raw: pd.DataFrame, train: str) -> list[str]:
    from scipy import stats

    lines = [
        "| method | test | tables | median gap, screened - plain (points) | Wilcoxon p | median AUROC of the score |",
        "|---|---|---:|---:|---:|---:|",
    ]
    auroc = raw[raw["metric"] == "screen_auroc"] if "metric" in raw else raw.iloc[0:0]
    methods = sorted(m[: -len("+screen")] for m in set(sc["method"]) if m.endswith("+screen"))
    for m in methods:
        for test in ("none", *(KINDS[k].format(r="0.5") for k in ("missing", "corrupted", "misaligned"))):
            c = sc[(sc["train_missing"] == train) & (sc["test_missing"] == test)]
            plain = c[c["method"] == m].groupby("dataset")["value"].mean()
            screened = c[c["method"] == f"{m}+screen"].groupby("dataset")["value"].mean()
            common = sorted(set(plain.index) & set(screened.index))
            if not common:
                continue
            gap = screened[common] - plain[common]
            p = float(stats.wilcoxon(gap.to_numpy()).pvalue) if len(common) >= 5 and (gap != 0).any() else float("nan")
            a = auroc[(auroc["method"] == m) & (auroc["test_missing"] == test)]
            med = float(a.groupby("dataset")["value"].mean().median()) if len(a) else float("nan")
            lines.append(
                f"| {m} | {test} | {len(common)} | {_fmt(float(gap.median()), 2)} | "
                f"{'-' if not np.isfinite(p) else f'{p:.2g}'} | {'-' if not np.isfinite(med) else f'{med:.1f}'} |"
            )
    return lines


def _degradation(sc: pd.DataFrame, train: str) -> list[str]:
    """Per method its level with every block (the median over tables of its score, and its mean rank among the plain
    methods: a small drop from a low start is no strength), the median over tables of the drop from every block to
    each wrong kind at 0.5, their mean, and a Wilcoxon signed-rank test over tables of the method's per-table mean
    drop against the most graceful method's."""
    from scipy import stats

    plain = sc[(sc["train_missing"] == train) & ~sc["method"].str.endswith("+screen")]
    means = plain.groupby(["dataset", "method", "test_missing"])["value"].mean().unstack("test_missing")
    if "none" not in means:
        return []
    rank = means["none"].unstack("method").rank(axis=1, ascending=False).mean()  # 1 = best on a table
    rows, per_table = [], {}
    kinds = [KINDS[k].format(r="0.5") for k in ("missing", "corrupted", "misaligned")]
    for m, g in means.groupby(level="method"):
        drops = [float((g["none"] - g[c]).median()) if c in g else float("nan") for c in kinds]
        level = (float(g["none"].median()), float(rank[m]))
        rows.append((m, level, drops, float(np.nanmean(drops)) if np.isfinite(drops).any() else float("nan")))
        present = [c for c in kinds if c in g]
        per_table[m] = (g["none"] - g[present].mean(axis=1)).droplevel("method") if present else None
    rows.sort(key=lambda r: r[3])
    best = rows[0][0]
    lines = [f"| method | score, every block | mean rank, every block | drop, missing 0.5 | drop, corrupted 0.5 | "
             f"drop, misaligned 0.5 | mean drop | Wilcoxon p, per-table mean drop against {best} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for m, (score, mrank), drops, mean in rows:
        p = float("nan")
        a, b = per_table.get(m), per_table.get(best)
        if m != best and a is not None and b is not None:
            common = sorted(set(a.dropna().index) & set(b.dropna().index))
            d = a[common] - b[common]
            if len(common) >= 5 and (d != 0).any():
                p = float(stats.wilcoxon(d.to_numpy()).pvalue)
        lines.append(f"| {m} | {score:.2f} | {mrank:.2f} | " + " | ".join(_fmt(d, 2) for d in drops)
                     + f" | {_fmt(mean, 2)} | " + ("-" if not np.isfinite(p) else f"{p:.2g}") + " |")  # fmt: skip
    return lines


def _cost_line(folder: Path, sc: pd.DataFrame) -> str:
    """One sweep's size and cost: its tables, methods, seeds, runs, summed run-hours, largest peak RSS and device."""
    from ..results.outputs import sweep_manifests

    mans = sweep_manifests(folder)  # read once: the cost and the devices
    total, _ = costs(folder, manifests=mans)
    devices = sorted({str(m.get("device", "cpu")) for m in mans})
    methods = sorted({m for m in sc["method"] if not m.endswith("+screen")})
    seeds = sc.groupby("dataset")["seed"].nunique()
    short = seeds[seeds < seeds.max()]  # tables with fewer seeds than the others: named, not hidden in a count
    fewer = "; fewer seeds on " + ", ".join(f"{d} ({n})" for d, n in short.items()) if len(short) else ""
    return (
        f"`{folder.name}`: {sc['dataset'].nunique()} tables, {len(methods)} method(s)"
        + (f" ({', '.join(methods)})" if len(methods) <= 2 else "")
        + f", seeds {', '.join(map(str, sorted(set(sc['seed']))))}{fewer}; {total.get('runs', 0)} runs, "
        f"{total.get('run_hours', 0)} run-hours on {', '.join(devices)}, largest peak RSS "
        f"{total.get('peak_rss_gb', float('nan'))} GB."
    )


def section(folders: list[Path]) -> list[str]:
    """One training's section: its sweep and the companion sweeps that join it (``BASE-SUFFIX``)."""
    from ..results.across_tables import with_wrong_blocks

    per = [(f, load_results(f)) for f in folders]
    raw = pd.concat([r for _, r in per], ignore_index=True)
    sc = scores(raw)
    raw = with_wrong_blocks(raw)
    base = folders[0]
    train = TRAINED.get(base.name, sorted(set(sc["train_missing"]))[0])
    lines = [
        f"## {base.name}: trained {train}",
        "",
        *[_cost_line(f, scores(r)) + "  " for f, r in per],
        "",
        "### 1. Does the ranking under missing blocks carry over to wrong blocks?",
        "",
        *_carry_over(sc, train),
        "",
        "### 2. Screening as missing (`--screen auto`): gain or cost",
        "",
        *_screening(sc, raw, train),
        "",
        "### 3. Degradation from every block (median over tables, points; smaller is more graceful)",
        "",
        *_degradation(sc, train),
        "",
    ]
    return lines


def companions(subs: list[Path]) -> dict[str, list[Path]]:
    """The sweeps of each section: ``BASE`` first, then its companions ``BASE-SUFFIX`` in name order."""
    groups: dict[str, list[Path]] = {}
    for sub in sorted(subs, key=lambda p: (p.name.split("-", 1)[0], "-" in p.name, p.name)):
        groups.setdefault(sub.name.split("-", 1)[0], []).append(sub)
    return groups


@register("robustness", "summary.md: missing vs corrupted vs misaligned blocks, ranks, screening and degradation")
def build(folder: Path) -> dict[str, str]:
    subs = sorted(p for p in Path(folder).iterdir() if p.is_dir() and is_sweep_folder(p))
    groups = companions(subs)
    lines = [
        "# Blocks present but wrong",
        "",
        "Written by `vflbench report results/robustness` from the sweeps below (vflbench/studies/robustness.py says "
        "how each figure is computed). A table's metric is AUPRC for a binary target, accuracy otherwise (x 100); "
        "`METHOD+screen` is the same run's predictions with the flagged blocks missing.",
        "",
    ]
    for base in sorted(groups):
        lines += section(groups[base])
    return {"summary.md": "\n".join(lines) + "\n"}
