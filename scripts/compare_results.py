"""Compare two sets of vflbench results value by value (a regression gate).

    python scripts/compare_results.py OLD NEW     # each: a results.csv, a sweep folder, or a folder of runs

Rows are matched on (dataset, method, parties, train setting, test setting, seed, metric), plus the
evaluated epoch and the method options where both sides record them (sweeps with --eval-epochs or a
method grid; for PBM-VFL its mechanism, b, beta and embed_dim columns); run keys and ids are ignored, so results
computed before and after a change of configuration format compare.
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
    both_have = [
        c for c in ("epoch", "mechanism", "b", "beta", "embed_dim", "options") if c in old.columns and c in new.columns
    ]
    if {"mechanism", "b", "beta"} & set(
        both_have
    ):  # PBM-VFL's own columns; its options text lists only non-defaults, which moved
        both_have = [c for c in both_have if c != "options"]
    keys = KEYS + both_have
    for df in (old, new):
        if (
            "epoch" in keys
        ):  # a run's last evaluation matches the other side's last, even if a target stopped it earlier
            df["epoch"] = df["epoch"].where(df["epoch"] < df.groupby("run_id")["epoch"].transform("max"), other=-1)
        for k in keys[len(KEYS) :]:
            df[k] = df[k].astype(str).replace("nan", "")  # a key that does not apply to a row is empty
    if old.duplicated(keys).any() or new.duplicated(keys).any():
        sys.exit(f"error: rows are not unique on {', '.join(keys)}; compare folders of one experiment each")
    m = old.merge(new, on=keys, how="outer", suffixes=("_old", "_new"), indicator=True)
    both = m[m["_merge"] == "both"]
    diff = (both["value_new"] - both["value_old"]).abs()
    print(
        f"old rows {len(old)}, new rows {len(new)}, matched {len(both)}, only old "
        f"{int((m['_merge'] == 'left_only').sum())}, only new {int((m['_merge'] == 'right_only').sum())}"
    )
    print(
        f"max |diff|: value {diff.max():.3g}, n_counted "
        f"{(both['n_counted_new'] - both['n_counted_old']).abs().max()}, n_test "
        f"{(both['n_test_new'] - both['n_test_old']).abs().max()}"
    )
    bad = both[diff > args.tolerance]
    print(f"values differing by more than {args.tolerance}: {len(bad)} of {len(both)}")
    if len(bad):
        print(bad[keys + ["value_old", "value_new"]].head(30).to_string(index=False))
    new_cols = sorted(set(new.columns) - set(old.columns))
    if new_cols:
        print(f"columns added in NEW: {', '.join(new_cols)}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
