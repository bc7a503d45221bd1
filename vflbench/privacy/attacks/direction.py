"""``direction``: a passive party scores each training sample by the cosine similarity of its returned gradient
with the gradient of samples whose label it knows (Li et al., ICLR 2022). The reference is the mean gradient of
the known positives of the same training step (the most recent step's where a batch holds none). With a top model
linear in the representation, every gradient is (p - y) w: positives and negatives point opposite ways."""

from __future__ import annotations

import torch

from .base import ATTACKS
from .scoring import GradientScoring


@ATTACKS.register("direction")
class DirectionScoring(GradientScoring):
    name = "direction"
    paper = "Li et al., Label Leakage and Protection in Two-party Split Learning (ICLR 2022)"
    adversary = "party"
    observes = "the gradients returned to it, for the rows it sent"
    side_knowledge = "known: the share of training labels it knows (the known positives' gradients are the reference)"

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.known_pos = self.known & (ctx.y == ctx.positive)
        self.ref: torch.Tensor | None = None  # [K, W] each party's latest reference
        self.has_ref = torch.zeros(ctx.k, dtype=torch.bool)

    def step_scores(self, g, sent, ids):
        kp = (sent & self.known_pos[ids][None]).to(g.dtype)  # [K, B] this step's known positives, per party
        count = kp.sum(1)  # [K]
        now = (g * kp[..., None]).sum(1) / count.clamp_min(1)[:, None]  # [K, W]
        if self.ref is None or self.ref.shape != now.shape:
            self.ref = torch.zeros_like(now)
        fresh = count > 0
        self.ref = torch.where(fresh[:, None], now, self.ref)
        self.has_ref |= fresh
        cos = torch.nn.functional.cosine_similarity(g, self.ref[:, None, :], dim=-1, eps=1e-12)  # [K, B]
        return torch.where(self.has_ref[:, None], cos, torch.full_like(cos, float("nan")))
