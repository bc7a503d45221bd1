"""Epsilon of PBM-VFL's Phishing setting in every accountant mode (docs/PBM_VFL.md).

    python scripts/pbm_epsilons.py [--parties 5 --dim 16 --b 32 --beta 0.1 --epochs 100 --delta 1e-5 --c0 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vflbench.accountant import AccountantSpec, NoisySumAccountant  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("parties", 5), ("dim", 16), ("b", 32), ("beta", 0.1), ("epochs", 100), ("delta", 1e-5), ("c0", 8.0)):
        ap.add_argument(f"--{name}", type=type(default), default=default)
    a = ap.parse_args()
    print(f"M={a.parties} P={a.dim} b={a.b} beta={a.beta} E={a.epochs} delta={a.delta:g} c0={a.c0:g}")
    print(f"{'mode':<8} {'conversion':<10} {'feature eps':>12} {'sample eps':>12} {'Remark 6.3':>12} {'seconds':>8}")
    for mode, conv in (("paper", "mironov"), ("paper", "cks"), ("exact", "mironov"), ("exact", "cks"), ("pld", "mironov")):
        t = time.perf_counter()
        acc = NoisySumAccountant(AccountantSpec("pbm", a.parties, a.dim, a.b, a.beta, c0=a.c0, mode=mode, conversion=conv), n_samples=1)
        acc.releases[0, a.parties] = a.epochs  # one sample released E times by all parties
        f, s, low = (acc.get_epsilon(a.delta, k) for k in ("feature", "sample", "sample_lower"))
        print(f"{mode:<8} {conv if mode != 'pld' else '(none)':<10} {f:>12.1f} {s:>12.0f} {low:>12.1f} {time.perf_counter() - t:>8.2f}")


if __name__ == "__main__":
    main()
