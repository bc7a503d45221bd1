"""The report of results/faults/ (experiments/faults.yaml): what losing party 1 costs each method, and what a
rejoin recovers, from the runs' own rows.

    vflbench report results/faults

writes results/faults/failures.md (the tables the README quotes; table.md is the sweep's own),
results/faults/summary.csv (one row per dataset, metric, method, test setting and condition: mean, std,
seeds) and results/faults/curves.png (accuracy over epochs).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.errors import VFLBenchError
from ..results.outputs import sweep_records
from .registry import register

# accuracy first: it averages the predictors a sample has, so a lost party's predictor drops out; F1 under LASER-VFL's
# per-predictor-mean rule counts a predictor with no valid sample as 0 (the README says what that does to a loss)
METRICS = {"credit": ["accuracy", "f1"], "isolet": ["accuracy"]}
CONDITIONS = [  # (fail_party, column title)
    ("none", "no failure"),
    ("1@1", "absent from the start"),
    ("1@13", "lost at 25%"),
    ("1@13:23", "25%, rejoins +10"),
    ("1@25", "lost at 50%"),
    ("1@25:35", "50%, rejoins +10"),
    ("1@37", "lost at 75%"),
    ("1@37:47", "75%, rejoins +10"),
]
METHODS = ["LASER-VFL", "PlugVFL", "Ensemble", "Local", "Standard VFL"]


def load(folder: Path) -> pd.DataFrame:
    parts = [rows for _, rows in sweep_records(folder)]
    if not parts:
        raise VFLBenchError(f"no runs under {folder}; run `vflbench sweep experiments/faults.yaml --out {folder}`")
    d = pd.concat(parts, ignore_index=True)
    if "settings" not in d:
        d["settings"] = float("nan")
    d["fail_party"] = d["settings"].fillna("").str.extract(r"fail_party=([^;]+)")[0].fillna("none")
    keep = [(ds, m) for ds, ms in METRICS.items() for m in ms]
    return d[[(a, b) in keep for a, b in zip(d["dataset"], d["metric"], strict=True)]]


def summary(d: pd.DataFrame) -> pd.DataFrame:
    final = d[d["epoch"] == d["epochs"]]
    g = final.groupby(["dataset", "metric", "method_display", "test_missing", "fail_party"])["value"]
    return g.agg(mean="mean", std=lambda v: v.std(ddof=0), seeds="count").reset_index()


def tables(s: pd.DataFrame) -> str:
    out = []
    for ds, metric in [(ds, m) for ds, ms in METRICS.items() for m in ms]:
        for test in ["none", "mcar:0.5"]:
            part = s[(s["dataset"] == ds) & (s["metric"] == metric) & (s["test_missing"] == test)]
            if part.empty:
                continue
            n = int(part["seeds"].min())
            out += [
                f"### {ds}: {metric} at the end of training (epoch 48), test {test}, mean ± std over {n} seeds",
                "",
                "| method | " + " | ".join(t for _, t in CONDITIONS) + " |",
                "|---|" + "---|" * len(CONDITIONS),
            ]
            for m in METHODS:
                row = part[part["method_display"] == m].set_index("fail_party")
                if row.empty:
                    continue
                base = row["mean"].get("none")
                cells = []
                for fp, _ in CONDITIONS:
                    if fp not in row.index:
                        cells.append("")
                        continue
                    v, sd = row.loc[fp, "mean"], row.loc[fp, "std"]
                    delta = "" if fp == "none" or base is None else f" ({v - base:+.1f})"
                    cells.append(f"{v:.1f} ± {sd:.1f}{delta}")
                out.append(f"| {m} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def costs(s: pd.DataFrame) -> str:
    """Per dataset and method: the mean loss of a failure without rejoin (three times), the mean share of it
    that a rejoin recovers, and the cost of being absent from the start."""
    out = [
        "### What a failure costs, and what a rejoin recovers (test none and mcar:0.5 pooled)",
        "",
        "| dataset | metric | method | lost (mean of 25/50/75%) | absent from the start | rejoin recovers |",
        "|---|---|---|---|---|---|",
    ]
    for ds, metric in [(ds, m) for ds, ms in METRICS.items() for m in ms]:
        for m in METHODS:
            part = s[(s["dataset"] == ds) & (s["metric"] == metric) & (s["method_display"] == m)]
            if part.empty:
                continue
            lost, back, absent = [], [], []
            for test in ["none", "mcar:0.5"]:
                r = part[part["test_missing"] == test].set_index("fail_party")["mean"]
                if "none" not in r:
                    continue
                base = r["none"]
                if "1@1" in r:
                    absent.append(base - r["1@1"])
                for fail, rejoin in (("1@13", "1@13:23"), ("1@25", "1@25:35"), ("1@37", "1@37:47")):
                    if fail in r and rejoin in r:
                        lost.append(base - r[fail])
                        gap = base - r[fail]
                        back.append((r[rejoin] - r[fail]) / gap if abs(gap) >= 0.5 else float("nan"))
            share = pd.Series(back).dropna()
            rec = f"{100 * share.mean():.0f}% of it ({len(share)} cases)" if len(share) else "no loss to recover"
            lost_s = f"{pd.Series(lost).mean():+.1f} points" if lost else ""
            absent_s = f"{pd.Series(absent).mean():+.1f}" if absent else ""
            out.append(f"| {ds} | {metric} | {m} | {lost_s} | {absent_s} | {rec} |")
    return "\n".join(out) + "\n\n(lost and absent: points below no failure; a negative number is a gain)\n"


def curves(d: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(METHODS), figsize=(4 * len(METHODS), 7), sharex=True)
    styles = {"none": ("k", "-"), "1@25": ("tab:red", "-"), "1@25:35": ("tab:blue", "--"), "1@1": ("0.6", ":")}
    names = {"none": "no failure", "1@25": "lost at epoch 25", "1@25:35": "lost 25, back 35", "1@1": "absent"}
    test = d[(d["test_missing"] == "none") & (d["metric"] == "accuracy")]
    for i, ds in enumerate(["credit", "isolet"]):
        for j, m in enumerate(METHODS):
            ax = axes[i, j]
            part = test[(test["dataset"] == ds) & (test["method_display"] == m)]
            for fp, (c, ls) in styles.items():
                cur = part[part["fail_party"] == fp].groupby("epoch")["value"].mean()
                if len(cur):
                    ax.plot(cur.index, cur.values, color=c, linestyle=ls, label=names[fp])
            ax.axvspan(25, 35, color="tab:red", alpha=0.06)
            ax.set_title(f"{m}, {ds}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{ds}: accuracy (test none)")
            if i == 1:
                ax.set_xlabel("epoch")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Party 1 lost at epoch 25 of 48, with and without a rejoin at 35 (mean of 5 seeds)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _figures(folder: Path) -> list[Path]:
    curves(load(folder), folder / "curves.png")
    return [folder / "curves.png"]


@register("faults", "failures.md (the tables the README quotes), summary.csv, curves.png", figures=_figures)
def build(folder: Path) -> dict[str, str]:
    s = summary(load(folder))
    text = "# results/faults: the failure tables\n\n" + tables(s) + "\n" + costs(s)
    return {"summary.csv": s.to_csv(index=False), "failures.md": text}
