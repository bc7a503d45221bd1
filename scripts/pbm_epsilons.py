"""Epsilon of PBM-VFL's Phishing setting in every accountant mode and unit (docs/PBM_VFL.md).

python scripts/pbm_epsilons.py [--parties 5 --dim 16 --b 32 --beta 0.1 --epochs 100 --delta 1e-5 --c0 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vflbench.privacy.accountant import AccountantSpec, epsilon  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (
        ("parties", 5),
        ("dim", 16),
        ("b", 32),
        ("beta", 0.1),
        ("epochs", 100),
        ("delta", 1e-5),
        ("c0", 8.0),
        ("n_train", 8844),
    ):
        ap.add_argument(f"--{name}", type=type(default), default=default)
    a = ap.parse_args()
    print(f"M={a.parties} P={a.dim} b={a.b} beta={a.beta} E={a.epochs} delta={a.delta:g} c0={a.c0:g}")
    print(f"(record units assume the record does not enter local training; column block: {a.n_train} training samples)")
    print(
        f"{'mode':<8} {'conversion':<10} {'upper bound':>11} {'feature/record':>15} {'sample/record':>14} "
        f"{'column block':>13} {'seconds':>8}"
    )
    for mode, conv in (
        ("paper", "mironov"),
        ("paper", "cks"),
        ("exact", "mironov"),
        ("exact", "cks"),
        ("pld", "mironov"),
    ):
        t = time.perf_counter()
        spec = AccountantSpec("pbm", a.parties, a.dim, a.b, a.beta, c0=a.c0, mode=mode, conversion=conv)
        hist = [0] * (a.parties - 1) + [a.epochs]  # a sample released E times by all parties
        f, s = (epsilon(spec, hist, a.delta, u) for u in ("feature_record", "sample_record"))
        cb = epsilon(spec, [0] * (a.parties - 1) + [a.epochs * a.n_train], a.delta, "column_block")
        print(
            f"{mode:<8} {conv if mode != 'pld' else '(none)':<10} {'yes' if spec.upper_bound else 'NO':>11} "
            f"{f:>15.1f} {s:>14.0f} {cb:>13.4g} {time.perf_counter() - t:>8.2f}"
        )


if __name__ == "__main__":
    main()
