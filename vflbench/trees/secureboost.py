"""SecureBoost (Cheng et al., 2019): gradient boosting across parties that each hold a block of columns, the labels
at the server (the label party, which holds no block).

The label party computes g and h (as integers, :class:`~.booster.FixedPoint`), sends each party those of its own
rows (in clear with ``encryption=none``, or as ciphertexts of the packed (g, h, 1) under Paillier or
Okamoto-Uchiyama: :mod:`.he`), and
grows each tree with :func:`~.booster.grow`: it asks every party for the histograms of the nodes it builds (the
party sums its rows' values per node, feature and bin, vectorised: no loop over rows or bins in plaintext), finds
the best split over all parties' candidates, and asks the winning party to apply it. The owner keeps the
threshold in its lookup table (record id -> feature, threshold): no one else learns it; it returns which of its
rows go left, and the label party routes the rows that party does not hold by the node's default direction
(sparsity-aware split finding over the samples the party lacks) and tells every other party where its rows went.
Prediction walks every tree level by level: at a node owned by party k the label party sends (sample, record id)
and k answers one bit; a party absent for a sample (its block missing) is asked nothing, and its nodes send the
sample the default way.

With every party in one process the histograms and routes are the central algorithm's, so the trees are the same,
node for node (tests/test_trees.py). The parties are request handlers (:class:`FeatureParty`) behind a link: in one
process a call (:class:`LocalLink`), across processes the wire (vflbench.federation); either way every message is
serialised (:func:`encode`) and its bytes counted per party, direction and kind, so what is counted is what
crosses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .binning import DEFAULT_BINNING, Cuts, fit_cuts
from .booster import BoostParams, FixedPoint, Model, Split, Tree, boost, filled_bin_sums, grow, split_left
from .he import EXP_BITS, SCHEMES, Scheme
from .he.bin_sums import chain_sums, install_party, load_cts, plan_chains
from .he.packing import Packing, capacity, unpack_compressed
from .he.pool import Pool
from .links import REPLIES, Link, LocalLink, PartyGone, RemoteLink, Traffic, serve  # noqa: F401  (re-exported)
from .messages import decode, encode, encoded_size, pack_bits, unpack_bits  # noqa: F401  (re-exported)

# ----------------------------------------------------------------------------- a feature party


def bin_layout(n_cuts: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each feature's bins start in a node's flat run of bins, and the run's length: feature j has
    ``n_cuts[j] + 1`` bins (codes 0 .. n_cuts[j]; a missing cell is in none). Both sides derive it from the cut
    counts the party announces at setup; a histogram message names its filled bins by their place in the run of
    its nodes (``at``)."""
    sizes = np.asarray(n_cuts, dtype=np.int64) + 1
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), int(sizes.sum())


class FeatureParty:
    """Party k's side: its own rows' values (``x`` [n_k, d_k], NaN a missing cell) and which training samples they
    are (``rows``); it bins them, keeps the g/h it is sent, sums histograms, applies the splits it wins (its lookup
    table) and answers prediction queries. Every request is a message (:meth:`handle`)."""

    def __init__(self, k: int, x: np.ndarray, rows: np.ndarray, categorical=(), workers: int = 1):
        self.k = k
        self.workers = max(1, int(workers))  # processes for its homomorphic sums and packing
        self.x = np.asarray(x, dtype=np.float64)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.categorical = sorted(int(j) for j in categorical)  # its columns of level codes (split by level sets)
        self.left_of: np.ndarray | None = None  # [records, B + 1]: per record and code, left? (built for prediction)
        self.rule_feature = np.zeros(0, dtype=np.int64)  # [records]: each record's feature (built with left_of)
        self.cuts: Cuts | None = None
        self.codes: np.ndarray | None = None
        self.node_of = np.zeros(len(self.rows), dtype=np.int64)
        self.g: np.ndarray | None = None
        self.h: np.ndarray | None = None
        self.he: Scheme | None = None
        self.pool: Pool | None = None
        self.workers_peak_rss = 0  # its worker processes' peak resident sets, summed (bytes)
        self.packing: Packing | None = None
        self.capacity = 1
        # record id -> (feature, bin, rule: a threshold or (levels, others), default left, left bins): the party's alone
        self.table: list[tuple] = []
        self.batch: np.ndarray | None = None  # codes of the batch being predicted
        self.seconds = {"histograms": 0.0, "predict": 0.0}

    def handle(self, data: bytes) -> bytes | None:
        kind, f = decode(data)
        return getattr(self, f"on_{kind}")(**f)

    def on_setup(
        self,
        max_bin: int,
        encryption: str,
        binning: str = DEFAULT_BINNING,
        cat_bins: int = 0,
        exp_bits: int = 0,
        public_n=None,
        **public_key,
    ) -> bytes:
        # its own columns, on its own rows: nothing crosses
        self.cuts = fit_cuts(self.x, int(max_bin), binning, self.categorical, int(cat_bins))
        self.max_bin = max(int(max_bin), int(cat_bins))  # the code of a missing cell (every party's the same)
        self.codes = self.cuts.codes(self.x)
        self.bins = bin_layout(self.cuts.n_cuts)
        self.encryption = encryption
        if encryption != "none":
            self._start_encrypted(SCHEMES[encryption].from_public_fields(public_key, int(exp_bits)))
        kinds = {"categorical": self.cuts.categorical} if self.categorical else {}  # said only where there are some
        return encode("cuts", n_cuts=self.cuts.n_cuts.astype(np.int32), **kinds)

    def _start_encrypted(self, he: Scheme) -> None:
        """Its workers: the public key, its bin codes and the chains its sums follow (:mod:`.he.bin_sums`)."""
        self.he, self.pool = he, Pool(self.workers)
        he.attach(self.pool)
        self.chains = plan_chains(self.codes)
        self.pool_id = f"party-{self.k}-{he.key_id}"
        self.pool.broadcast(install_party, self.pool_id, self.codes, self.max_bin, self.chains)

    def on_gh(self, g=None, h=None, cts=None, offset=0, bg=0, bh=0, bc=0, capacity=1, outputs=1, lanes=1) -> None:
        self.node_of[:] = 0
        if cts is not None:
            self.packing = Packing(int(offset), int(bg), int(bh), int(bc), int(outputs), int(lanes))
            self.capacity = int(capacity)
            self.pool.broadcast(load_cts, self.pool_id, np.asarray(cts, dtype=np.uint8), int(lanes), self.he.modulus)
        else:
            self.g, self.h = np.asarray(g, dtype=np.int64), np.asarray(h, dtype=np.int64)
        return None

    def on_build(self, nodes: np.ndarray) -> bytes:
        t0 = time.perf_counter()
        nodes = [int(v) for v in nodes]
        if self.he is None:  # the non-empty bins' sums (their positions, then g and h: the label party needs no count)
            at, G, H, _ = filled_bin_sums(self.codes, self.g, self.h, nodes, self.node_of, self.max_bin + 1)
            out = encode("hist", at=at.astype(np.int32), G=G, H=H)
        else:
            at, cts = self._encrypted_sums(nodes)
            out = encode("hist", at=at.astype(np.int32), cts=self.he.to_bytes(cts))
        self.seconds["histograms"] += time.perf_counter() - t0
        return out

    def _encrypted_sums(self, nodes: list[int]) -> tuple[np.ndarray, list]:
        """The filled bins of each of ``nodes`` and their homomorphic sums, packed ``capacity`` sums a ciphertext
        (every lane of a bin in turn) and re-randomised. ``at``: each filled bin's place in the nodes' run of bins
        (:func:`bin_layout`: node, then feature, then bin), ascending. The label party learns which bins are filled
        from their decrypted counts anyway, so naming them tells it nothing more, and an empty bin costs nothing."""
        starts, per_node = self.bins
        t0 = time.perf_counter()
        order = np.argsort(self.node_of, kind="stable")
        sorted_nodes = self.node_of[order]
        tasks, slots = [], []
        for s, v in enumerate(nodes):
            lo, hi = np.searchsorted(sorted_nodes, [v, v + 1])
            rows = order[lo:hi]
            if len(rows):
                for c in range(len(self.chains)):
                    tasks.append((self.pool_id, rows, [c]))
                    slots.append(s)
        results = self.pool.map(chain_sums, tasks)
        pos, sums, muls = [], [], 0
        for s, (out, m) in zip(slots, results, strict=True):
            muls += m
            for feature, bins, lanes in out:
                pos.append(s * per_node + starts[feature] + np.asarray(bins, dtype=np.int64))
                sums.extend(zip(*lanes, strict=True))  # per bin, its lanes' sums
        at = np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64)
        ranked = np.argsort(at, kind="stable")
        flat = [c for i in ranked.tolist() for c in sums[i]]
        self.he._count("add", muls, t0)
        return at[ranked], self.he.compress(flat, self.packing.bits, self.capacity)

    def on_split(
        self, node: int, feature: int, bin: int, default_left: bool, left: int, right: int, bins=None
    ) -> bytes:
        """Apply a split of one of its features: keep its rule in the lookup table (a threshold, or the set of levels
        that go left: its own values), and say which of its rows of the node go left."""
        record = len(self.table)
        j = int(feature)
        left_bins = None if bins is None else tuple(int(b) for b in bins)
        if left_bins is None:
            rule = self.cuts.threshold(j, int(bin))
        else:  # the levels of those bins (and the other levels, where its last bin is theirs and goes left)
            lv = self.cuts.levels[j]
            rule = (tuple(lv[[b for b in left_bins if b < len(lv)]].tolist()), len(lv) in left_bins)
        self.table.append((j, int(bin), rule, bool(default_left), left_bins))
        self.left_of = None
        mine = np.flatnonzero(self.node_of == node)
        go_left = split_left(self.codes[mine, j], int(bin), bool(default_left), self.max_bin, left_bins)
        self.node_of[mine[go_left]], self.node_of[mine[~go_left]] = left, right
        return encode("left", record=record, bits=pack_bits(go_left))

    def on_stop(self) -> None:
        """The end of a phase: its workers end with training (nothing after is encrypted)."""
        if self.pool is not None:
            self.pool.close()
            self.workers_peak_rss = sum(self.pool.peak_rss)
            self.pool = None
        return None

    def on_leave(self, tree: int) -> None:
        """The label party goes on without this party from ``tree`` (a scheduled loss): it is asked nothing until it
        is told ``back``. Its process learns it here (:func:`serve`'s hooks); the party's state stays as it is."""
        return None

    def on_back(self, tree: int) -> None:
        """This party takes part again from ``tree``, with the lookup table it kept."""
        return None

    def on_route(self, node: int, left: int, right: int, bits: np.ndarray) -> None:
        mine = np.flatnonzero(self.node_of == node)
        go_left = unpack_bits(bits, len(mine))
        self.node_of[mine[go_left]], self.node_of[mine[~go_left]] = left, right
        return None

    def set_batch(self, x: np.ndarray) -> None:
        """The columns of the rows about to be predicted (this party's, [B, d_k])."""
        self.batch = self.cuts.codes(x)

    def _rules(self) -> tuple[np.ndarray, np.ndarray]:
        """Its table as arrays, built once per table: each record's feature [records], and per record and code whether
        a row goes left [records, B + 1] (the last code: missing)."""
        if self.left_of is None or len(self.left_of) != len(self.table):
            out = np.zeros((len(self.table), self.max_bin + 1), dtype=bool)
            codes = np.arange(self.max_bin + 1)
            for r, entry in enumerate(self.table):
                t, dl, left_bins = entry[1], entry[3], entry[4] if len(entry) > 4 else None
                out[r] = split_left(codes, t, dl, self.max_bin, left_bins)
            self.left_of = out
            self.rule_feature = np.asarray([e[0] for e in self.table], dtype=np.int64)
        return self.rule_feature, self.left_of

    def on_predict(self, samples: np.ndarray, records: np.ndarray) -> bytes:
        """One bit per query: does the sample go left at that record's node (a missing cell: the node's default)."""
        t0 = time.perf_counter()
        feature, left_of = self._rules()
        go_left = left_of[records, self.batch[samples, feature[records]].astype(np.int64)]
        self.seconds["predict"] += time.perf_counter() - t0
        return encode("bits", left=pack_bits(go_left))


# ----------------------------------------------------------------------------- the label party


@dataclass
class Protocol:
    """What a SecureBoost run's label party and parties agree on."""

    params: BoostParams
    encryption: str = "none"  # none | a scheme of he.SCHEMES (paillier, ou)
    key_bits: int = 2048  # the scheme's key size (Paillier: N's bits; OU: n's, 3 x |p|)
    workers: int = 1  # processes for the label party's encryptions and decryptions (the trees do not depend on it)
    exp_bits: int = EXP_BITS  # a short random exponent's bits (every obfuscator)


class LabelParty:
    """The label party: g and h, every node's instance space, the trees' structure and leaves; the parties' columns
    and thresholds stay with them. ``held`` [n, K]: which training samples each party holds (its block observed)."""

    def __init__(self, link, held: np.ndarray, offsets: list[int], proto: Protocol):
        self.link, self.held, self.proto = link, np.asarray(held, dtype=bool), proto
        self.k = self.held.shape[1]
        self.now_held = self.held  # less the lost parties' blocks
        self.offsets = list(offsets)  # each party's first global feature
        self.he: Scheme | None = None
        self.pool: Pool | None = None
        self.workers_peak_rss = 0  # its worker processes' peak resident sets, summed (bytes)
        self.owner: list[list[tuple[int, int]]] = []  # per tree, per node: (party, record id) of a split, else (-1, -1)
        self.seconds: dict[str, float] = {}
        # the run's party losses (vflbench.runs.faults.PartyFaults; None: no party can be lost): one tree is one epoch
        # of its schedule; a lost party is asked nothing, its features split no node and its rows take the defaults
        self.faults = None
        self.redone = 0  # trees begun again without a party found lost while they grew
        self.builds: list[tuple[int, int, int]] = []  # every histogram request: (party, nodes asked for, filled bins)
        self.gh_rows: list[tuple[int, int]] = []  # every g/h message: (party, rows sent)
        self.gh: tuple[np.ndarray, np.ndarray] | None = None  # the last tree's g and h (integers)

    def setup(self) -> None:
        p = self.proto
        pub = {"public_n": None}  # (in clear: the field as it always was, so a clear run's bytes do not move)
        if p.encryption != "none":
            self.he = SCHEMES[p.encryption].generate(p.key_bits, p.exp_bits)
            self.pool = Pool(p.workers)
            self.he.attach(self.pool)
            pub = {"exp_bits": int(p.exp_bits), **self.he.public_fields()}
        n_cuts, kinds = [], []
        # the binning is said only when it is not the default
        named = {} if p.params.binning == DEFAULT_BINNING else {"binning": p.params.binning}
        if p.params.max_cat_bin:
            named["cat_bins"] = p.params.max_cat_bin
        self.setup_fields = {"max_bin": p.params.max_bin, **named}  # (beside encryption and the public key)
        for k in range(self.k):
            _, f = self.link.ask(k, "setup", max_bin=p.params.max_bin, encryption=p.encryption, **pub, **named)
            n_cuts.append(np.asarray(f["n_cuts"], dtype=np.int64))
            kinds.append(np.asarray(f.get("categorical", np.zeros(len(f["n_cuts"]), dtype=bool)), dtype=bool))
        self.categorical = np.concatenate(kinds) if kinds else np.zeros(0, dtype=bool)
        self.widths = [len(c) for c in n_cuts]
        self.n_cuts_of = n_cuts  # per party its features' cut counts (its bins: one more each)
        self.n_cuts = np.concatenate(n_cuts) if n_cuts else np.zeros(0, dtype=np.int64)
        self.party_of = np.repeat(np.arange(self.k), self.widths)

    def fit(self, y: np.ndarray, w: np.ndarray, n_classes: int, progress=None) -> Model:
        self.setup()
        try:
            return boost(y, w, n_classes, self.proto.params, self._grow_tree, progress)
        finally:
            if self.pool is not None:  # its workers end with training (nothing after is encrypted)
                self.pool.close()
                self.workers_peak_rss = sum(self.pool.peak_rss)
                self.pool = None

    # -- one tree
    def _grow_tree(self, g_int: np.ndarray, h_int: np.ndarray, fp: FixedPoint) -> tuple[Tree, np.ndarray]:
        self.fp, self.outputs = fp, g_int.shape[1]
        self._begin_tree(len(self.owner) + 1)
        while True:
            self.owner.append([])
            usable = ~np.isin(self.party_of, sorted(self.link.lost))  # a lost party's features split nothing
            try:
                self._send_gh(g_int, h_int)
                tree, leaf = grow(
                    g_int,
                    h_int,
                    self.n_cuts * usable,
                    self.proto.params,
                    fp,
                    self._histograms,
                    self._route,
                    self.categorical,
                )
            except PartyGone as e:  # its process stopped: the tree is grown again without it (as a step is redone)
                if self.faults is None:
                    raise
                self.owner.pop()
                self.faults.lose(e.party, 0, e.cause)
                self._follow_faults()
                self.redone += 1
                continue
            owners = self.owner[-1]
            owners += [(-1, -1)] * (tree.n_nodes - len(owners))
            return tree, leaf

    def _begin_tree(self, tree: int) -> None:
        """Tree ``tree`` (1-based) begins: the schedule's losses and rejoins at it take effect. A party the schedule
        loses is told first (``leave``: its process then does what a scheduled loss does), one that comes back after
        (``back``); both messages are counted, in one process as across."""
        f = self.faults
        if f is None:
            return
        fail, back = f.schedule.at(f.epoch + 1)
        for k in fail:
            if not f.lost[k]:
                self.link.tell(k, "leave", tree=tree)
        f.begin_epoch()
        self._follow_faults()
        for k in back:
            if not f.lost[k]:
                self.link.tell(k, "back", tree=tree)

    def _follow_faults(self) -> None:
        self.link.lost = {k for k, gone in enumerate(self.faults.lost) if gone}
        self.now_held = self.held & ~np.asarray(self.faults.lost, dtype=bool)[None, :]

    def _send_gh(self, g_int: np.ndarray, h_int: np.ndarray) -> None:
        for k in range(self.k):
            if k not in self.link.lost:
                self.gh_rows.append((k, int(self.now_held[:, k].sum())))
        if self.he is None:
            for k in range(self.k):
                rows = np.flatnonzero(self.now_held[:, k])
                self.link.tell(k, "gh", g=g_int[rows], h=h_int[rows])
            return
        n = len(g_int)
        # from the row count, the outputs and the key's size alone (nothing of the labels)
        self.packing = Packing.public(n, g_int.shape[1], self.he.usable_bits)
        self.packing.check(g_int, h_int)
        self.capacity = capacity(self.he.usable_bits, self.packing.bits)
        self.gh = (g_int, h_int)
        cts = self.he.encrypt(self.packing.pack(g_int, h_int))  # each row once (a plaintext a lane), whoever holds it
        lanes = np.arange(self.packing.lanes)[:, None] * n
        wire = self.he.to_bytes(cts)
        ks = list(range(self.k))
        # each party's rows, lane-major as packed; every party takes its in at once (its workers read them in)
        each = [{"cts": wire[(lanes + np.flatnonzero(self.now_held[:, k])[None, :]).ravel()]} for k in ks]
        self.link.ask_all(ks, "gh", each, **self.gh_fields())

    def gh_fields(self) -> dict[str, int]:
        """The plaintext fields of an encrypted ``gh`` message: the packing and the compression, all public
        (functions of the row count, the outputs and the key's size: the same for any labels)."""
        return {**self.packing.fields(), "capacity": self.capacity}

    def _histograms(self, nodes: list[int], node_of: np.ndarray):
        """Every party's histograms of ``nodes``, side by side in party order: G, H [len(nodes), d, B, outputs] (a lost
        party's features: zeros, no candidates). Under encryption every party is asked at once (they sum side by
        side) and their replies are decrypted in one batch."""
        shape = (len(nodes), len(self.party_of), self.proto.params.width, self.outputs)
        G, H = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        ks = [k for k in range(self.k) if k not in self.link.lost]  # a lost one is asked nothing: no candidates
        asked = np.asarray(nodes, dtype=np.int32)
        if self.he is None:
            replies = [self.link.ask(k, "build", nodes=asked) for k in ks]
        else:
            replies = self.link.ask_all(ks, "build", nodes=asked)
        for k, (_, f) in zip(ks, replies, strict=True):
            self.builds.append((k, len(nodes), len(f["at"])))
        if self.he is not None:
            plain = self.he.decrypt([c for _, f in replies for c in self.he.from_bytes(f["cts"])])
        for k, (_, f) in zip(ks, replies, strict=True):
            first = sum(self.widths[:k])
            mine = slice(first, first + self.widths[k])
            if self.he is None:  # its sent non-empty bins, in place
                at = np.unravel_index(np.asarray(f["at"], dtype=np.int64), shape[:1] + (self.widths[k],) + shape[2:3])
                G[:, mine][at], H[:, mine][at] = f["G"], f["H"]
            else:
                mine_plain, plain = plain[: len(f["cts"])], plain[len(f["cts"]) :]
                G[:, mine], H[:, mine] = self._decrypted(f["at"], mine_plain, len(nodes), k)[:2]
        return G, H, None

    def _decrypted(self, at: np.ndarray, plain: list[int], m: int, k: int):
        """Party k's sent histogram decrypted: G, H [m, d_k, B, outputs] and the count N [m, d_k, B] of every bin
        (zeros in the bins it did not name: empty ones, and beyond a feature's bins). ``at``: the named bins' places
        in the nodes' run of bins (:func:`bin_layout`), ascending; their sums come in that order, every lane of a
        bin in turn; ``plain``: its ciphertexts decrypted."""
        b, pk = self.proto.params.width, self.packing
        starts, per_node = bin_layout(self.n_cuts_of[k])
        at = np.asarray(at, dtype=np.int64)
        if len(at) and (at[0] < 0 or at[-1] >= m * per_node or (np.diff(at) <= 0).any()):
            raise ValueError(f"party {k} named bins outside its {m * per_node} or out of order")
        sums = unpack_compressed(plain, len(at) * pk.lanes, self.capacity, pk.bits)
        if len(sums) != len(at) * pk.lanes:
            raise ValueError(f"party {k} sent {len(sums)} bin sums for {len(at)} named bins")
        d = len(starts)
        G = np.zeros((m, d, b, pk.outputs), dtype=np.int64)
        H = np.zeros((m, d, b, pk.outputs), dtype=np.int64)
        N = np.zeros((m, d, b), dtype=np.int64)
        sizes = np.asarray(self.n_cuts_of[k], dtype=np.int64) + 1
        feat_of = np.repeat(np.arange(d), sizes)
        bin_of = np.concatenate([np.arange(s) for s in sizes]) if d else np.zeros(0, np.int64)
        node_i, within = np.divmod(at, per_node)
        lanes = [pk.lane_outputs(lane) for lane in range(pk.lanes)]
        for i, (v, f, j) in enumerate(
            zip(node_i.tolist(), feat_of[within].tolist(), bin_of[within].tolist(), strict=True)
        ):
            for lane, cols in enumerate(lanes):
                g, h, c = pk.unpack(sums[i * pk.lanes + lane], lane)
                G[v, f, j, cols.start : cols.stop] = g
                H[v, f, j, cols.start : cols.stop] = h
                N[v, f, j] = c
        return G, H, N

    def _route(self, node: int, s: Split, rows: np.ndarray, lc: int, rc: int) -> np.ndarray:
        k = int(self.party_of[s.feature])
        j = s.feature - self.offsets[k]
        cat = {} if s.left_bins is None else {"bins": np.asarray(s.left_bins, dtype=np.int32)}
        _, f = self.link.ask(
            k, "split", node=node, feature=j, bin=s.bin, default_left=s.default_left, left=lc, right=rc, **cat
        )
        owners = self.owner[-1]
        owners += [(-1, -1)] * (node + 1 - len(owners))
        owners[node] = (k, int(f["record"]))
        held = self.now_held[rows, k]
        go_left = np.full(len(rows), s.default_left)  # rows the owner does not hold: the default direction
        go_left[held] = unpack_bits(f["bits"], int(held.sum()))
        for other in range(self.k):  # every other party learns where its own rows of the node went
            if other != k and self.now_held[rows, other].any():
                mine = self.now_held[rows, other]
                self.link.tell(other, "route", node=node, left=lc, right=rc, bits=pack_bits(go_left[mine]))
        return go_left

    # -- prediction
    def predict(self, model: Model, observed: np.ndarray, rounds: int | None = None) -> np.ndarray:
        """Margins [B, outputs] of a batch whose parties hold its columns (``observed`` [B, K]: a party whose block
        is missing for a sample is asked nothing about it); ``rounds``: the first trees only (None: every tree)."""
        b = observed.shape[0]
        trees = model.trees[:rounds] if rounds else model.trees
        t_n = len(trees)
        arrays = [t.arrays() for t in trees]
        width = max(t.n_nodes for t in trees) if t_n else 1
        feat = np.full((t_n, width), -1, dtype=np.int64)
        dl = np.zeros((t_n, width), dtype=bool)
        lft = np.zeros((t_n, width), dtype=np.int64)
        rgt = np.zeros((t_n, width), dtype=np.int64)
        own = np.full((t_n, width), -1, dtype=np.int64)
        rec = np.zeros((t_n, width), dtype=np.int64)
        for i, (a, o) in enumerate(zip(arrays, self.owner[:t_n], strict=True)):
            n = len(a["feature"])
            feat[i, :n], dl[i, :n], lft[i, :n], rgt[i, :n] = a["feature"], a["default_left"], a["left"], a["right"]
            own[i, :n] = [p for p, _ in o]
            rec[i, :n] = [r for _, r in o]
        pos = np.zeros((b, t_n), dtype=np.int64)
        trees_idx = np.arange(t_n)[None, :].repeat(b, 0)
        depth = max((max(t.depth) for t in trees), default=0)
        for _ in range(depth):
            internal = feat[trees_idx, pos] >= 0
            if not internal.any():
                break
            go_left = dl[trees_idx, pos].copy()  # the default; overwritten where the owner answers
            owner = own[trees_idx, pos]
            for k in range(self.k):
                ask = internal & (owner == k) & observed[:, k][:, None]
                if not ask.any():
                    continue
                s_idx, t_idx = np.nonzero(ask)
                _, f = self.link.ask(
                    k, "predict", samples=s_idx.astype(np.int32), records=rec[t_idx, pos[s_idx, t_idx]].astype(np.int32)
                )
                go_left[s_idx, t_idx] = unpack_bits(f["left"], len(s_idx))
            nxt = np.where(go_left, lft[trees_idx, pos], rgt[trees_idx, pos])
            pos = np.where(internal, nxt, pos)
        margin = np.tile(model.base, (b, 1))
        for i, a in enumerate(arrays):
            margin += a["value"][pos[:, i]]
        return margin
