"""The PBM beta at which a mechanism at a method's boundary reaches a target certified epsilon.

    python scripts/equal_epsilon.py --target 15611 --releases 400 --dim 10 --b 32            # per-party releases
    (LASER-VFL, PlugVFL, ...)
    python scripts/equal_epsilon.py --target 15611 --releases 400 --dim 16 --b 32 --release sum --parties 4

Bisects beta in (0, 1/4] on the accountant's own epsilon (pld by default) of ``--releases`` releases
of one sample's ``--dim`` values (the worst-off sample of a run; a class-balanced sampler draws some
samples about three times per epoch), for the feature-record unit by default. Prints the largest beta
on the grid whose epsilon is at most the target, and that epsilon.
"""

from __future__ import annotations

import argparse

from vflbench.privacy.accountant import AccountantSpec, epsilon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=float, required=True, help="the epsilon to match")
    ap.add_argument("--releases", type=int, required=True, help="releases of the worst-off sample over the run")
    ap.add_argument("--dim", type=int, required=True, help="values per release (the representation size)")
    ap.add_argument("--b", type=int, default=32)
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--release", choices=("each", "sum"), default="each")
    ap.add_argument("--unit", choices=("feature_record", "sample_record", "column_block"), default="feature_record")
    ap.add_argument("--mode", choices=("pld", "exact"), default="pld")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--steps", type=int, default=14)
    a = ap.parse_args()
    counts = [0] * a.parties
    counts[(0 if a.release == "each" else a.parties - 1)] = a.releases

    def eps(beta: float) -> float:
        return epsilon(
            AccountantSpec("pbm", a.parties, a.dim, b=a.b, beta=beta, mode=a.mode, release=a.release),
            counts,
            a.delta,
            a.unit,
        )

    lo, hi = 1e-4, 0.25
    for _ in range(a.steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if eps(mid) <= a.target else (lo, mid)
    print(
        f"beta = {lo:.5f}: epsilon {eps(lo):.6g} <= target {a.target:g} ({a.unit}, {a.mode}, delta {a.delta:g}, "
        f"{a.releases} releases of {a.dim} values, release={a.release})"
    )


if __name__ == "__main__":
    main()
