"""What an attack costs a run (the target: at most twice a run's time at the attack's default settings).

    python benchmarks/attack_overhead.py                 # Credit, Standard VFL and LASER-VFL, 20 epochs, 3 rounds
    python benchmarks/attack_overhead.py --epochs 100 --rounds 2 --methods laser

Each round runs the same resolved run (Credit, no missing block, Adam 1e-3, one intra-op thread) once without an
attack and once with each attack at its defaults (``norm``, ``direction``, ``completion``, ``inversion``),
interleaved in one process, and times ``pipeline.execute`` (prepare, build, train with the attack's taps, evaluate,
score the attack, record). It prints the median seconds of each and the median over rounds of the per-round ratio
to the run without an attack. ``make bench`` prints it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))

from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402

ATTACKS = ("none", "norm", "direction", "completion", "inversion")


def timed(method: str, attack: str, epochs: int) -> float:
    run = resolve(
        RunConfig(
            dataset="credit",
            method=method,
            hp={"epochs": epochs, "lr": 1e-3},
            train_missing="none",
            test_missing=["none"],
            attack=attack,
        )
    )
    t = time.perf_counter()
    pipeline.execute(run, device="cpu")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--methods", default="svfl,laser")
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.environ["VFLBENCH_THREADS"] = "1"
    print(f"attack overhead: Credit, {a.epochs} epochs, one thread, {a.rounds} interleaved rounds (whole runs)")
    print(f"{'method':8} {'attack':11} {'median s':>9} {'x no attack':>12}")
    for method in a.methods.split(","):
        timed(method, "none", 1)  # warm: data cached, kernels loaded
        secs: dict[str, list[float]] = {x: [] for x in ATTACKS}
        for _ in range(a.rounds):
            for attack in ATTACKS:
                secs[attack].append(timed(method, attack, a.epochs))
        for attack in ATTACKS:
            ratio = statistics.median(s / b for s, b in zip(secs[attack], secs["none"], strict=True))
            print(f"{method:8} {attack:11} {statistics.median(secs[attack]):9.2f} {ratio:11.2f}x")


if __name__ == "__main__":
    main()
