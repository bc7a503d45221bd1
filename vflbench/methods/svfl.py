"""Standard VFL: one model (K extractors, fusion, a head) trained only on fully observed samples.

As in LASER-VFL (Section 5): mean fusion, a Linear head, trained on the complete samples of each
batch, and an incomplete test sample gets a uniformly random class. As "Vanilla VFL" in FALSE-VFL
(App. D.1; ``--protocol false``): trained only on the fully aligned labeled samples (``samples=aligned``,
whole batches of them), concatenated embeddings into the model's head, and missing parties'
embeddings zero-imputed at prediction (``incomplete=zero``)."""

from __future__ import annotations

import torch

from .base import (
    METHODS,
    Batch,
    BatchPrediction,
    Method,
    Option,
    Stage,
    masked_mean_ce,
    zero_missing_inputs,
)
from .simsiam import PRETRAIN, PRETRAIN_OPTION, simsiam_for, with_pretraining


@METHODS.register("svfl")
class StandardVFL(Method):
    @classmethod
    def loss_refusal(cls, options):
        if options.get("incomplete", "random") == "zero":
            return None  # a lost party's embedding is zero at the fusion layer (training stops: no complete sample)
        return "an incomplete sample gets a random class (give --method-opt incomplete=zero to go on)"

    name, display, hp_key, f1_rule = "svfl", "Standard VFL", "decoupled", "single"
    search_space = {"fusion": ("choice", ("mean", "sum", "concat"))}  # vflbench tune
    packable = True
    paper = "LASER-VFL (Valdeira et al., ICLR 2025), baseline; Vanilla VFL in FALSE-VFL"
    assumptions = (
        "incomplete=zero: a missing party's embedding is zero at the fusion layer (FALSE-VFL App. D.1)",
        "samples=aligned: the fully aligned labeled samples are the reserve plus labeled samples aligned by chance",
    )
    option_specs = (
        Option(
            "fusion",
            str,
            "mean",
            "fusion of the party representations before the head (concat: zeros for a missing party)",
            choices=("mean", "sum", "concat"),
            protocol="svfl_fusion",
        ),
        Option(
            "samples",
            str,
            "labeled",
            "train on the complete samples of batches of labeled samples, or on batches of "
            "fully aligned labeled samples only",
            choices=("labeled", "aligned"),
            protocol="svfl_samples",
        ),
        Option(
            "incomplete",
            str,
            "random",
            "an incomplete test sample gets a uniformly random class, or the model's "
            "prediction with the missing embeddings set to zero",
            choices=("random", "zero"),
            protocol="svfl_incomplete",
        ),
        PRETRAIN_OPTION,
    )

    @classmethod
    def stages_for(cls, options):
        samples = options.get("samples", "labeled")
        return with_pretraining(options, (Stage(samples=samples),))

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.fusion = self.options["fusion"]
        self.head, _ = self.heads("head", 1, self.ctx.model.cut * (self.k if self.fusion == "concat" else 1))
        self.ssl = simsiam_for(self, self.ext)
        self.impute_input = False
        if (
            self.options["incomplete"] == "zero"
        ):  # also score zero-imputation of the features (logged as metric@impute_input)
            self.eval_variants = ("impute_input",)

    def use_variant(self, variant: str | None) -> None:
        """``impute_input``: a missing block's (standardised) features are set to zero and encoded like
        an observed block, instead of its embedding being zero at the fusion layer."""
        self.impute_input = variant == "impute_input"

    def logits(self, blocks, use: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, C]`` from the parties ``use`` ``[B, K]`` (the others' embeddings are zeros)."""
        need = use.T
        if self.impute_input:
            blocks = zero_missing_inputs(blocks, need)
            need = torch.ones_like(need)
        emb = (
            self.send(self.ext(blocks, need=need), need) * need[:, :, None].float()
        )  # only the used blocks are read and sent
        if self.fusion == "concat":
            z = emb.permute(1, 0, 2).reshape(emb.shape[1], -1)
        else:
            z = emb.mean(0) if self.fusion == "mean" else emb.sum(0)
        return self.head(z[None])[0]

    def loss(self, batch: Batch, stage: Stage):
        if stage.name == PRETRAIN.name:
            return self.ssl.loss(batch)
        full = batch.obs.all(1)
        active = (
            full.any().expand(self.n_members).clone()
        )  # no complete sample: nothing trains (the trainer skips the batch)
        if self.ssl is not None:
            active[self.ssl.member_ids] = False
        use = full[:, None].expand(-1, self.k)
        return masked_mean_ce(self.logits(batch.blocks, use)[None], batch.y, full[None])[0], active

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        counted = obs.any(1)
        if self.options["incomplete"] == "zero":
            lg = self.logits(batch.blocks, obs)
            return BatchPrediction(
                lg.argmax(-1)[None], counted[None].clone(), None if self.c != 2 else self.score(lg)[None], counted
            )
        full = obs.all(1)
        lg = self.logits(batch.blocks, full[:, None].expand(-1, self.k))
        guess = self.random_classes(full.shape)
        preds = torch.where(full, lg.argmax(-1), guess)
        scores = None
        if self.c == 2:
            scores = torch.where(full, self.score(lg), torch.full_like(full, 0.5, dtype=torch.float))[None]
        return BatchPrediction(preds[None], counted[None].clone(), scores, counted)
