"""A short run's cost against the torch floor (the target: a one-epoch Credit run at most 1.35x
``python -c "import torch"``), measured side by side.

    python benchmarks/startup.py              # 3 interleaved pairs, medians and their ratio
    python benchmarks/startup.py --rounds 5

Each round starts a fresh ``python -c "import torch"`` and a fresh ``vflbench run --dataset credit --method svfl
--epochs 1 --train-samples 400`` (both wall time from spawn to exit, output discarded), alternating which goes
first. The run is timed after one untimed run, so that Credit's parsed-table and split caches exist, as they do
for every run after a machine's first. ``make bench`` prints it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))
    out = tempfile.mkdtemp()
    torch_cmd = [sys.executable, "-c", "import torch"]
    run_cmd = [str(BIN / "vflbench"), "run", "--dataset", "credit", "--method", "svfl", "--epochs", "1"]
    run_cmd += ["--train-samples", "400", "--out", out, "--quiet"]
    wall(run_cmd)  # caches
    floor, runs = [], []
    for r in range(a.rounds):
        pair = [(floor, torch_cmd), (runs, run_cmd)]
        for where, cmd in pair if r % 2 == 0 else reversed(pair):
            where.append(wall(cmd))
    f, g = statistics.median(floor), statistics.median(runs)
    print(f"start-up: import torch {f:.2f} s, one-epoch Credit run {g:.2f} s (medians of {a.rounds}): {g / f:.2f}x")
    print(f"  import torch: {', '.join(f'{x:.2f}' for x in floor)}   run: {', '.join(f'{x:.2f}' for x in runs)}")


if __name__ == "__main__":
    main()
