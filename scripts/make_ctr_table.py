"""Writes a SYNTHETIC click-through-shaped table (not taken from anywhere): numeric columns, a very
high-cardinality categorical, a Zipf-tailed one and a mid-cardinality one, a 0/1 ``click`` label, and a
parties file for three parties. Used by results/big_tables/ and the bar checks in benchmarks/big_tables.py@f5ab53e.

The signal is known, so what a model can reach is known too:

    logit = -1.1 + 0.5 f0 - 0.5 f3 + 0.4 f4 + 1.6 a[ad]        a[level] ~ N(0, 1), fixed per level
    click ~ Bernoulli(sigmoid(logit))

``user`` (``--user-levels``, uniform) and ``site`` (Zipf-tailed, exponent 1.2) carry no signal; ``ad``
(``--ad-levels``) carries most of it; f1, f2 and f5 are noise. 2% of ``site`` and 1% of ``user`` cells are
empty. The sidecar ``<out>.json`` records the generator's parameters and the accuracy of the true
probabilities (the Bayes classifier) with and without the categoricals.

    python scripts/make_ctr_table.py --rows 100000 --out /tmp/ctr.csv
    # also writes /tmp/ctr.json and the parties files /tmp/ctr_parties.yaml (every column), _numeric.yaml
    # (the categoricals dropped) and _ad.yaml (the numeric columns and ad, the column that carries the signal)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

PARTIES = {"user_side": ["f0", "f1", "user"], "ad_side": ["f2", "f3", "ad"], "site_side": ["f4", "f5", "site"]}


def make(rows: int, user_levels: int = 30_000, ad_levels: int = 2_000, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((rows, 6)).astype(np.float64)
    user = rng.integers(0, user_levels, rows)
    site = np.minimum(rng.zipf(1.2, rows), 1_000_000) - 1
    ad = rng.integers(0, ad_levels, rows)
    effect = rng.standard_normal(ad_levels)
    numeric_logit = -1.1 + 0.5 * f[:, 0] - 0.5 * f[:, 3] + 0.4 * f[:, 4]
    logit = numeric_logit + 1.6 * effect[ad]
    p = 1 / (1 + np.exp(-logit))
    click = (rng.random(rows) < p).astype(np.int64)
    df = pd.DataFrame({f"f{j}": np.round(f[:, j], 4) for j in range(6)})
    df["user"] = np.char.add("u", user.astype(str)).astype(object)
    df["ad"] = np.char.add("ad", ad.astype(str)).astype(object)
    df["site"] = np.char.add("s", site.astype(str)).astype(object)
    df.loc[rng.random(rows) < 0.02, "site"] = np.nan
    df.loc[rng.random(rows) < 0.01, "user"] = np.nan
    df["click"] = click
    # the accuracy of the true probabilities: with every column, and with the numeric ones only (E over ad)
    p_num = np.mean(1 / (1 + np.exp(-(numeric_logit[:, None] + 1.6 * effect[None, :200]))), axis=1)
    meta = {
        "synthetic": True,
        "generator": "scripts/make_ctr_table.py",
        "rows": rows,
        "seed": seed,
        "levels": {
            "user": int(df["user"].nunique()),
            "ad": int(df["ad"].nunique()),
            "site": int(df["site"].nunique()),
        },
        "signal": "logit = -1.1 + 0.5 f0 - 0.5 f3 + 0.4 f4 + 1.6 a[ad], a ~ N(0,1) per level; user, site: none",
        "click_rate": float(click.mean()),
        "bayes_accuracy": float(np.mean((p > 0.5) == click)),
        "bayes_accuracy_numeric_only": float(np.mean((p_num > 0.5) == click)),
        "majority_accuracy": float(max(click.mean(), 1 - click.mean())),
    }
    return df, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--user-levels", type=int, default=30_000)
    ap.add_argument("--ad-levels", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help=".csv or .parquet")
    a = ap.parse_args()
    df, meta = make(a.rows, a.user_levels, a.ad_levels, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.out.suffix == ".parquet":
        df.to_parquet(a.out, index=False)
    else:
        df.to_csv(a.out, index=False)
    a.out.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    parties = a.out.with_name(a.out.stem + "_parties.yaml")
    parties.write_text("".join(f"{p}: [{', '.join(c)}]\n" for p, c in PARTIES.items()))
    numeric = a.out.with_name(a.out.stem + "_parties_numeric.yaml")  # the same parties, categoricals dropped
    numeric.write_text("".join(f"{p}: [{', '.join(c[:2])}]\n" for p, c in PARTIES.items()))
    ad_only = a.out.with_name(a.out.stem + "_parties_ad.yaml")  # only the signal column ad (one-hot fits)
    ad_only.write_text("".join(f"{p}: [{', '.join(c if 'ad' in c else c[:2])}]\n" for p, c in PARTIES.items()))
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
