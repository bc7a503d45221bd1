"""The bar checks of large and categorical tables (issue "big-tables"), each a fresh ``vflbench run`` process whose
process tree's peak resident memory is sampled from /proc every 20 ms (the launcher, and for a run across processes
every party process it starts), beside its wall time:

The peak reported is the larger of the sampled tree sum and the main process's own peak from ``getrusage`` (recorded
in the manifest by runs since this check; a sample every 20 ms can miss a short spike, getrusage cannot). A base
revision that does not record it has only the sampled figure.

* ``ctr``: the SYNTHETIC click-through table of scripts/make_ctr_table.py (100,000 rows: 6 numeric columns, a
  30,000-level and a Zipf-tailed categorical without signal, a 2,000-level one with it), Standard VFL, 3 parties,
  3 epochs: with the categoricals embedded and with them dropped. Bar: tree peak at most 2.5 GB, accuracy at least
  3 points above the dropped run's.
* ``numeric``: a 1,000,000 x 24 numeric CSV, one Standard VFL epoch (4 parties). Bar: peak at most 1.2 GB.
* ``psi``: four party files, 250,000 labelled IDs, each other party holding 90% of them (scripts/make_party_files.py),
  aligned by PSI across processes, one Standard VFL epoch. Bar: within 900 s.

``--base REV`` runs each check from that git revision too, alternating (A B B A ...) in one sitting; both trees must
write the same ``results.csv`` where the code paths compute the same numbers (the large-CSV reader reads float32
now: the numeric check's numbers differ in the last digits, reported).

    python benchmarks/big_tables.py                                   # all three checks, this tree
    python benchmarks/big_tables.py --checks numeric,psi --base e04ca54 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import ROOT, worktree  # noqa: E402

DATA = ROOT / "data" / "bench"
GB = 1e9


def tree_rss(root_pid: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
        rss[int(d)] = pages * page
    total, todo = 0, [root_pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def measured_run(tree: Path, args: list[str], out: Path) -> dict:
    """One ``vflbench run`` from ``tree``: wall seconds, the process tree's peak RSS, the manifest and the rows."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))
    cmd = [sys.executable, "-m", "vflbench", "run", *args, "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    th.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} (in {tree}) failed:\n{stderr[-2000:]}")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    csv = (run_dir / "results.csv").read_text()
    return {"wall_s": wall, "tree_peak_gb": peak[0] / GB, "manifest": manifest, "csv": csv}


def accuracy(run: dict) -> float:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(run["csv"])))
    return next(float(r["value"]) for r in rows if r["metric"] == "accuracy" and r["test_missing"] == "none")


def ensure_data() -> dict[str, Path]:
    DATA.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    ctr = DATA / "ctr.csv"
    if not ctr.exists():
        subprocess.run([py, str(ROOT / "scripts/make_ctr_table.py"), "--rows", "100000", "--out", str(ctr)], check=True,
                       capture_output=True)  # fmt: skip
    num = DATA / "numeric_1m.csv"
    if not num.exists():
        import numpy as np
        import pandas as pd

        rng = np.random.default_rng(0)
        x = rng.standard_normal((1_000_000, 24)).astype(np.float32)
        y = (x[:, :6].sum(1) + rng.standard_normal(len(x)) > 0).astype(int)
        df = pd.DataFrame(np.round(x, 5), columns=[f"x{i}" for i in range(24)])
        df["label"] = y
        df.to_csv(num, index=False)
    psi = DATA / "psi250k"
    if not (psi / "party3.csv").exists():
        subprocess.run([py, str(ROOT / "scripts/make_party_files.py"), "--ids", "250000", "--parties", "4",
                        "--share", "0.9", "--out", str(psi)], check=True, capture_output=True)  # fmt: skip
    return {"ctr": ctr, "numeric": num, "psi": psi}


def checks(paths: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    ctr = paths["ctr"]
    common = "--method svfl --train-missing none --test-missing none --seed 0".split()
    party = ",".join(f"party{k}={paths['psi'] / f'party{k}.csv'}" for k in range(4))
    ctr_opts = f"--dataset csv:{ctr} --data-opt target=click --partitioner columns --parties 3 --epochs 3".split()
    return {
        "ctr": {
            "embedded": [*ctr_opts, "--part-opt", f"file={ctr.with_name('ctr_parties.yaml')}", *common],
            "dropped": [
                *ctr_opts,
                *["--data-opt", "drop=user,ad,site", "--part-opt", f"file={ctr.with_name('ctr_parties_numeric.yaml')}"],
                *common,
            ],
            "ad_embedded": [
                *ctr_opts,
                *["--data-opt", "drop=user,site", "--part-opt", f"file={ctr.with_name('ctr_parties_ad.yaml')}"],
                *common,
            ],
            "ad_onehot": [
                *ctr_opts,
                *["--data-opt", "drop=user,site", "--data-opt", "embed_above=5000"],
                *["--part-opt", f"file={ctr.with_name('ctr_parties_ad.yaml')}", *common],
            ],
        },
        "numeric": {
            "run": [*f"--dataset csv:{paths['numeric']} --data-opt target=label".split(), "--parties", "4", *common]
            + ["--epochs", "1"]
        },
        "psi": {
            "run": [
                *f"--runtime processes --party-data {party} --id-column id --data-opt target=label".split(),
                *["--parties", "4", "--epochs", "1", *common],
            ]
        },
    }


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checks", default="ctr,numeric,psi")
    ap.add_argument("--base", help="a git revision to run beside the working tree")
    ap.add_argument(
        "--base-checks",
        default="numeric,psi",
        help="the checks the base revision runs too (not ctr by default: before embeddings it one-hot encodes "
        "the 30,000-level column and needs about 24 GB)",
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    a = ap.parse_args()
    paths = ensure_data()
    plan = checks(paths)
    wanted = [c.strip() for c in a.checks.split(",") if c.strip()]
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, worktree(a.base) if a.base else nullcontext() as base:
        trees = {"new": ROOT, **({"base": base} if a.base else {})}
        for check in wanted:
            here = trees if check in a.base_checks.split(",") else {"new": ROOT}
            for variant, args in plan[check].items():
                for r in range(a.rounds):
                    for k in list(here) if r % 2 == 0 else list(reversed(here)):
                        got = measured_run(here[k], args, Path(tmp) / f"{check}-{variant}-{k}-{r}")
                        m = got["manifest"]
                        own = m.get("memory", {}).get("peak_rss_bytes", 0) / GB  # getrusage: misses no spike
                        row = {
                            "wall_s": round(got["wall_s"], 2),
                            # the tree's sampled sum, or the main process's exact peak where that is higher
                            "tree_peak_gb": round(max(got["tree_peak_gb"], own), 3),
                            "sampled_tree_peak_gb": round(got["tree_peak_gb"], 3),
                            "process_peak_gb": round(own, 3) if own else None,
                            "accuracy": accuracy(got),
                            "load_and_partition_s": round(m["timings"].get("load_and_partition_s", 0.0), 2),
                            "train_s": round(m["timings"].get("train_s", 0.0), 2),
                        }
                        if "runtime" in m:
                            row["control_bytes_by_phase"] = m["runtime"]["framing"].get("control_bytes_by_phase")
                            row["control_bytes"] = m["runtime"]["framing"]["control_bytes"]
                            meas = m["runtime"]["measured"]
                            row["payload_bytes_train"] = meas["bytes_train_up"] + meas["bytes_train_down"]
                        out.setdefault(check, {}).setdefault(variant, {}).setdefault(k, []).append(row)
                        print(f"{check:8} {variant:9} {k:4} round {r}: " + json.dumps(row), flush=True)
    print()
    verdicts = []
    for check, variants in out.items():
        for variant, by_tree in variants.items():
            for k, rows in by_tree.items():
                med = {f: statistics.median(r[f] for r in rows) for f in ("wall_s", "tree_peak_gb", "accuracy")}
                print(f"{check:8} {variant:9} {k:4} median of {len(rows)}: wall {med['wall_s']:.1f} s, "
                      f"tree peak {med['tree_peak_gb']:.3f} GB, accuracy {med['accuracy']:.2f}")  # fmt: skip
    new = {c: {v: t["new"] for v, t in vs.items()} for c, vs in out.items()}
    if "ctr" in new:
        emb, drop = new["ctr"]["embedded"][0], new["ctr"]["dropped"][0]
        ok = emb["tree_peak_gb"] <= 2.5 and emb["accuracy"] >= drop["accuracy"] + 3
        verdicts.append(f"ctr: peak {emb['tree_peak_gb']:.2f} GB (<= 2.5), accuracy {emb['accuracy']:.2f} vs dropped "
                        f"{drop['accuracy']:.2f} (+{emb['accuracy'] - drop['accuracy']:.2f}, >= 3): "
                        f"{'met' if ok else 'NOT met'}")  # fmt: skip
    if "numeric" in new:
        peak = statistics.median(r["tree_peak_gb"] for r in new["numeric"]["run"])
        verdicts.append(f"numeric: peak {peak:.3f} GB (<= 1.2): {'met' if peak <= 1.2 else 'NOT met'}")
    if "psi" in new:
        wall = statistics.median(r["wall_s"] for r in new["psi"]["run"])
        verdicts.append(f"psi: {wall:.0f} s (<= 900): {'met' if wall <= 900 else 'NOT met'}")
    print("\n".join(verdicts))
    if a.json:
        a.json.write_text(json.dumps({"measurements": out, "verdicts": verdicts}, indent=1) + "\n")


if __name__ == "__main__":
    main()
