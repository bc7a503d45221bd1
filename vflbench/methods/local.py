"""Local: K independent single-party predictors (extractor + Linear head), each trained only on
samples where its own block is observed. At test time every observed client's predictor answers and
accuracy averages over them (LASER-VFL Appendix D)."""

from __future__ import annotations

import torch

from .base import METHODS, BatchPrediction, Method, masked_mean_ce


@METHODS.register("local")
class Local(Method):
    name, display, hp_key, f1_rule = "local", "Local", "decoupled", "per_predictor_nonzero"

    def build(self) -> None:
        self.ext, ext_ids = self.extractors("ext", list(range(self.k)))
        self.head, head_ids = self.heads("head", self.k, self.ctx.model.cut)
        self.ext_ids, self.head_ids = ext_ids, head_ids

    def logits(self, blocks, obs) -> torch.Tensor:
        return self.head(self.ext(blocks, need=obs.T))  # [K, B, C]

    def loss_and_active(self, blocks, obs, y):
        w = obs.T  # model k learns from samples that observe block k
        used = w.any(1)
        active = torch.cat([used, used])  # extractor k and head k
        if not bool(used.any()):
            return None, active
        return masked_mean_ce(self.logits(blocks, obs), y, w).sum(), active

    @torch.no_grad()
    def predict_batch(self, blocks, obs):
        lg = self.logits(blocks, obs)
        return BatchPrediction(lg.argmax(-1), obs.T.clone(), self.score(lg), obs.any(1))
