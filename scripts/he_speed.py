"""Encrypted SecureBoost's techniques, each against what it replaced, side by side in one sitting (A B A B, one
thread, medians of the rounds and their ratio): docs/SPEED.md, "Encrypted SecureBoost".

    python scripts/he_speed.py primitives            # microseconds an operation, 2,048-bit Paillier and OU
    python scripts/he_speed.py sums --data ../shared/data   # products of one tree's root on Credit's four parties
    python scripts/he_speed.py runs --data ../shared/data   # whole runs: each technique switched off, then on

``primitives``: the label party's encryption (vflbench before: (1 + m N) r^N mod N^2 with a full 2,048-bit r; DJN's
short exponent h_s^r without and with fixed-base tables; the tables through the CRT), a feature party's
re-randomisation, a homomorphic sum (one product), a shift by one packed sum's bits (the compression), and a
decryption, under Paillier and OU. ``sums``: the products a party takes for a node of all 24,000 training rows,
one pass a feature against the chains of vflbench.trees.he.bin_sums, on Credit's real bin codes (32 bins a
column, the parties of `--parties 4`), and their seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gmpy2
import numpy as np
from gmpy2 import mpz

from vflbench.trees.he import OkamotoUchiyama, Paillier
from vflbench.trees.he.fixed_base import FixedBase
from vflbench.trees.he.scheme import random_digits

ROUNDS = 4


def _timed(fn, n: int) -> float:
    t0 = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t0) / n * 1e6


def _ab(label: str, a, b, n: int, rounds: int = ROUNDS) -> str:
    """A B A B ...: microseconds an operation of each, their medians and the ratio B / A."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(_timed(a, n))
        tb.append(_timed(b, n))
    ma, mb = statistics.median(ta), statistics.median(tb)
    return f"| {label} | {ma:,.1f} | {mb:,.1f} | {mb / ma:.3f} |"


def primitives() -> None:
    he = Paillier.generate(2048)
    party = Paillier.from_ints(he.public_ints(), he.exp_bits)
    ou = OkamotoUchiyama.generate(2049)
    ou_party = OkamotoUchiyama.from_ints(ou.public_ints(), ou.exp_bits)
    m = (1 << 121) - 12345  # a packed (g, h, 1) of Credit's 24,000 rows: 122 bits
    n, n2 = he.n, he.nsquare
    rng = np.random.default_rng(0)

    def full_r(k):  # vflbench before: a fresh r < N and r^N mod N^2
        for _ in range(k):
            r = mpz(int(rng.integers(1, 2**62))) << 1984 | 1
            (1 + m * n) % n2 * gmpy2.powmod(r, n, n2) % n2

    def djn_plain(k):  # DJN's h_s^r, r of 224 bits, a plain powmod
        for d in random_digits(k, he.exp_bits, 32):
            r = sum(int(x) << (32 * i) for i, x in enumerate(d))
            (1 + m * n) % n2 * gmpy2.powmod(he.hs, r, n2) % n2

    table = FixedBase(he.hs, n2)

    def djn_table(k):  # fixed-base tables, modulo N^2 (what a party without the key can do)
        for d in random_digits(k, he.exp_bits, 12):
            (1 + m * n) % n2 * table.pow_digits(d) % n2

    def djn_crt(k):  # the tables modulo p^2 and q^2 (the label party's)
        he.encrypt_many([m] * k)

    for f in (full_r, djn_plain, djn_table, djn_crt):
        f(3)  # tables built before any clock starts
    ou.encrypt_many([m] * 3)
    ou_party.zeros(3)
    party.zeros(3)
    print("| label party's encryption, 2,048-bit Paillier | A (us) | B (us) | B / A |")
    print("|---|---:|---:|---:|")
    print(_ab("r^N (before) -> DJN h_s^r, plain powmod", full_r, djn_plain, 20))
    print(_ab("DJN plain powmod -> fixed-base tables", djn_plain, djn_table, 300))
    print(_ab("fixed-base tables mod N^2 -> through the CRT", djn_table, djn_crt, 2000))
    print(_ab("r^N (before) -> DJN, tables, CRT (now)", full_r, djn_crt, 20))
    print(_ab("Paillier (now) -> OU (now)", djn_crt, lambda k: ou.encrypt_many([m] * k), 2000))
    print()
    cts = he.encrypt_many([m] * 400)
    octs = ou.encrypt_many([m] * 400)
    e = mpz(1) << 122

    def mul(cs, mod):
        def f(k):
            acc = cs[0]
            for i in range(k):
                acc = acc * cs[i % 400] % mod

        return f

    def shift(cs, mod):
        return lambda k: [pow(cs[i % 400], e, mod) for i in range(k)]

    def dec(key, cs):
        return lambda k: [key.decrypt_one(cs[i % 400]) for i in range(k)]

    import phe

    priv = phe.PaillierPrivateKey(phe.PaillierPublicKey(int(n)), int(he.p), int(he.q))

    def phe_dec(k):
        for i in range(k):
            priv.raw_decrypt(int(cts[i % 400]))

    print("| operation | Paillier (us) | OU (us) | OU / Paillier |")
    print("|---|---:|---:|---:|")
    print(_ab("a feature party's re-randomisation (fixed-base, no key)", party.zeros, ou_party.zeros, 1000))
    print(_ab("homomorphic sum (one product)", mul(cts, n2), mul(octs, ou.n), 50_000))
    print(_ab("shift by 122 bits (one packed sum)", shift(cts, n2), shift(octs, ou.n), 500))
    print(_ab("decryption (CRT; OU: c^t mod p^2)", dec(he, cts), dec(ou, octs), 200))
    print()
    print("| decryption, 2,048-bit Paillier | A (us) | B (us) | B / A |")
    print("|---|---:|---:|---:|")
    print(_ab("python-paillier raw_decrypt -> vflbench", phe_dec, dec(he, cts), 200))


def sums(data: str | None) -> None:
    """One tree's root on Credit: every party's products over all 24,000 training rows."""
    import os

    from vflbench.trees.binning import fit_cuts
    from vflbench.trees.he.bin_sums import chain_sums, install_party, load_cts, plan_chains

    if data:
        os.environ["VFLBENCH_DATA_MIRROR"] = data
    from vflbench.data.datasets import load_dataset

    ds = load_dataset("credit")
    x = np.asarray(ds.x_train, dtype=np.float64)
    he = OkamotoUchiyama.generate(2049)
    pa = Paillier.generate(2048)
    blocks = np.array_split(np.arange(x.shape[1]), 4)  # --parties 4: contiguous blocks of columns
    print("| party (columns) | one pass a feature: products | chains: products | chains | A (s) | B (s) | B / A |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for key in (he, pa):
        cts = key.to_bytes(key.encrypt_many(list(range(len(x)))))
        for k, cols in enumerate(blocks):
            cuts = fit_cuts(x[:, cols], 32, "quantile")
            codes = cuts.codes(x[:, cols])
            rows = np.arange(len(x))
            out = {}
            for name, chains in (("one pass", [[j] for j in range(len(cols))]), ("chains", plan_chains(codes))):
                state: dict = {}
                install_party(state, "p", codes, cuts.missing, chains)
                load_cts(state, "p", cts, 1, key.modulus)
                out[name] = (state, chains)
            ta, tb, counts = [], [], {}
            for _ in range(2):
                for name, t in (("one pass", ta), ("chains", tb)):
                    state, chains = out[name]
                    t0 = time.perf_counter()
                    _, muls = chain_sums(state, "p", rows, list(range(len(chains))))
                    t.append(time.perf_counter() - t0)
                    counts[name] = muls
            ma, mb = statistics.median(ta), statistics.median(tb)
            print(
                f"| {key.name} party {k} ({len(cols)}) | {counts['one pass']:,} | {counts['chains']:,} | "
                f"{out['chains'][1]} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} |"
            )


# whole runs: Credit, 4 parties, every block, OU, 6 trees; each variant switches one technique off
RUN = ["run", "--dataset", "credit", "--parties", "4", "--method", "secureboost", "--method-opt", "encryption=ou",
       "--method-opt", "trees=6", "--test-missing", "none", "--seed", "0", "--quiet"]  # fmt: skip
VARIANTS = {
    "now": ("all of it, --threads 2", ["--threads", "2"]),
    "one_pass": ("one pass a feature (no chains), --threads 2", ["--threads", "2"]),
    "in_turn": ("parties asked one after another, --threads 2", ["--threads", "2"]),
    "one_thread": ("--threads 1", ["--threads", "1"]),
}


def _switch_off(variant: str) -> None:
    """Patch one technique out of this process before the run starts."""
    if variant == "one_pass":
        from vflbench.trees import secureboost

        secureboost.plan_chains = lambda codes, **_: [[j] for j in range(codes.shape[1])]
    if variant == "in_turn":
        from vflbench.trees.links import Link, LocalLink

        LocalLink.exchange_all = Link.exchange_all


def one(variant: str, out: str) -> None:
    from vflbench.cli.app import app

    _switch_off(variant)
    try:
        app([*RUN, *VARIANTS[variant][1], "--out", out])
    except SystemExit as e:
        if e.code:
            raise


def runs(data: str | None, rounds: int = 2) -> None:
    """A B A B: every variant against "now", each a fresh process; medians of the seconds a tree after the first
    (which also starts the workers and builds their tables) and of the whole training."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    env = {**os.environ, **({"VFLBENCH_DATA_MIRROR": data} if data else {})}
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    per_tree: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for v in VARIANTS:
                out = os.path.join(tmp, f"{v}{r}")
                subprocess.run([sys.executable, __file__, "_one", v, out], env=env, check=True)
                (m,) = [json.load(open(os.path.join(out, d, "manifest.json"))) for d in os.listdir(out)]
                seconds[v].append(m["timings"]["train_s"])
                per_tree[v].append(statistics.median(m["history"]["seconds"][1:]))
    now, now_tree = statistics.median(seconds["now"]), statistics.median(per_tree["now"])
    print("| switched off | a tree (s): without | with | with / without | training (s): without | with |")
    print("|---|---:|---:|---:|---:|---:|")
    for v, (label, _) in VARIANTS.items():
        if v != "now":
            off, off_tree = statistics.median(seconds[v]), statistics.median(per_tree[v])
            print(f"| {label} | {off_tree:.2f} | {now_tree:.2f} | {now_tree / off_tree:.3f} | {off:.1f} | {now:.1f} |")
    print(f"(rounds, train s: {seconds}; a tree: {per_tree})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("primitives", "sums", "runs", "_one"))
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--data", default=None, help="the data mirror (VFLBENCH_DATA_MIRROR) for sums and runs")
    a = ap.parse_args()
    if a.what == "primitives":
        primitives()
    elif a.what == "sums":
        sums(a.data)
    elif a.what == "runs":
        runs(a.data)
    else:
        one(*a.rest)


if __name__ == "__main__":
    main()
