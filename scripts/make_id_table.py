"""Writes the SYNTHETIC table of the bar `trust` (issue "trust", item 1): integer user IDs from 2^25 up, a
label that depends on the ID, three numeric columns; as CSV, gzip CSV and Parquet. float32 holds every
integer only up to 2^24, so a reader that narrows these IDs to float32 merges every four of them into one level
(their labels with them); an exact reader keeps all of them.

    python scripts/make_id_table.py --rows 1500000 --users 200000 --out /tmp/ids
    # -> /tmp/ids.csv (about 80 MB: over the 64 MB at which the multithreaded reader takes over), /tmp/ids.csv.gz,
    #    /tmp/ids.parquet
    vflbench inspect csv:/tmp/ids.csv --data-opt target=y --data-opt categorical=user --format json

Every one of the ``--users`` IDs appears at least once; the label is 1 for IDs whose number is 0, 1 or 2 mod 7, with
10% of the labels flipped, so the ID carries all of the signal (f0, f1, f2 are noise).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

FIRST_ID = 1 << 25


def make(rows: int, users: int, seed: int = 0) -> pd.DataFrame:
    if rows < users:
        raise SystemExit(f"--rows ({rows}) must be at least --users ({users}): every ID appears once")
    rng = np.random.default_rng(seed)
    ids = np.concatenate([np.arange(users), rng.integers(0, users, rows - users)])
    rng.shuffle(ids)
    user = FIRST_ID + ids
    signal = (user % 7 < 3).astype(np.int64)
    y = signal ^ (rng.random(rows) < 0.1)
    f = rng.standard_normal((rows, 3))
    return pd.DataFrame({"user": user.astype(np.int64), "f0": f[:, 0], "f1": f[:, 1], "f2": f[:, 2], "y": y})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--users", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="path stem: writes STEM.csv, STEM.csv.gz, STEM.parquet")
    a = ap.parse_args()
    df = make(a.rows, a.users, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    stem = str(a.out)
    df.to_csv(stem + ".csv", index=False, float_format="%.10g")
    df.to_csv(stem + ".csv.gz", index=False, float_format="%.10g", compression={"method": "gzip", "compresslevel": 1})
    # the Parquet file holds the values the CSV spells (10 significant digits), so all three are the same table
    pd.read_csv(stem + ".csv").to_parquet(stem + ".parquet", index=False)
    sizes = {p: Path(stem + p).stat().st_size for p in (".csv", ".csv.gz", ".parquet")}
    print(json.dumps({"rows": a.rows, "users": int(df["user"].nunique()), "first_id": FIRST_ID, "bytes": sizes}))


if __name__ == "__main__":
    main()
