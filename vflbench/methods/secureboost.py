"""SecureBoost (Cheng et al., IEEE Intelligent Systems 2021): vertical gradient boosting. The server is the label
party; each party bins its own columns, sums the g/h it is sent into histograms, keeps the thresholds of the splits
it wins in its lookup table and routes its own rows; a block a party lacks for a sample sends the sample the
learned default way (:mod:`vflbench.trees.secureboost`).

``encryption=none`` (the default) sends g and h in clear: the same trees as under encryption (tested), at a
fraction of the cost, and insecure (the first tree's g reveal the labels); the manifest also records what Paillier
and OU would send for the same run (``secureboost.paillier_estimate``, ``secureboost.ou_estimate``).
``encryption=paillier`` (Damgård-Jurik-Nielsen's obfuscator) and ``encryption=ou`` (Okamoto-Uchiyama) encrypt them
(vflbench.trees.he: gmpy2 arithmetic with fixed-base tables, the label party's side through the CRT, the g/h and the
count packed in one plaintext, filled bins packed into few ciphertexts and re-randomised, every batch on the run's
``--threads`` processes) and record the count and seconds of every operation. With every party in one process the
trees equal the central algorithm's node for node.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..trees.binning import BINNINGS, DEFAULT_BINNING
from ..trees.booster import BoostParams
from ..trees.he import EXP_BITS, SCHEMES
from ..trees.he import ou as ou_scheme
from ..trees.he import paillier as paillier_scheme
from ..trees.he.packing import Packing, capacity
from ..trees.he.scheme import usable_bits, wire_width
from ..trees.links import LocalLink, RemoteLink, serve
from ..trees.messages import encoded_size
from ..trees.secureboost import FeatureParty, LabelParty, Protocol
from .base import METHODS, Batch, Option
from .boosting import TREE_OPTIONS, TreeMethod

PAILLIER_BINS = 32  # FATE's and FedTree's default: decryptions and upload grow with the bins
CLEAR_CAT_BINS = 4096  # in clear, the most bins a categorical column gets by default (its B - 1 most frequent levels)


@METHODS.register("secureboost")
class SecureBoost(TreeMethod):
    name, display = "secureboost", "SecureBoost"
    paper = "SecureBoost (Cheng et al., IEEE Intelligent Systems 2021)"
    runtime_refusal = None
    attack_surface = "secureboost"
    option_specs = (
        *TREE_OPTIONS,
        Option(
            "encryption",
            str,
            "none",
            "none: g/h in clear (insecure: they reveal the labels; what Paillier and OU would cost is in the "
            "manifest) | paillier: Paillier with DJN's obfuscator (key_bits) | ou: Okamoto-Uchiyama (ou_key_bits; "
            "smaller ciphertexts, a less studied assumption: docs/TREES.md)",
            choices=("none", *SCHEMES),
        ),
        Option(
            "binning",
            str,
            DEFAULT_BINNING,
            "how each party bins its own columns: sketch (XGBoost's quantile sketch of its present values, "
            "unweighted: gbdt's cuts up to the class weights a feature party does not hold) | quantile (their "
            "exact quantiles; needs no XGBoost)",
            choices=tuple(BINNINGS),
        ),
        Option(
            "categorical",
            str,
            "codes",
            "embedded categorical columns (over embed_above levels): codes (binned as numbers; the default since "
            "the suite: results/suite_categorical) | partition (split by sets of levels, ordered by g/h per node, as "
            "LightGBM and XGBoost do)",
            choices=("partition", "codes"),
        ),
        Option(
            "max_cat_bin",
            int,
            0,
            "bins of an embedded categorical column under categorical=partition: its most frequent levels less one "
            "keep a bin each, the rest share one (0: 4,096 in clear, max_bin under Paillier)",
            check=lambda v: None if v == 0 or 2 <= v <= 65_535 else "0, or 2 .. 65535",
        ),
        Option(
            "max_cat_threshold",
            int,
            64,
            "the most levels on the smaller side of a partition split (XGBoost's max_cat_threshold)",
            check=lambda v: None if v >= 1 else "must be >= 1",
        ),
        Option(
            "key_bits",
            int,
            paillier_scheme.KEY_BITS_FLOOR,
            "the Paillier modulus N's bits (2,048: 112-bit security, NIST SP 800-57)",
            check=lambda v: (
                None
                if v >= paillier_scheme.KEY_BITS_FLOOR and v % 2 == 0
                else f"must be even and >= {paillier_scheme.KEY_BITS_FLOOR} (112-bit security: docs/TREES.md)"
            ),
        ),
        Option(
            "ou_key_bits",
            int,
            ou_scheme.KEY_BITS_FLOOR,
            "the OU modulus n = p^2 q's bits, 3 x |p| (2,049: 683-bit p and q, 112-bit security)",
            check=ou_scheme.check_key_bits,
        ),
        Option(
            "exp_bits",
            int,
            EXP_BITS,
            "bits of the short random exponent of every obfuscator (224: twice the 112-bit security level)",
            check=lambda v: None if v >= EXP_BITS else f"must be >= {EXP_BITS} (2 x 112: docs/TREES.md)",
        ),
    )
    assumptions = (
        "the label party (server) holds no block; it sees each built node's per-bin sums and the winning feature "
        "and bin (no shuffling), never a threshold",
        "binning: XGBoost's quantile sketch per feature on the party's own rows, unweighted (a party holds no labels "
        "to weigh them by), in the aligned row order; binning=quantile: their exact quantiles (midpoints up to "
        "max_bin values)",
        "a node with no missing mass in training sends missing rows to the child with the larger hessian",
        "embedded categorical columns split by sets of levels (bins ordered by G / (H + lambda) per node; the "
        "B - 1 most frequent levels keep a bin, the rest share one)",
        "more than two classes: one multi-output tree a round (SecureBoost+'s SBT-MO)",
    )

    @classmethod
    def behaviour_components(cls, options, info=None):
        paillier = ["method.secureboost.paillier"] if options.get("encryption", "none") != "none" else []
        return paillier + (["method.trees.early_stop"] if int(options.get("early_stop") or 0) > 0 else [])

    @classmethod
    def libraries(cls, options):
        return ["xgboost"] if options.get("binning") == "sketch" else []  # its sketch bins each party's columns

    @classmethod
    def loss_refusal(cls, options):
        """SecureBoost goes on without a lost party: from the tree it is lost at, its block is missing for every
        sample (its features split no node, its rows take the defaults); a party lost while a tree grows has that
        tree grown again without it."""
        return None

    def default_bin(self) -> int:
        return PAILLIER_BINS if self.encrypted else 256

    @property
    def encrypted(self) -> bool:
        return self.options["encryption"] != "none"

    def key_size(self) -> int:
        return int(self.options["ou_key_bits" if self.options["encryption"] == "ou" else "key_bits"])

    def params(self) -> BoostParams:
        o = self.options
        return BoostParams(
            trees=int(o["trees"]),
            max_depth=int(o["max_depth"]),
            learning_rate=float(o["learning_rate"]),
            max_bin=self.max_bin,
            reg_lambda=float(o["reg_lambda"]),
            gamma=float(o["gamma"]),
            min_child_weight=float(o["min_child_weight"]),
            binning=str(o["binning"]),
            max_cat_bin=self.cat_bins(),
            max_cat_threshold=int(o["max_cat_threshold"]),
        )

    def _book(self, k: int, up: int, down: int) -> None:
        u = torch.zeros(self.k, dtype=torch.float64)
        d = torch.zeros(self.k, dtype=torch.float64)
        u[k], d[k] = up, down
        self.channel.book_bytes(u, d)
        self.channel.commit(self.channel.mode, backward=True)

    def fit_whole(self, blocks, y, observed, weights, progress):
        params = self.params()
        transport = self.channel.message_link()  # None: every party in this process
        self.transport = transport
        if transport is not None and transport.rank != 0:  # a party process: it answers the label party
            me = transport.rank - 1
            self.me = me
            self.party = FeatureParty(
                me,
                blocks[me][observed[:, me]],
                np.flatnonzero(observed[:, me]),
                self.categorical_columns(me),
                torch.get_num_threads(),
            )
            serve(self.party, transport, hooks=self._party_hooks())
            return []
        if transport is None:
            self.parties = [
                FeatureParty(
                    k,
                    blocks[k][observed[:, k]],
                    np.flatnonzero(observed[:, k]),
                    self.categorical_columns(k),
                    torch.get_num_threads(),
                )
                for k in range(self.k)
            ]
            self.link = LocalLink(self.parties, self._book)
        else:
            self.parties = []
            self.link = RemoteLink(transport, self.k, self._book)
        offsets = np.cumsum([0, *self.ctx.widths])[:-1].tolist()
        # the label party encrypts and decrypts in --threads processes (one by default), each party sums and packs in
        # as many
        o = self.options
        proto = Protocol(params, o["encryption"], self.key_size(), torch.get_num_threads(), int(o["exp_bits"]))
        self.label = LabelParty(self.link, observed, offsets, proto)
        self.label.faults = self.faults
        if self.faults is not None:
            self.faults.unit = "tree"
        watchers = [t for t in self.channel.taps if getattr(t, "surface", None) == "secureboost"]
        if self.encrypted and any(getattr(w, "needs_clear_gh", False) for w in watchers):
            from ..core.errors import VFLBenchError

            raise VFLBenchError(
                f"--attack gradients reads the g a party is sent in clear; under encryption={o['encryption']} a party "
                "sees ciphertexts only (attack the instance spaces with leaves)"
            )

        def tree_done(t: int, loss: float, model) -> bool:
            for p in self.parties:  # what each party holds of the tree (in this process: the attacks' view)
                for w in watchers:
                    if p.k not in self.link.lost:
                        w.on_tree(p.k, p.rows, p.node_of.copy(), None if p.g is None else p.g.copy())
            self.model = model  # the trees so far predict (early stopping scores them as they are grown)
            return bool(progress(t, params.trees, loss))

        self.model = self.label.fit(y, weights, self.c, progress=tree_done)
        self._stop_parties()
        self.nodes = sum(t.n_nodes for t in self.model.trees)
        outputs = 1 if self.c == 2 else self.c
        self._estimates = {
            scheme: encryption_estimate(
                self.link, self.label, len(y), outputs, scheme, int(o[option]), int(o["exp_bits"])
            )
            for scheme, option in (("paillier", "key_bits"), ("ou", "ou_key_bits"))
        }
        return list(self.model.history)

    def cat_bins(self) -> int:
        """The bins of a categorical column (0: the run splits none by level). In clear, by default, as many as its
        widest categorical's codes can take (every level then keeps a bin of its own, as under 4,096), at most 4,096:
        a histogram is as wide as its widest feature, so a 51-level column need not make every feature 4,096 bins."""
        if not any(self.categorical_columns(k) for k in range(self.k)):
            return 0
        if int(self.options["max_cat_bin"]):
            return int(self.options["max_cat_bin"])
        if self.encrypted:
            return self.max_bin
        widest = max(
            int(rows) for k in range(self.k) for _, rows, _ in (self.ctx.embedded[k] if self.ctx.embedded else [])
        )
        return min(CLEAR_CAT_BINS, max(widest, 2))

    def categorical_columns(self, k: int) -> list[int]:
        """Party k's embedded categorical columns (their codes), split by level sets (``categorical=partition``)."""
        if self.options["categorical"] != "partition" or not self.ctx.embedded:
            return []
        return sorted(int(pos) for pos, _, _ in self.ctx.embedded[k])

    def _party_hooks(self) -> dict:
        """A party process's side of the run: its tree count (the fault-injection hook's epoch: a process told to
        die at tree E stops as tree E's g/h arrive), and the run's party losses followed up to the tree a ``leave``
        or ``back`` names (a scheduled loss with no rejoin ends this process, as a failed one; with a rejoin it
        stays silent until told ``back``)."""
        trees = [0]

        def gh(**_):
            trees[0] += 1
            self.channel.epoch = trees[0]

        def follow(tree: int) -> None:
            while self.faults is not None and self.faults.epoch < int(tree):
                self.faults.begin_epoch()

        return {"gh": gh, "leave": follow, "back": follow}

    def _stop_parties(self) -> None:
        """The end of a phase (training, a batch's prediction): party processes stop answering; in one process a
        message of the same bytes (what is counted does not depend on the runtime)."""
        for k in range(self.k):
            self.link.tell(k, "stop")

    def probabilities(self, batch: Batch) -> np.ndarray:
        cols = self.party_columns(batch.blocks)
        if self.transport is not None and self.transport.rank != 0:  # a party: it answers this batch's queries
            self.party.set_batch(cols[self.me])
            serve(self.party, self.transport)
            return np.full((cols[0].shape[0], self.c), 1.0 / self.c)  # (the server scores the run)
        was, self.link.phase = self.link.phase, "eval"
        obs = batch.obs.cpu().numpy().astype(bool)
        for k, c in enumerate(cols[: len(self.parties)]):
            self.parties[k].set_batch(c)
        margin = self.label.predict(self.model, obs, self.round_limit)
        self._stop_parties()
        self.link.phase = was  # a prediction between rounds: the next round's messages count as training again
        return self.model.objective.probabilities(margin)

    def predicts_while_growing(self) -> bool:
        """In one process and in clear: its parties answer a prediction between two trees as after the last (their
        training state is untouched, and a clear party has no workers to stop). Parties as processes, or encrypted
        training, grow every round and are scored after."""
        return self.transport is None and not self.encrypted and self.faults is None

    def prediction_rounds(self) -> int:
        """One round per tree level: the label party asks each party about the samples at its nodes of that level
        (every tree at once), and the next level needs the answers."""
        trees = getattr(getattr(self, "model", None), "trees", None) or []
        return max(1, max((max(t.depth) for t in trees if t.depth), default=1))

    def model_parts(self):
        """The label party's trees (structure, owners and record ids, leaf values, the first margin) and each
        party's binning and lookup table (its thresholds: nobody else's)."""
        m = self.model
        parts = {
            "server": {
                # a tree's leaf values as one array [nodes, outputs] (one tensor, not one per node)
                "trees": [{**t.__dict__, "value": np.stack(t.value) if t.value else None} for t in m.trees],
                "owner": self.label.owner,
                "base": m.base,
                "classes": self.c,
                "params": m.params.__dict__,
                "held": self.label.held,
                "offsets": self.label.offsets,
            }
        }
        for p in self.parties:
            parts[f"party_{p.k}"] = {
                "cuts": p.cuts.__dict__,
                "table": p.table,
                "max_bin": p.max_bin,
                "categorical": p.categorical,
            }
        return parts

    def load_part(self, name, part):
        from ..trees.binning import Cuts
        from ..trees.booster import Model, Objective, Tree

        if name == "server":
            params = BoostParams(**part["params"])
            trees = []
            for d in part["trees"]:
                t = Tree()
                t.__dict__.update(d)
                t.value = [] if d["value"] is None else list(np.asarray(d["value"]))
                trees.append(t)
            self.model = Model(Objective(int(part["classes"])), np.asarray(part["base"]), trees, params)
            self.nodes = sum(t.n_nodes for t in trees)
            if not hasattr(self, "parties"):
                self.parties = [None] * self.k
            self.link = LocalLink(self.parties, self._book)
            self.label = LabelParty(self.link, part["held"], part["offsets"], Protocol(params))
            self.label.owner = [list(map(tuple, o)) for o in part["owner"]]
            self.transport = None
            return
        k = int(name.split("_")[1])
        party = FeatureParty(k, np.zeros((0, 1)), np.zeros(0, dtype=np.int64), part.get("categorical", ()))
        party.cuts, party.table, party.max_bin = Cuts(**part["cuts"]), list(part["table"]), int(part["max_bin"])
        if not hasattr(self, "parties"):
            self.parties = [None] * self.k
        self.parties[k] = party
        if getattr(self, "link", None) is not None:
            self.link.parties = self.parties

    def extras(self):
        if getattr(self, "label", None) is None or getattr(self, "model", None) is None:
            return {}
        out = {"trees_grown": len(self.model.trees)}
        he = self.label.he
        if he is not None:
            party_ops = {}
            for p in self.parties:
                for k, v in (p.he.seconds if p.he else {}).items():
                    party_ops[k] = party_ops.get(k, 0.0) + v
            # across processes a party's seconds stay in its process: blank, not a false zero
            here = any(p.he is not None for p in self.parties)
            out.update(
                {
                    "he_encrypt_s": round(he.seconds.get("encrypt", 0.0), 3),
                    "he_decrypt_s": round(he.seconds.get("decrypt", 0.0), 3),
                    "he_sum_s": round(party_ops.get("add", 0.0), 3) if here else None,
                    "he_pack_s": round(party_ops.get("pack", 0.0) + party_ops.get("rerandomise", 0.0), 3)
                    if here
                    else None,
                }
            )
        return out

    def manifest_extras(self) -> dict:
        """The protocol's record: bytes by message kind and party, every homomorphic operation's count and seconds,
        and what Paillier and OU would send for the same run (equal to what an encrypted run sends: tested)."""
        out = {
            "encryption": self.options["encryption"],
            "max_bin": self.max_bin,
            "bytes_by_kind": {ph: t.by_kind for ph, t in self.link.traffic.items()},
            # (across processes each party's seconds stay in its process)
            "party_seconds": {f"party {p.k}": {k: round(v, 3) for k, v in p.seconds.items()} for p in self.parties},
            "paillier_estimate": self._estimates["paillier"],
            "ou_estimate": self._estimates["ou"],
        }
        he = self.label.he
        if he is not None:
            ops = {"label party": {"ops": dict(he.ops), "seconds": {k: round(v, 3) for k, v in he.seconds.items()}}}
            for p in self.parties:
                if p.he is not None:
                    ops[f"party {p.k}"] = {
                        "ops": dict(p.he.ops),
                        "seconds": {k: round(v, 3) for k, v in p.he.seconds.items()},
                    }
            out[self.options["encryption"]] = {
                "key_bits": self.key_size(),
                "exp_bits": int(self.options["exp_bits"]),
                **ops,
            }
            # the worker processes beside this one (their peaks summed: an upper bound on what they held at once);
            # across processes, this process's own only
            peaks = {"label party": int(self.label.workers_peak_rss)}
            peaks.update({f"party {p.k}": int(p.workers_peak_rss) for p in self.parties})
            out["workers_peak_rss_bytes"] = {**peaks, "total": sum(peaks.values())}
        return out


def encryption_estimate(
    link, label: LabelParty, n: int, outputs: int, scheme: str, key_bits: int, exp_bits: int = EXP_BITS
) -> dict:
    """What this run would send in training under ``scheme`` with a ``key_bits`` key: the same messages, with each
    party's g/h as one ciphertext per held row, lane and tree (the public packing of ``n`` rows, :class:`Packing`),
    each histogram as its filled bins (``at``, as the clear run names them) packed ``capacity`` sums a ciphertext
    (what :meth:`FeatureParty._encrypted_sums` sends), and the public key in the setup. Every message is sized as
    :func:`encode` makes it, so the count is what crosses, not an approximation: ``bytes_down``/``bytes_up`` are the
    training bytes the encrypted run counts (tests/test_trees.py compares them)."""
    usable, width = usable_bits(scheme, key_bits), wire_width(scheme, key_bits)
    pk = Packing.public(n, outputs, usable)
    cap = capacity(usable, pk.bits)
    fields = {**pk.fields(), "capacity": cap}
    gh_cts = sum(rows for _, rows in label.gh_rows) * pk.lanes
    gh_bytes = sum(
        encoded_size("gh", fields, {"cts": (np.uint8, (rows * pk.lanes, width))}) for _, rows in label.gh_rows
    )
    up_cts, hist_bytes = 0, 0
    for _, _, filled in label.builds:
        c = math.ceil(filled * pk.lanes / cap)
        up_cts += c
        hist_bytes += encoded_size("hist", {}, {"at": (np.int32, (filled,)), "cts": (np.uint8, (c, width))})
    setup = label.setup_fields
    rest = {k: v for k, v in setup.items() if k != "max_bin"}
    setup_encrypted = encoded_size(
        "setup",
        {"max_bin": setup["max_bin"], "encryption": scheme, "exp_bits": int(exp_bits), **rest},
        {f"pk_{name}": (np.uint8, (width,)) for name in SCHEMES[scheme].public_names},
    )
    t = link.traffic.get("train")
    by = t.by_kind if t is not None else {}
    total = {d: sum(sum(v) for kind, v in by.items() if kind.endswith(f"_{d}")) for d in ("down", "up")}
    clear_gh, clear_hist = sum(by.get("gh_down", [])), sum(by.get("hist_up", []))
    clear_setup = sum(by.get("setup_down", []))
    down = total["down"] - clear_gh - clear_setup + gh_bytes + setup_encrypted * label.k
    up = total["up"] - clear_hist + hist_bytes
    return {
        "key_bits": int(key_bits),
        "ciphertext_bytes": width,
        "packed_bits": pk.bits,
        "lanes": pk.lanes,
        "capacity": cap,
        "ciphertexts_down": int(gh_cts),
        "ciphertexts_up": int(up_cts),
        "bytes_down": int(down),
        "bytes_up": int(up),
        "bytes": int(down + up),
        "encryptions": int(n * pk.lanes * len(label.owner)),
        "decryptions": int(up_cts),
    }
