"""What the label attacks based on returned gradients share: a score per training sample, kept for the epoch
(each sample once: its last gradient of the epoch), then the ROC AUC of the scores on the samples whose label
the party does not know, oriented by the ones it does (Li et al. ICLR 2022's "leak AUC", per epoch).

Scores of every party are kept in one ``[K, n]`` tensor and a step's gradients are scored for all parties at once
(a party with several senders, as Combinatorial's, is scored on its senders' gradients side by side)."""

from __future__ import annotations

import numpy as np
import torch

from .base import Attack, oriented_auc, party_rows


class GradientScoring(Attack):
    """Base of ``norm`` and ``direction``: subclasses give :meth:`step_scores`."""

    labels = True
    binary_only = True
    metrics = ("auc", "auc_mean", "auc_max")

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.rows = torch.tensor(self.parties(), dtype=torch.long)
        self.score = torch.full((ctx.k, ctx.n), float("nan"))
        self.pos = (ctx.y == ctx.positive).numpy()

    def step_scores(self, g: torch.Tensor, sent: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``g`` ``[K, B, W]`` (each party's gradients of the step), ``sent`` ``[K, B]``, ``ids`` ``[B]``: ``[K, B]``
        scores (NaN: not scored)."""
        raise NotImplementedError

    def on_down(self, grads, sent, party_of, idx, summed) -> None:
        if not len(self.rows):
            return
        ids = idx.cpu()
        sent = sent.cpu()
        if summed:  # one gradient of the sum for every party that sent
            g = grads.float().cpu()[None].expand(self.ctx.k, -1, -1)
        elif party_of is None:
            g = grads.float().cpu()
        else:  # several senders per party: each party's gradients side by side
            per = [party_rows(grads, sent, party_of, k, False) for k in range(self.ctx.k)]
            width = max(v.shape[1] for _, v in per)
            g = torch.zeros(self.ctx.k, len(ids), width)
            sent = torch.zeros(self.ctx.k, len(ids), dtype=torch.bool)
            for k, (rows, v) in enumerate(per):
                rows = rows.cpu()
                g[k, rows, : v.shape[1]] = v.float().cpu()
                sent[k] = rows
        s = self.step_scores(g, sent, ids)
        cur = self.score[:, ids]
        keep = sent & ~torch.isnan(s)
        self.score[:, ids] = torch.where(keep, s, cur)

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        known = self.known.numpy()
        for k in self.parties():
            s = self.score[k].numpy()
            seen = ~np.isnan(s)
            self.history.setdefault(k, {})[epoch] = oriented_auc(s[seen], known[seen], self.pos[seen])
        self.score.fill_(float("nan"))

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        return self.history_rows(epoch)
