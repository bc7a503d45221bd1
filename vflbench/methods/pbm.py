"""PBM-VFL (Tran, Castiglia, Patterson & Milanova, 2025): the summing method (:mod:`.sumvfl`) with the
Poisson Binomial Mechanism and secure aggregation attached at its party-to-server boundary
(:mod:`vflbench.privacy.mechanisms`), configured from this method's options as the paper runs it. The server
sees only a noisy, unbiased estimate of the *sum* of the party embeddings and trains a
``Linear(P, classes)`` head on it; the server's gradient at that estimate goes straight through to
each party's exact embedding; all models take plain SGD steps at one constant rate (Algorithm 2).
``mechanism=npq`` and ``mechanism=ldp`` are the paper's two baselines on the same model.

``--method pbm`` equals ``--method sum --mechanism pbm:b=32,beta=0.1 --secagg masked`` (same numbers,
tested); this method keeps the paper's knobs in one place (and LDP's noise matching).

Beyond the paper, blocks may be missing: a party without a sample's block sends nothing for it, the
server unbiases over the parties that took part, and the accountant charges each sample's release
with the number of parties that actually released.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import VFLBenchError
from ..privacy.accountant import AccountantSpec, ldp_sigma, match_ldp_sigma, worst_epsilon
from ..privacy.mechanism_spec import (
    beta_in_range,
    delta_in_range,
    make_mechanism,
    pbm_trials,
    positive_finite,
)
from ..privacy.mechanisms import attach, paper_comm_bits
from .base import METHODS, Epoch, Option
from .sumvfl import EVAL_OPTION, MODEL_OPTIONS, SumVFL

_C, _EMBED, _HIDDEN = MODEL_OPTIONS


@METHODS.register("pbm")
class PBMVFL(SumVFL):
    name, display, hp_key, f1_rule = "pbm", "PBM-VFL", "pbm", "single"
    paper = "PBM-VFL (Tran et al., 2025)"
    eval_variants = ("exact", "mechanism")
    draws_noise = True  # attaches its own privacy mechanism (vflbench.runs.settings: the noise source's default)
    setting_options = ("secagg",)  # --secagg masked is --method-opt secagg=masked: the mechanism is the method's
    boundary_refusal = (
        "it attaches its own mechanism from its options (--method-opt mechanism=pbm|npq|ldp, b=, "
        "beta=, secagg=); use --method sum with --mechanism"
    )
    option_specs = (
        Option(
            "mechanism",
            str,
            "pbm",
            "what the server receives: pbm (quantised, securely summed), npq (exact floats), ldp (Gaussian noise per "
            "party)",
            choices=("pbm", "npq", "ldp"),
        ),
        Option("b", int, 32, "Binomial trials per value (PBM bit budget; at most 1,024)", check=pbm_trials),
        Option("beta", float, 0.1, "PBM privacy parameter, in (0, 1/4]", check=beta_in_range),
        _C,
        _EMBED,
        _HIDDEN,
        Option(
            "secagg",
            str,
            "plain",
            "secure sum: plain (the sum directly) or masked (Bonawitz Protocol 0; bit-identical)",
            choices=("plain", "masked"),
        ),
        EVAL_OPTION,
        Option(
            "ldp_match",
            str,
            "paper",
            "LDP noise: paper (sigma^2 = 2M/(b beta^2)), c0 (2 C^2 M / (c0 b beta^2)) or epsilon (bisection: LDP's "
            "certified record-level feature epsilon equals PBM's at the run's horizon)",
            choices=("paper", "c0", "epsilon"),
        ),
        Option(
            "c0",
            float,
            8.0,
            "the constant of the paper's RDP bounds (paper mode, and the paper-formula column)",
            check=positive_finite,
        ),
        Option(
            "accountant",
            str,
            "pld",
            "privacy accounting: pld (certified: pessimistic privacy-loss distributions, exact Gaussian for LDP), "
            "exact (certified, looser: numeric RDP), paper (closed forms with c0; NOT an upper bound)",
            choices=("pld", "exact", "paper"),
        ),
        Option("conversion", str, "mironov", "RDP to (epsilon, delta): mironov or cks", choices=("mironov", "cks")),
        Option("delta", float, 1e-5, "delta of the reported (epsilon, delta)", check=delta_in_range),
        Option(
            "noise",
            str,
            "shared",
            "whose stream draws the parties' noise: shared (one seeded stream, the simulation of the committed "
            "results) or party (each party its own, as separate processes draw it; the default under --runtime "
            "processes, the only value that runs there)",
            choices=("shared", "party"),
            runtime=(("processes", "party"),),
        ),
    )
    assumptions = (
        *SumVFL.assumptions[:2],
        "estimator C/(beta b) (sum - b |O|/2) over the parties that released (|O| = M without missing blocks)",
        "plain SGD, one constant learning rate for server and parties, no momentum or weight decay (the preset)",
        SumVFL.assumptions[2],
        "one seeded generator draws every party's Binomials (a simulation; with noise=party and --runtime processes "
        "each party "
        "draws its own, from the OS by default: --noise-source)",
        "in one process secure aggregation masks come from seeded streams; across processes from X25519 keys and "
        "ChaCha20",
        "epsilon counts every release of training samples' sums: the training steps and, with --target, the "
        "monitoring pass after each epoch when it goes through the mechanism (eval=mechanism); with eval=exact the "
        "monitor sees exact sums, outside the protocol, and is not a release",
        "epsilon_column_block (a party's whole block differs) is the unit that holds for Algorithm 2 as trained; the "
        "record-level columns assume the record does not enter local training (Thm 6.1/6.2's unit), see "
        "docs/PBM_VFL.md",
    )

    @classmethod
    def validate_options(cls, opts: dict) -> str | None:
        if opts["mechanism"] == "ldp" and opts["secagg"] == "masked":
            return (
                "mechanism=ldp sends noisy floats, which secure aggregation of integers cannot carry; use "
                "secagg=plain with ldp"
            )
        if opts["mechanism"] == "npq" and opts["secagg"] == "masked":
            return "mechanism=npq sends exact floats without secure aggregation; use secagg=plain with npq"
        return None

    def mechanism(self):
        """The paper's configuration as the boundary mechanism this method attaches."""
        o = self.options
        acct = {k: o[k] for k in ("accountant", "conversion", "delta", "c0", "noise")}
        if o["mechanism"] == "pbm":
            return make_mechanism("pbm", b=o["b"], beta=o["beta"], C=o["C"], **acct)
        if o["mechanism"] == "ldp":
            return make_mechanism("ldp", C=o["C"], **acct)
        return make_mechanism("npq")

    def build(self) -> None:
        super().build()
        o = self.options
        self.mech = o["mechanism"]
        spec = self.mechanism()
        self.sigma = None
        if self.mech == "ldp":
            if o["ldp_match"] == "epsilon":
                self.sigma = match_ldp_sigma(self._pbm_spec(), self._horizon(), o["delta"])
            else:
                self.sigma = ldp_sigma(self.k, o["b"], o["beta"], self.Cb, o["c0"], o["ldp_match"])
        attach(self, spec, o["secagg"], self.sigma)
        self.epochs_seen, self.n_train, self.batch_size = 0, 0, 1

    def on_attach(self, boundary) -> None:
        """The paper's baselines keep the variant columns they always had (NPQ: exact either way)."""

    def _pbm_spec(self, mode: str | None = None) -> AccountantSpec:
        o = self.options
        return AccountantSpec(
            "pbm",
            self.k,
            self.P,
            b=o["b"],
            beta=o["beta"],
            C=self.Cb,
            c0=o["c0"],
            mode=mode or o["accountant"],
            conversion=o["conversion"],
        )

    def _horizon(self) -> list[int]:
        """A sample's releases over the run's planned epochs, all M parties taking part (two per epoch
        when a charged monitoring pass follows each epoch)."""
        if not self.ctx.epochs:
            raise VFLBenchError("ldp_match=epsilon needs the run's number of epochs to match at; this run has none.")
        per_epoch = 2 if self.ctx.monitored and self.options["eval"] == "mechanism" else 1
        return [0] * (self.k - 1) + [int(self.ctx.epochs) * per_epoch]

    def begin_epoch(self, epoch: Epoch) -> None:
        self.epochs_seen += 1
        self.n_train, self.batch_size = int(epoch.obs.shape[0]), int(epoch.batch_size)
        self.boundary.start(self.n_train)

    def privacy_manifest(self, monitored: bool) -> dict:
        """What the manifest says about the accounting rules this run followed."""
        if not monitored:
            rule = "none: the run has no --target"
        elif self.options["eval"] == "mechanism":
            rule = "charged: each monitoring pass releases every training sample's sum through the mechanism"
        else:
            rule = (
                "not charged: eval=exact, the monitor reads exact sums (a measurement outside the protocol, not a "
                "release)"
            )
        out = {"monitor_passes": rule}
        if self.mech == "ldp":
            out["ldp"] = {"sigma": self.sigma, "match": self.options["ldp_match"]}
        return out

    def extras(self) -> dict:
        o = self.options
        out = {
            "mechanism": self.mech,
            "b": o["b"] if self.mech != "npq" else float("nan"),
            "beta": o["beta"] if self.mech != "npq" else float("nan"),
            "embed_dim": self.P,
            "secagg": o["secagg"],
        }
        if self.epochs_seen:
            bits = paper_comm_bits(self.epochs_seen, self.n_train, self.batch_size, self.k, self.P, o["b"], self.mech)
            out["comm_bits_paper"] = bits
        if self.mech == "ldp":
            out.update({"ldp_sigma": self.sigma, "ldp_match": o["ldp_match"]})
        privacy = self.boundary.extras()
        if self.boundary.accountant is None:  # NPQ, or nothing released yet: the user's delta and accountant as always
            privacy.update({"accountant": "none" if self.mech == "npq" else o["accountant"], "delta": o["delta"]})
        out.update(privacy)
        acc = self.boundary.accountant
        if (
            acc is not None and self.mech == "pbm"
        ):  # Thm 6.1's closed form with c0, for comparison only: not an upper bound
            hist = acc.releases.cpu().numpy()[:, 1:]
            out["epsilon_feature_paper_formula"] = worst_epsilon(
                self._pbm_spec("paper"), np.unique(hist, axis=0), o["delta"], "feature_record"
            )
            out["c0"] = o["c0"]
        return out
