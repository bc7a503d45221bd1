"""``norm``: a passive party scores each training sample by the norm of the gradient the server returned for it
(Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022). On imbalanced binary data the
minority class carries the larger |p - y|, so the larger gradient."""

from __future__ import annotations

from .base import ATTACKS
from .scoring import GradientScoring


@ATTACKS.register("norm")
class NormScoring(GradientScoring):
    name = "norm"
    paper = "Li et al., Label Leakage and Protection in Two-party Split Learning (ICLR 2022)"
    adversary = "party"
    observes = "the gradients returned to it, for the rows it sent"
    side_knowledge = "known: the share of training labels it knows (orients the score)"

    def step_scores(self, g, sent, ids):
        return g.norm(dim=-1)
