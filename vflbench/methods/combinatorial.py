"""Combinatorial: one independent predictor per non-empty subset of parties (2^K - 1 of them, no
shared parameters). Predictor S trains on samples that observe all of S; at test time the predictor
whose subset equals the observed set answers."""

from __future__ import annotations

import torch

from .base import METHODS, Batch, BatchPrediction, Method, Stage, fusion_option, masked_mean_ce


def pattern_ids(obs: torch.Tensor) -> torch.Tensor:
    """Observed pattern of each sample as an integer bitmask (bit k = block k observed)."""
    return (obs.long() << torch.arange(obs.shape[1], device=obs.device)).sum(1)


@METHODS.register("combinatorial")
class Combinatorial(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: a model per subset of parties: the subsets without the lost party predict

    name, display, hp_key, f1_rule = "combinatorial", "Combinatorial", "decoupled", "per_predictor_nonzero"
    boundary_refusal = (
        "a party sends one representation per subset model it belongs to; charging several releases "
        "per party and step is not implemented"
    )
    packable = True
    paper = "LASER-VFL (Valdeira et al., ICLR 2025), baseline"
    option_specs = (fusion_option(),)

    def build(self) -> None:
        k = self.k
        if k > 10:
            from ..core.errors import VFLBenchError

            raise VFLBenchError(
                f"Combinatorial trains 2^K - 1 = {2**k - 1} predictors; K={k} is too many (use K <= 10)."
            )
        self.bits = torch.arange(1, 2**k)  # subset h <-> bitmask h+1
        party_of, owner = [], []
        for h, b in enumerate(self.bits.tolist()):
            for j in range(k):
                if b >> j & 1:
                    party_of.append(j)
                    owner.append(h)
        self.ext, ext_ids = self.extractors("ext", party_of, groups=owner)  # one optimiser per subset model
        self.head, head_ids = self.heads("head", len(self.bits), self.ctx.model.cut, groups=list(range(len(self.bits))))
        self.party_of = torch.as_tensor(party_of, device=self.device)
        owner_t = torch.as_tensor(owner)
        size = torch.bincount(owner_t).float()
        agg = torch.zeros(len(self.bits), len(party_of))
        agg[owner_t, torch.arange(len(party_of))] = 1.0 / size[owner_t] if self.fusion_is_mean() else 1.0
        self.agg = agg.to(self.device)
        self.owner = owner_t.to(self.device)
        self.bits = self.bits.to(self.device)

    def logits(self, blocks, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` [H, B]: the samples each subset model may see."""
        need = rows[self.owner]
        emb = self.send(self.ext(blocks, need=need), need, self.party_of)  # [M, B, D]
        fused = torch.einsum("hm,mbd->hbd", self.agg, emb)
        return self.head(fused)  # [H, B, C]

    def covers(self, obs: torch.Tensor) -> torch.Tensor:
        """``[H, B]``: subset h is fully observed in sample b."""
        pat = pattern_ids(obs)
        return (self.bits[:, None] & pat[None, :]) == self.bits[:, None]

    def loss(self, batch: Batch, stage: Stage):
        w = self.covers(batch.obs)
        used = w.any(1)
        active = torch.cat([used[self.owner], used])
        return masked_mean_ce(self.logits(batch.blocks, w), batch.y, w).sum(), active

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        exact = self.bits[:, None] == pattern_ids(obs)[None, :]  # [H, B]
        lg = self.logits(batch.blocks, exact)
        return BatchPrediction(lg.argmax(-1), exact, self.score(lg), obs.any(1))
