"""A feature party's encrypted histograms: per node, feature and bin, the homomorphic sum (a product of ciphertexts)
of its rows' encrypted g/h, with fewer products than one pass a feature.

One pass a feature multiplies every row of a node into its bin: (rows - filled bins) products a feature. The party
instead joins features into chains (:func:`plan_chains`): the rows of a node are first multiplied into the cells of
the chain's joint code (rows with the same bins in every feature of the chain), and each feature's bins, and each
shorter prefix of the chain, are then sums of those cells. A chain's features share the rows' products, so where
the joint code has far fewer cells than the node has rows (correlated or few-level columns) most of the work is done
once for all of them. The sums are the same integers (a product modulo N^2 or n is associative and commutative), and
the plan never takes more products than one pass a feature: joining two groups of features into one saves
rows - cells(joint) products.

The chains are the party's own choice, from its own columns (nothing of it crosses). The work runs in the party's
:class:`~.pool.Pool`: its workers hold the bin codes (:func:`install_party`) and the tree's ciphertexts
(:func:`load_cts`), and a task is a (node, chain) pair (:func:`chain_sums`)."""

from __future__ import annotations

import numpy as np

from .scheme import group_products, ints_from_bytes


def plan_chains(codes: np.ndarray, most: int | None = None, keep: float = 0.5) -> list[list[int]]:
    """Chains of the columns of ``codes`` [n, d] (the missing code counts as a code): columns in order of their
    distinct codes, fewest first; a column joins the current chain while the chain's joint code keeps at most
    ``keep`` x n cells (over every row) and the chain has fewer than ``most`` columns, else it begins the next."""
    n, d = codes.shape
    if d == 0:
        return []
    card = [len(np.unique(codes[:, j])) for j in range(d)]
    order = sorted(range(d), key=lambda j: (card[j], j))
    chains: list[list[int]] = []
    cur: list[int] = []
    key = None
    for j in order:
        if cur and (most is None or len(cur) < most):
            joint = np.unique(key * (int(codes[:, j].max()) + 1) + codes[:, j], return_inverse=True)[1]
            if joint.max(initial=-1) + 1 <= keep * n:
                cur.append(j)
                key = joint.astype(np.int64)
                continue
        if cur:
            chains.append(cur)
        cur, key = [j], np.unique(codes[:, j], return_inverse=True)[1].astype(np.int64)
    chains.append(cur)
    return chains


def install_party(state: dict, pid: str, codes: np.ndarray, missing: int, chains: list[list[int]]) -> None:
    state[pid] = {"codes": np.ascontiguousarray(codes), "missing": int(missing), "chains": chains, "cts": None}


def load_cts(state: dict, pid: str, raw: np.ndarray, lanes: int, modulus: int) -> None:
    """The tree's ciphertexts (lane-major rows of ``raw`` [lanes * n_k, width]) as integers, per lane."""
    vals = ints_from_bytes(raw)
    n = len(vals) // max(int(lanes), 1)
    state[pid]["cts"] = [vals[i * n : (i + 1) * n] for i in range(int(lanes))]
    state[pid]["modulus"] = modulus


def _grouped(gid: np.ndarray, lanes_vals: list[list], modulus) -> tuple[np.ndarray, np.ndarray, list[list], int]:
    """Products of ``lanes_vals`` (per lane, one value an item) grouped by ``gid``: each group's id, the position of
    its first item, its product per lane, and the products taken."""
    order = np.argsort(gid, kind="stable")
    g = gid[order]
    bounds = np.flatnonzero(np.diff(g)) + 1
    starts = np.concatenate([[0], bounds, [len(g)]]).astype(np.int64)
    out, muls = [], 0
    for vals in lanes_vals:
        prods, m = group_products(vals, order, starts, modulus)
        out.append(prods)
        muls += m
    return g[starts[:-1]], order[starts[:-1]], out, muls


def chain_sums(state: dict, pid: str, rows: np.ndarray, chain_at: list[int]) -> tuple[list, int]:
    """For the party's rows ``rows`` (one node's) and its chains ``chain_at``: every filled bin of every feature in
    them, as (feature, bins [int array], per lane the bins' sums), and the products taken."""
    st = state[pid]
    codes, missing, modulus = st["codes"], st["missing"], st["modulus"]
    out, muls = [], 0
    rows = np.asarray(rows, dtype=np.int64)
    for c in chain_at:
        chain = st["chains"][c]
        cd = codes[np.ix_(rows, chain)].astype(np.int64)
        keys = [cd[:, 0]]  # keys[j]: the joint code of the chain's first j + 1 columns, per row
        for j in range(1, len(chain)):
            keys.append(np.unique(keys[-1] * (int(cd[:, j].max()) + 1) + cd[:, j], return_inverse=True)[1])
        vals = [[lane[i] for i in rows.tolist()] for lane in st["cts"]]
        ids, rep, vals, m = _grouped(keys[-1], vals, modulus)  # the rows into the joint cells
        muls += m
        for j in range(len(chain) - 1, 0, -1):  # column j's bins, and the prefix j - 1's cells, from prefix j's cells
            bins, _, sums, m = _grouped(cd[rep, j], vals, modulus)
            muls += m
            out.append(_filled(chain[j], bins, sums, missing))
            ids, first, vals, m = _grouped(keys[j - 1][rep], vals, modulus)
            rep = rep[first]
            muls += m
        out.append(_filled(chain[0], cd[rep, 0], vals, missing))
    return out, muls


def _filled(feature: int, bins: np.ndarray, sums: list[list], missing: int):
    keep = np.flatnonzero(bins != missing)
    return feature, bins[keep], [[s[i] for i in keep.tolist()] for s in sums]
