"""The Credit compat grid of LASER-VFL Table 1 (90 runs: 6 methods x 3 training settings x 5 seeds,
paper epochs) swept from an empty output folder with packing off (`--pack 1`) and on (the default),
`--workers 2`, one after the other; prints both wall times, their ratio, and how far the two
tables' cells differ.

    python benchmarks/grid_pack.py                    # both: the unpacked grid alone takes over 30 minutes on the
    2-core VM
    python benchmarks/grid_pack.py --only packed      # one side (400 s measured, benchmarks/README.md)
    python benchmarks/grid_pack.py --train-missing mcar:0.1   # the 30 runs of one training setting (457 s + 321 s
    measured)

Run it on an idle machine: each sweep already uses every core.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def sweep(out: Path, pack: int, workers: int, train_missing: str | None) -> float:
    cmd = [
        sys.executable,
        "-m",
        "vflbench",
        "sweep",
        str(ROOT / "experiments/laser_table1.yaml"),
        "--datasets",
        "credit",
        "--workers",
        str(workers),
        "--pack",
        str(pack),
        "--out",
        str(out),
    ]
    if train_missing:
        cmd += ["--train-missing", train_missing]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", choices=("alone", "packed"))
    ap.add_argument("--train-missing", default=None, help="one part of the grid, e.g. mcar:0.1 (30 runs)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grid_pack_"))
    walls = {}
    try:
        for name, pack in (("alone", 1), ("packed", 16)):
            if a.only and a.only != name:
                continue
            walls[name] = sweep(tmp / name, pack, a.workers, a.train_missing)
            print(f"{name:7s} (--pack {pack}): {walls[name]:.0f} s wall", flush=True)
        if len(walls) == 2:
            print(
                f"packed / alone: {walls['packed'] / walls['alone']:.2f} ({walls['alone'] / walls['packed']:.2f}x "
                "faster)"
            )
            k = ["run_id", "test_missing", "metric"]
            m = pd.read_csv(tmp / "alone/results.csv").merge(
                pd.read_csv(tmp / "packed/results.csv"), on=k, suffixes=("_a", "_p")
            )
            m["diff"] = (m["value_a"] - m["value_p"]).abs()
            print(
                "max |difference| per metric over",
                len(m),
                "rows:",
                m.groupby("metric")["diff"].max().round(4).to_dict(),
            )
            same = (tmp / "alone/table.md").read_text() == (tmp / "packed/table.md").read_text()
            print("table.md identical:", same)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
