"""Cost of every method against the number of parties K, each run a fresh process (issue "many-parties", part 3):
seconds per training epoch, evaluation seconds, parameters and peak RSS, on Isolet (the study's dataset) trained
under MCAR 0.3 for one epoch, seed 0, tested with none and MCAR 0.5.

A sweep worker runs many runs in one process, so its manifests' peaks are not one run's; this script gives each run
its own process, so ``memory.peak_rss_bytes`` is that run's (torch's import, about 0.6 GB, included). It also covers
the methods the 10-epoch sweep leaves out for their cost (FALSE-VFL-I with the paper's 500 labeled and 100 aligned
samples, FedHSSL with its SimSiam stages) and PBM-VFL.

    python benchmarks/scaling_costs.py --out results/scalability/costs.csv

A method refused at some K (Combinatorial above 10) gets a row with its one-line reason. Rows already in ``--out``
are kept (the run is resumable: delete the file to start over).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import ROOT, cli_run  # noqa: E402

METHODS = ["local", "svfl", "ensemble", "plug", "sum", "pbm", "laser", "combinatorial", "false1", "fedhssl"]
EXTRA = {"false1": ["--labeled", "500", "--aligned", "100"]}
PARTIES = [2, 4, 8, 16, 32, 64]
FIELDS = ["method", "display", "parties", "seconds_per_epoch", "eval_s", "parameters",
          "peak_rss_gb", "note"]  # fmt: skip


def one(method: str, k: int, tmp: Path) -> dict:
    args = [
        *f"--dataset isolet --method {method} --parties {k} --epochs 1 --train-missing mcar:0.3".split(),
        *"--test-missing none,mcar:0.5 --seed 0 --quiet".split(),
        *EXTRA.get(method, []),
    ]
    out = tmp / f"{method}-{k}"
    try:
        man, _ = cli_run(ROOT, args, out)
    except SystemExit as e:  # a refusal: keep its one line
        last = [ln for ln in str(e).splitlines() if ln.strip()][-1]
        return {"method": method, "parties": k, "note": last.split(": ", 1)[-1][:300]}
    t = man["timings"]
    return {
        "method": method,
        "display": man["method"]["display"],
        "parties": k,
        "seconds_per_epoch": round(float(t["seconds_per_epoch"]), 4),
        "eval_s": round(float(t.get("eval_s", 0.0)), 4),
        "parameters": int(man["parameters"]["total"]),
        "peak_rss_gb": round(man["memory"]["peak_rss_bytes"] / 1e9, 3),
        "note": "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "scalability" / "costs.csv")
    ap.add_argument("--methods", nargs="*", default=METHODS)
    ap.add_argument("--parties", nargs="*", type=int, default=PARTIES)
    a = ap.parse_args()
    done: dict[tuple[str, int], dict] = {}
    if a.out.exists():
        for row in csv.DictReader(a.out.open()):
            done[(row["method"], int(row["parties"]))] = row
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"tree at {commit.stdout.strip()}; {len(done)} rows already in {a.out}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for method in a.methods:
            for k in a.parties:
                if (method, k) in done:
                    continue
                t0 = time.perf_counter()
                done[(method, k)] = row = one(method, k, Path(tmp))
                print(f"{method:14} K={k:<3} {time.perf_counter() - t0:6.1f} s wall  {row}", flush=True)
                a.out.parent.mkdir(parents=True, exist_ok=True)
                with a.out.open("w", newline="") as f:  # rewritten after every run: an interrupted run resumes
                    w = csv.DictWriter(f, FIELDS)
                    w.writeheader()
                    for key in sorted(done, key=lambda mk: (METHODS.index(mk[0]) if mk[0] in METHODS else 99, mk[1])):
                        w.writerow({f: done[key].get(f, "") for f in FIELDS})


if __name__ == "__main__":
    main()
