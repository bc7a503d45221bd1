"""results/big_tables/summary.md: the four encodings of the SYNTHETIC click-through table side by side (the sweeps
of experiments/big_tables/, written by ``make big-tables``): accuracy and AUPRC at test none and MCAR 0.5, mean
+- std over seeds, per method and training setting, with each encoding's parameters and seconds per epoch (from the
manifests), and the Bayes accuracy of the generator's true probabilities (``ctr.json`` in the study folder: the
generator's record, data/ctr/ctr.json as scripts/make_ctr_table.py wrote it for these runs).

    vflbench report results/big_tables
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..core.errors import VFLBenchError
from ..results.loading import load_results
from ..results.outputs import sweep_records
from .registry import register

ENCODINGS = {
    "embed": "user, ad, site embedded",
    "drop": "categoricals dropped",
    "embed_ad": "ad only, embedded",
    "onehot_ad": "ad only, one-hot",
}


def markdown(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A pipe table (without tabulate, which pandas' to_markdown needs)."""
    cols = [str(c) for c in df.columns]
    cell = lambda v: format(v, floatfmt) if isinstance(v, float) else str(v)  # noqa: E731
    rows = [" | ".join(cell(v) for v in r) for r in df.itertuples(index=False)]
    return "\n".join([" | ".join(cols), " | ".join("---" for _ in cols), *rows])


@register("big_tables", "summary.md: the four encodings of the synthetic click table side by side, with their costs")
def build(root: Path) -> dict[str, str]:
    frames, costs = [], []
    for key, label in ENCODINGS.items():
        folder = root / key
        if not (folder / "results.csv").exists():
            continue
        df = load_results(folder)
        df["encoding"] = label
        frames.append(df)
        for man, _ in sweep_records(folder):
            costs.append(
                {
                    "encoding": label,
                    "method": man["method"]["display"],
                    "parameters": man["parameters"]["total"],
                    "seconds_per_epoch": man["timings"]["seconds_per_epoch"],
                    "encoded_width": man["data"].get("preprocessing", {}).get("encoded_width"),
                }
            )
    if not frames:
        raise VFLBenchError(f"no results under {root}; run `make big-tables` first")
    df = pd.concat(frames, ignore_index=True)
    df = df[df["metric"].isin(["accuracy", "auprc"]) & df["test_missing"].isin(["none", "mcar:0.5"])]
    g = df.groupby(["method_display", "train_missing", "encoding", "metric", "test_missing"], sort=False)["value"]
    stats = g.agg(["mean", "std", "count"]).reset_index()
    stats["cell"] = stats.apply(lambda r: f"{r['mean']:.2f} ± {r['std']:.2f}", axis=1)
    wide = stats.pivot_table(
        index=["method_display", "train_missing", "encoding"],
        columns=["metric", "test_missing"],
        values="cell",
        aggfunc="first",
        sort=False,
    )
    wide.columns = [f"{m} (test {t})" for m, t in wide.columns]
    cost = pd.DataFrame(costs).groupby(["encoding", "method"], sort=False).median(numeric_only=True).reset_index()
    meta_path = root / "ctr.json"  # the generator's record, kept with the runs it made the table for
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    lines = [
        "# Encodings of a SYNTHETIC click-through table (scripts/make_ctr_table.py, 100,000 rows)",
        "",
        f"Seeds per cell: {int(stats['count'].min())}-{int(stats['count'].max())}. Written by "
        "`vflbench report results/big_tables`.",
        "",
    ]
    if meta:
        lines += [
            f"The generator's own probabilities score {100 * meta['bayes_accuracy']:.2f}% accuracy with every "
            f"column and {100 * meta['bayes_accuracy_numeric_only']:.2f}% with the numeric columns only; always "
            f"predicting no click scores {100 * meta['majority_accuracy']:.2f}%.",
            "",
        ]
    lines += [markdown(wide.reset_index()), "", "Cost per encoding (medians over its runs):", ""]
    lines += [markdown(cost), ""]
    return {"summary.md": "\n".join(lines)}
