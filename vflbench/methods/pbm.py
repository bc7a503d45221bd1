"""PBM-VFL (Tran, Castiglia, Patterson & Milanova, 2025): every party's network ends in ``C*tanh``;
the server sees only a noisy, unbiased estimate of the *sum* of the party embeddings, released with
the Poisson Binomial Mechanism and secure aggregation, and trains a ``Linear(P, classes)`` head on
it. The server's gradient at that estimate goes straight through to each party's exact embedding;
all models take plain SGD steps at one constant rate (Algorithm 2).

The mechanism is a channel (:mod:`vflbench.mechanisms`), the accountant a module of its own
(:mod:`vflbench.accountant`); this file holds the model and the loss. ``mechanism=npq`` and
``mechanism=ldp`` are the paper's two baselines on the same model.

Beyond the paper, blocks may be missing: a party without a sample's block sends nothing for it, the
server unbiases over the parties that took part, and the accountant charges each sample's release
with the number of parties that actually released.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..accountant import (
    AccountantSpec,
    NoisySumAccountant,
    ldp_sigma,
    match_ldp_sigma,
    worst_epsilon,
)
from ..channel import PHASES
from ..errors import VFLBenchError
from ..mechanisms import LDPChannel, PBMChannel, paper_comm_bits
from ..models import Extractors, ModelSpec
from ..secagg import PairwiseMasking
from .base import METHODS, Batch, BatchPrediction, Epoch, Method, Option, Stage, masked_mean_ce


def _beta(v: float) -> str | None:
    return None if 0 < v <= 0.25 else "beta must be in (0, 1/4]"


def _positive(v: float) -> str | None:
    return None if v > 0 and math.isfinite(v) else "must be a finite number > 0"


def _at_least_1(v: int) -> str | None:
    return None if v >= 1 else "must be >= 1"


def _delta(v: float) -> str | None:
    return None if 0 < v < 1 else "delta must be in (0, 1)"


def _hidden(v: str) -> str | None:
    try:
        sizes = [int(x) for x in v.split(",") if x.strip()]
    except ValueError:
        return "give comma-separated layer sizes, e.g. 128,64"
    return None if all(s >= 1 for s in sizes) else "layer sizes must be >= 1"


@METHODS.register("pbm")
class PBMVFL(Method):
    name, display, hp_key, f1_rule = "pbm", "PBM-VFL", "pbm", "single"
    paper = "PBM-VFL (Tran et al., 2025)"
    stages = (Stage("train"),)
    option_specs = (
        Option("mechanism", str, "pbm", "what the server receives: pbm (quantised, securely summed), npq (exact floats), ldp (Gaussian noise per party)", choices=("pbm", "npq", "ldp")),
        Option("b", int, 32, "Binomial trials per value (PBM bit budget)", check=_at_least_1),
        Option("beta", float, 0.1, "PBM privacy parameter, in (0, 1/4]", check=_beta),
        Option("C", float, 1.0, "embedding bound: party outputs are C*tanh", check=_positive),
        Option("embed_dim", int, 16, "embedding size P", check=_at_least_1),
        Option("hidden", str, "128,64", "hidden widths of the party MLPs (tabular data)", check=_hidden),
        Option("secagg", str, "plain", "secure sum: plain (the sum directly) or masked (Bonawitz Protocol 0; bit-identical)", choices=("plain", "masked")),
        Option("eval", str, "mechanism", "test-time fusion: mechanism (as in training) or exact sums; the other is logged as metric@variant", choices=("mechanism", "exact")),
        Option("ldp_match", str, "paper", "LDP noise: paper (sigma^2 = 2M/(b beta^2)), c0 (2 C^2 M / (c0 b beta^2)) or epsilon (bisection: LDP's certified record-level feature epsilon equals PBM's at the run's horizon)", choices=("paper", "c0", "epsilon")),
        Option("c0", float, 8.0, "the constant of the paper's RDP bounds (paper mode, and the paper-formula column)", check=_positive),
        Option("accountant", str, "pld", "privacy accounting: pld (certified: pessimistic privacy-loss distributions, exact Gaussian for LDP), exact (certified, looser: numeric RDP), paper (closed forms with c0; NOT an upper bound)", choices=("pld", "exact", "paper")),
        Option("conversion", str, "mironov", "RDP to (epsilon, delta): mironov or cks", choices=("mironov", "cks")),
        Option("delta", float, 1e-5, "delta of the reported (epsilon, delta)", check=_delta),
    )
    eval_variants = ("exact", "mechanism")
    smoke_hp = {"lr": 0.1}  # plain SGD: 8 short epochs need a larger step than the suite's Adam-sized 3e-3
    assumptions = (
        "party MLPs Linear(d,128)-ReLU-Linear(128,64)-ReLU-Linear(64,P), then C*tanh and clamp to [-C, C] (spec 5.2; widths not in the paper)",
        "server: one Linear(P, classes) with bias on the estimated embedding sum, mean cross-entropy",
        "estimator C/(beta b) (sum - b |O|/2) over the parties that released (|O| = M without missing blocks)",
        "plain SGD, one constant learning rate for server and parties, no momentum or weight decay (the preset)",
        "the server's gradient is float32, uncompressed, the same for every party (straight-through)",
        "one seeded generator draws every party's Binomials (a simulation; each party's own RNG in a deployment)",
        "secure aggregation keys come from seeded streams, not a key agreement",
        "epsilon counts every release of training samples' sums: the training steps and, with --target, the monitoring pass after each epoch when it goes through the mechanism (eval=mechanism); with eval=exact the monitor sees exact sums, outside the protocol, and is not a release",
        "epsilon_column_block (a party's whole block differs) is the unit that holds for Algorithm 2 as trained; the record-level columns assume the record does not enter local training (Thm 6.1/6.2's unit), see docs/PBM_VFL.md",
    )

    @classmethod
    def validate_options(cls, opts: dict) -> str | None:
        if opts["mechanism"] == "ldp" and opts["secagg"] == "masked":
            return "mechanism=ldp sends noisy floats, which secure aggregation of integers cannot carry; use secagg=plain with ldp"
        if opts["mechanism"] == "npq" and opts["secagg"] == "masked":
            return "mechanism=npq sends exact floats without secure aggregation; use secagg=plain with npq"
        return None

    def build(self) -> None:
        o = self.options
        self.P, self.Cb, self.mech = int(o["embed_dim"]), float(o["C"]), o["mechanism"]
        spec = self.ctx.model
        if spec.arch == "mlp":
            spec = ModelSpec("mlp", self.P, tuple(int(x) for x in str(o["hidden"]).split(",") if x.strip()))
        else:
            spec = ModelSpec(spec.arch, self.P)
        ids = self.new_members(self.k)
        self.ext = Extractors(spec, self.store, "ext", list(range(self.k)), ids, self.ctx.widths, self.ctx.in_ch, self.init_gen)
        self.extractor_sets.append(self.ext)
        self.head, _ = self.heads("head", 1, self.P, hidden=0)  # Linear(P, classes), Algorithm 2
        gens = {}
        for phase in PHASES:  # one noise stream per phase: evaluation never shifts training's draws
            gens[phase] = torch.Generator(device=self.device)
            gens[phase].manual_seed(self.ctx.streams.seed_for("mechanism" if phase == "train" else f"mechanism/{phase}"))
        if self.mech == "pbm":
            sec = PairwiseMasking(self.k, o["b"], self.ctx.streams.seed_for("secagg"), self.device) if o["secagg"] == "masked" else None
            self.channel = PBMChannel(self.k, o["b"], o["beta"], self.Cb, gens, sec)
        elif self.mech == "ldp":
            if o["ldp_match"] == "epsilon":
                self.sigma = match_ldp_sigma(self._pbm_spec(), self._horizon(), o["delta"])
            else:
                self.sigma = ldp_sigma(self.k, o["b"], o["beta"], self.Cb, o["c0"], o["ldp_match"])
            self.channel = LDPChannel(self.k, self.sigma, gens)
        self.accountant: NoisySumAccountant | None = None
        self.variant = o["eval"]
        self.epochs_seen, self.n_train, self.batch_size = 0, 0, 1

    def _pbm_spec(self, mode: str | None = None) -> AccountantSpec:
        o = self.options
        return AccountantSpec("pbm", self.k, self.P, b=o["b"], beta=o["beta"], C=self.Cb, c0=o["c0"], mode=mode or o["accountant"], conversion=o["conversion"])

    def _horizon(self) -> list[int]:
        """A sample's releases over the run's planned epochs, all M parties taking part (two per epoch
        when a charged monitoring pass follows each epoch)."""
        if not self.ctx.epochs:
            raise VFLBenchError("ldp_match=epsilon needs the run's number of epochs to match at; this run has none.")
        per_epoch = 2 if self.ctx.monitored and self.options["eval"] == "mechanism" else 1
        return [0] * (self.k - 1) + [int(self.ctx.epochs) * per_epoch]

    def embed(self, blocks) -> torch.Tensor:
        """``[K, B, P]`` party embeddings in [-C, C]."""
        return (self.Cb * torch.tanh(self.ext(blocks))).clamp(-self.Cb, self.Cb)

    def fused(self, batch: Batch, mechanism: bool) -> torch.Tensor:
        sent = batch.obs.T  # [K, B]: a party sends for the samples whose block it holds
        emb = self.embed(batch.blocks)
        if mechanism:
            return self.channel.aggregate(emb, sent, batch.idx)
        self.channel.count(emb, sent)  # exact sums: the traffic is counted, nothing is released
        return (emb * sent[..., None].to(emb.dtype)).sum(0)

    def begin_epoch(self, epoch: Epoch) -> None:
        self.epochs_seen += 1
        self.n_train, self.batch_size = int(epoch.obs.shape[0]), int(epoch.batch_size)
        if self.accountant is None and self.mech in ("pbm", "ldp"):
            o = self.options
            spec = AccountantSpec(self.mech, self.k, self.P, b=o["b"], beta=o["beta"], C=self.Cb, sigma=getattr(self, "sigma", 0.0),
                                  c0=o["c0"], mode=o["accountant"], conversion=o["conversion"])
            self.accountant = NoisySumAccountant(spec, self.n_train, epoch.obs.device)
            self.channel.accountant = self.accountant

    def loss(self, batch: Batch, stage: Stage):
        any_obs = batch.obs.any(1)
        active = torch.zeros(self.n_members, dtype=torch.bool, device=batch.obs.device)
        active[: self.k] = batch.obs.any(0)
        active[self.k] = bool(any_obs.any())
        if not bool(any_obs.any()):
            return None, active
        logits = self.head(self.fused(batch, True)[None])  # [1, B, C]
        return masked_mean_ce(logits, batch.y, any_obs[None])[0], active

    @torch.no_grad()
    def predict(self, batch: Batch) -> BatchPrediction:
        counted = batch.obs.any(1)
        lg = self.head(self.fused(batch, self.variant == "mechanism")[None])[0]
        preds = torch.where(counted, lg.argmax(-1), self.random_classes(counted.shape))
        scores = None
        if self.c == 2:
            scores = torch.where(counted, self.score(lg), torch.full_like(counted, 0.5, dtype=torch.float))[None]
        return BatchPrediction(preds[None], counted[None].clone(), scores, counted)

    def use_variant(self, variant: str) -> None:
        """Evaluate with ``mechanism`` or ``exact`` sums (the pipeline logs the non-default one too)."""
        if variant not in ("mechanism", "exact"):
            raise VFLBenchError(f"PBM-VFL evaluation variant must be mechanism or exact, got {variant!r}.")
        self.variant = variant

    def privacy_manifest(self, monitored: bool) -> dict:
        """What the manifest says about the accounting rules this run followed."""
        if not monitored:
            rule = "none: the run has no --target"
        elif self.options["eval"] == "mechanism":
            rule = "charged: each monitoring pass releases every training sample's sum through the mechanism"
        else:
            rule = "not charged: eval=exact, the monitor reads exact sums (a measurement outside the protocol, not a release)"
        out = {"monitor_passes": rule}
        if self.mech == "ldp":
            out["ldp"] = {"sigma": self.sigma, "match": self.options["ldp_match"]}
        return out

    def extras(self) -> dict:
        o = self.options
        out = {"mechanism": self.mech, "b": o["b"] if self.mech != "npq" else float("nan"), "beta": o["beta"] if self.mech != "npq" else float("nan"),
               "embed_dim": self.P, "secagg": o["secagg"]}
        if self.epochs_seen:
            bits = paper_comm_bits(self.epochs_seen, self.n_train, self.batch_size, self.k, self.P, o["b"], self.mech)
            out["comm_bits_paper"] = bits
        if self.mech == "ldp":
            out.update({"ldp_sigma": self.sigma, "ldp_match": o["ldp_match"]})
        d = o["delta"]
        if self.accountant is not None:
            acc = self.accountant
            out.update({"accountant": o["accountant"], "privacy_upper_bound": acc.spec.upper_bound, "delta": d,
                        "epsilon_column_block": acc.get_epsilon(d, "column_block"),
                        "epsilon_feature_record_no_local_training": acc.get_epsilon(d, "feature_record"),
                        "epsilon_sample_record_no_local_training": acc.get_epsilon(d, "sample_record"),
                        "privacy_releases": acc.epochs()})
            if self.mech == "pbm":  # Thm 6.1's closed form with c0, for comparison only: not an upper bound
                hist = acc.releases.cpu().numpy()[:, 1:]
                out["epsilon_feature_paper_formula"] = worst_epsilon(self._pbm_spec("paper"), np.unique(hist, axis=0), d, "feature_record")
                out["c0"] = o["c0"]
        else:
            out.update({"accountant": "none" if self.mech == "npq" else o["accountant"], "delta": d,
                        **{f"epsilon_{u}": float("inf") for u in ("column_block", "feature_record_no_local_training", "sample_record_no_local_training")}})
        return out
