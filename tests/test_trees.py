"""Gradient-boosted trees (issue "trees"): the histogram booster's rules on hand-built cases, SecureBoost equal to the
central algorithm tree for tree (with and without missing blocks, and under test masks), Paillier equal to the
clear protocol, the packing's arithmetic, and the two methods end to end with their refusals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.trees.binning import fit_cuts
from vflbench.trees.booster import (
    BoostParams,
    FixedPoint,
    best_splits,
    bin_sums,
    filled_bin_sums,
    fit_central,
    predict_codes,
)
from vflbench.trees.he import OkamotoUchiyama, Paillier
from vflbench.trees.he.packing import Packing, unpack_compressed
from vflbench.trees.secureboost import FeatureParty, LabelParty, LocalLink, Protocol, decode, encode

from .conftest import needs_mirror

runner = CliRunner()


def _table(n=1200, k=3, dk=4, seed=0, p_missing=0.3, classes=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k * dk))
    z = x[:, 0] + x[:, dk + 1] * x[:, -1] + 0.3 * rng.standard_normal(n)
    y = (z > 0.2).astype(int) if classes == 2 else np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    x[rng.random(x.shape) < 0.05] = np.nan  # missing cells inside held blocks too
    held = rng.random((n, k)) >= p_missing
    joined = x.copy()
    for j in range(k):
        joined[~held[:, j], j * dk : (j + 1) * dk] = np.nan
    return x, y, held, joined


TEST_BITS = {"none": 0, "paillier": 1024, "ou": 1344}  # small keys: the arithmetic is the same (the CLI's floors apart)


def _federated(x, y, held, dk, params, encryption="none", key_bits=None, classes=2, w=None, workers=1):
    k = held.shape[1]
    key_bits = key_bits or TEST_BITS[encryption]
    parties = [
        FeatureParty(j, x[held[:, j], j * dk : (j + 1) * dk], np.flatnonzero(held[:, j]), workers=workers)
        for j in range(k)
    ]
    booked = np.zeros((k, 2), dtype=np.int64)

    def book(j, up, down):
        booked[j] += (up, down)

    link = LocalLink(parties, book)
    label = LabelParty(link, held, [j * dk for j in range(k)], Protocol(params, encryption, key_bits, workers))
    model = label.fit(y, np.ones(len(y)) if w is None else w, classes)
    return model, label, parties, link, booked


# ----------------------------------------------------------------------------- the booster's rules


@pytest.mark.parametrize("outputs", [1, 2, 5])  # 5: the sparse product's path
def test_bin_sums_are_the_loop_over_rows_they_replace(outputs):
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 5, (200, 3)).astype(np.uint8)  # 4 bins + the missing code 4
    codes[:, 2] = np.where(codes[:, 2] == 3, 4, codes[:, 2])  # bin 3 of feature 2 holds no row
    g = rng.integers(-50, 50, (200, outputs))
    h = rng.integers(0, 50, (200, outputs))
    node_of = rng.integers(0, 4, 200)
    G, H, N = bin_sums(codes, g, h, [1, 3], node_of, 5, outputs)
    for s, v in enumerate([1, 3]):
        for j in range(3):
            for b in range(4):
                rows = (node_of == v) & (codes[:, j] == b)
                assert N[s, j, b] == rows.sum()
                assert (G[s, j, b] == g[rows].sum(0)).all() and (H[s, j, b] == h[rows].sum(0)).all()
    at, Gf, Hf, count = filled_bin_sums(codes, g, h, [1, 3], node_of, 5)  # what a party sends: the filled bins only
    assert at.tolist() == np.flatnonzero(N.reshape(-1)).tolist()
    assert (Gf == G.reshape(-1, outputs)[at]).all() and (Hf == H.reshape(-1, outputs)[at]).all()
    assert (count == N.reshape(-1)[at]).all()


def _best_split_by_loops(G, H, tot_g, tot_h, n_cuts, params, fp):
    """The split rule written out cut by cut in Python floats: XGBoost's gain summed over the outputs, both missing
    directions, every side's hessian at least min_child_weight in every output; the first maximum wins."""
    lam, best = params.reg_lambda, None
    g_all, h_all = [v / 2**fp.bits for v in tot_g], [v / 2**fp.bits for v in tot_h]
    parent = sum(g * g / (h + lam) for g, h in zip(g_all, h_all, strict=True))
    for j in range(G.shape[0]):
        g_miss = [g_all[o] - G[j, :, o].sum() / 2**fp.bits for o in range(G.shape[2])]
        h_miss = [h_all[o] - H[j, :, o].sum() / 2**fp.bits for o in range(G.shape[2])]
        for t in range(1, n_cuts[j] + 1):
            for direction in (0, 1):
                gl = [G[j, :t, o].sum() / 2**fp.bits + direction * g_miss[o] for o in range(G.shape[2])]
                hl = [H[j, :t, o].sum() / 2**fp.bits + direction * h_miss[o] for o in range(G.shape[2])]
                gr, hr = (
                    [a - b for a, b in zip(g_all, gl, strict=True)],
                    [a - b for a, b in zip(h_all, hl, strict=True)],
                )
                if min(hl) < params.min_child_weight or min(hr) < params.min_child_weight:
                    continue
                gain = (
                    sum(a * a / (b + lam) + c * c / (e + lam) for a, b, c, e in zip(gl, hl, gr, hr, strict=True))
                    - parent
                )
                if best is None or gain > best[0]:
                    best = (gain, j, t, direction)
    return best


def test_the_best_split_of_many_features_and_outputs_is_the_one_a_loop_over_every_cut_finds(monkeypatch):
    """best_splits scores a chunk of features at a time (SPLIT_CHUNK): one feature a chunk, or all at once, the split
    is the one the loop over every feature, cut, direction and output finds, and so is its gain."""
    import vflbench.trees.booster as booster

    rng = np.random.default_rng(3)
    fp, params = FixedPoint(4), BoostParams(min_child_weight=2.0, reg_lambda=0.5)
    d, b, outputs = 7, 6, 3
    G = rng.integers(-200, 200, (2, d, b, outputs))
    H = rng.integers(0, 60, (2, d, b, outputs))
    tot_g = G.sum((1, 2)) + rng.integers(-300, 300, (2, outputs))  # missing mass besides the bins
    tot_h = H.sum((1, 2)) + rng.integers(0, 90, (2, outputs))
    n_cuts = np.array([5, 5, 3, 5, 1, 5, 4])
    found = {}
    for chunk in (1, 1 << 20):
        monkeypatch.setattr(booster, "SPLIT_CHUNK", chunk)
        found[chunk] = best_splits(list(G), list(H), tot_g, tot_h, n_cuts, params, fp)
    assert found[1] == found[1 << 20]
    for v, s in enumerate(found[1]):
        gain, j, t, direction = _best_split_by_loops(G[v], H[v], tot_g[v], tot_h[v], n_cuts, params, fp)
        assert (s.feature, s.bin, s.default_left) == (j, t, direction == 1)
        assert s.gain == pytest.approx(gain, rel=1e-12)


def test_a_node_with_empty_bins_finds_the_split_the_loop_over_every_cut_finds():
    """Deep nodes leave most bins empty, and a cut after an empty bin repeats the gain of the cut before it: with 70%
    of the bins empty the split and its gain are the ones the loop over every feature, cut and direction finds (the
    first maximum among equal gains)."""
    rng = np.random.default_rng(11)
    fp, params = FixedPoint(4), BoostParams(min_child_weight=1.0, reg_lambda=0.5)
    nodes, d, b, outputs = 6, 9, 12, 3
    G = rng.integers(-200, 200, (nodes, d, b, outputs))
    H = rng.integers(1, 60, (nodes, d, b, outputs))
    empty = rng.random((nodes, d, b)) < 0.7
    G[empty], H[empty] = 0, 0
    tot_g = G.sum((1, 2)) + rng.integers(-300, 300, (nodes, outputs))
    tot_h = H.sum((1, 2)) + rng.integers(0, 90, (nodes, outputs))
    n_cuts = rng.integers(1, b, d)
    for v, s in enumerate(best_splits(list(G), list(H), tot_g, tot_h, n_cuts, params, fp)):
        best = _best_split_by_loops(G[v], H[v], tot_g[v], tot_h[v], n_cuts, params, fp)
        if best is None:
            assert s is None
            continue
        gain, j, t, direction = best
        assert (s.feature, s.bin, s.default_left) == (j, t, direction == 1)
        assert s.gain == pytest.approx(gain, rel=1e-12)


def test_the_best_split_by_hand_and_the_default_direction_follows_the_missing_mass():
    """One feature, two bins: rows {g: -1 x 3 in bin 0, +1 x 3 in bin 1}, lambda 0. The split at t = 1 separates
    them. The node's totals are g = -5, h = 8: its missing rows carry g = -5, h = 2, and go left with the negative
    ones: (-8)^2/5 + 3^2/3 - (-5)^2/8 against (-3)^2/3 + (-2)^2/5 - (-5)^2/8 on the right. With no missing mass they
    go to the child with the larger hessian."""
    fp = FixedPoint(0)
    params = BoostParams(reg_lambda=0.0, min_child_weight=0.0, gamma=0.0)
    G = np.array([[[[-3], [3]]]])  # [node, feature, bin, output]
    H = np.array([[[[3], [3]]]])
    (s,) = best_splits(G, H, np.array([[-5]]), np.array([[8]]), np.array([1]), params, fp)
    assert (s.feature, s.bin, s.default_left) == (0, 1, True)
    assert s.gain == pytest.approx(64 / 5 + 9 / 3 - 25 / 8)
    H2 = np.array([[[[4], [2]]]])
    (s2,) = best_splits(G, H2, np.array([[0]]), np.array([[6]]), np.array([1]), params, fp)
    assert s2.default_left is True  # no missing mass: the larger hessian is on the left
    # a split whose side falls under min_child_weight is no split
    (none,) = best_splits(G, H, np.array([[0]]), np.array([[6]]), np.array([1]), BoostParams(min_child_weight=4), fp)
    assert none is None


def test_cuts_are_midpoints_of_few_values_and_a_missing_cell_has_its_own_code():
    x = np.array([[1.0], [2.0], [2.0], [4.0], [np.nan]])
    cuts = fit_cuts(x, 8, "quantile")
    assert cuts.values[0, : cuts.n_cuts[0]].tolist() == [1.5, 3.0]
    assert cuts.codes(x)[:, 0].tolist() == [0, 1, 1, 2, 8]
    assert cuts.threshold(0, 2) == 3.0  # split 2 sends x < 3 left


# ----------------------------------------------------------------------------- SecureBoost against the central run


@pytest.mark.parametrize("p_missing", [0.0, 0.3])
@pytest.mark.parametrize("classes", [2, 3])
def test_secureboost_equals_the_central_algorithm_tree_for_tree_and_under_test_masks(p_missing, classes):
    dk = 4
    x, y, held, joined = _table(p_missing=p_missing, classes=classes)
    params = BoostParams(trees=8, max_depth=4, max_bin=16)
    central, cuts = fit_central(joined, y, np.ones(len(y)), classes, params)
    model, label, parties, link, booked = _federated(x, y, held, dk, params, classes=classes)
    assert len(model.trees) == 8
    for a, b in zip(central.trees, model.trees, strict=True):
        assert a.structure() == b.structure()
    # every split's threshold is known to its owner alone; the label party holds (owner, record id)
    for tree, owners in zip(model.trees, label.owner, strict=True):
        for v, f in enumerate(tree.feature):
            if f >= 0:
                k, rec = owners[v]
                assert k == f // dk and parties[k].table[rec][:2] == (f % dk, tree.bin[v])
    # prediction through the parties under a test mask equals the central run on the NaN-filled table
    rng = np.random.default_rng(5)
    xt = rng.standard_normal((300, 3 * dk))
    obs = rng.random((300, 3)) < 0.6
    xt_joined = xt.copy()
    for j in range(3):
        xt_joined[~obs[:, j], j * dk : (j + 1) * dk] = np.nan
    link.phase = "eval"
    for j, p in enumerate(parties):
        p.set_batch(xt[:, j * dk : (j + 1) * dk])
    np.testing.assert_array_equal(
        label.predict(model, obs), predict_codes(central, cuts.codes(xt_joined), cuts.missing)
    )
    assert (booked > 0).all()  # every party sent and received


@pytest.mark.parametrize("scheme,workers", [("paillier", 1), ("ou", 1), ("ou", 2)])
def test_encryption_gives_the_trees_of_the_clear_protocol(scheme, workers):
    """Spec 7.2 (b): n = 300, 2 trees, depth 3, 2 parties; Paillier and OU, in this process and in two worker
    processes a party."""
    dk = 3
    x, y, held, _ = _table(n=300, k=2, dk=dk, seed=3)
    params = BoostParams(trees=2, max_depth=3, max_bin=8)
    clear, *_ = _federated(x, y, held, dk, params)
    enc, label, parties, _, _ = _federated(x, y, held, dk, params, encryption=scheme, workers=workers)
    for a, b in zip(clear.trees, enc.trees, strict=True):
        assert a.structure() == b.structure()
    assert label.he.ops["encrypt"] == 600 and label.he.ops["decrypt"] > 0
    assert all(p.he.ops["add"] > 0 and p.he.ops["rerandomise"] > 0 for p in parties)


def _shared_obfuscator(he, a, b) -> bool:
    """Whether ciphertexts a and b carry the same obfuscator, found without the key: their quotient is then an
    obfuscator-free encryption of the plaintexts' difference, (1 + N)^d = 1 + d N under Paillier (a multiple of N
    plus one), G^d under OU (a known power of G for any small d)."""
    import gmpy2

    q = a * gmpy2.invert(b, he.modulus) % he.modulus
    if he.name == "paillier":
        return (q - 1) % he.n == 0
    inv = gmpy2.invert(he.g, he.n)
    return any(q == gmpy2.powmod(he.g, d, he.n) or q == gmpy2.powmod(inv, d, he.n) for d in range(0, 301))


@pytest.mark.parametrize("scheme", ["paillier", "ou"])
def test_encryptions_in_worker_processes_are_exact_and_share_no_obfuscator_and_a_fixed_r_is_caught(scheme, monkeypatch):
    """The label party's encryptions in two processes decrypt to their plaintexts; two encryptions of one value
    differ; no two ciphertexts share an obfuscator (a shared one gives away the plaintexts' difference without the
    key: the attack). The mutant: an obfuscator with a fixed r, planted in the scheme, is caught by the same test."""
    from vflbench.trees.he import pool as pool_module

    cls = {"paillier": Paillier, "ou": OkamotoUchiyama}[scheme]
    he = cls.generate(TEST_BITS[scheme])
    pool = pool_module.Pool(2)
    try:
        he.attach(pool)
        ms = [7] * 300 + list(range(300))  # the same plaintext again and again, then distinct ones
        cts = he.encrypt(ms)
    finally:
        pool.close()
    assert he.decrypt(cts) == ms and he.ops["encrypt"] == 600
    assert len({int(c) for c in cts[:300]}) == 300  # one value, 300 different ciphertexts
    pairs = [(i, j) for i in range(0, 600, 7) for j in range(i + 1, min(i + 40, 600))]
    assert not any(_shared_obfuscator(he, cts[i], cts[j]) for i, j in pairs)
    # the attack works: a fixed r (the mutant) makes every pair share its obfuscator, and gives m1 - m2 away
    module = __import__(f"vflbench.trees.he.{scheme}", fromlist=["random_digits"])
    monkeypatch.setattr(module, "random_digits", lambda count, bits, window: [[1234] * -(-bits // window)] * count)
    mutant = he.encrypt([50, 8, 7, 7])
    assert he.decrypt(mutant) == [50, 8, 7, 7]
    assert _shared_obfuscator(he, mutant[0], mutant[1]) and mutant[2] == mutant[3]
    if scheme == "paillier":
        assert (mutant[0] * pow(int(mutant[1]), -1, int(he.modulus)) - 1) % he.modulus // he.n == 42


def test_python_paillier_decrypts_vflbench_paillier_and_a_textbook_ou_decrypts_vflbench_ou():
    """Known answers from independent code under the same keys: python-paillier's private key (its own CRT
    decryption, from p and q) decrypts vflbench's DJN ciphertexts, at the label party's CRT encryption and at a
    feature party's public-key re-randomisation; a textbook Okamoto-Uchiyama decryption written here,
    L(c^(p-1) mod p^2) / L(G^(p-1) mod p^2) mod p, decrypts vflbench's OU ciphertexts."""
    import phe

    ms = [0, 1, 2**60 + 12345, 2**121 - 1, 987654321987654321]
    he = Paillier.generate(2048)
    party = Paillier.from_ints(he.public_ints(), he.exp_bits)  # a feature party's copy: the public key only
    priv = phe.PaillierPrivateKey(phe.PaillierPublicKey(int(he.n)), int(he.p), int(he.q))
    cts = he.encrypt(ms)
    assert [priv.raw_decrypt(int(c)) for c in cts] == ms
    rerandomised = party.compress(cts, 0, 1)  # one sum a ciphertext: each times a fresh encryption of 0
    assert [priv.raw_decrypt(int(c)) for c in rerandomised] == ms and not set(rerandomised) & set(cts)
    assert [priv.raw_decrypt(int(c)) for c in party.encrypt_many(ms)] == ms  # the public-key encryption too

    ou = OkamotoUchiyama.generate(2049)
    p, p2 = int(ou.p), int(ou.p) ** 2

    def textbook(c: int) -> int:
        def ell(x: int) -> int:
            return (x - 1) // p

        return ell(pow(c % p2, p - 1, p2)) * pow(ell(pow(int(ou.g) % p2, p - 1, p2)), -1, p) % p

    cts = ou.encrypt(ms)
    assert [textbook(int(c)) for c in cts] == ms
    party = OkamotoUchiyama.from_ints(ou.public_ints(), ou.exp_bits)
    assert [textbook(int(c)) for c in party.compress(cts, 0, 1)] == ms
    assert int(ou.n).bit_length() in (2048, 2049) and ou.usable_bits == 682 and party.usable_bits == 682


@pytest.mark.parametrize("outputs", [1, 3])
def test_packing_and_compression_round_trip_and_a_sum_is_the_sum_of_its_rows(outputs):
    he = Paillier.generate(1024)
    rng = np.random.default_rng(outputs)
    pk = Packing.public(4, outputs)
    g = rng.integers(-pk.offset + 1, pk.offset, size=(4, outputs))
    h = rng.integers(0, pk.offset, size=(4, outputs))
    cts = he.encrypt(pk.pack(g, h))
    assert [pk.unpack(p) for p in he.decrypt(cts)] == [(a, b, 1) for a, b in zip(g.tolist(), h.tolist(), strict=True)]
    total = he.sum_groups(cts, np.arange(4), np.array([0, 4]))
    assert pk.unpack(he.decrypt(total)[0]) == (g.sum(0).tolist(), h.sum(0).tolist(), 4)
    cap = he.usable_bits // pk.bits
    packed = he.compress([cts[0], None, cts[2]], pk.bits, cap)
    sums = unpack_compressed(he.decrypt(packed), 3, cap, pk.bits)
    assert [pk.unpack(s) if s else None for s in sums] == [
        (g[0].tolist(), h[0].tolist(), 1),
        None,
        (g[2].tolist(), h[2].tolist(), 1),
    ]
    # a re-randomised ciphertext decrypts the same and is not the one the label party made
    again = he.compress([cts[1]], pk.bits, 1)
    assert again[0] != cts[1] and he.decrypt(again) == he.decrypt([cts[1]])


def test_the_public_packing_depends_on_the_row_count_alone_and_holds_every_fixed_point_value():
    from vflbench.trees.booster import FixedPoint

    for n in (1, 7, 2_000, 30_000, 1_000_000):
        pk = Packing.public(n, 2)
        for w in (0.01, 1.0, 37.5, 5e4):  # class weights of any label prior
            fp = FixedPoint.for_rows(n, w)
            assert fp.encode(np.array([w, -w])).__abs__().max() < pk.offset  # |g| <= w, h <= w
        assert pk == Packing.public(n, 2)


def test_messages_round_trip():
    data = encode("x", a=np.arange(5, dtype=np.int32), flag=True, name="n", nothing=None)
    kind, f = decode(data)
    assert kind == "x" and f["a"].tolist() == [0, 1, 2, 3, 4] and f["flag"] is True and f["nothing"] is None
    # the bytes are the header, then each array's bytes in C order, and nothing else; the arrays come back read-only
    arrays = {"g": np.arange(12).reshape(3, 4)[:, ::2], "empty": np.zeros((2, 0)), "bits": np.array([True, False])}
    data = encode("hist", node=3, **arrays)
    head = json.dumps(
        {"kind": "hist", "s": {"node": 3}, "a": [[n, a.dtype.str, list(a.shape)] for n, a in arrays.items()]},
        separators=(",", ":"),
    ).encode()
    assert bytes(data) == len(head).to_bytes(4, "little") + head + b"".join(a.tobytes() for a in arrays.values())
    kind, f = decode(data)
    for n, a in arrays.items():
        assert f[n].dtype == a.dtype and f[n].shape == a.shape and (f[n] == a).all() and not f[n].flags.writeable


# ----------------------------------------------------------------------------- the methods


@needs_mirror
def test_gbdt_and_secureboost_train_under_missing_blocks_and_refuse_what_trees_lack(tmp_path):
    common = ["--dataset", "credit", "--parties", "4", "--train-missing", "mcar:0.5", "--test-missing",
              "none,mcar:0.5", "--seed", "0", "--quiet", "--method-opt", "trees=20"]  # fmt: skip
    f1 = {}
    for m in ("gbdt", "secureboost"):
        r = runner.invoke(app, ["run", "--method", m, *common, "--out", str(tmp_path / m)])
        assert r.exit_code == 0, r.output
        (run_dir,) = list((tmp_path / m).iterdir())
        res = pd.read_csv(run_dir / "results.csv")
        f1[m] = res[res["metric"] == "f1"].set_index("test_missing")["value"]
        man = json.loads((run_dir / "manifest.json").read_text())
        assert man["extras"]["trees_grown"] == 20
    assert (f1["gbdt"] > 40).all() and (f1["secureboost"] > 40).all()
    assert man["secureboost"]["bytes_by_kind"]["train"]["hist_up"][0] > 0
    assert man["extras"]["comm_bytes_up"] == sum(
        sum(v) for k, v in man["secureboost"]["bytes_by_kind"]["train"].items() if k.endswith("_up")
    )
    for extra, message in [
        (["--method", "gbdt", "--attack", "norm"], "has no parties: nothing crosses"),
        (["--method", "secureboost", "--label-defense", "gaussian"], "use rr:epsilon=E"),
        (["--method", "gbdt", "--runtime", "processes"], "gbdt is the central reference"),
        (["--method", "secureboost", "--compress", "quant:bits=4"], "send no representations"),
        (["--method", "secureboost", "--eval-epochs", "5"], "trees=N instead"),
    ]:
        r = runner.invoke(app, ["run", "--dataset", "synthetic", *extra, "--out", str(tmp_path / "never")])
        assert r.exit_code == 2 and message in r.output, (extra, r.output)
    assert not (tmp_path / "never").exists()
    # three classes under Paillier: every class's g and h packed in one plaintext a row
    paillier = ["--method-opt", "encryption=paillier", "--method-opt", "trees=1"]
    three = ["--dataset", "synthetic", "--data-opt", "n_classes=3", "--test-missing", "none", "--quiet"]
    r = runner.invoke(app, ["run", *three, "--method", "secureboost", *paillier, "--out", str(tmp_path / "three")])
    assert r.exit_code == 0, r.output
    (run3,) = list((tmp_path / "three").iterdir())
    assert json.loads((run3 / "manifest.json").read_text())["extras"]["trees_grown"] == 1


@needs_mirror
@pytest.mark.integration
def test_secureboost_across_processes_gives_the_numbers_of_one_process_and_the_bytes_it_counts(tmp_path):
    """Bar `trees` 2 in small: 30 trees; the party processes answer the label party over the wire."""
    flags = ["run", "--dataset", "credit", "--method", "secureboost", "--parties", "4", "--train-missing", "mcar:0.5",
             "--test-missing", "none,mcar:0.5", "--seed", "0", "--method-opt", "trees=30", "--quiet"]  # fmt: skip
    out = {}
    for rt in ("inprocess", "processes"):
        r = runner.invoke(app, [*flags, "--runtime", rt, "--out", str(tmp_path / rt)])
        assert r.exit_code == 0, r.output
        (out[rt],) = list((tmp_path / rt).iterdir())
    one, many = (pd.read_csv(out[rt] / "results.csv") for rt in ("inprocess", "processes"))
    pd.testing.assert_frame_equal(one, many[one.columns])
    man = json.loads((out["processes"] / "manifest.json").read_text())
    assert man["runtime"]["measured_equals_accounted"]


@needs_mirror
@pytest.mark.integration
def test_ou_across_processes_gives_the_numbers_of_one_process_and_the_bytes_on_the_wire_are_the_counted(tmp_path):
    """Under OU (2,049-bit key) with two worker processes a party: the party processes sum, pack and re-randomise in
    their own workers, the label party asks them all at once, and the run gives the rows of one process (the same
    trees); the bytes on the wire equal the counted ones, and the clear run's estimate equals them too."""
    flags = ["run", "--dataset", "credit", "--method", "secureboost", "--parties", "4", "--train-missing", "mcar:0.5",
             "--test-missing", "none,mcar:0.5", "--seed", "0", "--method-opt", "trees=2", "--method-opt",
             "encryption=ou", "--train-samples", "2000", "--threads", "2", "--quiet"]  # fmt: skip
    out = {}
    for rt in ("inprocess", "processes"):
        r = runner.invoke(app, [*flags, "--runtime", rt, "--out", str(tmp_path / rt)])
        assert r.exit_code == 0, r.output
        (out[rt],) = list((tmp_path / rt).iterdir())
    one, many = (pd.read_csv(out[rt] / "results.csv") for rt in ("inprocess", "processes"))
    seconds = [c for c in one.columns if c.startswith("he_") and c.endswith("_s")]  # wall seconds, never equal
    assert (one[seconds] > 0).all().all() and (many[["he_encrypt_s", "he_decrypt_s"]] > 0).all().all()
    assert many[["he_sum_s", "he_pack_s"]].isna().all().all()  # a party's seconds stay in its process: blank
    one = one.drop(columns=seconds)
    pd.testing.assert_frame_equal(one, many[one.columns])
    man = json.loads((out["processes"] / "manifest.json").read_text())
    assert man["runtime"]["measured_equals_accounted"]
    est = man["secureboost"]["ou_estimate"]
    train = man["secureboost"]["bytes_by_kind"]["train"]
    assert est["bytes_up"] == sum(sum(v) for k, v in train.items() if k.endswith("_up"))


# ----------------------------------------------------------------------------- binning against XGBoost's


def test_sketch_binning_is_xgboosts_cut_sets_and_fed_those_codes_xgboost_grows_the_central_algorithms_trees():
    """Spec 7.2 (d), parity with the library: ``binning=sketch`` (the default) takes XGBoost's own interior cuts of
    each column (unweighted); XGBoost trained on vflbench's bin codes (gbdt's ``binning=sketch``) then splits between
    the same values as the central algorithm: the first tree's root split is the same and the scores agree to 1e-3
    AUC."""
    import xgboost as xgb
    from sklearn.metrics import roc_auc_score

    x, y, held, joined = _table(n=3000, p_missing=0.3)
    dm = xgb.QuantileDMatrix(joined, max_bin=32, nthread=1)
    ptr, vals = dm.get_quantile_cut()
    cuts = fit_cuts(joined, 32, "sketch")
    for j in range(joined.shape[1]):
        col = joined[~np.isnan(joined[:, j]), j]
        inner = vals[ptr[j] : ptr[j + 1]][
            (vals[ptr[j] : ptr[j + 1]] > col.min()) & (vals[ptr[j] : ptr[j + 1]] <= col.max())
        ]
        np.testing.assert_array_equal(cuts.values[j, : cuts.n_cuts[j]], inner.astype(np.float64))
    assert (cuts.values != fit_cuts(joined, 32, "quantile").values).any()  # the two binnings differ
    assert fit_cuts(joined, 32).values.tobytes() == cuts.values.tobytes()  # the default binning is the sketch

    params = BoostParams(trees=20, max_depth=3, max_bin=32, learning_rate=0.3)
    model, qcuts = fit_central(joined, y, np.ones(len(y)), 2, params)
    codes = qcuts.codes(joined).astype(np.float64)
    codes[np.isnan(joined)] = np.nan
    booster = xgb.train(
        {"tree_method": "hist", "max_depth": 3, "eta": 0.3, "max_bin": 256, "lambda": 1.0, "min_child_weight": 1.0,
         "objective": "binary:logistic", "base_score": float(y.mean()), "nthread": 1},
        xgb.DMatrix(codes, label=y, missing=np.nan), num_boost_round=20,
    )  # fmt: skip
    ours = predict_codes(model, qcuts.codes(joined), qcuts.missing)[:, 0]
    theirs = booster.predict(xgb.DMatrix(codes, missing=np.nan), output_margin=True)
    assert abs(roc_auc_score(y, ours) - roc_auc_score(y, theirs)) < 1e-3
    root = booster.trees_to_dataframe().query("Tree == 0 and Node == 0").iloc[0]
    first = model.trees[0]
    assert root["Feature"] == f"f{first.feature[0]}" and float(root["Split"]) == first.bin[0]  # x < bin code


# ----------------------------------------------------------------------------- a lost party


def test_a_party_lost_at_a_tree_is_asked_nothing_after_it_splits_no_later_node_and_a_rejoin_brings_it_back():
    from vflbench.runs.faults import PartyFaults, parse_failures

    dk = 4
    x, y, held, joined = _table(p_missing=0.2)
    params = BoostParams(trees=8, max_depth=3, max_bin=16)
    runs = {}
    for schedule in ("none", "1@4", "1@4:7"):
        k = held.shape[1]
        parties = [FeatureParty(j, x[held[:, j], j * dk : (j + 1) * dk], np.flatnonzero(held[:, j])) for j in range(k)]
        link = LocalLink(parties, lambda *a: None)
        label = LabelParty(link, held, [j * dk for j in range(k)], Protocol(params))
        label.faults = PartyFaults(parse_failures(schedule), k)
        model = label.fit(y, np.ones(len(y)), 2)
        runs[schedule] = (model, label, link)
    plain, lost, back = (runs[s][0] for s in ("none", "1@4", "1@4:7"))
    owners = {s: [{o for o, _ in t if o >= 0} for t in runs[s][1].owner] for s in runs}
    for a, b in zip(plain.trees[:3], lost.trees[:3], strict=True):  # before the loss: the same trees
        assert a.structure() == b.structure()
    assert 1 in set().union(*owners["none"][3:])  # party 1 splits later trees when present ...
    assert all(1 not in o for o in owners["1@4"][3:])  # ... and none once lost
    assert all(1 not in o for o in owners["1@4:7"][3:6]) and 1 in set().union(*owners["1@4:7"][6:])  # back at tree 7
    kinds = runs["1@4"][2].traffic["train"].by_kind
    assert kinds["leave_down"] == [0, kinds["leave_down"][1], 0] and kinds["leave_down"][1] > 0
    assert "back_down" not in kinds and runs["1@4:7"][2].traffic["train"].by_kind["back_down"][1] > 0
    # what party 1 was sent: 3 trees' g/h in the lost run, against 8 in the plain one (the same bytes a tree)
    assert kinds["gh_down"][1] * 8 == runs["none"][2].traffic["train"].by_kind["gh_down"][1] * 3 > 0
    assert runs["1@4"][1].faults.manifest()[0] == {
        "party": 1, "epoch": 4, "step": 0, "cause": "scheduled", "rejoined_epoch": None,
    }  # fmt: skip


def test_a_party_gone_while_a_tree_grows_has_the_tree_grown_again_without_it():
    """Across processes a party found lost mid-tree (its process stopped) is lost from that tree: the tree is grown
    again without it, so the model equals the one whose schedule loses it at that tree."""
    from vflbench.runs.faults import PartyFaults, parse_failures
    from vflbench.trees.secureboost import PartyGone

    dk = 4
    x, y, held, _ = _table(p_missing=0.2)
    params = BoostParams(trees=6, max_depth=3, max_bin=16)

    class Dying(LocalLink):
        builds = 0

        def exchange(self, k, data, reply):
            if k == 2 and decode(data)[0] == "build":
                Dying.builds += 1
                if Dying.builds == 9:  # in the middle of tree 3 or so
                    raise PartyGone(2, "connection closed by peer", sent=True)
            return super().exchange(k, data, reply)

    models, labels = {}, {}
    for name, link_cls, schedule in (("killed", Dying, "none"), ("scheduled", LocalLink, None)):
        parties = [FeatureParty(j, x[held[:, j], j * dk : (j + 1) * dk], np.flatnonzero(held[:, j])) for j in range(3)]
        link = link_cls(parties, lambda *a: None)
        label = LabelParty(link, held, [j * dk for j in range(3)], Protocol(params))
        if schedule is None:  # the tree the killed run lost it at
            schedule = f"2@{labels['killed'].faults.records[0].epoch}"
        label.faults = PartyFaults(parse_failures(schedule), 3)
        models[name], labels[name] = label.fit(y, np.ones(len(y)), 2), label
    rec = labels["killed"].faults.records[0]
    assert rec.cause == "connection closed by peer" and 2 <= rec.epoch <= 4 and labels["killed"].redone == 1
    for a, b in zip(models["killed"].trees, models["scheduled"].trees, strict=True):
        assert a.structure() == b.structure()


@needs_mirror
@pytest.mark.integration  # process groups: make test-slow (CI)
def test_secureboost_loses_a_party_across_processes_as_in_one_process_and_a_killed_one_as_a_scheduled_one(
    tmp_path, monkeypatch
):
    """The runtime's lost party for trees: a scheduled loss (with and without a rejoin) gives the rows and bytes of
    one process; a party process that dies as tree 5 begins is lost there, that tree is grown again without it, and
    the run's metrics equal the scheduled loss at tree 5; the bytes on the wire equal the accounted throughout."""
    from vflbench.core.errors import VFLBenchWarning

    flags = ["run", "--dataset", "credit", "--method", "secureboost", "--parties", "4", "--train-missing", "mcar:0.1",
             "--test-missing", "none,mcar:0.5", "--seed", "0", "--method-opt", "trees=12", "--train-samples", "3000",
             "--quiet"]  # fmt: skip

    def one(name, *extra):
        with pytest.warns(VFLBenchWarning, match="party 2 lost in tree 5"):
            r = runner.invoke(app, [*flags, *extra, "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        (d,) = list((tmp_path / name).iterdir())
        return pd.read_csv(d / "results.csv"), json.loads((d / "manifest.json").read_text())

    for schedule in ("2@5", "2@5:9"):
        a, _ = one(f"in{schedule}", "--fail-party", schedule)
        b, mb = one(f"pr{schedule}", "--fail-party", schedule, "--runtime", "processes")
        pd.testing.assert_frame_equal(a, b[a.columns])
        assert set(a["parties_lost"]) == {schedule} and mb["runtime"]["measured_equals_accounted"]
    monkeypatch.setenv("VFLBENCH_KILL_PARTY", "secureboost:2:5")
    c, mc = one("killed", "--runtime", "processes")
    (loss,) = mc["party_losses"]
    assert loss["party"] == 2 and loss["epoch"] == 5 and loss["cause"] != "scheduled"
    scheduled, _ = one("in2@5-again", "--fail-party", "2@5")
    assert c["value"].tolist() == scheduled["value"].tolist() and mc["runtime"]["measured_equals_accounted"]


# ----------------------------------------------------------------------------- categorical columns


def _categorical_table(n=3000, seed=0, p_missing=0.2):
    """Three parties of two columns: party 0 holds a numeric column and a 60-level code column (0: a missing cell)
    that carries the signal, party 1 two numeric columns, party 2 a numeric and a 300-level noise code column."""
    rng = np.random.default_rng(seed)
    lv = rng.integers(1, 61, n).astype(float)
    noise = rng.integers(1, 301, n).astype(float)
    effect = rng.standard_normal(61)
    x = np.c_[rng.standard_normal(n), lv, rng.standard_normal((n, 2)), rng.standard_normal(n), noise]
    y = (effect[lv.astype(int)] + 0.5 * x[:, 2] + 0.3 * rng.standard_normal(n) > 0).astype(int)
    x[rng.random(n) < 0.03, 1] = 0  # missing cells of a code column
    held = rng.random((n, 3)) >= p_missing
    joined = x.copy()
    for j in range(3):
        joined[~held[:, j], 2 * j : 2 * j + 2] = np.nan
    return x, y, held, joined


def test_a_partition_split_orders_levels_by_their_gradient_and_keeps_its_smaller_side_within_the_threshold():
    fp = FixedPoint(0)
    G = np.array([[[[10], [-10], [10], [-10], [0]]]])  # one node, one feature, 5 bins (the last empty)
    H = np.array([[[[10], [10], [10], [10], [0]]]])
    tot_g, tot_h = np.array([[0]]), np.array([[40]])
    cat = np.array([True])
    (s,) = best_splits(G, H, tot_g, tot_h, np.array([4]), BoostParams(max_cat_threshold=2), fp, cat)
    assert s.left_bins == (1, 3) and s.bin == 2  # the two negative-gradient levels together, whatever their codes
    (s,) = best_splits(G, H, tot_g, tot_h, np.array([4]), BoostParams(max_cat_threshold=1), fp, cat)
    assert min(len(s.left_bins), 4 - len(s.left_bins)) == 1  # one level against the rest
    (s,) = best_splits(G, H, tot_g, tot_h, np.array([4]), BoostParams(), fp)  # as a number: bins 0 | 1 2 3
    assert s.left_bins is None and s.gain < 20


def test_levels_keep_their_bins_the_rare_ones_share_one_and_an_unseen_level_is_missing():
    x = np.array([[3.0], [3.0], [3.0], [7.0], [7.0], [9.0], [11.0], [0.0], [np.nan]])
    cuts = fit_cuts(x, 16, categorical=[0], cat_bins=3)  # the two most frequent levels keep a bin
    assert cuts.levels[0].tolist() == [3.0, 7.0] and cuts.other[0] and cuts.n_cuts[0] == 2 and cuts.max_bin == 16
    assert cuts.codes(np.array([[3.0], [7.0], [9.0], [0.0], [np.nan], [42.0]]))[:, 0].tolist() == [0, 1, 2, 16, 16, 2]
    few = fit_cuts(x, 16, categorical=[0])
    assert few.levels[0].tolist() == [3.0, 7.0, 9.0, 11.0] and not few.other[0]
    assert few.codes(np.array([[42.0]]))[0, 0] == 16  # a level never seen in training: missing (the default)


@pytest.mark.parametrize("p_missing", [0.0, 0.2])
def test_partition_splits_secureboost_equals_the_central_algorithm_and_its_predictions(p_missing):
    x, y, held, joined = _categorical_table(p_missing=p_missing)
    params = BoostParams(trees=6, max_depth=4, max_bin=16, max_cat_bin=64, max_cat_threshold=8)
    central, cuts = fit_central(joined, y, np.ones(len(y)), 2, params, categorical=[1, 5])
    parties = [
        FeatureParty(j, x[held[:, j], 2 * j : 2 * j + 2], np.flatnonzero(held[:, j]), [1] if j != 1 else [])
        for j in range(3)
    ]
    link = LocalLink(parties, lambda *a: None)
    label = LabelParty(link, held, [0, 2, 4], Protocol(params))
    model = label.fit(y, np.ones(len(y)), 2)
    assert label.categorical.tolist() == [False, True, False, False, False, True]
    cats = 0
    for a, b in zip(central.trees, model.trees, strict=True):
        assert a.structure() == b.structure()
        cats += len(b.cats)
    assert cats > 0  # the signal is in the levels
    # the owner keeps the levels that go left, not the label party
    (tree, owners), v = next(((t, o), v) for t, o in zip(model.trees, label.owner, strict=True) for v in t.cats)
    k, rec = owners[v]
    levels, _ = parties[k].table[rec][2]
    assert set(levels) <= set(cuts.levels[tree.feature[v]].tolist())
    rng = np.random.default_rng(9)
    xt, _, _, _ = _categorical_table(n=400, seed=3)
    xt[:5, 1] = 999.0  # unseen levels
    obs = rng.random((400, 3)) < 0.7
    xt_joined = xt.copy()
    for j in range(3):
        xt_joined[~obs[:, j], 2 * j : 2 * j + 2] = np.nan
    link.phase = "eval"
    for j, p in enumerate(parties):
        p.set_batch(xt[:, 2 * j : 2 * j + 2])
    np.testing.assert_array_equal(
        label.predict(model, obs), predict_codes(central, cuts.codes(xt_joined), cuts.missing)
    )


def test_paillier_grows_the_partition_splits_of_the_clear_protocol():
    x, y, held, joined = _categorical_table(n=300, p_missing=0.0)
    x, held = x[:, :4], held[:, :2]
    params = BoostParams(trees=2, max_depth=3, max_bin=8, max_cat_bin=16, max_cat_threshold=4)
    models = []
    for enc in ("none", "paillier", "ou"):
        parties = [FeatureParty(j, x[:, 2 * j : 2 * j + 2], np.arange(300), [1] if j == 0 else []) for j in range(2)]
        label = LabelParty(LocalLink(parties, lambda *a: None), held, [0, 2], Protocol(params, enc, TEST_BITS[enc]))
        models.append(label.fit(y, np.ones(len(y)), 2))
    assert any(t.cats for t in models[0].trees)
    for other in models[1:]:
        for a, b in zip(models[0].trees, other.trees, strict=True):
            assert a.structure() == b.structure()


# ----------------------------------------------------------------------------- what Paillier sends, by the numbers


def _cat_parties(x, held, classes_y=None):
    """The categorical table's three parties (party 0's and party 2's code columns split by levels)."""
    return [
        FeatureParty(j, x[held[:, j], 2 * j : 2 * j + 2], np.flatnonzero(held[:, j]), [1] if j != 1 else [])
        for j in range(3)
    ]


def _oracle(party: FeatureParty, g_int, h_int, nodes):
    """Per (node, feature, bin) the sums of g and h and the row count, by an independent route: np.add.at over the
    party's own rows and codes (neither bin_sums nor any packing)."""
    m, d, b = len(nodes), party.codes.shape[1], party.max_bin
    slot = np.full(int(party.node_of.max()) + 1, -1)
    slot[nodes] = np.arange(m)
    G = np.zeros((m, d, b, g_int.shape[1]), dtype=np.int64)
    H = np.zeros_like(G)
    N = np.zeros((m, d, b), dtype=np.int64)
    for i, row in enumerate(party.rows):
        s = slot[party.node_of[i]]
        if s < 0:
            continue
        for j in range(d):
            c = int(party.codes[i, j])
            if c < b:
                np.add.at(G, (s, j, c), g_int[row])
                np.add.at(H, (s, j, c), h_int[row])
                N[s, j, c] += 1
    return G, H, N


@pytest.mark.parametrize("scheme,classes", [("paillier", 2), ("paillier", 3), ("ou", 2), ("ou", 5)])
def test_decrypted_bin_sums_equal_the_clear_sums_exactly(scheme, classes):
    """n = 2,400 rows, parties missing 20% of their blocks, code columns split by levels, 2 and 3 classes (one packed
    plaintext a row with every class's g and h): after a tree, each party is asked for the histograms of every leaf
    its rows are in, and the label party's decryption gives (G, H, count) of every bin equal to the sums of the
    rows' integer g and h and their count, computed apart. (A packing that shifted each g sum by its row count grew
    the same trees before this test: the trees alone cannot tell.) OU's small key with five classes splits them into
    two lanes (two plaintexts a row, each with its count)."""
    x, y, held, _ = _categorical_table(n=2400, p_missing=0.2)
    if classes == 3:
        y = y + (x[:, 0] > 0.8).astype(int) * (2 - y)
    if classes == 5:
        y = y + 2 * (x[:, 0] > 0.5).astype(int) + (x[:, 2] > 0).astype(int)
    params = BoostParams(trees=2, max_depth=3, max_bin=8, max_cat_bin=16, max_cat_threshold=4)
    parties = _cat_parties(x, held)
    label = LabelParty(
        LocalLink(parties, lambda *a: None), held, [0, 2, 4], Protocol(params, scheme, TEST_BITS[scheme])
    )
    label.fit(y, np.ones(len(y)), classes)
    g_int, h_int = label.gh
    assert g_int.shape[1] == (1 if classes == 2 else classes) and label.packing.outputs == g_int.shape[1]
    assert label.packing.lanes == (2 if classes == 5 else 1)
    checked = 0
    for k, party in enumerate(parties):
        nodes = sorted(set(party.node_of.tolist()))
        _, f = label.link.ask(k, "build", nodes=np.asarray(nodes, dtype=np.int32))
        G, H, N = label._decrypted(f["at"], label.he.decrypt(label.he.from_bytes(f["cts"])), len(nodes), k)
        assert len(f["at"]) == int((N > 0).sum())  # it names its filled bins, and only those
        Go, Ho, No = _oracle(party, g_int, h_int, nodes)
        np.testing.assert_array_equal(N, No)
        np.testing.assert_array_equal(G, Go)
        np.testing.assert_array_equal(H, Ho)
        checked += int((No > 0).sum())
    assert checked > 100  # non-empty bins compared (every empty one is compared too: zeros)


def test_a_feature_party_receives_the_same_plaintext_fields_whatever_the_labels_and_the_same_under_ou():
    """The g/h a feature party is sent under encryption carry plaintext fields (the packing, the compression): for
    two label vectors of different priors (18.7% and 60% positive) every one of them is the same, in every tree's
    message (the offset no longer says the largest |g|, nor its first tree the label prior). Under OU a party is
    sent the same messages with the same fields: only the public key's integers (OU's n, G, H for Paillier's N, h_s)
    and the capacity that follows from the key's size differ, so it learns from OU what it learns from Paillier."""
    x, y, held, _ = _table(n=600, k=2, dk=3, seed=4)
    rng = np.random.default_rng(0)
    labels = [(rng.random(600) < 0.18667).astype(int), (rng.random(600) < 0.6).astype(int)]
    seen, kinds = {}, {}
    for scheme in ("paillier", "ou"):
        for yy in labels:
            parties = [FeatureParty(j, x[held[:, j], 3 * j : 3 * j + 3], np.flatnonzero(held[:, j])) for j in range(2)]
            got: list[dict] = []
            every: list[tuple] = []
            real = parties[1].handle

            def spy(data, real=real, got=got, every=every):
                kind, f = decode(data)
                every.append((kind, tuple(n for n in sorted(f) if not n.startswith("pk_"))))
                if kind in ("setup", "gh"):
                    got.append({n: v for n, v in f.items() if n != "cts" and not n.startswith("pk_")})
                return real(data)

            parties[1].handle = spy
            label = LabelParty(
                LocalLink(parties, lambda *a: None),
                held,
                [0, 3],
                Protocol(BoostParams(trees=3, max_depth=2, max_bin=8), scheme, TEST_BITS[scheme]),
            )
            w = np.where(yy == 1, len(yy) / (2 * yy.sum()), len(yy) / (2 * (len(yy) - yy.sum())))  # class-balanced
            label.fit(yy, w, 2)
            seen.setdefault(scheme, []).append(got)
            kinds.setdefault(scheme, []).append(every)
        a, b = seen[scheme]
        assert len(a) == 4 and a == b  # setup and three trees' g/h: the same fields, the same values
        assert a[1]["offset"] == Packing.public(600).offset
    # the same kinds of message with the same field names, in the same order, under both schemes
    assert kinds["paillier"][0] == kinds["ou"][0]
    for p, o in zip(seen["paillier"][0], seen["ou"][0], strict=True):
        assert {k: v for k, v in p.items() if k not in ("capacity", "encryption")} == {
            k: v for k, v in o.items() if k not in ("capacity", "encryption")
        }


@pytest.mark.parametrize("scheme", ["paillier", "ou"])
@pytest.mark.parametrize("features", ["continuous", "few_levels", "mixed"])
def test_the_encryption_estimate_of_a_clear_run_is_what_the_encrypted_run_sends(features, scheme):
    """The clear run's estimate counts every message as the encrypted run encodes it (the filled bins of every
    feature packed, the g/h of every held row, the key in the setup): its ciphertexts and bytes equal what the
    Paillier and the OU run of the same data count, on continuous features, 5-level features and a mix (so it is an
    upper bound, with equality)."""
    rng = np.random.default_rng(1)
    n, k, dk = 500, 2, 3
    cont = rng.standard_normal((n, k * dk))
    few = rng.integers(0, 5, (n, k * dk)).astype(float)
    x = {"continuous": cont, "few_levels": few, "mixed": np.where(np.arange(k * dk) % 2 == 0, cont, few)}[features]
    y = (x[:, 0] + x[:, 4] + 0.5 * rng.standard_normal(n) > 0.5).astype(int)
    held = rng.random((n, k)) >= 0.25
    params = BoostParams(trees=2, max_depth=3, max_bin=16)
    from vflbench.methods.secureboost import encryption_estimate

    out = {}
    for enc in ("none", scheme):
        model, label, parties, link, _ = _federated(x, y, held, dk, params, encryption=enc)
        out[enc] = (label, link)
    clear_label, clear_link = out["none"]
    est = encryption_estimate(clear_link, clear_label, n, 1, scheme, TEST_BITS[scheme])
    label, link = out[scheme]
    by = link.traffic["train"].by_kind
    sent_down = sum(sum(v) for kind, v in by.items() if kind.endswith("_down"))
    sent_up = sum(sum(v) for kind, v in by.items() if kind.endswith("_up"))
    assert (
        est["ciphertexts_up"] == label.he.ops["decrypt"]
        and est["ciphertexts_down"] == sum(int(held[:, j].sum()) for j in range(k)) * params.trees
    )
    assert (est["bytes_down"], est["bytes_up"]) == (sent_down, sent_up)
    if features == "few_levels":  # 5 bins a feature, not 16: what is packed follows the feature's own bins
        assert est["ciphertexts_up"] < sum(m for _, m, _ in clear_label.builds) * dk * 16 / est["capacity"]


@pytest.mark.parametrize("method", ["gbdt", "secureboost"])
def test_a_tree_method_refuses_one_bin_and_epochs_in_one_line(method, tmp_path):
    for extra, message in [
        (["--method-opt", "max_bin=1"], "a feature needs two bins to split"),
        (["--epochs", "2"], "grows trees, not epochs: give --method-opt trees=N"),
    ]:
        r = runner.invoke(app, ["run", "--dataset", "synthetic", "--method", method, *extra, "--out", str(tmp_path)])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (extra, r.output)
    assert not any(tmp_path.iterdir())


def test_secureboost_bins_a_small_categorical_as_wide_as_its_codes_with_the_numbers_of_4096(tmp_path):
    """In clear a categorical column's bins default to as many as the widest categorical's codes (at most 4,096):
    every level keeps its own bin either way, so a 60-level column gives the numbers of max_cat_bin=4096, with
    histograms 16 times narrower than 4,096 bins for every feature."""
    rng = np.random.default_rng(0)
    n = 2000
    lv = rng.integers(0, 60, n)
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n), "c": [f"L{v}" for v in lv]})
    df["y"] = (rng.standard_normal(60)[lv] + df["a"] > 0).astype(int)
    df.to_csv(tmp_path / "t.csv", index=False)
    vals = {}
    for tag, extra in (("auto", []), ("wide", ["--method-opt", "max_cat_bin=4096"])):
        r = runner.invoke(app, ["run", "--dataset", f"csv:{tmp_path / 't.csv'}", "--data-opt", "target=y", "--parties",
                                "3", "--method", "secureboost", "--method-opt", "trees=8", *extra, "--test-missing",
                                "none,mcar:0.5", "--quiet", "--out", str(tmp_path / tag)])  # fmt: skip
        assert r.exit_code == 0, r.output
        vals[tag] = pd.read_csv(next((tmp_path / tag).rglob("results.csv")))["value"].tolist()
        man = json.loads(next((tmp_path / tag).rglob("manifest.json")).read_text())
        assert man["extras"]["trees_grown"] == 8
    assert vals["auto"] == vals["wide"]


@pytest.mark.parametrize(
    "opts,message",
    [
        (["encryption=rsa"], "encryption"),
        (["encryption=paillier", "key_bits=1024"], ">= 2048"),
        (["encryption=paillier", "key_bits=2049"], "must be even"),
        (["encryption=ou", "ou_key_bits=2048"], "multiple of 3"),
        (["encryption=ou", "ou_key_bits=1536"], ">= 2049"),
        (["encryption=ou", "exp_bits=128"], ">= 224"),
    ],
)
def test_bad_encryption_options_get_one_line_and_exit_2(opts, message, tmp_path):
    """An unknown scheme, a key below the documented floor (Paillier: 2,048 bits; OU: 2,049), an OU key whose bits
    are not three times its primes', and a short exponent below 2 x 112 bits: one line naming the fix, exit 2,
    nothing written."""
    args = ["run", "--dataset", "synthetic", "--method", "secureboost", "--out", str(tmp_path / "never")]
    for o in opts:
        args += ["--method-opt", o]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.strip()]) <= 2, r.output
    assert not (tmp_path / "never").exists()


def test_chained_bin_sums_are_each_features_bins_with_fewer_products():
    """A party's chains (:mod:`vflbench.trees.he.bin_sums`) give every filled bin of every feature the product of
    exactly its rows' values (checked against a loop over rows), the missing code in no bin, and take fewer products
    than one pass a feature on correlated few-level columns (as many at worst)."""
    from gmpy2 import mpz

    from vflbench.trees.he.bin_sums import chain_sums, install_party, load_cts, plan_chains

    rng = np.random.default_rng(0)
    n, missing = 3000, 32
    base = rng.integers(0, 5, n)
    codes = np.stack(
        [base, np.minimum(base + rng.integers(0, 2, n), 5), rng.integers(0, 3, n), rng.integers(0, 33, n)], 1
    )
    codes[rng.random(codes.shape) < 0.05] = missing
    m = mpz(2**127 - 1)  # a prime: a product of values is what the party's sum is
    vals = [mpz(int(v)) for v in rng.integers(2, 2**62, n)]
    raw = np.frombuffer(b"".join(int(v).to_bytes(16, "big") for v in vals), np.uint8).reshape(n, 16)
    for most in (None, 1):  # chains as planned, and one pass a feature
        chains = plan_chains(codes) if most is None else [[j] for j in range(codes.shape[1])]
        state: dict = {}
        install_party(state, "p", codes, missing, chains)
        load_cts(state, "p", raw, 1, m)
        rows = np.flatnonzero(rng.random(n) < 0.6)
        out, muls = chain_sums(state, "p", rows, list(range(len(chains))))
        assert sorted(f for f, _, _ in out) == [0, 1, 2, 3]
        for f, bins, sums in out:
            present = sorted(set(codes[rows, f].tolist()) - {missing})
            assert bins.tolist() == present
            for b, s in zip(bins.tolist(), sums[0], strict=True):
                acc = mpz(1)
                for i in rows[codes[rows, f] == b]:
                    acc = acc * vals[i] % m
                assert acc == s
        if most is None:
            planned = muls
            assert any(len(c) > 1 for c in chains)
        else:
            assert planned < 0.75 * muls


def test_a_worker_error_comes_back_with_its_traceback_and_results_keep_their_order():
    from vflbench.trees.he.pool import Pool, WorkerError

    pool = Pool(2)
    try:
        assert pool.map(_square_or_fail, [(i,) for i in range(12)]) == [i * i for i in range(12)]
        with pytest.raises(WorkerError, match="ValueError: no 13"):
            pool.map(_square_or_fail, [(i,) for i in (1, 13, 2)])
        assert pool.map(_square_or_fail, [(3,)]) == [9]  # the pool goes on
    finally:
        pool.close()


def _square_or_fail(state, i):
    if i == 13:
        raise ValueError("no 13")
    return i * i


def test_a_tree_methods_early_stop_keeps_the_best_round_count_on_the_validation_rows_by_the_patience_rule():
    """--method-opt early_stop=N (issue 79, item 5): the trees train on the rows the neural methods train on (the run's
    validation rows held out, 0.1 when none are), and keep the round count that scores best on those rows. Checked
    against an independent computation: every prefix of the booster scored by scikit-learn's average precision on the
    validation rows, the patience rule applied by hand; the test predictions are the booster's with that many rounds."""
    from sklearn.metrics import average_precision_score

    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.inputs import prepare
    from vflbench.training.pipeline import build, early_stopping, train

    cfg = RunConfig(dataset="breast_cancer", method="gbdt", method_options={"early_stop": 5, "trees": 60}, seed=3)
    run = resolve(cfg)
    assert run.protocol.val_split == pytest.approx(0.1)
    inputs = prepare(run, "cpu")
    assert len(inputs.train.y) + len(inputs.y_val) == len(inputs.prep.data.y_train)  # the rows held out: not trained
    method = build(run, inputs)
    stop = early_stopping(run, inputs, method)
    train(run, inputs, method, [stop])
    import xgboost as xgb

    obs = inputs.val_train_obs.cpu().numpy()
    blocks = [inputs.val.x[k, :, : method.ctx.widths[k]].float().cpu().numpy() for k in range(method.k)]
    x = method.binned(method.categorical_codes(method.with_missing(blocks, obs)))
    curve = []
    for r in range(1, 61):
        p = method.booster.predict(method.matrix(xgb, x), iteration_range=(0, r))
        curve.append(100 * average_precision_score(inputs.y_val == 1, p))
        best = int(np.argmax(curve)) + 1  # the first of the best
        if r - best >= 5:
            break
    assert stop.extras()["best_epoch"] == best and stop.extras()["epochs_trained"] == len(curve)
    assert stop.extras()["val_best"] == pytest.approx(max(curve), abs=1e-9)
    assert method.round_limit == (best if best < 60 else None)


@pytest.mark.parametrize("name", ["gbdt", "xgboost", "secureboost"])
def test_early_stop_grows_no_round_after_the_count_stops_and_scores_as_growing_them_all(name, monkeypatch):
    """A tree method that predicts while growing is scored round by round and stops growing where the count stops:
    the same rounds kept, validation curve and test scores as growing every round and scoring them after (the path
    of parties as processes and of encrypted SecureBoost), with only the rounds scored grown."""
    from vflbench.methods import METHODS
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    trees = 300 if name == "xgboost" else 60  # the yardstick's rounds are fixed
    options = {"early_stop": 5, **({"trees": trees} if name != "xgboost" else {})}
    cfg = RunConfig(dataset="breast_cancer", method=name, method_options=options, seed=3,
                    test_missing=["none", "mcar:0.5"], train_missing="mcar:0.3")  # fmt: skip
    run = resolve(cfg)
    assert run.behaviour["method.trees.early_stop"] == 2
    live, _ = execute(run, device="cpu")
    monkeypatch.setattr(METHODS.get(name), "predicts_while_growing", lambda self: False)
    after, _ = execute(run, device="cpu")
    cols = ["test_missing", "metric", "value", "best_epoch", "epochs_trained", "val_best"]
    assert [[r[c] for c in cols] for r in live] == [[r[c] for c in cols] for r in after]
    scored = int(live[0]["epochs_trained"])
    assert scored < trees and int(after[0]["trees_grown"]) == trees
    assert int(live[0]["trees_grown"]) == scored
