"""The privacy accountant from the command line: PBM-VFL's epsilons in every mode and unit, and the PBM beta that
reaches a target epsilon (docs/PBM_VFL.md, experiments/boundary/).

    python scripts/epsilon.py table [--parties 5 --dim 16 --b 32 --beta 0.1 --epochs 100 --delta 1e-5 --c0 8]
    python scripts/epsilon.py beta --target 15611 --releases 400 --dim 10 --b 32            # per-party releases
    (LASER-VFL, PlugVFL, ...)
    python scripts/epsilon.py beta --target 15611 --releases 400 --dim 16 --b 32 --release sum --parties 4

``table``: Phishing's setting by default; record units assume the record does not enter local training.
``beta``: bisects beta in (0, 1/4] on the accountant's own epsilon (pld by default) of ``--releases`` releases
of one sample's ``--dim`` values (the worst-off sample of a run; a class-balanced sampler draws some
samples about three times per epoch), for the feature-record unit by default. Prints the largest beta
on the grid whose epsilon is at most the target, and that epsilon.
"""

from __future__ import annotations

import argparse
import sys
import time

from vflbench.privacy.accountant import AccountantSpec, epsilon


def table(argv: list[str]) -> None:
    """Epsilon of PBM-VFL's Phishing setting in every accountant mode and unit (docs/PBM_VFL.md)."""
    ap = argparse.ArgumentParser(prog="epsilon.py table", description=table.__doc__)
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
    a = ap.parse_args(argv)
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


def beta(argv: list[str]) -> None:
    """The PBM beta at which a mechanism at a method's boundary reaches a target certified epsilon."""
    ap = argparse.ArgumentParser(prog="epsilon.py beta", description=beta.__doc__)
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
    a = ap.parse_args(argv)
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


COMMANDS = {"table": table, "beta": beta}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(
            f"usage: python scripts/epsilon.py {{{'|'.join(COMMANDS)}}} [options] (--help after one)", file=sys.stderr
        )
        return 2
    COMMANDS[argv[0]](argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
