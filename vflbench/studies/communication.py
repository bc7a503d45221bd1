"""results/communication/: one CSV and a summary of what each communication protocol costs and keeps, from the sweeps
of experiments/communication/ (q1: one update per exchange, 10 epochs; q5: 5 local steps per exchange, 2 epochs).

Per run: the utility (Credit: F1, Isolet: accuracy) at test none and MCAR 0.5, the training bytes up and down, the
exchanges (one a minibatch), and the time an emulated WAN link adds (50 ms one way, 100 Mbit/s per party link, the
model of ``--net-latency``/``--net-bandwidth``: an exchange costs two one-way latencies, up then down, and every byte
of the busiest party's link its serialisation time):

    wan_s = exchanges x 2 x 0.05 + (max-party bytes up + max-party bytes down) x 8 / 100e6

    vflbench report results/communication
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from ..results.outputs import is_sweep_folder, sweep_records
from ..results.plot import protocol_label
from .registry import register

LATENCY_S, MBIT = 0.05, 100.0
METRIC = {"credit": "f1"}  # else accuracy


def load(root: Path) -> pd.DataFrame:
    rows = []
    for man, res in (r for d in sorted(root.iterdir()) if is_sweep_folder(d) for r in sweep_records(d)):
        cfg, comm = man["config"], man["communication"]
        metric = METRIC.get(cfg["dataset"], "accuracy")
        val = res[res["metric"] == metric].set_index("test_missing")["value"]
        settings = cfg.get("settings") or {}
        method = man["method"]["display"]
        if settings.get("mechanism") or cfg["method"] == "pbm":
            method = "PBM-VFL"
        batches = math.ceil(man["data"]["n_train"] / cfg["hp"]["batch_size"])
        exchanges = batches * cfg["hp"]["epochs"]
        up, down = comm["bytes_train_up_per_party"], comm["bytes_train_down_per_party"]
        rows.append(
            {
                "dataset": cfg["dataset"],
                "method": method,
                "protocol": protocol_label(res["settings"].fillna("").iloc[0] if "settings" in res else ""),
                "local_steps": int(settings.get("local_steps", 1)),
                "train_missing": cfg["train_missing"],
                "seed": cfg["seed"],
                "metric": metric,
                "test_none": float(val.get("none", np.nan)),
                "test_mcar_0.5": float(val.get("mcar:0.5", np.nan)),
                "bytes_up": int(comm["bytes_train_up"]),
                "bytes_down": int(comm["bytes_train_down"]),
                "exchanges": exchanges,
                "wan_s": exchanges * 2 * LATENCY_S + (max(up) + max(down)) * 8 / (MBIT * 1e6),
                "train_s": float(man["timings"]["train_s"]),
                # a pack's train_s is the whole pack's wall time (its runs trained together): not comparable with a run
                # trained alone, so every row says which it is
                "trained": f"pack of {man['pack']['size']}" if "pack" in man else "alone",
            }
        )
    if not rows:
        raise VFLBenchError(f"no runs under {root}")
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby(["dataset", "method", "train_missing", "protocol"], sort=False)
    return g.agg(
        metric=("metric", "first"),
        none=("test_none", "mean"),
        none_std=("test_none", "std"),
        half=("test_mcar_0.5", "mean"),
        half_std=("test_mcar_0.5", "std"),
        mb_up=("bytes_up", lambda v: v.mean() / 1e6),
        mb_down=("bytes_down", lambda v: v.mean() / 1e6),
        wan_s=("wan_s", "mean"),
        seeds=("seed", "count"),
    ).reset_index()


@register("communication", "communication.csv (one row a run) and summary.md (cost and utility per protocol)")
def build(root: Path) -> dict[str, str]:
    df = load(root)
    s = summarise(df)
    lines = [
        "# Communication protocols under missing blocks (Credit F1, Isolet accuracy; 4 parties; 3 seeds)",
        "",
        "Written by `vflbench report results/communication` from the runs under this folder.",
        "`communication.csv` has one row per run. MB are training bytes, summed over parties; WAN s is the emulated",
        f"link's time ({LATENCY_S * 1000:.0f} ms one way, {MBIT:.0f} Mbit/s per party): exchanges x 2 latencies + the "
        "busiest party's bytes. Its `train_s` is a run's training wall time where `trained` is `alone`, and the whole",
        "pack's where it is `pack of N` (the runs of a pack train together): compare seconds only between rows trained",
        "alike.",
        "",
    ]
    for (ds, train), t in s.groupby(["dataset", "train_missing"], sort=False):
        metric = t["metric"].iloc[0]
        lines += [
            f"## {ds}, trained with {'every block' if train == 'none' else train}",
            "",
            f"| method | protocol | {metric}, test none | {metric}, test MCAR 0.5 | MB up | MB down | WAN s | seeds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in t.itertuples(index=False):
            lines.append(
                f"| {r.method} | {r.protocol} | {r.none:.2f} ± {r.none_std:.2f} | {r.half:.2f} ± {r.half_std:.2f} | "
                f"{r.mb_up:.3f} | {r.mb_down:.3f} | {r.wan_s:.1f} | {r.seeds} |"
            )
        lines.append("")
    lines += answers(df, s)
    return {"communication.csv": df.to_csv(index=False), "summary.md": "\n".join(lines) + "\n"}


def answers(df: pd.DataFrame, s: pd.DataFrame) -> list[str]:
    """The three questions of the README, computed: the cheapest protocol within 1 point of the plain run; the
    loss each compressor costs with and without missing blocks; PBM-VFL's release against quantisation at equal
    bytes."""
    s = s.assign(mb=s["mb_up"] + s["mb_down"])
    out = [
        "## Cheapest protocol within 1 point of the plain run",
        "",
        "Target: the plain protocol's mean at the test setting that matches training (test none after training with",
        "every block, test MCAR 0.5 after MCAR 0.5), minus 1 point. Among the protocols whose mean reaches it:",
        "",
        "| dataset | trained | method | plain | target | fewest MB (protocol, MB) | least WAN s (protocol, s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (ds, tr, meth), t in s.groupby(["dataset", "train_missing", "method"], sort=False):
        col = "none" if tr == "none" else "half"
        plain = t[t["protocol"] == "none"]
        if plain.empty:
            continue
        base = float(plain[col].iloc[0])
        ok = t[t[col] >= base - 1]
        b, w = ok.loc[ok["mb"].idxmin()], ok.loc[ok["wan_s"].idxmin()]
        out.append(
            f"| {ds} | {tr} | {meth} | {base:.2f} | {base - 1:.2f} | {b['protocol']}, {b['mb']:.3f} "
            f"({b[col]:.2f}) | {w['protocol']}, {w['wan_s']:.1f} ({w[col]:.2f}) |"
        )
    out += [
        "",
        "## What each compressor costs, with and without missing blocks (one update per exchange)",
        "",
        "Points lost against the plain protocol (mean over seeds), at test none after training with every block and",
        "at test MCAR 0.5 after training under MCAR 0.5; per dataset and method:",
        "",
        "| dataset | method | compressor | lost, every block | lost, MCAR 0.5 |",
        "|---|---|---|---|---|",
    ]
    one = s[~s["protocol"].str.contains("Q=")]
    for (ds, meth), t in one.groupby(["dataset", "method"], sort=False):
        full, half = (
            t[t["train_missing"] == "none"].set_index("protocol"),
            t[t["train_missing"] != "none"].set_index("protocol"),
        )
        if "none" not in full.index or "none" not in half.index:
            continue
        for proto in [p for p in full.index if p != "none" and p in half.index]:
            out.append(
                f"| {ds} | {meth} | {proto} | {full.loc['none', 'none'] - full.loc[proto, 'none']:+.2f} | "
                f"{half.loc['none', 'half'] - half.loc[proto, 'half']:+.2f} |"
            )
    out += [
        "",
        "## PBM-VFL's quantised release against scalar quantisation of the same model (Summing VFL)",
        "",
        "| dataset | trained | protocol | MB up | test none | test MCAR 0.5 |",
        "|---|---|---|---|---|---|",
    ]
    for (ds, tr), t in s[s["method"].isin(["PBM-VFL", "Summing VFL"])].groupby(["dataset", "train_missing"]):
        for r in t.sort_values("mb_up").itertuples(index=False):
            if "Q=" in r.protocol:
                continue
            name = "PBM-VFL (b=32: 6-bit counts, noise)" if r.method == "PBM-VFL" else f"Summing VFL, {r.protocol}"
            out.append(f"| {ds} | {tr} | {name} | {r.mb_up:.3f} | {r.none:.2f} | {r.half:.2f} |")
    return out
