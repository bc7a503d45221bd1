"""``direction``: a passive party scores each training sample by the cosine similarity of its returned gradient
with the gradient of samples whose label it knows (Li et al., ICLR 2022). The reference is the mean gradient of
the known positives of the same training step (the most recent step's where a batch holds none). With a top model
linear in the representation, every gradient is (p - y) w: positives and negatives point opposite ways."""

from __future__ import annotations

import torch

from .base import ATTACKS, party_rows
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
        self.ref: dict[int, torch.Tensor] = {}

    def on_down(self, grads, sent, party_of, idx, summed) -> None:
        for k in self.score:
            rows, vec = party_rows(grads, sent, party_of, k, summed)
            if not len(vec):
                continue
            ids = idx[rows.to(idx.device)].cpu()
            vec = vec.float().cpu()
            kp = self.known_pos[ids]
            if kp.any():
                self.ref[k] = vec[kp].mean(0)
            ref = self.ref.get(k)
            if ref is None:  # no known positive seen yet in this run
                continue
            self.score[k][ids] = torch.nn.functional.cosine_similarity(vec, ref[None], dim=1, eps=1e-12)
