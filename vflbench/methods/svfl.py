"""Standard VFL: one model (K extractors, mean fusion, Linear head) trained only on fully observed
samples. An incomplete test sample gets a uniformly random class (LASER-VFL Section 5)."""

from __future__ import annotations

import torch

from .base import METHODS, BatchPrediction, Method, masked_mean_ce


@METHODS.register("svfl")
class StandardVFL(Method):
    name, display, hp_key, f1_rule = "svfl", "Standard VFL", "decoupled", "single"
    option_defaults = {"fusion": "mean"}

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.head, _ = self.heads("head", 1, self.ctx.model.cut)
        self.mean = self.fusion_is_mean()

    def logits(self, blocks, full: torch.Tensor) -> torch.Tensor:
        emb = self.ext(blocks, need=full[None].expand(self.k, -1))  # only complete samples are read
        return self.head(emb.mean(0, keepdim=True) if self.mean else emb.sum(0, keepdim=True))[0]  # [B, C]

    def loss_and_active(self, blocks, obs, y):
        full = obs.all(1)
        active = torch.full((self.n_members,), bool(full.any()), device=obs.device)
        if not bool(full.any()):
            return None, active
        return masked_mean_ce(self.logits(blocks, full)[None], y, full[None])[0], active

    @torch.no_grad()
    def predict_batch(self, blocks, obs):
        full = obs.all(1)
        lg = self.logits(blocks, full)
        guess = self.random_classes(full.shape)
        preds = torch.where(full, lg.argmax(-1), guess)
        scores = None
        if self.c == 2:
            scores = torch.where(full, self.score(lg), torch.full_like(full, 0.5, dtype=torch.float))[None]
        counted = obs.any(1)
        return BatchPrediction(preds[None], counted[None].clone(), scores, counted)
