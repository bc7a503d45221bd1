"""Summing VFL: every party's network ends in ``C*tanh``; the server reads only the *sum* of the party
embeddings (``Channel.aggregate``) and trains a ``Linear(P, classes)`` head on it; all models take
plain SGD steps (the preset). It is PBM-VFL's model without its mechanism: ``--method sum --mechanism
pbm:b=32,beta=0.1 --secagg masked`` is ``--method pbm`` (:mod:`vflbench.methods.pbm`), bit for bit.

Under missing blocks a party without a sample's block sends nothing for it, and the server sums
over the parties that sent (a mechanism unbiases over them).
"""

from __future__ import annotations

import torch

from ..nn.models import Extractors, ModelSpec
from ..privacy.mechanism_spec import at_least_one, positive_finite
from .base import METHODS, Batch, BatchPrediction, Method, Option, Stage, masked_mean_ce


def _hidden(v: str) -> str | None:
    try:
        sizes = [int(x) for x in v.split(",") if x.strip()]
    except ValueError:
        return "give comma-separated layer sizes, e.g. 128,64"
    return None if all(s >= 1 for s in sizes) else "layer sizes must be >= 1"


MODEL_OPTIONS = (
    Option("C", float, 1.0, "embedding bound: party outputs are C*tanh", check=positive_finite),
    Option("embed_dim", int, 16, "embedding size P", check=at_least_one),
    Option("hidden", str, "128,64", "hidden widths of the party MLPs (tabular data)", check=_hidden),
)
EVAL_OPTION = Option(
    "eval",
    str,
    "mechanism",
    "test-time fusion under a mechanism: mechanism (as in training) or exact sums; "
    "the other is logged as metric@variant",
    choices=("mechanism", "exact"),
)


@METHODS.register("sum")
class SumVFL(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: the server sums the representations that are present

    name, display, hp_key, f1_rule = "sum", "Summing VFL", "pbm", "single"
    paper = "PBM-VFL's model without its mechanism (Tran et al., 2025)"
    stages = (Stage("train"),)
    sums_at_server = True
    option_specs = (*MODEL_OPTIONS, EVAL_OPTION)
    smoke_hp = {"lr": 0.1}  # plain SGD: 8 short epochs need a larger step than the suite's Adam-sized 3e-3
    assumptions = (
        "party MLPs Linear(d,128)-ReLU-Linear(128,64)-ReLU-Linear(64,P), then C*tanh and clamp to [-C, C] (PBM-VFL "
        "spec 5.2; widths not in the paper)",
        "server: one Linear(P, classes) with bias on the embedding sum, mean cross-entropy",
        "the server's gradient is float32, uncompressed, the same for every party (straight-through under a mechanism)",
    )

    def build(self) -> None:
        o = self.options
        self.P, self.Cb = int(o["embed_dim"]), float(o["C"])
        spec = self.ctx.model
        if spec.arch == "mlp":
            spec = ModelSpec("mlp", self.P, tuple(int(x) for x in str(o["hidden"]).split(",") if x.strip()))
        else:
            spec = ModelSpec(spec.arch, self.P)
        ids = self.new_members(self.k)
        self.ext = Extractors(
            spec,
            self.store,
            "ext",
            list(range(self.k)),
            ids,
            self.ctx.widths,
            self.ctx.in_ch,
            self.init_gen,
            self.ctx.embedded or None,
        )
        self.extractor_sets.append(self.ext)
        self.head, _ = self.heads("head", 1, self.P, hidden=0)  # Linear(P, classes), Algorithm 2
        self.variant = o["eval"]

    def on_attach(self, boundary) -> None:
        """A private mechanism: evaluation goes through it (``eval``), and exact sums are logged too."""
        if boundary.spec.private:
            self.eval_variants = ("exact", "mechanism")

    def embed(self, blocks) -> torch.Tensor:
        """``[K, B, P]`` party embeddings in [-C, C]."""
        return (self.Cb * torch.tanh(self.ext(blocks))).clamp(-self.Cb, self.Cb)

    def fused(self, batch: Batch, mechanism: bool) -> torch.Tensor:
        sent = batch.obs.T  # [K, B]: a party sends for the samples whose block it holds
        emb = self.embed(batch.blocks)
        if mechanism:
            return self.channel.aggregate(emb, sent, batch.idx)
        return self.channel.exact_sum(emb, sent)  # exact float sums (no mechanism): counted, nothing is released

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
            super().use_variant(variant)
        self.variant = variant

    def extras(self) -> dict:
        return {"embed_dim": self.P}
