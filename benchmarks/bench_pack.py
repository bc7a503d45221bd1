"""Seed packing, measured: one whole run alone against a pack of N seeds of the same run, interleaved
(A B A B ...) in one process at one intra-op thread. Whole runs: data preparation, training and
evaluation, as `vflbench sweep` executes them.

    python benchmarks/bench_pack.py --method laser --pack 5 --rounds 3           # LASER-VFL, Credit, compat, p_train
    0.1, 100 epochs
    python benchmarks/bench_pack.py --method svfl --train-missing mcar:0.5 --epochs 20

Prints, per round, the seconds of the run alone and of the pack, then the medians and the per-seed
speed-up (alone / (pack / N)), and checks that the packed seed-0 run reports the accuracies of the
run alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute, execute_pack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="laser")
    ap.add_argument("--dataset", default="credit")
    ap.add_argument("--protocol", default="compat")
    ap.add_argument("--train-missing", default="mcar:0.1")
    ap.add_argument("--epochs", type=int, default=None, help="default: the preset's (Credit LASER-VFL: 100)")
    ap.add_argument("--pack", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    hp = {"epochs": a.epochs} if a.epochs else {}
    runs = [
        resolve(
            RunConfig(
                dataset=a.dataset,
                method=a.method,
                protocol=a.protocol,
                train_missing=a.train_missing,
                test_missing=["none", "mcar:0.5"],
                seed=s,
                hp=hp,
            )
        )
        for s in range(a.pack)
    ]
    print(
        f"{a.method} on {a.dataset}, {a.protocol}, train {a.train_missing}, {runs[0].hp.epochs} epochs; pack of "
        f"{a.pack}; 1 thread",
        flush=True,
    )
    alone, packed = [], []
    for r in range(a.rounds):
        t = time.perf_counter()
        rows_alone, _ = execute(runs[0], device="cpu")
        alone.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = execute_pack(runs, device="cpu")
        packed.append(time.perf_counter() - t)
        acc = [(x["test_missing"], x["value"]) for x in rows_alone if x["metric"] == "accuracy"]
        acc_p = [(x["test_missing"], x["value"]) for x in out[0][0] if x["metric"] == "accuracy"]
        print(
            f"round {r + 1}: alone {alone[-1]:.1f} s, pack of {a.pack} {packed[-1]:.1f} s ({packed[-1] / a.pack:.1f} "
            "s per seed); "
            f"seed-0 accuracies {'equal' if acc == acc_p else f'DIFFER {acc} vs {acc_p}'}",
            flush=True,
        )
    ma, mp = statistics.median(alone), statistics.median(packed)
    ratios = [x / (y / a.pack) for x, y in zip(alone, packed, strict=True)]
    print(
        f"median: alone {ma:.1f} s, pack {mp:.1f} s = {mp / a.pack:.1f} s per seed; per-seed speed-up "
        f"{ma / (mp / a.pack):.2f}x "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x)"
    )


if __name__ == "__main__":
    main()
