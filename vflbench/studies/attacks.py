"""The summary tables of results/attacks/README.md, from its four sweep folders (means over seeds, and over the
adversaries of a run: the four parties for the label attacks, the server against each party for inversion).

    vflbench report results/attacks             # writes results/attacks/summary.md

Utility is the test F1 x 100 on Credit and the test accuracy on Isolet, with every block present (test none) and
with half missing (test mcar:0.5). Certified epsilons: PBM's per-record feature epsilon at the run's end
(``epsilon_feature_record_no_local_training``, delta 1e-5) and randomized response's label epsilon. The odds gain
of model completion is (a / (1 - a)) / (a0 / (1 - a0)) for its accuracy a on the trained bottom model and a0 on the
bottom model at initialisation: set beside the e^epsilon bound of label DP on the posterior odds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.loading import load_results
from .registry import register

EPS = "epsilon_feature_record_no_local_training"
ATTACKS = {
    "attack:direction:auc": "direction AUC",
    "attack:norm:auc": "norm AUC",
    "attack:completion:accuracy": "completion acc.",
    "attack:completion:accuracy_init": "completion acc. at init",
    "attack:completion:gain": "completion gain",
    "attack:inversion:r2": "inversion R²",
}


def per_run(folder: Path) -> pd.DataFrame:
    """One row per run: its variant, regime, utility, every attack metric (mean over adversaries), epsilons."""
    df = load_results(folder)
    if "epoch" in df.columns:
        df = df[df["epoch"].isna() | (df["epoch"] == df.groupby("run_id")["epoch"].transform("max"))]
    settings = df["settings"].fillna("") if "settings" in df.columns else pd.Series("", index=df.index)
    options = df["options"].fillna("") if "options" in df.columns else pd.Series("", index=df.index)
    df = df.assign(
        variant=df["method_display"]
        + [f" [{o}]" if o else "" for o in options]
        + [f" {{{s}}}" if s else "" for s in settings]
    )
    keys = ["run_id", "dataset", "variant", "train_missing", "seed"]
    out = df.groupby(keys).size().rename("rows").reset_index()[keys]
    for metric, name in ATTACKS.items():
        v = df[df["metric"] == metric].groupby(keys)["value"].mean().rename(name)
        out = out.merge(v.reset_index(), on=keys, how="left")
    for test in ("none", "mcar:0.5"):
        for ds, metric in (("credit", "f1"), ("isolet", "accuracy")):
            v = df[(df["dataset"] == ds) & (df["metric"] == metric) & (df["test_missing"] == test)]
            v = v.groupby(keys)["value"].first().rename(f"utility {test}")
            out = out.merge(v.reset_index(), on=keys, how="left", suffixes=("", "_dup"))
            dup = f"utility {test}_dup"
            if dup in out:
                out[f"utility {test}"] = out[f"utility {test}"].fillna(out.pop(dup))
    extra = [c for c in (EPS, "epsilon_label") if c in df.columns]
    if extra:
        out = out.merge(df.groupby("run_id")[extra].first().reset_index(), on="run_id", how="left")
    return out


def table(runs: pd.DataFrame, by: list[str], cols: list[str], sort: bool = True) -> str:
    g = runs.groupby(by, sort=sort)
    lines = ["| " + " | ".join(by + cols + ["seeds"]) + " |", "|" + "---|" * (len(by) + len(cols) + 1)]
    for key, h in g:
        key = key if isinstance(key, tuple) else (key,)
        cells = []
        for c in cols:
            v = h[c].dropna() if c in h else pd.Series(dtype=float)
            if v.empty:
                cells.append("–")
            elif c.startswith("epsilon"):
                cells.append(f"{v.mean():.3g}")
            elif "AUC" in c or "R²" in c:
                cells.append(f"{v.mean():.3f} ± {v.std(ddof=0):.3f}")
            else:
                cells.append(f"{v.mean():.1f} ± {v.std(ddof=0):.1f}")
        lines.append("| " + " | ".join([str(k) for k in key] + cells + [str(h["seed"].nunique())]) + " |")
    return "\n".join(lines)


def odds(a: float) -> float:
    a = min(max(a / 100.0, 1e-9), 1 - 1e-9)
    return a / (1 - a)


@register("attacks", "summary.md: utility, every attack's score and the certified epsilons, per variant")
def build(root: Path) -> dict[str, str]:
    parts = []
    grid = per_run(root / "grid")
    cols = ["utility none", "utility mcar:0.5", *ATTACKS.values(), EPS]
    parts += ["## The grid (`grid/`)", "", table(grid, ["dataset", "variant", "train_missing"], cols), ""]
    if (root / "pbm" / "results.csv").exists():  # (a sweep still running has no results.csv yet)
        pbm = per_run(root / "pbm")
        rows = table(pbm, ["dataset", "variant", "train_missing"], cols)
        parts += ["## PBM-VFL at the paper's settings (`pbm/`)", "", rows, ""]
        if (root / "pbm_epsilon" / "results.csv").exists():
            sweep = pd.concat([per_run(root / "pbm_epsilon"), pbm[pbm["train_missing"] == "none"]])
            sweep = sweep.assign(order=sweep[EPS]).sort_values("order")
            rows = table(sweep, ["variant"], [EPS, "inversion R²", "direction AUC", "utility none"], sort=False)
            title = "## PBM-VFL's epsilon against inversion (`pbm_epsilon/`, and the paper's beta = 0.1 from `pbm/`)"
            parts += [title, "", rows, ""]
    d = per_run(root / "defenses")
    dcols = [
        "utility none",
        "utility mcar:0.5",
        "direction AUC",
        "norm AUC",
        "completion acc.",
        "completion gain",
        "epsilon_label",
    ]
    parts += ["## Label defenses (`defenses/`)", "", table(d, ["variant", "train_missing"], dcols), ""]
    rr = d[d["epsilon_label"].notna()] if "epsilon_label" in d else d.iloc[:0]
    if len(rr):
        rows = [
            "| variant | train | epsilon_label | e^eps | completion odds gain (mean, max over seeds) | direction AUC |"
        ]
        rows.append("|---|---|---|---|---|---|")
        for (v, tr), h in rr.groupby(["variant", "train_missing"], sort=True):
            gains = [odds(x) / odds(y) for x, y in zip(h["completion acc."], h["completion acc. at init"], strict=True)]
            eps = float(h["epsilon_label"].iloc[0])
            rows.append(
                f"| {v} | {tr} | {eps:g} | {math.exp(eps):.2f} | {np.mean(gains):.3f}, {np.max(gains):.3f} | "
                f"{h['direction AUC'].mean():.3f} |"
            )
        parts += ["### Randomized response: measured leakage beside the certified label epsilon", "", *rows, ""]
    return {"summary.md": "\n".join(parts) + "\n"}
