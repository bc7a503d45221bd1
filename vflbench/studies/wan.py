"""The systems cost of robustness to missing parties (results/runtime/wan, docs/RUNTIME.md quotes it): seconds and
bytes per epoch of LASER-VFL, Standard VFL and PBM-VFL (b=32, beta=0.1, secagg=masked with X25519 keys, each party
drawing its own noise) on Credit with each party in its own process (``--runtime processes``), over an emulated WAN
link per party (latency 0, 20 and 100 ms one way, 10 Mbit/s), one epoch, seed 0.

    vflbench report results/runtime/wan --run     # the nine runs (one folder each), then table.md
    vflbench report results/runtime/wan           # table.md from the committed runs' manifests
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..core.errors import VFLBenchError
from .registry import register

METHODS = ("laser", "svfl", "pbm")
LATENCIES = (0.0, 20.0, 100.0)
BANDWIDTH, EPOCHS, PARTIES = 10.0, 1, 4


def run(folder: Path, workers: int = 1) -> None:
    """One ``vflbench run --runtime processes`` per latency and method, each into ``folder/<method>_lat<ms>/``."""
    for lat in LATENCIES:
        for m in METHODS:
            extra = ["--method-opt", "noise=party", "--method-opt", "secagg=masked"] if m == "pbm" else []
            cmd = [sys.executable, "-m", "vflbench", "run", "--dataset", "credit", "--method", m, *extra,
                   "--runtime", "processes", "--parties", str(PARTIES), "--epochs", str(EPOCHS), "--seed", "0",
                   "--test-missing", "none", "--net-latency", str(lat), "--net-bandwidth", str(BANDWIDTH), "--quiet",
                   "--out", str(Path(folder) / f"{m}_lat{lat:g}")]  # fmt: skip
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def row(man: dict, lat: float) -> str:
    tm, meas = man["timings"], man["runtime"]["measured"]
    epochs = man["config"]["hp"]["epochs"]
    comm_share = tm["comm_s"] / max(tm["train_s"] + tm["eval_s"], 1e-9)
    equal = "yes" if man["runtime"]["measured_equals_accounted"] else "NO"
    return (
        f"| {man['method']['display']} | {lat:g} | {BANDWIDTH:g} | {tm['seconds_per_epoch']:.1f} | "
        f"{100 * comm_share:.0f}% | {meas['bytes_train_up'] / epochs / 1e6:.2f} | "
        f"{meas['bytes_train_down'] / epochs / 1e6:.2f} | {equal} |"
    )


@register(
    "runtime/wan", "table.md: seconds, server time in send/recv and bytes per epoch over an emulated WAN", run=run
)
def build(folder: Path) -> dict[str, str]:
    lines = [
        "| method | latency (ms) | Mbit/s | s / epoch | server time in send/recv | MB up / epoch | MB down / epoch | "
        "measured = accounted |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for lat in LATENCIES:
        for m in METHODS:
            found = sorted((Path(folder) / f"{m}_lat{lat:g}").glob("*/manifest.json"))
            if not found:
                raise VFLBenchError(f"{folder}/{m}_lat{lat:g} has no run: vflbench report {folder} --run")
            lines.append(row(json.loads(found[0].read_text()), lat))
    return {"table.md": "\n".join(lines) + "\n"}
