"""results/scalability/: one CSV and a summary of how every method scales with the number of parties K, from the
sweeps of experiments/scalability/ (each run alone, one worker, no packs, so that its seconds per epoch are its own)
and from ``costs.csv`` (benchmarks/scaling_costs.py: one epoch of every method, FALSE-VFL-I and FedHSSL included, each
in a fresh process).

Per method and K: seconds per training epoch (median over seeds), peak memory of the run (where the manifest records
the run's own: ``memory.of == "this run"``), accuracy at test none and at MCAR 0.5 (mean and std over seeds); per
method, the cost exponent b of a least-squares fit of log(seconds per epoch) = a + b log(K) over the K it runs at
(K >= 4), from the sweeps and from costs.csv.

    vflbench report results/scalability
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from ..results.outputs import is_sweep_folder, sweep_records
from .registry import register

SWEEPS = ("isolet", "isolet_combinatorial")


def exponent(k: pd.Series, seconds: pd.Series) -> float:
    keep = k >= 4
    return float(np.polyfit(np.log(k[keep]), np.log(seconds[keep]), 1)[0])


def per_run(root: Path) -> pd.DataFrame:
    """One row a run of the K sweeps: method, K, seed, seconds per epoch, peak memory, parameters, accuracies."""
    rows = []
    # the sweeps of experiments/scalability/ (laser_weights/ beside them is a study of LASER-VFL's weights, not of K)
    records = [r for d in sorted(root.iterdir()) if d.name in SWEEPS and is_sweep_folder(d) for r in sweep_records(d)]
    for man, res in records:
        acc = res[res["metric"] == "accuracy"].set_index("test_missing")["value"]
        mem = man.get("memory", {})
        rows.append(
            {
                "method": man["method"]["display"],
                "parties": int(res["parties"].iloc[0]),
                "seed": int(res["seed"].iloc[0]),
                "seconds_per_epoch": float(man["timings"]["seconds_per_epoch"]),
                "peak_rss_gb": round(mem["peak_rss_bytes"] / 1e9, 3) if mem.get("of") == "this run" else np.nan,
                "parameters": int(man["parameters"]["total"]),
                "accuracy_none": float(acc.get("none", np.nan)),
                "accuracy_mcar_0.5": float(acc.get("mcar:0.5", np.nan)),
            }
        )
    if not rows:
        raise VFLBenchError(f"no runs under {root}")
    return pd.DataFrame(rows).sort_values(["method", "parties", "seed"])


@register("scalability", "scalability.csv (one row a run) and summary.md (per method and K; the cost exponents)")
def build(root: Path) -> dict[str, str]:
    df = per_run(root)
    files = {"scalability.csv": df.to_csv(index=False)}
    g = df.groupby(["method", "parties"], sort=False)
    table = g.agg(
        seconds_per_epoch=("seconds_per_epoch", "median"),
        peak=("peak_rss_gb", "median"),
        parameters=("parameters", "first"),
        acc_none=("accuracy_none", "mean"),
        acc_none_std=("accuracy_none", "std"),
        acc_half=("accuracy_mcar_0.5", "mean"),
        acc_half_std=("accuracy_mcar_0.5", "std"),
        seeds=("seed", "count"),
    ).reset_index()
    lines = [
        "# Methods against the number of parties K (Isolet, MCAR 0.3 in training, 10 epochs)",
        "",
        "Written by `vflbench report results/scalability` from the runs under this folder and",
        "from `costs.csv`. `scalability.csv` has one row per run. The runs are experiments/scalability/*.yaml, each",
        "trained alone (one worker, no packs) on the 2-core VM. Peak memory is the run's own (its process's high-water",
        "mark reset at the run's start; torch's import, about 0.6 GB, is in it); `-` where a manifest predates that.",
        "",
        "| method | K | seconds per epoch | peak memory (GB) | parameters | accuracy, test none "
        "| accuracy, test MCAR 0.5 | seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples(index=False):
        peak = "-" if np.isnan(r.peak) else f"{r.peak:.2f}"
        lines.append(
            f"| {r.method} | {r.parties} | {r.seconds_per_epoch:.3f} | {peak} | {r.parameters:,} | {r.acc_none:.2f} ± "
            f"{r.acc_none_std:.2f} | {r.acc_half:.2f} ± {r.acc_half_std:.2f} | {r.seeds} |"
        )
    lines += [
        "",
        "Cost exponent b in seconds per epoch ≈ a K^b (least squares on log-log, K >= 4), from the 10-epoch sweeps:",
        "",
        "| method | b | K it ran to | an epoch at that K (s) |",
        "|---|---|---|---|",
    ]
    for method, t in table.groupby("method", sort=False):
        if (t["parties"] >= 4).sum() >= 2:
            top = t.iloc[-1]
            b = exponent(t["parties"], t["seconds_per_epoch"])
            lines.append(f"| {method} | {b:.2f} | {int(top['parties'])} | {top['seconds_per_epoch']:.3f} |")
    costs_path = root / "costs.csv"
    if costs_path.exists():
        c = pd.read_csv(costs_path)
        lines += [
            "",
            "## Every method, one epoch in a fresh process (costs.csv)",
            "",
            "`python benchmarks/scaling_costs.py`: Isolet, MCAR 0.3 in training, one epoch, seed 0, each run its own",
            "process (FALSE-VFL-I with `--labeled 500 --aligned 100`, its paper's setting). Seconds per epoch are a",
            "stage-epoch's for methods with stages (FALSE-VFL's two, FedHSSL's SimSiam stages and fine-tuning).",
            "",
            "| method | K | seconds per epoch | evaluation (s) | parameters | peak memory (GB) |",
            "|---|---|---|---|---|---|",
        ]
        for r in c.itertuples(index=False):
            if isinstance(r.note, str) and r.note:
                lines.append(f"| {r.method} | {r.parties} | refused: {r.note} | | | |")
            else:
                lines.append(
                    f"| {r.display} | {r.parties} | {r.seconds_per_epoch:.3f} | {r.eval_s:.2f} | "
                    f"{int(r.parameters):,} | {r.peak_rss_gb:.2f} |"
                )
        lines += [
            "",
            "| method | time exponent b | parameters at K = 64 / K = 8 | peak at K = 64 (GB) |",
            "|---|---|---|---|",
        ]
        ok = c[c["note"].isna() | (c["note"] == "")] if "note" in c else c
        for _, t in ok.groupby("method", sort=False):
            if (t["parties"] >= 4).sum() < 2:
                continue
            p = t.set_index("parties")
            ratio = f"{p.loc[64, 'parameters'] / p.loc[8, 'parameters']:.1f}x" if {8, 64} <= set(p.index) else "-"
            peak = f"{p.loc[64, 'peak_rss_gb']:.2f}" if 64 in p.index else "-"
            lines.append(
                f"| {t['display'].iloc[0]} | {exponent(t['parties'], t['seconds_per_epoch']):.2f} | {ratio} | {peak} |"
            )
    files["summary.md"] = "\n".join(lines) + "\n"
    return files
