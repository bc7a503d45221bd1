"""Observed-mean VFL: a complete method in one file (the example of docs/ADDING_A_METHOD.md).

One model: K extractors, the mean of the *observed* parties' representations, one Linear head.
It trains on every sample that observes at least ``min_observed`` blocks and predicts for any
observed set, so it is a one-head cousin of LASER-VFL without the subset sampling.

Use it without touching vflbench:

    vflbench --plugin docs/examples/observed_mean.py run --dataset credit --method obsmean
    VFLBENCH_PLUGINS=docs/examples/observed_mean.py pytest tests/test_method_contract.py
"""

import torch

from vflbench.methods import METHODS, Batch, BatchPrediction, Method, Option, Stage
from vflbench.methods.base import masked_mean_ce


@METHODS.register("obsmean")
class ObservedMean(Method):
    name = "obsmean"
    display = "Observed-mean VFL"
    paper = "example plugin (docs/ADDING_A_METHOD.md)"
    hp_key = "laser"  # use the preset block of LASER-VFL (same model family)
    f1_rule = "single"  # one predictor answers for every sample
    option_specs = (
        Option(
            "min_observed",
            int,
            1,
            "train only on samples that observe at least this many blocks",
            check=lambda v: None if v >= 1 else "must be >= 1",
        ),
    )

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))  # one extractor per party
        self.head, _ = self.heads("head", 1, self.ctx.model.cut)  # one Linear head on the server

    def logits(self, batch: Batch) -> torch.Tensor:
        obs = batch.obs
        emb = self.send(self.ext(batch.blocks, need=obs.T), obs.T)  # [K, B, D]; only observed blocks cross
        w = obs.T.float()[:, :, None]
        fused = (emb * w).sum(0) / w.sum(0).clamp_min(1.0)  # mean over the observed parties
        return self.head(fused[None])[0]  # [B, C]

    def loss(self, batch: Batch, stage: Stage):
        use = batch.obs.sum(1) >= self.options["min_observed"]
        active = torch.cat([batch.obs[use].any(0), use.any()[None]])  # K extractors, then the head
        if not bool(use.any()):
            return None, active
        return masked_mean_ce(self.logits(batch)[None], batch.y, use[None])[0], active

    @torch.no_grad()
    def predict(self, batch: Batch) -> BatchPrediction:
        lg = self.logits(batch)
        counted = batch.obs.any(1)  # all-missing samples are not scored
        scores = self.score(lg)
        return BatchPrediction(
            lg.argmax(-1)[None], counted[None].clone(), None if scores is None else scores[None], counted
        )
