"""results/scalability/: one CSV and a summary of how every method scales with the number of parties K, from the
sweeps of experiments/scalability/ (each run alone, one worker, so that its seconds per epoch are its own).

Per method and K: seconds per training epoch (median over seeds), accuracy at test none and at MCAR 0.5 (mean and
std over seeds); per method, the cost exponent b of a least-squares fit of log(seconds per epoch) = a + b log(K)
over the K it runs at (K >= 4), and the largest K at which an epoch takes under 60 s on this machine.

    python scripts/scalability_report.py results/scalability
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    a = ap.parse_args()
    rows = []
    for man_path in sorted(a.root.glob("*/runs/*/manifest.json")):
        man = json.loads(man_path.read_text())
        res = pd.read_csv(man_path.parent / "results.csv")
        acc = res[res["metric"] == "accuracy"].set_index("test_missing")["value"]
        rows.append(
            {
                "method": man["method"]["display"],
                "parties": int(res["parties"].iloc[0]),
                "seed": int(res["seed"].iloc[0]),
                "seconds_per_epoch": float(man["timings"]["seconds_per_epoch"]),
                "parameters": int(man["parameters"]["total"]),
                "accuracy_none": float(acc.get("none", np.nan)),
                "accuracy_mcar_0.5": float(acc.get("mcar:0.5", np.nan)),
            }
        )
    if not rows:
        raise SystemExit(f"no runs under {a.root}")
    df = pd.DataFrame(rows).sort_values(["method", "parties", "seed"])
    df.to_csv(a.root / "scalability.csv", index=False)
    g = df.groupby(["method", "parties"], sort=False)
    table = g.agg(
        seconds_per_epoch=("seconds_per_epoch", "median"),
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
        "Written by `python scripts/scalability_report.py results/scalability` from the runs under this folder.",
        "`scalability.csv` has one row per run. The runs are experiments/scalability/*.yaml, each trained alone (one",
        "worker, no packs) on the 2-core VM. A sweep worker runs many runs, so a manifest's peak memory is not that",
        "run's; docs/SCALING.md has peaks from fresh processes at K = 64.",
        "",
        "| method | K | seconds per epoch | parameters | accuracy, test none | accuracy, test MCAR 0.5 | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples(index=False):
        lines.append(
            f"| {r.method} | {r.parties} | {r.seconds_per_epoch:.3f} | {r.parameters:,} | {r.acc_none:.2f} ± "
            f"{r.acc_none_std:.2f} | {r.acc_half:.2f} ± {r.acc_half_std:.2f} | {r.seeds} |"
        )
    lines += [
        "",
        "Cost exponent b in seconds per epoch ≈ a K^b (least squares on log-log, K >= 4):",
        "",
        "| method | b | K it ran to | an epoch at that K (s) |",
        "|---|---|---|---|",
    ]
    for method, t in table.groupby("method", sort=False):
        t = t[t["parties"] >= 4]
        if len(t) >= 2:
            b = float(np.polyfit(np.log(t["parties"]), np.log(t["seconds_per_epoch"]), 1)[0])
            top = t.iloc[-1]
            lines.append(f"| {method} | {b:.2f} | {int(top['parties'])} | {top['seconds_per_epoch']:.3f} |")
    (a.root / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
