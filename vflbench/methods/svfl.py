"""Standard VFL: one model (K extractors, mean fusion, Linear head) trained only on fully observed
samples. An incomplete test sample gets a uniformly random class (LASER-VFL Section 5)."""

from __future__ import annotations

import torch

from .base import METHODS, Batch, BatchPrediction, Method, Stage, fusion_option, masked_mean_ce


@METHODS.register("svfl")
class StandardVFL(Method):
    name, display, hp_key, f1_rule = "svfl", "Standard VFL", "decoupled", "single"
    paper = "LASER-VFL (Valdeira et al., ICLR 2025), baseline"
    option_specs = (fusion_option(),)

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.head, _ = self.heads("head", 1, self.ctx.model.cut)
        self.mean = self.fusion_is_mean()

    def logits(self, blocks, full: torch.Tensor) -> torch.Tensor:
        need = full[None].expand(self.k, -1)
        emb = self.send(self.ext(blocks, need=need), need)  # only complete samples are read and sent
        return self.head(emb.mean(0, keepdim=True) if self.mean else emb.sum(0, keepdim=True))[0]  # [B, C]

    def loss(self, batch: Batch, stage: Stage):
        full = batch.obs.all(1)
        active = torch.full((self.n_members,), bool(full.any()), device=batch.obs.device)
        if not bool(full.any()):
            return None, active
        return masked_mean_ce(self.logits(batch.blocks, full)[None], batch.y, full[None])[0], active

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        full = obs.all(1)
        lg = self.logits(batch.blocks, full)
        guess = self.random_classes(full.shape)
        preds = torch.where(full, lg.argmax(-1), guess)
        scores = None
        if self.c == 2:
            scores = torch.where(full, self.score(lg), torch.full_like(full, 0.5, dtype=torch.float))[None]
        counted = obs.any(1)
        return BatchPrediction(preds[None], counted[None].clone(), scores, counted)
