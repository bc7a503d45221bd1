"""Local: K independent single-party predictors (extractor + Linear head), each trained only on
samples where its own block is observed. At test time every observed client's predictor answers and
accuracy averages over them (LASER-VFL Appendix D). Nothing leaves a party."""

from __future__ import annotations

import torch

from .base import METHODS, Batch, BatchPrediction, Method, Stage, masked_mean_ce


@METHODS.register("local")
class Local(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: each party predicts alone; a lost party's predictor abstains

    name, display, hp_key, f1_rule = "local", "Local", "decoupled", "per_predictor_nonzero"
    boundary_refusal = "nothing crosses the boundary (every party predicts alone)"
    packable = True
    paper = "LASER-VFL (Valdeira et al., ICLR 2025), baseline"
    local_only = True

    def build(self) -> None:
        parties = list(range(self.k))
        self.ext, self.ext_ids = self.extractors("ext", parties, groups=parties)  # one optimiser per party
        self.head, self.head_ids = self.heads("head", self.k, self.ctx.model.cut, groups=parties)

    def party_members(self):
        """A party holds its extractor and its head (it predicts alone; Ensemble's parties send their logits)."""
        out = super().party_members()
        for k, m in enumerate(self.head_ids):
            out[k].append(int(m))
        return out

    def logits(self, blocks, obs) -> torch.Tensor:
        return self.head(self.ext(blocks, need=obs.T))  # [K, B, C]

    def party_losses(self, batch: Batch, stage: Stage):
        """Party k's own term: its model's mean cross-entropy over the samples that observe block k."""
        w = batch.obs.T  # model k learns from samples that observe block k
        used = w.any(1)
        active = torch.cat([used, used])  # extractor k and head k
        return masked_mean_ce(self.logits(batch.blocks, batch.obs), batch.y, w), active

    def loss(self, batch: Batch, stage: Stage):
        terms, active = self.party_losses(batch, stage)
        return terms.sum(), active

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        lg = self.logits(batch.blocks, obs)
        return BatchPrediction(lg.argmax(-1), obs.T.clone(), self.score(lg), obs.any(1))
