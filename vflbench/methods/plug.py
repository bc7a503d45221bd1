"""PlugVFL (Sun et al. 2024), as the LASER-VFL baseline: K extractors, concatenation fusion into one
Linear head, zeros for missing blocks, and party-wise dropout of observed *passive* blocks with
probability ``p_drop`` during training. The active party (last client) is never dropped; samples
whose active block is missing are not trained on. At test time such samples are excluded from the
denominators (``plug_denominator: exclude``, the authors' code) or scored as a uniformly random guess
(``random``, the clean default).

As the FALSE-VFL paper runs it (``--protocol false``): ``p_drop`` 0.5, per-sample dropout, and
``active_missing=impute``: a sample whose active block is missing is still trained on and predicted,
with that block's embedding zero-imputed like any other missing party's."""

from __future__ import annotations

import torch

from .base import METHODS, Batch, BatchPrediction, Method, Option, Stage, masked_mean_ce
from .simsiam import PRETRAIN, PRETRAIN_OPTION, simsiam_for, with_pretraining


@METHODS.register("plug")
class PlugVFL(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: party dropout trains the head for missing passive blocks

    name, display, hp_key, f1_rule = "plug", "PlugVFL", "plug", "single"
    search_space = {"p_drop": ("float", 0.0, 0.9)}  # vflbench tune
    packable = True
    pack_state = ("_drop",)
    paper = "PlugVFL (Sun et al., 2024); as run in LASER-VFL"
    assumptions = (
        "active_missing=impute: dropout never hits the active party; a sample left with no block after dropout "
        "trains the head on zeros",
    )
    option_specs = (
        Option(
            "p_drop",
            float,
            0.0,
            "party-wise dropout probability of observed passive blocks in training",
            check=lambda p: None if 0.0 <= p < 1.0 else "must be in [0, 1)",
            protocol="plug_p_drop",
        ),
        Option(
            "active_missing",
            str,
            "skip",
            "samples whose active party's block is missing: not trained on (the LASER-VFL "
            "code), or zero-imputed like any missing party (FALSE-VFL)",
            choices=("skip", "impute"),
            protocol="plug_active_missing",
        ),
        Option(
            "plug_denominator",
            str,
            "random",
            "test samples whose active party is missing: excluded from the denominators, or scored as random guesses",
            choices=("exclude", "random"),
            protocol="plug_denominator",
        ),
        Option(
            "granularity",
            str,
            "sample",
            "party dropout drawn per sample or once per batch",
            choices=("batch", "sample"),
            protocol="train_granularity",
        ),
        PRETRAIN_OPTION,
    )

    @classmethod
    def stages_for(cls, options):
        return with_pretraining(options, cls.stages)

    def build(self) -> None:
        self.active_party = self.k - 1
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.head, _ = self.heads("head", 1, self.k * self.ctx.model.cut)
        self.impute = self.options["active_missing"] == "impute"
        self.ssl = simsiam_for(self, self.ext)
        self._drop = None  # this batch's party dropout [1|B, K] (drawn by draw())

    def draw(self, batch: Batch, stage: Stage) -> None:
        """Party dropout of observed passive blocks for this batch, from the method's stream."""
        p = float(self.options["p_drop"])
        if p <= 0 or stage.name == PRETRAIN.name:
            self._drop = None
            return
        shape = (1, self.k) if self.options["granularity"] == "batch" else tuple(batch.obs.shape)
        drop = torch.rand(shape, generator=self.gen, device=batch.obs.device) < p
        drop[:, self.active_party] = False
        self._drop = drop

    def logits(self, blocks, keep: torch.Tensor) -> torch.Tensor:
        emb = self.send(self.ext(blocks, need=keep.T), keep.T) * keep.T[:, :, None].float()  # zero missing/dropped
        z = emb.permute(1, 0, 2).reshape(emb.shape[1], -1)  # concat in party order
        return self.head(z[None])[0]

    def loss(self, batch: Batch, stage: Stage):
        if stage.name == PRETRAIN.name:
            return self.ssl.loss(batch)
        obs = batch.obs
        has_active = obs.any(1) if self.impute else obs[:, self.active_party]  # the samples trained on
        keep = obs & has_active[:, None]
        drop, self._drop = self._drop, None
        if drop is None:  # a batch the trainer did not prepare (a direct call): draw now
            self.draw(batch, stage)
            drop, self._drop = self._drop, None
        if drop is not None:
            keep = keep & ~drop
        active = torch.cat([keep.any(0), has_active.any()[None]])
        if self.ssl is not None:
            active = torch.cat([active, torch.zeros(self.ssl.n_members, dtype=torch.bool, device=active.device)])
        return masked_mean_ce(self.logits(batch.blocks, keep)[None], batch.y, has_active[None])[0], active

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        has_active = obs.any(1) if self.impute else obs[:, self.active_party]  # the samples the model answers
        lg = self.logits(batch.blocks, obs)
        preds = lg.argmax(-1)
        sc = self.score(lg)
        counted = obs.any(1)
        if self.options["plug_denominator"] == "exclude":
            counted = counted & has_active
        else:
            preds = torch.where(has_active, preds, self.random_classes(has_active.shape))
            if sc is not None:
                sc = torch.where(has_active, sc, torch.full_like(sc, 0.5))
        return BatchPrediction(preds[None], counted[None].clone(), None if sc is None else sc[None], counted)
