"""The method interface: build models, take a training step on a batch, predict for a batch.

A batch is ``blocks`` (``[K, B, w]`` stacked tabular blocks, or a list of K image tiles), the
observed-mask ``obs`` (``[B, K]`` bool; per-batch masks are simply identical rows) and labels ``y``.
Prediction returns, per *predictor* (a client's model, a head, a subset model), its class
predictions, whether it answers for each sample, and a positive-class score; plus which samples are
counted at all. :mod:`vflbench.metrics` turns that into the paper's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..models import Extractors, HeadBank, ModelSpec, ParamStore
from ..optim import MaskedOptimizer
from ..registry import Registry
from ..rng import Streams


@dataclass
class MethodContext:
    k: int
    n_classes: int
    widths: list[int]
    in_ch: int
    model: ModelSpec
    device: torch.device
    streams: Streams
    hp: dict[str, Any]  # optimizer, lr, weight_decay, momentum
    options: dict[str, Any] = field(default_factory=dict)
    positive_class: int | None = None


@dataclass
class BatchPrediction:
    preds: torch.Tensor  # [P, B] long
    valid: torch.Tensor  # [P, B] bool: predictor p answers for sample b
    scores: torch.Tensor | None  # [P, B] float: positive-class score (binary tasks)
    counted: torch.Tensor  # [B] bool: sample enters the metric denominators


class Method:
    """Base class. Subclasses set ``name``, ``display``, ``hp_key`` and ``f1_rule`` and implement
    :meth:`build`, :meth:`loss_and_active` and :meth:`predict_batch`."""

    name: ClassVar[str]
    display: ClassVar[str]
    hp_key: ClassVar[str]  # which hyper-parameter block of the presets applies (LASER code's method_type)
    f1_rule: ClassVar[str]  # "per_predictor_mean" | "per_predictor_nonzero" | "single"
    option_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, ctx: MethodContext):
        self.ctx = ctx
        self.k, self.c = ctx.k, ctx.n_classes
        self.device = ctx.device
        self.options = {**self.option_defaults, **ctx.options}
        self.store = ParamStore()
        self.init_gen = ctx.streams.torch("init")
        self.gen = torch.Generator(device=ctx.device)
        self.gen.manual_seed(ctx.streams.seed_for("method"))
        self.n_members = 0
        self.extractor_sets: list[Extractors] = []
        self.build()
        self.store.finalize(self.init_gen)
        self.store.to(self.device)
        for e in self.extractor_sets:
            e.to(self.device)
        module_params = [mp for e in self.extractor_sets for mp in e.member_params()]
        hp = ctx.hp
        self.opt = MaskedOptimizer(
            self.store, module_params, self.n_members, name=hp["optimizer"], lr=float(hp["lr"]),
            weight_decay=float(hp.get("weight_decay", 0.0)), momentum=float(hp.get("momentum", 0.0)),
        )
        self.opt.to(self.device)

    # -- construction helpers
    def new_members(self, n: int) -> list[int]:
        ids = list(range(self.n_members, self.n_members + n))
        self.n_members += n
        return ids

    def extractors(self, prefix: str, party_of: list[int]) -> tuple[Extractors, list[int]]:
        ids = self.new_members(len(party_of))
        ex = Extractors(self.ctx.model, self.store, prefix, party_of, ids, self.ctx.widths, self.ctx.in_ch, self.init_gen)
        self.extractor_sets.append(ex)
        return ex, ids

    def heads(self, prefix: str, n: int, in_dim: int) -> tuple[HeadBank, list[int]]:
        ids = self.new_members(n)
        return HeadBank(self.store, prefix, ids, in_dim, self.c), ids

    def fusion_is_mean(self) -> bool:
        """Fusion of representations before a Linear head: 'mean' (the papers' default) or 'sum'."""
        f = self.options.get("fusion", "mean")
        if f not in ("mean", "sum"):
            from ..errors import VFLBenchError

            raise VFLBenchError(f"fusion must be 'mean' or 'sum' for {self.display}, got {f!r} (PlugVFL always concatenates).")
        return f == "mean"

    def n_params(self) -> int:
        return self.store.n_params() + sum(p.numel() for e in self.extractor_sets for p, _ in e.member_params())

    def train(self, mode: bool = True) -> None:
        for e in self.extractor_sets:
            e.train(mode)

    # -- to implement
    def build(self) -> None:
        raise NotImplementedError

    def loss_and_active(self, blocks, obs: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Return the training loss (None if nothing trains on this batch) and the active members."""
        raise NotImplementedError

    def predict_batch(self, blocks, obs: torch.Tensor) -> BatchPrediction:
        raise NotImplementedError

    # -- shared
    def begin_epoch(self, obs: torch.Tensor, order: torch.Tensor, batch_size: int, per_batch: bool) -> None:
        """Called before each epoch with the full training mask and the epoch's sample order, so a
        method can draw its per-batch randomness for the whole epoch in one vectorised call."""

    def train_step(self, blocks, obs: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None = None, batch_no: int | None = None) -> float | None:
        self._where = (idx, batch_no)
        self.store.begin()
        loss, active = self.loss_and_active(blocks, obs, y)
        if loss is None or not bool(active.any()):
            return None
        self.opt.zero_grad()
        loss.backward()
        self.opt.step(active)
        return float(loss.detach())

    def set_lr(self, lr: float) -> None:
        self.opt.lr = lr

    def random_classes(self, shape) -> torch.Tensor:
        return torch.randint(0, self.c, shape, generator=self.gen, device=self.device)

    def score(self, logits: torch.Tensor) -> torch.Tensor | None:
        if self.c != 2:
            return None
        return logits.softmax(-1)[..., self.ctx.positive_class if self.ctx.positive_class is not None else 1]


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-element cross-entropy over the last axis (``y`` broadcast to ``logits.shape[:-1]``).
    For two classes it is softplus of the signed logit gap: the same value, about half the cost."""
    y = y.expand(logits.shape[:-1])
    if logits.shape[-1] == 2:
        gap = logits[..., 1] - logits[..., 0]
        return F.softplus(torch.where(y == 1, -gap, gap))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none").view(y.shape)


def masked_mean_ce(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per-predictor CE averaged over the samples with weight 1: logits ``[P, B, C]``, weight ``[P, B]``
    -> ``[P]`` (zero where a predictor has no sample)."""
    p, b, c = logits.shape
    ce = F.cross_entropy(logits.reshape(p * b, c), y.repeat(p), reduction="none").view(p, b)
    w = weight.float()
    return (ce * w).sum(1) / w.sum(1).clamp_min(1.0)


METHODS: Registry[type[Method]] = Registry("method")
