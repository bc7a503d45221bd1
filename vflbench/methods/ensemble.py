"""Ensemble: the Local predictors (trained identically, with their own presets) combined by a
one-hot majority vote over the observed clients, ties broken uniformly at random. Each observed
party sends its prediction (its logits) to the server that counts the votes.

The label is the paper's majority vote. The score that ranks the samples for AUPRC (a binary target) is the mean
predicted probability of the positive class over the observed parties: a vote share over one to four parties has
two to five values, and on a table where one party predicts alone it is constant (until 2026-11-29 the vote share
was the score; behaviour component ``method.ensemble.score``)."""

from __future__ import annotations

import torch

from .base import METHODS, Batch, BatchPrediction
from .local import Local


def majority_vote(
    preds: torch.Tensor, valid: torch.Tensor, n_classes: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``preds``/``valid`` ``[P, B]`` -> winning class ``[B]`` (random among tied classes) and vote share."""
    votes = torch.zeros(preds.shape[1], n_classes, device=preds.device)
    votes.scatter_add_(1, preds.T, valid.T.float())
    top = votes.max(1, keepdim=True).values
    tied = (votes == top) & (top > 0)
    noise = torch.rand(votes.shape, generator=gen, device=votes.device)
    winner = torch.where(tied, noise, torch.full_like(noise, -1.0)).argmax(1)
    share = votes / votes.sum(1, keepdim=True).clamp_min(1)
    return winner, share


@METHODS.register("ensemble")
class Ensemble(Local):
    name, display, hp_key, f1_rule = "ensemble", "Ensemble", "ensemble", "single"
    paper = "LASER-VFL (Valdeira et al., ICLR 2025), baseline"
    local_only = False  # the votes cross at prediction time
    boundary_refusal = (
        "no training value crosses the boundary (each party trains alone; only test-time votes cross), "
        "so a mechanism would protect no training record"
    )

    @classmethod
    def behaviour_components(cls, options, info=None):
        return ["method.ensemble.score"] if info is not None and info.n_classes == 2 else []

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        lg = self.send(self.logits(batch.blocks, obs), obs.T)  # each observed party sends its logits
        winner, _ = majority_vote(lg.argmax(-1), obs.T, self.c, self.gen)
        scores = None
        if self.c == 2:  # the observed parties' mean probability of the positive class
            p1 = torch.softmax(lg.float(), -1)[..., 1] * obs.T
            scores = (p1.sum(0) / obs.T.sum(0).clamp_min(1))[None]
        counted = obs.any(1)
        return BatchPrediction(winner[None], counted[None].clone(), scores, counted)
