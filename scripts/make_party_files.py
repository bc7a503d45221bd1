"""Writes SYNTHETIC party files for entity alignment at scale (not taken from anywhere): the label party's file
(``id``, ``label`` and numeric columns) with N labelled IDs, and K-1 other parties' files that each hold a share of
those IDs (``--share``, drawn independently per party) plus IDs of their own that no one else has, each with numeric
columns. The label depends on columns of every party, so alignment has something to bring.

    python scripts/make_party_files.py --ids 250000 --parties 4 --share 0.9 --out /tmp/psi
    # -> /tmp/psi/party0.csv ... party3.csv; the --party-data value is printed
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def make(ids: int, parties: int, share: float, width: int, seed: int, out: Path) -> list[Path]:
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    # random 12-digit IDs as text (leading zeros kept): unique, in no order
    pool = rng.choice(10**12, size=int(ids * (1 + 0.2 * parties)), replace=False)
    labelled = np.char.zfill(pool[:ids].astype(str), 12)
    spare = np.char.zfill(pool[ids:].astype(str), 12)
    feats = rng.standard_normal((parties, ids, width))
    logit = sum(feats[k, :, 0] for k in range(parties)) / np.sqrt(parties)
    label = (logit + 0.5 * rng.standard_normal(ids) > 0).astype(int)
    paths = []
    for k in range(parties):
        cols = {f"p{k}_x{j}": np.round(feats[k, :, j], 4) for j in range(width)}
        if k == 0:
            df = pd.DataFrame({"id": labelled, "label": label, **cols})
        else:
            held = rng.random(ids) < share
            extra = spare[(k - 1) * int(0.2 * ids) : k * int(0.2 * ids)][: int(0.1 * ids)]
            df = pd.DataFrame({"id": labelled[held], **{c: v[held] for c, v in cols.items()}})
            noise = pd.DataFrame({"id": extra, **{c: rng.standard_normal(len(extra)).round(4) for c in cols}})
            df = pd.concat([df, noise], ignore_index=True).sample(frac=1.0, random_state=k)
        path = out / f"party{k}.csv"
        df.to_csv(path, index=False)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=250_000, help="labelled IDs (the label party's rows)")
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--share", type=float, default=0.9, help="share of the labelled IDs each other party holds")
    ap.add_argument("--width", type=int, default=4, help="numeric columns per party")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    paths = make(a.ids, a.parties, a.share, a.width, a.seed, a.out)
    print("--party-data " + ",".join(f"party{k}={p}" for k, p in enumerate(paths)))


if __name__ == "__main__":
    main()
