"""Writes tests/data/loans.csv: a small synthetic loan-default table made for vflbench's tests and
the README's "Your own data" example (not taken from anywhere). Mixed numeric and categorical
columns, missing cells, an ID column and a string label; the label depends on columns that three
different parties hold, so a vertical federation has something to gain.

    python tests/data/make_loans.py            # rewrites tests/data/loans.csv (deterministic)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).with_name("loans.csv")


def make(n: int = 600, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(21, 75, n).astype(float)
    income = np.round(rng.lognormal(10.4, 0.45, n), -2)
    debt_ratio = np.round(np.clip(rng.beta(2, 5, n) + 0.15 * (income < 25000), 0, 1), 3)
    credit_score = np.round(np.clip(rng.normal(660, 70, n) - 120 * debt_ratio, 300, 850))
    n_accounts = rng.poisson(3, n)
    employment = rng.choice(["salaried", "self-employed", "unemployed", "retired"], n, p=[0.6, 0.2, 0.1, 0.1])
    region = rng.choice(["north", "south", "east", "west"], n)
    policy = rng.choice(["basic", "plus", "premium"], n, p=[0.5, 0.3, 0.2])
    claims = rng.poisson(np.where(policy == "basic", 0.6, 1.2), n)
    late = rng.poisson(0.5 + 2.0 * (employment == "unemployed") + 1.5 * debt_ratio, n)
    logit = (
        -2.2
        + 3.0 * (debt_ratio - 0.3)
        - 0.012 * (credit_score - 640)
        + 0.45 * late
        + 0.35 * claims
        + 0.9 * (employment == "unemployed")
        - 0.4 * (policy == "premium")
    )
    default = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no")
    df = pd.DataFrame(
        {
            "customer_id": [f"C{10000 + i}" for i in range(n)],
            "age": age,
            "income": income,
            "debt_ratio": debt_ratio,
            "credit_score": credit_score,
            "credit_accounts": n_accounts,
            "employment": employment,
            "region": region,
            "policy_type": policy,
            "claims": claims,
            "late_payments": late,
            "default": default,
        }
    )
    for col, share in (("age", 0.05), ("income", 0.08), ("employment", 0.06), ("claims", 0.04)):  # missing cells
        df.loc[rng.random(n) < share, col] = np.nan
    return df


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    make().to_csv(out, index=False)
    print(f"wrote {out}")
