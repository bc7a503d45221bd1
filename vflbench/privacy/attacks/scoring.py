"""What the label attacks based on returned gradients share: a score per training sample, kept for the epoch
(each sample once: its last gradient of the epoch), then the ROC AUC of the scores on the samples whose label
the party does not know, oriented by the ones it does (Li et al. ICLR 2022's "leak AUC", per epoch)."""

from __future__ import annotations

import numpy as np
import torch

from .base import Attack, auc


class GradientScoring(Attack):
    """Base of ``norm`` and ``direction``: subclasses fill ``self.score[k]`` in :meth:`on_down`."""

    labels = True
    binary_only = True
    metrics = ("auc", "auc_mean", "auc_max")

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.score = {k: torch.full((ctx.n,), float("nan")) for k in self.parties()}
        self.pos = (ctx.y == ctx.positive).numpy()
        self.oriented: dict[int, int] = {}

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        known = self.known.numpy()
        for k, s in self.score.items():
            s = s.numpy()
            seen = ~np.isnan(s)
            kp, kn = seen & known & self.pos, seen & known & ~self.pos
            # the party orients its score by the labels it knows: positives are the high end
            sign = -1 if kp.any() and kn.any() and s[kp].mean() < s[kn].mean() else 1
            self.oriented[k] = sign
            scored = seen & ~known
            self.history.setdefault(k, {})[epoch] = (
                auc(sign * s[scored], self.pos[scored]) if scored.any() else float("nan")
            )
            self.score[k] = torch.full((self.ctx.n,), float("nan"))

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        out = []
        for k, h in self.history.items():
            upto = [v for e, v in h.items() if e <= epoch and not np.isnan(v)]
            out += [
                (self.adversary_of(k), "auc", h.get(epoch, float("nan"))),
                (self.adversary_of(k), "auc_mean", float(np.mean(upto)) if upto else float("nan")),
                (self.adversary_of(k), "auc_max", float(np.max(upto)) if upto else float("nan")),
            ]
        return out
