"""results/suite_xgboost_rounds/summary.md: what shrank LASER-VFL's lead over xgboost between the suite's two
protocols (experiments/suite_xgboost_rounds.yaml, the control).

Trained with every block and tested at MCAR 0.5, LASER-VFL led xgboost by +12.8 points at the median over the 24
tables of the first protocol (results/suite: one split, entities across it, the trees without early stopping) and by
about +8 under the referee's (results/suite_protocol). The protocols differ in several ways at once; this study changes
one back: xgboost without early stopping, under the referee's protocol, on the same chosen tables, splits, held-out
rows and masks. Per table and condition it sets side by side

* LASER-VFL's gap to xgboost under the first protocol (``results/suite``, the tables' means);
* its gap to the early-stopped xgboost under the referee's protocol (``results/suite_protocol``);
* its gap to xgboost without early stopping under the referee's protocol (this folder);
* and the early stopping's own effect on xgboost, paired by split;

and over the tables the medians and the Wilcoxon signed-rank test of the early stopping's effect.

    vflbench sweep experiments/suite_xgboost_rounds.yaml --out results/suite_xgboost_rounds --gather
    vflbench report results/suite_xgboost_rounds
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..data.datasets.suite import read_suite_table, table_sets
from ..results.across_tables import scores, with_train_rows
from ..results.loading import load_results
from .registry import register

PROTOCOL, FIRST = "suite_protocol", "suite"  # sibling folders under results/
CONDITIONS = ["train_missing", "test_missing"]


def _means(sc: pd.DataFrame, method: str) -> pd.Series:
    """A method's mean score per (condition, table) over its splits."""
    return sc[sc["method"] == method].groupby([*CONDITIONS, "dataset"])["value"].mean()


def control_table(first: pd.DataFrame, protocol: pd.DataFrame, control: pd.DataFrame) -> pd.DataFrame:
    """Per condition and table (the tables of ``control``): LASER-VFL's gap to xgboost under the first protocol
    (``gap_first``), to the early-stopped xgboost (``gap_early``) and to xgboost without early stopping
    (``gap_rounds``) under the referee's, and ``early_effect``: the early-stopped xgboost minus the one without, paired
    by split (points; scores as ``vflbench rank`` scores them). ``first``, ``protocol``, ``control``: score rows."""
    key = [*CONDITIONS, "dataset", "seed"]
    pair = protocol[protocol["method"] == "xgboost"][[*key, "value"]].merge(
        control[control["method"] == "xgboost"][[*key, "value"]], on=key, suffixes=("_early", "_rounds")
    )
    out = pd.DataFrame(
        {
            "early_effect": (pair["value_early"] - pair["value_rounds"]).groupby([pair[k] for k in key[:-1]]).mean(),
            "splits": pair.groupby(key[:-1])["seed"].nunique(),
        }
    )
    laser = _means(protocol, "laser")
    out["gap_early"] = laser - _means(protocol, "xgboost")
    out["gap_rounds"] = laser - _means(control, "xgboost")
    out["gap_first"] = _means(first, "laser") - _means(first, "xgboost")
    return out.dropna(subset=["early_effect"]).reset_index()


def summary_lines(cells: pd.DataFrame, names: dict[str, str], grouped: set[str]) -> list[str]:
    """Per condition the medians over the tables and the Wilcoxon test of the early stopping's effect; per table the
    condition whose lead shrank (trained with every block, tested at MCAR 0.5)."""
    from scipy import stats

    lines = [
        "| training -> test | tables | LASER-VFL's median gap: first protocol | referee's, xgboost stopped early | "
        "referee's, xgboost without early stopping | early stopping's effect on xgboost: median (range) | "
        "tables it raises / lowers by 0.5+ | Wilcoxon p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (tr, te), g in cells.groupby(CONDITIONS, sort=True):
        e = g["early_effect"].to_numpy()
        p = float(stats.wilcoxon(e).pvalue) if len(e) >= 2 and not np.allclose(e, 0) else float("nan")
        lines.append(
            f"| {tr} -> {te} | {len(g)} | {g['gap_first'].median():+.1f} | {g['gap_early'].median():+.1f} | "
            f"{g['gap_rounds'].median():+.1f} | {np.median(e):+.2f} ({e.min():+.1f} to {e.max():+.1f}) | "
            f"{int((e >= 0.5).sum())} / {int((e <= -0.5).sum())} | {p:.2g} |"
        )
    one = cells[(cells["train_missing"] == "none") & (cells["test_missing"] == "mcar:0.5")].copy()
    if len(one):
        one["shrink"] = one["gap_early"] - one["gap_first"]
        lines += [
            "",
            "Trained with every block, tested at MCAR 0.5, table by table (points; `grouped`: its entity now kept on "
            "one side of the split; `early stopping`: the early-stopped xgboost minus the one without, the same "
            "splits):",
            "",
            "| table | grouped | first protocol | referee's | change | of which early stopping | referee's, xgboost "
            "without early stopping |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in one.sort_values("shrink").itertuples():
            name = names.get(r.dataset, r.dataset)
            lines.append(
                f"| {name} | {'yes' if name in grouped else ''} | {r.gap_first:+.1f} | {r.gap_early:+.1f} | "
                f"{r.shrink:+.1f} | {-r.early_effect:+.1f} | {r.gap_rounds:+.1f} |"
            )
    return lines


@register(
    "suite_xgboost_rounds",
    "summary.md: LASER-VFL's lead over xgboost under the first protocol, under the referee's with xgboost stopped "
    "early and without (the control), per condition and table, and the early stopping's effect on xgboost",
)
def build(folder: Path) -> dict[str, str]:
    def read(f: Path) -> pd.DataFrame:
        return scores(with_train_rows(load_results(f), f))

    control = read(folder)
    protocol, first = read(folder.parent / PROTOCOL), read(folder.parent / FIRST)
    tables = {n: read_suite_table(n) for names in table_sets().values() for n in names}  # each YAML read once
    names = {t.source: n for n, t in tables.items()}
    grouped = {n for n, t in tables.items() if t.group}
    cells = control_table(first, protocol, control)
    lines = [
        "# What shrank LASER-VFL's lead over xgboost: xgboost without early stopping under the referee's protocol",
        "",
        f"{control['dataset'].nunique()} chosen tables, {control['seed'].nunique()} splits, both trainings "
        f"(experiments/suite_xgboost_rounds.yaml), paired with `results/{PROTOCOL}` (the same splits, held-out rows "
        f"and masks; there xgboost stops after 10 rounds without gain on the held-out rows) and set beside "
        f"`results/{FIRST}` (the first protocol: one split, entities across it, the trees without early stopping). "
        "Gaps are LASER-VFL minus xgboost, the median over the tables of each table's mean over its splits, scored "
        "as `vflbench rank` scores them. Rebuilt by `vflbench report results/suite_xgboost_rounds`.",
        "",
        *summary_lines(cells, names, grouped),
        "",
    ]
    return {"summary.md": "\n".join(lines)}
