"""Combinatorial at K = 8 against Standard VFL (the target: at most 300x Standard VFL's training time), each run a
fresh ``vflbench run`` process as a user starts it, with a base revision's tree side by side.

    python benchmarks/combinatorial_k8.py                          # the working tree only, 3 rounds
    python benchmarks/combinatorial_k8.py --base 732cc11 --rounds 3

One epoch of each method on Isolet under the FALSE-VFL protocol (K = 8, MCAR 0.2, 1,280 training samples), the
default threads of each run. With ``--base``, the revision is checked out in a temporary git worktree and run
with the same interpreter, alternating which tree goes first (ABBA). Reported: the median ``train_s`` of each
(from the run's manifest), Combinatorial over Standard VFL per tree, new over base per method, and whether the
two trees wrote the same ``results.csv`` (they must: the speed-up may not move a number).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import ROOT, cli_run, worktree  # noqa: E402

ARGS = (
    "--dataset isolet --protocol false --parties 8 --train-missing mcar:0.2 --test-missing none "
    "--epochs 1 --train-samples 1280"
).split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="a git revision to time beside the working tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default="svfl,combinatorial")
    a = ap.parse_args()
    methods = a.methods.split(",")
    with tempfile.TemporaryDirectory() as tmp, worktree(a.base) if a.base else nullcontext() as base:
        trees = {"new": ROOT, **({"base": base} if a.base else {})}
        secs = {(m, k): [] for m in methods for k in trees}
        digests = {(m, k): set() for m in methods for k in trees}
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for m in methods:
                for k in order:
                    man, d = cli_run(trees[k], ["--method", m, *ARGS], Path(tmp) / f"{k}-{m}-{r}")
                    s = float(man["timings"]["train_s"])
                    secs[(m, k)].append(s)
                    digests[(m, k)].add(d)
                    print(f"round {r} {k:4} {m:14} train {s:8.3f} s ({man.get('threads')} threads)", flush=True)
    med = {key: statistics.median(v) for key, v in secs.items()}
    print(f"\nIsolet, FALSE-VFL protocol, K=8, MCAR 0.2, 1,280 samples, 1 epoch; median of {a.rounds} fresh processes")
    for m in methods:
        line = f"{m:14} " + "   ".join(f"{k} {med[(m, k)]:8.3f} s" for k in trees)
        if a.base:
            same = digests[(m, "new")] == digests[(m, "base")] and len(digests[(m, "new")]) == 1
            line += f"   new/base {med[(m, 'new')] / med[(m, 'base')]:.3f}   same results.csv: {same}"
        print(line)
    if "svfl" in methods:
        for m in methods:
            if m != "svfl":
                print(f"{m} / svfl: " + ", ".join(f"{k} {med[(m, k)] / med[('svfl', k)]:.0f}x" for k in trees))


if __name__ == "__main__":
    main()
