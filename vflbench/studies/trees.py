"""results/trees/summary.md: the tree methods beside the neural methods of the same grids (issue "trees").

For each grid, the mean over seeds of every method (the trees' folder and the neural folder it sits beside: the same
split, partition, masks and seeds), per training x test missingness, and per condition the best tree against the best
neural method (points; positive: a tree is ahead).

    vflbench report results/trees            # writes results/trees/summary.md
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..methods.base import display_name, method_order
from ..results.loading import load_results
from .registry import register

TREES = {"gbdt", "secureboost"}
# (title, trees folder, neural folder or None, metric, filter on the neural rows)
CREDIT, ISOLET = "results/laser_table1/clean", "results/scalability/isolet"
GRIDS = [
    ("Credit, Table 1 grid, clean protocol, 4 parties, 5 seeds", "results/trees/credit", CREDIT, "f1", None),
    ("Phishing, 5 parties, 3 seeds", "results/trees/phishing", None, "f1", None),
    ("Isolet, K = 4, MCAR 0.3 in training, 3 seeds", "results/trees/isolet", ISOLET, "accuracy", 4),
    ("Isolet, K = 16, MCAR 0.3 in training, 3 seeds", "results/trees/isolet", ISOLET, "accuracy", 16),
    (
        "click-through table (synthetic), 3 parties, 3 seeds",
        "results/trees/ctr",
        "results/big_tables/embed",
        "accuracy",
        None,
    ),
]


def load(root: Path, folder: str) -> pd.DataFrame:
    return load_results(root / folder)


def label(v) -> str:
    return f"{float(v):.1f}"


def grid_table(root: Path, title: str, trees: str, neural: str | None, metric: str, parties) -> list[str]:
    if not (root / trees).exists():
        return [f"## {title}", "", f"(`{trees}` not run yet)", ""]
    df = load(root, trees)
    if neural and (root / neural).exists():
        df = pd.concat([df, load(root, neural)], ignore_index=True)
    df = df[(df["metric"] == metric) & df["value"].notna()]
    if parties is not None:
        df = df[df["parties"] == parties]
    if "epoch" in df.columns:  # the last evaluation of each run
        df = df[df["epoch"].isna() | (df["epoch"] == df.groupby("run_id")["epoch"].transform("max"))]
    g = df.groupby(["p_miss_train", "p_miss_test", "method"])["value"].agg(["mean", "std", "count"]).reset_index()
    methods = method_order(g["method"].unique())
    lines = [
        f"## {title}",
        "",
        f"{metric}, mean over seeds (± population std); best tree minus best neural method:",
        "",
    ]
    head = ["p_miss train", "p_miss test", *[display_name(m) for m in methods], "best tree - best neural"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (tr, te), h in g.groupby(["p_miss_train", "p_miss_test"], sort=True):
        cell = {r["method"]: r for _, r in h.iterrows()}
        vals = [
            f"{cell[m]['mean']:.1f} ± {cell[m]['std'] * ((cell[m]['count'] - 1) / max(cell[m]['count'], 1)) ** 0.5:.1f}"
            if m in cell
            else "–"
            for m in methods
        ]
        tree = max((cell[m]["mean"] for m in cell if m in TREES), default=float("nan"))
        nn = max((cell[m]["mean"] for m in cell if m not in TREES), default=float("nan"))
        lines.append("| " + " | ".join([label(tr), label(te), *vals, f"{tree - nn:+.1f}"]) + " |")
    return [*lines, ""]


# the controlled runs of results/trees/binning: (name, first arm, second arm), an arm = (method, binning)
PAIRS = [
    ("defaults: gbdt (XGBoost's cuts) - secureboost (sketch)", ("gbdt", "library"), ("secureboost", "sketch")),
    (
        "gbdt (XGBoost's cuts) - secureboost (quantile, the default until 2026-11-27)",
        ("gbdt", "library"),
        ("secureboost", "quantile"),
    ),
    ("same cuts, quantile: gbdt - secureboost", ("gbdt", "quantile"), ("secureboost", "quantile")),
    ("same cuts, sketch: gbdt - secureboost", ("gbdt", "sketch"), ("secureboost", "sketch")),
    (
        "gbdt: its own cuts - the unweighted sketch (the class weights in its sketch)",
        ("gbdt", "library"),
        ("gbdt", "sketch"),
    ),
    ("gbdt: its own cuts - quantile cuts (the binning alone)", ("gbdt", "library"), ("gbdt", "quantile")),
]


def binning_table(root: Path, folder: str = "results/trees/binning", metric: str = "f1") -> list[str]:
    title = "## Same cuts, same numbers: gbdt and secureboost under each binning (Credit, 9 conditions, 5 seeds)"
    if not (root / folder).exists():
        return [title, "", f"(`{folder}` not run yet)", ""]
    df = load(root, folder)
    df = df[df["metric"] == metric].copy()
    df["binning"] = df["options"].str.extract(r"binning=(\w+)")[0]
    v = df.set_index(["method", "binning", "p_miss_train", "p_miss_test", "seed"])["value"]
    lines = [
        title,
        "",
        f"{metric} differences per (training, test, seed) run pair: mean |difference|, the largest, how many exceed "
        "1 point; apart for the 30 pairs trained under missing blocks (MCAR 0.1 and 0.5: default directions learned) "
        "and the 15 trained without (test-time defaults then follow each method's convention: XGBoost's fixed side, "
        "secureboost's larger-hessian child); and at the bar's condition (train MCAR 0.5, seed 0) at test none and "
        "MCAR 0.5:",
        "",
        "| pair | trained under MCAR: mean abs | max abs | > 1 | trained without: mean abs | max abs | > 1 | "
        "bar: test none | bar: test MCAR 0.5 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a, b in PAIRS:
        d = (v.xs(a, level=(0, 1)) - v.xs(b, level=(0, 1))).dropna()
        trained = d.index.get_level_values("p_miss_train") > 0
        cells = []
        for part in (d[trained], d[~trained]):
            cells += [
                f"{part.abs().mean():.2f}",
                f"{part.abs().max():.2f}",
                f"{int((part.abs() > 1).sum())} of {len(part)}",
            ]
        bar = [d.get((0.5, te, 0), float("nan")) for te in (0.0, 0.5)]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {bar[0]:+.2f} | {bar[1]:+.2f} |")
    return [*lines, ""]


def attacks_table(root: Path, folder: str = "results/trees/attacks") -> list[str]:
    """What a passive party learns of the labels from SecureBoost's messages, without and with randomized response."""
    import math

    title = "## What a party learns of the labels from SecureBoost's messages (Credit, 4 parties, 3 seeds)"
    if not (root / folder).exists():
        return [title, "", f"(`{folder}` not run yet)", ""]
    df = load(root, folder)
    df["defense"] = df["label_defense"].fillna("none") if "label_defense" in df else "none"
    att = df[df["metric"].isin(["attack:leaves:auc_max", "attack:gradients:auc_max", "attack:leaves:auc"])]
    f1 = df[(df["metric"] == "f1") & (df["p_miss_test"] == 0.0)].groupby(["defense", "p_miss_train"])["value"].mean()
    cell = att.groupby(["defense", "p_miss_train", "metric"])["value"].agg(["mean", "max"])
    lines = [
        title,
        "",
        "Per label defense and training missingness, over 3 seeds x 4 parties: `gradients` (the g in clear) and "
        "`leaves` (the instance spaces, 1% known labels): the best AUC over the 300 trees (mean, and the largest of "
        "the 12), `leaves` after the last tree, the bound e^eps / (1 + e^eps) that label epsilon puts on any attack on "
        "a row's label beyond what the other rows imply, and the model's F1 at test none:",
        "",
        "| label defense | train MCAR | gradients: best AUC (max) | leaves: best AUC (max) | leaves: last tree | "
        "bound | F1 (test none) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (defense, tr), _ in att.groupby(["defense", "p_miss_train"]):
        eps = float(defense.split("=")[1]) if defense.startswith("rr:") else None
        bound = f"{math.exp(eps) / (1 + math.exp(eps)):.3f}" if eps is not None else "1 (no defense)"

        def c(metric, defense=defense, tr=tr):
            m = cell.loc[(defense, tr, metric)]
            return f"{m['mean']:.3f} ({m['max']:.3f})"

        lines.append(
            f"| {defense} | {tr:.1f} | {c('attack:gradients:auc_max')} | {c('attack:leaves:auc_max')} | "
            f"{c('attack:leaves:auc')} | {bound} | {f1.loc[(defense, tr)]:.1f} |"
        )
    return [*lines, ""]


@register("trees", "summary.md: the tree methods beside the neural methods of the same grids, binning, attacks")
def build(folder: Path) -> dict[str, str]:
    root = Path(folder).resolve().parent.parent  # results/trees -> the repository, where the grids' paths start
    lines = ["# Trees beside the neural methods", "", "Written by `vflbench report results/trees`.", ""]
    for title, trees, neural, metric, parties in GRIDS:
        lines += grid_table(root, title, trees, neural, metric, parties)
    lines += binning_table(root)
    lines += attacks_table(root)
    return {"summary.md": "\n".join(lines)}
