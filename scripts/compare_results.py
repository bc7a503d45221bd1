"""Compare two sets of vflbench results value by value (a regression gate).

    python scripts/compare_results.py OLD NEW     # each: a results.csv, a sweep folder, or a folder of runs

Rows are matched on (dataset, method, parties, train setting, test setting, seed, metric); run keys
and ids are ignored, so results computed before and after a change of configuration format compare.
Prints the number of matched values, the largest absolute difference of `value`, `n_counted` and
`n_test`, the rows only one side has, and the differing rows. Exit status 1 if any matched value
differs (use --tolerance to allow a margin).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

KEYS = ["dataset", "method", "parties", "train_missing", "test_missing", "seed", "metric"]


def load(path: str) -> pd.DataFrame:
    p = Path(path)
    if p.is_dir():
        if (p / "results.csv").exists():
            return pd.read_csv(p / "results.csv")
        frames = [pd.read_csv(f) for f in sorted(p.rglob("results.csv")) if (f.parent / "manifest.json").exists()]
        if not frames:
            sys.exit(f"error: no results under {p}")
        return pd.concat(frames, ignore_index=True)
    return pd.read_csv(p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--tolerance", type=float, default=0.0)
    args = ap.parse_args()
    old, new = load(args.old), load(args.new)
    m = old.merge(new, on=KEYS, how="outer", suffixes=("_old", "_new"), indicator=True)
    both = m[m["_merge"] == "both"]
    diff = (both["value_new"] - both["value_old"]).abs()
    print(f"old rows {len(old)}, new rows {len(new)}, matched {len(both)}, only old {int((m['_merge'] == 'left_only').sum())}, only new {int((m['_merge'] == 'right_only').sum())}")
    print(f"max |diff|: value {diff.max():.3g}, n_counted {(both['n_counted_new'] - both['n_counted_old']).abs().max()}, n_test {(both['n_test_new'] - both['n_test_old']).abs().max()}")
    bad = both[diff > args.tolerance]
    print(f"values differing by more than {args.tolerance}: {len(bad)} of {len(both)}")
    if len(bad):
        print(bad[KEYS + ["value_old", "value_new"]].head(30).to_string(index=False))
    new_cols = sorted(set(new.columns) - set(old.columns))
    if new_cols:
        print(f"columns added in NEW: {', '.join(new_cols)}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
