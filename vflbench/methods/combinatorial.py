"""Combinatorial: one independent predictor per non-empty subset of parties (2^K - 1 of them, no
shared parameters). Predictor S trains on samples that observe all of S; at test time the predictor
whose subset equals the observed set answers."""

from __future__ import annotations

import torch

from .base import METHODS, BatchPrediction, Method, masked_mean_ce


def pattern_ids(obs: torch.Tensor) -> torch.Tensor:
    """Observed pattern of each sample as an integer bitmask (bit k = block k observed)."""
    return (obs.long() << torch.arange(obs.shape[1], device=obs.device)).sum(1)


@METHODS.register("combinatorial")
class Combinatorial(Method):
    name, display, hp_key, f1_rule = "combinatorial", "Combinatorial", "decoupled", "per_predictor_nonzero"
    option_defaults = {"fusion": "mean"}

    def build(self) -> None:
        k = self.k
        if k > 10:
            from ..errors import VFLBenchError

            raise VFLBenchError(f"Combinatorial trains 2^K - 1 = {2**k - 1} predictors; K={k} is too many (use K <= 10).")
        self.bits = torch.arange(1, 2**k)  # subset h <-> bitmask h+1
        party_of, owner = [], []
        for h, b in enumerate(self.bits.tolist()):
            for j in range(k):
                if b >> j & 1:
                    party_of.append(j)
                    owner.append(h)
        self.ext, ext_ids = self.extractors("ext", party_of)
        self.head, head_ids = self.heads("head", len(self.bits), self.ctx.model.cut)
        owner_t = torch.as_tensor(owner)
        size = torch.bincount(owner_t).float()
        agg = torch.zeros(len(self.bits), len(party_of))
        agg[owner_t, torch.arange(len(party_of))] = 1.0 / size[owner_t] if self.fusion_is_mean() else 1.0
        self.agg = agg.to(self.device)
        self.owner = owner_t.to(self.device)
        self.bits = self.bits.to(self.device)

    def logits(self, blocks, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` [H, B]: the samples each subset model may see."""
        emb = self.ext(blocks, need=rows[self.owner])  # [M, B, D]
        fused = torch.einsum("hm,mbd->hbd", self.agg, emb)
        return self.head(fused)  # [H, B, C]

    def covers(self, obs: torch.Tensor) -> torch.Tensor:
        """``[H, B]``: subset h is fully observed in sample b."""
        pat = pattern_ids(obs)
        return (self.bits[:, None] & pat[None, :]) == self.bits[:, None]

    def loss_and_active(self, blocks, obs, y):
        w = self.covers(obs)
        used = w.any(1)
        active = torch.cat([used[self.owner], used])
        if not bool(used.any()):
            return None, active
        return masked_mean_ce(self.logits(blocks, w), y, w).sum(), active

    @torch.no_grad()
    def predict_batch(self, blocks, obs):
        exact = self.bits[:, None] == pattern_ids(obs)[None, :]  # [H, B]
        lg = self.logits(blocks, exact)
        return BatchPrediction(lg.argmax(-1), exact, self.score(lg), obs.any(1))
