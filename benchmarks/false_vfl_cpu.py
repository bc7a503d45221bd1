"""FALSE-VFL on the CPU: one FALSE-VFL-I Isolet run at the paper's settings (preset false_tables: 300 epochs a
stage, batch 512, kappa 10, L 50; 500 labeled samples, 100 aligned; K = 8; MCAR 0.2 in training, the seven test
regimes of Tables 12-17), from the working tree and from a base revision, side by side on one machine.

    python benchmarks/false_vfl_cpu.py --base 732cc11 --epochs 10 --rounds 2   # 10 epochs a stage, ABBA
    python benchmarks/false_vfl_cpu.py --base 732cc11 --rounds 1                # whole runs (about 45 min)

Each run is a fresh ``vflbench run`` process with its default threads. Reported: the median training, stage and
evaluation seconds of each tree, new over base, the threads each used, and whether both wrote the same
``results.csv`` (they must). With ``--epochs`` below 300, also each tree's time for a whole run projected from
its seconds per epoch of each stage (labelled as a projection).
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

PAPER_EPOCHS = 300
TESTS = "none,mcar:0.2,mcar:0.5,mar1,mar2,mnar:0.7,mnar:0.9"


def args_for(method: str, epochs: int) -> list[str]:
    return [
        *f"--dataset isolet --method {method} --protocol false --parties 8 --train-missing mcar:0.2".split(),
        *f"--labeled 500 --aligned 100 --test-missing {TESTS}".split(),
        *f"--hp pretrain.epochs={epochs} --hp train.epochs={epochs}".split(),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="a git revision to time beside the working tree")
    ap.add_argument("--epochs", type=int, default=PAPER_EPOCHS, help="epochs of each stage")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--method", default="false1")
    a = ap.parse_args()
    rows: dict[str, list[dict]] = {}
    digests: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(a.base) if a.base else nullcontext() as base:
        trees = {"new": ROOT, **({"base": base} if a.base else {})}
        for r in range(a.rounds):
            for k in list(trees) if r % 2 == 0 else list(reversed(trees)):
                man, d = cli_run(trees[k], args_for(a.method, a.epochs), Path(tmp) / f"{k}-{r}")
                t = man["timings"]
                ss = t["stage_seconds"]
                row = {"training": t["train_s"], "stage1": ss["pretrain"], "stage2": ss["train"], "eval": t["eval_s"]}
                row["threads"] = man.get("threads")
                rows.setdefault(k, []).append(row)
                digests.setdefault(k, set()).add(d)
                print(f"round {r} {k:4} " + "  ".join(f"{n} {v:.1f}" for n, v in row.items() if n != "threads")
                      + f"  ({row['threads']} threads)", flush=True)  # fmt: skip
    keys = ("training", "stage1", "stage2", "eval")
    med = {k: {n: statistics.median(r[n] for r in rs) for n in keys} for k, rs in rows.items()}
    print(f"\n{a.method} on Isolet at the paper's settings, {a.epochs} epochs a stage; median of {a.rounds}")
    for k, m in med.items():
        whole = m["training"] + m["eval"]
        line = (f"{k:4}  training {m['training']:8.1f} s (stage 1 {m['stage1']:.1f}, stage 2 {m['stage2']:.1f})  "
                f"evaluation {m['eval']:6.1f} s  run {whole:8.1f} s")  # fmt: skip
        if a.epochs != PAPER_EPOCHS:
            proj = m["training"] * PAPER_EPOCHS / a.epochs + m["eval"]
            line += f"  projected whole run ({PAPER_EPOCHS} epochs a stage) {proj:7.0f} s"
        print(line + f"  threads {rows[k][0]['threads']}")
    if a.base:
        n, b = med["new"], med["base"]
        print(f"new/base: training {n['training'] / b['training']:.3f}, evaluation {n['eval'] / b['eval']:.3f}; "
              f"same results.csv: {digests['new'] == digests['base'] and len(digests['new']) == 1}")  # fmt: skip


if __name__ == "__main__":
    main()
