"""The regression gate of an interface change: every committed result folder must still resolve and
re-run to its committed numbers.

1. Keys: every committed run's manifest is turned back into a request (``config_from_manifest``) and
   resolved; its run key must equal the committed one (so `vflbench sweep` finds every run: a dry run
   of the folder's experiment would schedule nothing).
2. Numbers: per folder, the cheapest run recorded on a CPU (least committed training time, optionally only tabular) is
   executed again the way it was trained (alone, or as a bank of one when it was trained in a pack: a
   member's numbers do not depend on its bank's size) and its CSV rows are compared value by value
   with the committed ones (timing columns excepted).

    python scripts/regression_gate.py results --out /tmp/gate.json            # keys and one re-run per folder
    python scripts/regression_gate.py results/pbm --keys-only

Prints one line per folder and exits 1 if any key moved or any value differs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

TIME_COLUMNS = {"train_seconds", "seconds_per_epoch", "eval_seconds"}


def folders(root: Path) -> list[Path]:
    return sorted({p.parent.parent.parent for p in root.rglob("runs/*/manifest.json")})


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b or str(a) == str(b)


def rerun(manifest: dict, run_dir: Path) -> list[str]:
    from dataclasses import replace

    import pandas as pd

    from vflbench.config import config_from_manifest, resolve
    from vflbench.outputs import read_results_csv
    from vflbench.pipeline import execute, execute_pack

    run = resolve(config_from_manifest(manifest))
    # the request spells out every option; the row's `options` column lists those a user set, as recorded
    run = replace(run, option_sources=dict(manifest["method"]["option_sources"]))
    rows = execute_pack([run], device="cpu")[0][0] if "pack" in manifest else execute(run, device="cpu")[0]
    new = pd.DataFrame(rows)
    old = read_results_csv(run_dir / "results.csv")
    ident = [c for c in ("test_missing", "metric", "epoch") if c in old.columns]
    key = lambda df: df[ident].astype(str).agg("|".join, axis=1)  # noqa: E731
    new.index, old.index = key(new), key(old)
    diffs = []
    missing = sorted(set(old.index) - set(new.index))
    if missing:
        diffs.append(f"{len(missing)} committed rows not produced, e.g. {missing[0]}")
    extra = sorted(set(new.index) - set(old.index))
    new = new.loc[[i for i in old.index if i in new.index]]
    old = old.loc[new.index]
    for col in sorted(set(old.columns) - TIME_COLUMNS):
        if col not in new.columns:
            diffs.append(f"column {col} gone")
            continue
        for i, (a, b) in enumerate(zip(old[col].tolist(), new[col].tolist(), strict=True)):
            if not same(a, b):
                diffs.append(f"{col}[{old.index[i]}]: {a!r} -> {b!r}")
                break
    if extra:  # rows a later version adds (a new metric or variant): reported, not a difference
        print(f"   ({len(extra)} rows not in the committed CSV, e.g. {extra[0]})", flush=True)
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="results")
    ap.add_argument("--keys-only", action="store_true")
    ap.add_argument("--tabular-only", action="store_true", help="re-run only MLP (tabular) runs")
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument(
        "--run", action="append", default=[], help="re-run just this run folder (repeatable) and compare it"
    )
    a = ap.parse_args()
    from vflbench.config import config_from_manifest, resolve

    if a.run:
        bad = False
        for d in map(Path, a.run):
            diffs = rerun(json.loads((d / "manifest.json").read_text()), d)
            bad |= bool(diffs)
            print(f"{d}: " + ("identical" if not diffs else "; ".join(diffs[:6])), flush=True)
        return 1 if bad else 0

    report, bad = {}, False
    for folder in folders(Path(a.root)):
        manifests = [(p.parent, json.loads(p.read_text())) for p in sorted(folder.glob("runs/*/manifest.json"))]
        manifests = [(d, m) for d, m in manifests if m.get("status", "ok") == "ok" and "config" in m]
        moved = [m["run_id"] for _, m in manifests if resolve(config_from_manifest(m)).key != m["run_key"]]
        entry = {"runs": len(manifests), "keys_moved": moved}
        if not a.keys_only:
            # bit-identical repeats are promised on CPU: a run recorded on a GPU draws other random numbers there
            pool = [
                (d, m)
                for d, m in manifests
                if (not a.tabular_only or m["config"]["model"].get("arch") == "mlp") and m.get("device", "cpu") == "cpu"
            ]
            if not pool and manifests:
                entry["note"] = (
                    f"every run was recorded on {manifests[0][1].get('device')}; a CPU re-run is not comparable"
                )
            if pool:
                d, m = min(pool, key=lambda dm: dm[1].get("timings", {}).get("train_s", 1e9))
                t = time.perf_counter()
                entry.update(
                    {
                        "rerun": m["run_id"],
                        "packed": "pack" in m,
                        "diffs": rerun(m, d),
                        "seconds": round(time.perf_counter() - t, 1),
                    }
                )
        bad |= bool(entry["keys_moved"]) or bool(entry.get("diffs"))
        report[str(folder)] = entry
        print(
            f"{folder}: {entry['runs']} runs, keys moved {len(moved)}"
            + (f" ({entry['note']})" if "note" in entry else "")
            + (
                f", re-ran {entry['rerun']} ({'pack of 1' if entry['packed'] else 'alone'}, {entry['seconds']}s): "
                + ("identical" if not entry["diffs"] else "; ".join(entry["diffs"][:4]))
                if "rerun" in entry
                else ""
            ),
            flush=True,
        )
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
