"""What a party's checkpoint costs at each epoch boundary (docs/RUNTIME.md, "Rejoin"): the time to walk,
copy and write the state of a built run's method, and the file's size, median over repeats.

    python benchmarks/checkpoint_cost.py                       # LASER-VFL on Credit, 4 parties
    python benchmarks/checkpoint_cost.py --method plug --parties 8 --repeats 50
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from vflbench.federation import checkpoint
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import build, prepare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="credit")
    ap.add_argument("--method", default="laser")
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    run = resolve(RunConfig(dataset=a.dataset, method=a.method, parties=a.parties, hp={"epochs": 1}, seed=0))
    method = build(run, prepare(run, "cpu"))
    path = Path(tempfile.mkdtemp(prefix="vflbench-ckpt-")) / "party0.pt"
    times = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        checkpoint.save(path, {"tensors": checkpoint.tensors({"method": method})})
        times.append(time.perf_counter() - t)
    print(
        f"{run.method_display} on {a.dataset}, {a.parties} parties: {statistics.median(times) * 1e3:.1f} ms per "
        f"checkpoint (median of {a.repeats}), {path.stat().st_size / 1e3:.0f} kB"
    )


if __name__ == "__main__":
    main()
