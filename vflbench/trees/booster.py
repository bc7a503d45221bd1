"""vflbench's own histogram booster: second-order gradient boosting (XGBoost, Chen & Guestrin 2016) on binned
features with sparsity-aware split finding, written so that SecureBoost (:mod:`.secureboost`) runs the same
algorithm with the histograms summed by the parties and the splits routed by their owners.

One tree is grown level by level (:func:`grow`). The label holder computes g and h, turns them into integers of a
fixed point (:class:`FixedPoint`), asks for the histograms of the nodes it builds (the root, then the smaller child
of every split: the sibling is the parent's histogram minus the child's), and finds every node's best split from
integer sums, so the central run and the federated one compare exactly the same numbers. A node's missing mass
(rows whose cell is missing: a NaN, or a block the party does not hold) is its total minus its bins'; each
candidate is scored with it on the right, then on the left, and the better sets the node's default direction
(XGBoost's Algorithm 3). Ties go to the lowest feature (party order, then column order), then the lowest cut, then
missing-right. A node that saw no missing mass sends missing rows to the child with the larger hessian (the open
choice of the trees spec: XGBoost's convention would be a fixed side).

The gain is XGBoost's (unhalved): ``G_L^2/(H_L+l) + G_R^2/(H_R+l) - G^2/(H+l)``, summed over the outputs of a
multi-output tree; a split needs a gain above ``gamma`` and ``H >= min_child_weight`` on both sides for every output.
A leaf's value is ``-eta G/(H+l)``. Binary tasks grow one tree a round on the logistic loss; with C > 2 classes a
round is one multi-output tree on the softmax loss (SecureBoost+'s SBT-MO, FATE's multi-output trees): its leaves
hold C values and its histograms C pairs of sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .binning import DEFAULT_BINNING, fit_cuts

SOFTMAX_HESSIAN_FACTOR = 2.0  # XGBoost's multi:softprob hessian max(2 p (1 - p), 1e-16) (its documented bound)
MIN_HESSIAN = 1e-16
SPLIT_CHUNK = 1 << 16  # float64 values (cuts x outputs) of the features scored at once: 512 KiB, within a core's L2


@dataclass(frozen=True)
class BoostParams:
    trees: int = 300
    max_depth: int = 6
    learning_rate: float = 0.1
    max_bin: int = 256
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    binning: str = DEFAULT_BINNING  # vflbench.trees.binning.BINNINGS
    max_cat_bin: int = 0  # levels with a bin of their own in a categorical column (0: no categorical column)
    max_cat_threshold: int = 64  # a partition split's smaller side holds at most this many levels (XGBoost's default)

    @property
    def width(self) -> int:
        """The bins of the widest feature: the histograms' last axis, and the code of a missing cell."""
        return max(self.max_bin, self.max_cat_bin)


class Objective:
    """The loss: logistic for two classes (one output), softmax for more (one output per class)."""

    def __init__(self, n_classes: int):
        self.n_classes = int(n_classes)
        self.outputs = 1 if self.n_classes == 2 else self.n_classes

    def base_margin(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The constant first margin: the training prior's log-odds (binary) or log-priors (softmax), weighted."""
        prior = np.bincount(y, weights=w, minlength=self.n_classes) / w.sum()
        prior = np.clip(prior, 1e-6, 1 - 1e-6)
        if self.outputs == 1:
            return np.array([math.log(prior[1] / prior[0])])
        return np.log(prior)

    def probabilities(self, margin: np.ndarray) -> np.ndarray:
        """[n, outputs] margins -> [n, classes] probabilities."""
        if self.outputs == 1:
            p1 = 1.0 / (1.0 + np.exp(-margin[:, 0]))
            return np.stack([1.0 - p1, p1], 1)
        z = margin - margin.max(1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(1, keepdims=True)

    def grad_hess(self, margin: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g, h [n, outputs] of the weighted loss at ``margin``."""
        p = self.probabilities(margin)
        if self.outputs == 1:
            g = (p[:, 1] - y)[:, None]
            h = (p[:, 1] * (1 - p[:, 1]))[:, None]
        else:
            onehot = np.zeros_like(p)
            onehot[np.arange(len(y)), y] = 1.0
            g = p - onehot
            h = np.maximum(SOFTMAX_HESSIAN_FACTOR * p * (1 - p), MIN_HESSIAN)
        return g * w[:, None], h * w[:, None]

    def loss(self, margin: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
        p = self.probabilities(margin)
        return float(-(w * np.log(np.clip(p[np.arange(len(y)), y], 1e-15, 1))).sum() / w.sum())


@dataclass(frozen=True)
class FixedPoint:
    """g and h as integers ``round(v 2^bits)``: integer sums are exact (and so are float64 sums of them while they
    stay below 2^53), so the label holder, the parties and the central run see the same numbers, in plaintext, under
    mock encryption and under Paillier."""

    bits: int

    @classmethod
    def for_rows(cls, n: int, max_abs: float, wanted: int = 30) -> FixedPoint:
        """The most bits up to ``wanted`` with which any sum of ``n`` values of magnitude <= ``max_abs`` is exact in
        float64 (below 2^52)."""
        room = 52 - math.ceil(math.log2(max(n, 1) * max(max_abs, 1e-12) + 1)) - 1
        return cls(int(max(8, min(wanted, room))))

    def encode(self, v: np.ndarray) -> np.ndarray:
        return np.rint(v * (1 << self.bits)).astype(np.int64)

    def decode(self, v) -> np.ndarray:
        return np.asarray(v, dtype=np.float64) / (1 << self.bits)


@dataclass
class Tree:
    """One tree as arrays over its nodes (node 0 the root). ``feature`` is the global feature (party order, then
    column order; -1 at a leaf), ``bin`` the candidate cut t (a row goes left when its code is below t),
    ``default_left`` where missing rows go, ``value`` a leaf's outputs (the learning rate folded in)."""

    feature: list[int] = field(default_factory=list)
    bin: list[int] = field(default_factory=list)
    default_left: list[bool] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[np.ndarray] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    cats: dict[int, list[int]] = field(default_factory=dict)  # a node split on a categorical feature -> left bins

    def add(self, depth: int, outputs: int) -> int:
        self.feature.append(-1)
        self.bin.append(0)
        self.default_left.append(False)
        self.left.append(-1)
        self.right.append(-1)
        self.value.append(np.zeros(outputs))
        self.gain.append(0.0)
        self.depth.append(depth)
        return len(self.feature) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": np.asarray(self.feature, dtype=np.int64),
            "bin": np.asarray(self.bin, dtype=np.int64),
            "default_left": np.asarray(self.default_left, dtype=bool),
            "left": np.asarray(self.left, dtype=np.int64),
            "right": np.asarray(self.right, dtype=np.int64),
            "value": np.stack(self.value) if self.value else np.zeros((0, 1)),
        }

    def structure(self) -> list[tuple]:
        """Node by node (feature, bin, default_left, left, right, leaf value bytes, left bins of a categorical
        split): what "tree for tree" compares."""
        return [
            (f, b, dl, lc, rc, v.tobytes(), tuple(self.cats.get(i, ())))
            for i, (f, b, dl, lc, rc, v) in enumerate(
                zip(self.feature, self.bin, self.default_left, self.left, self.right, self.value, strict=True)
            )
        ]

    def goes_left(self, missing: int) -> np.ndarray:
        """[nodes, missing + 1] bool: per node and code whether a row goes left (the missing code: the default)."""
        codes = np.arange(missing + 1)
        out = codes[None, :] < np.asarray(self.bin, dtype=np.int64)[:, None]
        for v, bins in self.cats.items():
            out[v] = False
            out[v, bins] = True
        out[:, missing] = np.asarray(self.default_left, dtype=bool)
        return out


@dataclass
class Split:
    feature: int  # global
    bin: int  # a numeric feature: rows whose code is below it go left; a categorical one: how many bins go left
    default_left: bool
    gain: float
    left_bins: tuple[int, ...] | None = None  # a categorical feature: the bins that go left


# histograms(nodes, node_of) -> (G, H, N): int64 [len(nodes), d, B, outputs] x 2 and [len(nodes), d, B], bins 0..B-1
HistogramFn = Callable[[list[int], np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
# route(node, split, rows, left child, right child) -> bool [len(rows)]: which of the node's rows go left
RouteFn = Callable[[int, Split, np.ndarray, int, int], np.ndarray]


def best_splits(
    G: np.ndarray,
    H: np.ndarray,
    tot_g: np.ndarray,
    tot_h: np.ndarray,
    n_cuts: np.ndarray,
    params: BoostParams,
    fp: FixedPoint,
    categorical: np.ndarray | None = None,
) -> list[Split | None]:
    """The best split of each node from its histograms ``G, H`` [nodes, d, B, outputs] (integers; or a sequence of each
    node's [d, B, outputs]) and totals
    ``tot_g, tot_h`` [nodes, outputs]; None where no candidate passes (its gain <= gamma, or a side's hessian below
    min_child_weight). Vectorised over cuts and the two missing directions, a chunk of features at a time (the same
    numbers as all at once, in less memory); node by node.

    A ``categorical`` feature's bins are first ordered by their summed ``G / (H + lambda)`` (empty bins last), and its
    candidates are the prefixes of that order: a partition split whose left side is a set of levels (LightGBM's and
    XGBoost's categorical splits; for one output the best partition by the gain, Fisher 1958), whose smaller side
    holds at most ``max_cat_threshold`` of the node's levels (XGBoost's guard against over-fitting)."""
    lam, mc = params.reg_lambda, params.min_child_weight
    d, b, outputs = G[0].shape
    valid_cut = np.arange(1, b)[None, :] <= n_cuts[:, None]  # [d, B-1]
    cat = np.zeros(d, dtype=bool) if categorical is None else np.asarray(categorical, dtype=bool)
    step = max(1, SPLIT_CHUNK // max(1, b * outputs))  # features scored at once: their arrays stay in cache
    out: list[Split | None] = []
    for v in range(len(G)):
        Gv, Hv = G[v], H[v]
        order, valid = None, valid_cut
        if cat.any():  # per categorical feature its bins by G / (H + lambda), empty ones last
            filled = Hv[cat].sum(-1) > 0  # [d_cat, B]
            score = np.where(filled, (fp.decode(Gv[cat]) / (fp.decode(Hv[cat]) + lam)).sum(-1), np.inf)
            order = np.tile(np.arange(b), (d, 1))
            order[cat] = np.argsort(score, axis=1, kind="stable")
            Gv, Hv = Gv.copy(), Hv.copy()
            Gv[cat] = np.take_along_axis(Gv[cat], order[cat][..., None], axis=1)
            Hv[cat] = np.take_along_axis(Hv[cat], order[cat][..., None], axis=1)
            t = np.arange(1, b)[None, :]
            levels = filled.sum(1)[:, None]  # the node's levels with rows
            valid = valid_cut.copy()
            valid[cat] &= np.minimum(t, levels - t) <= params.max_cat_threshold
        g_all, h_all = fp.decode(tot_g[v]), fp.decode(tot_h[v])  # [outputs]
        g_miss = g_all - fp.decode(Gv.sum(1))  # [d, outputs]
        h_miss = h_all - fp.decode(Hv.sum(1))
        parent = (g_all**2 / (h_all + lam)).sum()
        # a column with no missing mass here scores the same cuts missing left as right: only right is scored (the
        # first maximum is the same), and a chunk's cuts stop at its columns' last valid cut
        missing = (g_miss != 0).any(1) | (h_miss != 0).any(1)
        gains = np.full((d, b - 1, 2), -np.inf)
        totals = np.broadcast_to(g_all, (b - 1, outputs)).copy(), np.broadcast_to(h_all, (b - 1, outputs)).copy()
        for lo in range(0, d, step):
            f = slice(lo, lo + step)
            top = int(n_cuts[f].max(initial=0))
            if top:
                gains[f, :top] = _cut_gains(
                    Gv[f, : top + 1], Hv[f, : top + 1], totals[0][:top], totals[1][:top], g_miss[f], h_miss[f],
                    missing[f], valid[f, :top], parent, lam, mc, fp,
                )  # fmt: skip
        flat = gains.reshape(-1)
        i = int(np.argmax(flat))  # the first maximum: lowest feature, then cut, then missing-right
        best = float(flat[i])
        if not best > params.gamma:
            out.append(None)
            continue
        j, t, direction = np.unravel_index(i, gains.shape)
        if float(h_miss[j].sum()) == 0.0:  # no missing mass here: missing rows follow the larger hessian
            hl_t = float(fp.decode(Hv[j, : t + 1].sum(0)).sum())
            default_left = hl_t >= float(h_all.sum()) - hl_t
        else:
            default_left = bool(direction == 1)
        left_bins = tuple(sorted(int(c) for c in order[j, : t + 1])) if cat[j] else None
        out.append(Split(int(j), int(t) + 1, bool(default_left), best, left_bins))
    return out


def _cut_gains(Gf, Hf, g_all, h_all, g_miss, h_miss, missing, valid, parent, lam, mc, fp) -> np.ndarray:
    """The gains [f, B-1, 2] of some columns' cuts at one node (``Gf, Hf`` [f, B, outputs], bins in the order the
    cuts take them; ``g_all, h_all`` the node's totals repeated per cut, [B-1, outputs]), missing right (0) and left
    (1: only the ``missing`` columns, -inf for the others); -inf where a cut is not valid or a side's hessian is below
    ``mc`` for an output."""
    scale = float(1 << fp.bits)  # fp.decode, in place: the prefix sums are integers, exact in float64
    gl, hl = Gf[:, :-1].astype(np.float64), Hf[:, :-1].astype(np.float64)  # [f, B-1, outputs]: bins < t
    for x in (gl, hl):
        np.cumsum(x, axis=1, out=x)
        x /= scale
    gains = np.full((*gl.shape[:2], 2), -np.inf)
    buffers = np.empty_like(gl), np.empty_like(gl)
    gains[:, :, 0] = _side_gains(gl, hl, g_all, h_all, valid, parent, lam, mc, buffers)
    if missing.all():
        gains[:, :, 1] = _side_gains(gl + g_miss[:, None], hl + h_miss[:, None], g_all, h_all, valid, parent, lam, mc,
                                     buffers)  # fmt: skip
    elif missing.any():
        m = missing
        gains[m, :, 1] = _side_gains(gl[m] + g_miss[m, None], hl[m] + h_miss[m, None], g_all, h_all, valid[m], parent,
                                     lam, mc, (buffers[0][: m.sum()], buffers[1][: m.sum()]))  # fmt: skip
    return gains


def _side_gains(gx, hx, g_all, h_all, valid, parent, lam, mc, buffers) -> np.ndarray:
    """The gain gx^2/(hx+lam) + gr^2/(hr+lam), summed over the outputs, less the parent's, of cuts whose left side
    sums to ``gx, hx`` [f, cuts, outputs]; -inf where a cut is not ``valid`` or a side's hessian is below ``mc`` in an
    output. Computed in two buffers, with the same operations in the same order as written."""
    right, left = buffers
    np.subtract(h_all, hx, out=right)  # hr
    ok = valid & (hx >= mc).all(-1) & (right >= mc).all(-1)
    right += lam
    np.subtract(g_all, gx, out=left)  # gr
    np.square(left, out=left)
    np.divide(left, right, out=right)  # gr^2 / (hr + lam)
    np.add(hx, lam, out=left)
    np.divide(np.square(gx), left, out=left)  # gx^2 / (hx + lam)
    left += right
    return np.where(ok, left.sum(-1) - parent, -np.inf)


def grow(
    g_int: np.ndarray,
    h_int: np.ndarray,
    n_cuts: np.ndarray,
    params: BoostParams,
    fp: FixedPoint,
    histograms: HistogramFn,
    route: RouteFn,
    categorical: np.ndarray | None = None,
) -> tuple[Tree, np.ndarray]:
    """One tree over the rows of ``g_int, h_int`` [n, outputs]; returns it and each row's leaf (``categorical``:
    which features split by level sets)."""
    n, outputs = g_int.shape
    tree = Tree()
    tree.add(0, outputs)
    node_of = np.zeros(n, dtype=np.int64)  # the node each row is in (a leaf once it stops)
    frontier, build, derive = [0], [0], {}  # derive: a child -> (its parent, its built sibling)
    hist: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for depth in range(params.max_depth + 1):
        if not frontier:
            break
        tot_g = node_sums(g_int, node_of, frontier)
        tot_h = node_sums(h_int, node_of, frontier)
        splits: list[Split | None] = [None] * len(frontier)
        if depth < params.max_depth:  # the last level's nodes are leaves: no histogram is asked for
            G, H, _ = histograms(build, node_of)
            level = {v: (G[i], H[i]) for i, v in enumerate(build)}
            for v, (parent, sibling) in derive.items():  # a sibling's histogram: its parent's minus the built one
                pg, ph = hist[parent]  # (in place: the parent's is not needed again, and it has one derived child)
                level[v] = (np.subtract(pg, level[sibling][0], out=pg), np.subtract(ph, level[sibling][1], out=ph))
            hist = level
            splits = best_splits(
                [hist[v][0] for v in frontier],
                [hist[v][1] for v in frontier],
                tot_g,
                tot_h,
                n_cuts,
                params,
                fp,
                categorical,
            )
        next_frontier, build, derive = [], [], {}
        for v, s, tg, th in zip(frontier, splits, tot_g, tot_h, strict=True):
            if s is None:
                tree.value[v] = -params.learning_rate * fp.decode(tg) / (fp.decode(th) + params.reg_lambda)
                continue
            rows = np.flatnonzero(node_of == v)
            lc, rc = tree.add(depth + 1, outputs), tree.add(depth + 1, outputs)
            go_left = route(v, s, rows, lc, rc)
            tree.feature[v], tree.bin[v], tree.default_left[v], tree.gain[v] = s.feature, s.bin, s.default_left, s.gain
            tree.left[v], tree.right[v] = lc, rc
            if s.left_bins is not None:
                tree.cats[v] = list(s.left_bins)
            node_of[rows[go_left]] = lc
            node_of[rows[~go_left]] = rc
            n_left = int(go_left.sum())
            small, big = (lc, rc) if n_left <= len(rows) - n_left else (rc, lc)  # ties: build the left child
            build.append(small)
            derive[big] = (v, small)
            next_frontier += [lc, rc]
        frontier = next_frontier
    return tree, node_of


def node_sums(v: np.ndarray, node_of: np.ndarray, nodes: list[int]) -> np.ndarray:
    """Per node of ``nodes`` the sums of the integer rows ``v`` [n, outputs] in it: int64 [len(nodes), outputs]."""
    size = int(node_of.max(initial=0)) + 1
    out = np.stack(
        [np.rint(np.bincount(node_of, weights=v[:, o].astype(np.float64), minlength=size)) for o in range(v.shape[1])],
        1,
    ).astype(np.int64)
    return out[np.asarray(nodes, dtype=np.int64)]


# ----------------------------------------------------------------------------- the central algorithm


def central_histograms(codes: np.ndarray, g_int: np.ndarray, h_int: np.ndarray, max_bin: int) -> HistogramFn:
    """Histograms of every feature from the whole table's codes [n, d] (missing = max_bin, left out of the bins)."""
    n, d = codes.shape
    outputs = g_int.shape[1]
    stride = max_bin + 1

    def histograms(nodes: list[int], node_of: np.ndarray):
        return bin_sums(codes, g_int, h_int, nodes, node_of, stride, outputs)

    return histograms


def bin_sums(
    codes: np.ndarray, g_int: np.ndarray, h_int: np.ndarray, nodes: list[int], node_of: np.ndarray, stride: int, outputs
):
    """Per node of ``nodes``, feature and bin (the missing code's bin dropped): the sums of g, h (int64 [len(nodes),
    d, B, outputs]) and the row counts ([len(nodes), d, B]) over the rows of ``codes`` in that node: the sums of
    :func:`filled_bin_sums` in place, zeros in the bins with no row."""
    at, Gf, Hf, count = filled_bin_sums(codes, g_int, h_int, nodes, node_of, stride)
    shape = (len(nodes), codes.shape[1], stride - 1)
    G = np.zeros((*shape, outputs), dtype=np.int64)
    H = np.zeros_like(G)
    N = np.zeros(shape, dtype=np.int64)
    G.reshape(-1, outputs)[at], H.reshape(-1, outputs)[at], N.reshape(-1)[at] = Gf, Hf, count
    return G, H, N


def filled_bin_sums(
    codes: np.ndarray, g_int: np.ndarray, h_int: np.ndarray, nodes: list[int], node_of: np.ndarray, stride: int
):
    """The bins with rows, per node of ``nodes`` and feature (the missing code's bin dropped), and their sums:
    ``at`` (int64, ascending) their flat positions in [len(nodes), d, B = stride - 1]; G, H int64 [len(at), outputs]
    the sums of g, h over their rows; their row counts [len(at)]. One pass over (slot, feature, bin) keys: a bincount
    per output for one or two outputs, else one sparse product of the filled keys' indicator with every output's g
    and h at once (no dense [bins, outputs] intermediate). No loop over rows, bins or features. Exact: float64 sums
    of integers below 2^53 (FixedPoint.for_rows)."""
    d, outputs = codes.shape[1], g_int.shape[1]
    slot_of = np.full(max(int(node_of.max(initial=0)), max(nodes, default=0)) + 1, -1, dtype=np.int64)
    slot_of[np.asarray(nodes, dtype=np.int64)] = np.arange(len(nodes))
    slot = slot_of[node_of]
    rows = np.flatnonzero(slot >= 0)
    size = len(nodes) * d * stride
    key = ((slot[rows, None] * d + np.arange(d)[None, :]) * stride + codes[rows].astype(np.int64)).ravel()
    count = np.bincount(key, minlength=size)
    count[stride - 1 :: stride] = 0  # a missing cell is in no bin
    filled = np.flatnonzero(count)
    at = filled // stride * (stride - 1) + filled % stride
    if outputs <= 2:
        G = np.empty((len(filled), outputs), dtype=np.int64)
        H = np.empty_like(G)
        for o in range(outputs):
            for src, dst in ((g_int, G), (h_int, H)):
                w = np.repeat(src[rows, o].astype(np.float64), d)
                dst[:, o] = np.rint(np.bincount(key, weights=w, minlength=size)[filled]).astype(np.int64)
        return at, G, H, count[filled]
    from scipy.sparse import csr_matrix

    index = np.full(size, -1, dtype=np.int64)
    index[filled] = np.arange(len(filled))
    in_bin = index[key]  # each (row, feature)'s filled bin, -1 for a missing cell
    keep = in_bin >= 0
    ind = csr_matrix(
        (np.ones(int(keep.sum())), (in_bin[keep], np.repeat(np.arange(len(rows)), d)[keep])),
        shape=(len(filled), len(rows)),
    )  # [filled bin, row] indicator
    gh = np.concatenate([g_int[rows], h_int[rows]], 1).astype(np.float64)  # [rows, 2 outputs]
    sums = np.rint(ind @ gh).astype(np.int64)
    return at, sums[:, :outputs], sums[:, outputs:], count[filled]


def split_left(c: np.ndarray, bin: int, default_left: bool, missing: int, left_bins=None) -> np.ndarray:
    """Which rows of codes ``c`` go left at a split: the missing code the default way, else the code below ``bin``
    (numeric) or among ``left_bins`` (categorical)."""
    c = np.asarray(c, dtype=np.int64)
    inside = np.isin(c, np.asarray(left_bins, dtype=np.int64)) if left_bins is not None else c < bin
    return np.where(c == missing, bool(default_left), inside)


def central_route(codes: np.ndarray, missing: int) -> RouteFn:
    def route(node: int, s: Split, rows: np.ndarray, lc: int, rc: int) -> np.ndarray:
        return split_left(codes[rows, s.feature], s.bin, s.default_left, missing, s.left_bins)

    return route


@dataclass
class Model:
    """A trained booster: its first margin, its trees, the fixed point it was grown with and its objective."""

    objective: Objective
    base: np.ndarray
    trees: list[Tree]
    params: BoostParams
    history: list[float] = field(default_factory=list)  # the weighted training loss after each tree
    fixed_point: FixedPoint | None = None

    def margins_from_leaves(self, leaves: list[np.ndarray]) -> np.ndarray:
        """Margins [n, outputs] from each tree's leaf per row."""
        n = len(leaves[0]) if leaves else 0
        m = np.tile(self.base, (n, 1))
        for t, leaf in zip(self.trees, leaves, strict=True):
            m += np.stack(t.value)[leaf]
        return m


def boost(
    y: np.ndarray,
    w: np.ndarray,
    n_classes: int,
    params: BoostParams,
    grow_tree: Callable[[np.ndarray, np.ndarray, FixedPoint], tuple[Tree, np.ndarray]],
    progress: Callable[[int, float, Model], bool | None] | None = None,
) -> Model:
    """Boost ``params.trees`` rounds: each round the label holder's g and h at the current margins, as integers, and
    one tree grown from them (``grow_tree``: central or federated); the margins move by the leaf of each row.
    ``progress(rounds, loss, model)`` after each round, with the model so far (it predicts with the trees grown);
    True from it ends the boosting there (early stopping: a tree depends only on the trees before it, so the trees
    kept are the ones every round would have given)."""
    obj = Objective(n_classes)
    base = obj.base_margin(y, w)
    margin = np.tile(base, (len(y), 1))
    fp = FixedPoint.for_rows(len(y), float(np.max(w)))  # |g| <= w and h <= w / 2 for both losses
    model = Model(obj, base, [], params)
    model.fixed_point = fp
    for t in range(params.trees):
        g, h = obj.grad_hess(margin, y, w)
        tree, leaf = grow_tree(fp.encode(g), fp.encode(h), fp)
        model.trees.append(tree)
        margin += np.stack(tree.value)[leaf]
        model.history.append(obj.loss(margin, y, w))
        if progress is not None and progress(t + 1, model.history[-1], model):
            break
    return model


def predict_codes(model: Model, codes: np.ndarray, missing: int) -> np.ndarray:
    """Margins [n, outputs] of rows given as codes [n, d] (missing = ``missing``): every tree walked level by level,
    vectorised over rows."""
    n = codes.shape[0]
    margin = np.tile(model.base, (n, 1))
    rows = np.arange(n)
    for tree in model.trees:
        a = tree.arrays()
        goes_left = tree.goes_left(missing)
        idx = np.zeros(n, dtype=np.int64)
        for _ in range(max(tree.depth) + 1):
            f = a["feature"][idx]
            internal = f >= 0
            if not internal.any():
                break
            left = goes_left[idx, codes[rows, np.maximum(f, 0)].astype(np.int64)]
            idx = np.where(internal, np.where(left, a["left"][idx], a["right"][idx]), idx)
        margin += a["value"][idx]
    return margin


def fit_central(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, n_classes: int, params: BoostParams, progress=None, categorical=()
) -> tuple[Model, object]:
    """The central algorithm on a table ``x`` [n, d] with NaN for missing cells (and code 0 in a ``categorical``
    column): the oracle that SecureBoost equals tree for tree. Returns the model and its cuts (to bin test rows)."""
    cuts = fit_cuts(x, params.max_bin, params.binning, categorical, params.max_cat_bin)
    codes = cuts.codes(x)

    def grow_tree(g_int, h_int, fp):
        return grow(
            g_int,
            h_int,
            cuts.n_cuts,
            params,
            fp,
            central_histograms(codes, g_int, h_int, cuts.max_bin),
            central_route(codes, cuts.missing),
            cuts.categorical,
        )

    return boost(y, w, n_classes, params, grow_tree, progress), cuts
