"""Seed-paired gaps between methods taken from different result sets, per test condition.

    python scripts/paired_gap.py SRC:METHOD[=LABEL] SRC:METHOD[=LABEL] [...] [--metric accuracy] [--format md|csv]

Each SRC is what `vflbench table` reads (a sweep folder, a folder of runs, a results.csv); METHOD is a
method key (`laser`, `false2`). Columns follow the arguments' order; after each column but the first
comes its difference from the previous column: the mean over the seeds both ran, the per-seed range, and
the two-sided p-value of vflbench's paired test over those seeds (vflbench.results.stats.paired_p: the corrected
resampled t-test of Nadeau & Bengio, n_test/n_train 0.25), before any correction, and Holm's adjustment of
that column's p-values over the table's conditions (vflbench.results.stats.holm). Every method of one seed shares that
seed's partition and masks, so results with the same (dataset, train setting, seed) pair even when they
come from different sweeps, such as a tuned and a default preset. The means are over each column's own
seeds. The command behind the per-seed tables of results/tuned/README.md:

    python scripts/paired_gap.py results/tuned/isolet_false/false_vfl/results.csv:false2=default \\
      results/tuned/isolet_false_vfl/tuned:false2=tuned results/tuned/isolet_false/tuned:laser=LASER-VFL
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np
import pandas as pd

from vflbench.core.errors import VFLBenchError
from vflbench.results.loading import load_results
from vflbench.results.report import at_budget
from vflbench.results.stats import holm, paired_p
from vflbench.results.verdicts import label

ROW = ["dataset", "train_missing", "test_missing"]


def parse(arg: str) -> tuple[str, str, str]:
    spec, _, name = arg.partition("=")
    src, sep, method = spec.rpartition(":")
    if not sep or not src or not method:
        raise SystemExit(f"error: {arg!r} is not SRC:METHOD[=LABEL], e.g. results/tuned/isolet_false/tuned:laser")
    return src, method, name or f"{method} ({src})"


def column(src: str, method: str, metric: str) -> pd.Series:
    """``value`` indexed by (dataset, train, test, seed) for one method of one result set."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a CSV given directly is read as it is; the caller chose it
        df = load_results(src)
    df = at_budget(df)  # a sweep with --eval-epochs: each run's final epoch
    df = df[(df["method"] == method) & (df["metric"] == metric)]
    if df.empty:
        raise SystemExit(f"error: no {metric} rows for method {method!r} in {src}")
    s = df.set_index([*ROW, "seed"])["value"]
    if s.index.duplicated().any():
        raise SystemExit(f"error: {src} has several {method!r} rows per seed and condition (a method grid?)")
    return s


def gap_table(cols: list[tuple[str, pd.Series]]) -> pd.DataFrame:
    conds = list(dict.fromkeys(k[:3] for _, s in cols for k in s.index))
    rows = []
    for cond in conds:
        row = {"dataset": cond[0], "train": label(cond[1]), "test": label(cond[2])}
        prev = None
        for name, s in cols:
            cur = s.xs(cond, level=ROW) if cond in s.droplevel("seed").index else pd.Series(dtype=float)
            row[name] = float(cur.mean()) if len(cur) else np.nan
            if prev is not None:
                seeds = sorted(set(cur.index) & set(prev[1].index))
                d = (cur.loc[seeds] - prev[1].loc[seeds]).to_numpy()
                key = f"{name} - {prev[0]}"
                row[key] = float(d.mean()) if len(d) else np.nan
                row[f"{key} min"] = float(d.min()) if len(d) else np.nan
                row[f"{key} max"] = float(d.max()) if len(d) else np.nan
                row[f"{key} seeds"] = len(d)
                row[f"{key} p"] = (
                    paired_p(cur.loc[seeds].to_numpy(), prev[1].loc[seeds].to_numpy())[0] if len(d) else np.nan
                )
            prev = (name, cur)
        rows.append(row)
    t = pd.DataFrame(rows)
    for (name, _), (prev, _) in zip(cols[1:], cols[:-1], strict=True):
        t[f"{name} - {prev} holm"] = holm(t[f"{name} - {prev} p"].tolist())
    return t


def markdown(t: pd.DataFrame, names: list[str]) -> str:
    head = ["test"] if t["train"].nunique() == 1 and t["dataset"].nunique() == 1 else ["dataset", "train", "test"]
    cols = list(head)
    for i, n in enumerate(names):
        cols.append(n)
        if i:
            cols += [f"{n} - {names[i - 1]} (per-seed range)", "p", "Holm p"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in t.iterrows():
        cells = [str(r[h]) for h in head]
        for i, n in enumerate(names):
            cells.append(f"{r[n]:.1f}")
            if i:
                k = f"{n} - {names[i - 1]}"
                cells.append(f"{r[k]:+.1f} ({r[k + ' min']:+.1f} to {r[k + ' max']:+.1f}; {r[k + ' seeds']} seeds)")
                cells += ["n/a" if np.isnan(r[k + x]) else f"{r[k + x]:.2g}" for x in (" p", " holm")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("columns", nargs="+", metavar="SRC:METHOD[=LABEL]")
    ap.add_argument("--metric", default="accuracy")
    ap.add_argument("--format", choices=["md", "csv"], default="md")
    a = ap.parse_args(argv)
    if len(a.columns) < 2:
        ap.error("give at least two SRC:METHOD columns to compare")
    specs = [parse(c) for c in a.columns]
    names = [n for _, _, n in specs]
    if len(set(names)) < len(names):
        ap.error("two columns have the same label: name them with =LABEL")
    try:
        cols = [(n, column(src, m, a.metric)) for src, m, n in specs]
    except VFLBenchError as e:
        raise SystemExit(f"error: {e}") from None
    t = gap_table(cols)
    print(markdown(t, names) if a.format == "md" else t.to_csv(index=False), end="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
