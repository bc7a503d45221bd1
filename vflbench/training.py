"""The trainer: stages, then epochs, then batches; backward, the optimiser step and the schedule;
callbacks around the step and at the end of each epoch. Data stays in memory as tensors on the
run's device; the only Python loop is over batches (and epochs and stages).

A method (:mod:`vflbench.methods`) supplies only the maths: the loss of a :class:`Batch` at a stage
and the members it trains, and predictions. :func:`fit` below is the whole loop."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .errors import TrainingDiverged
from .methods import Batch, Epoch, Method, Stage
from .optim import MaskedOptimizer, cosine_lr
from .partitioners import Partition


class BlockData:
    """Per-party views of one split. Tabular: ``[K, n, w]`` stacked (zero-padded to the widest block).
    Images: the full ``[n, C, H, W]`` tensor, tiled per batch (after augmentation, as the authors)."""

    def __init__(self, x: np.ndarray, partition: Partition, device: torch.device):
        self.partition = partition
        self.kind = partition.kind
        xt = torch.as_tensor(x)
        if self.kind == "features":
            w = max(partition.widths())
            stacked = torch.zeros(partition.n_parties, len(xt), w)
            for k, cols in enumerate(partition.blocks):
                stacked[k, :, : len(cols)] = xt[:, torch.as_tensor(np.asarray(cols), dtype=torch.long)]
            self.x = stacked.to(device)
            self.n = len(xt)
        else:
            self.x = xt.to(device)
            self.n = len(xt)

    @classmethod
    def stacked(cls, x: torch.Tensor) -> BlockData:
        """Tabular blocks already stacked as ``[K, n, w]`` (tests, synthetic data)."""
        out = cls.__new__(cls)
        out.partition, out.kind, out.x, out.n = None, "features", x, x.shape[1]
        return out

    def head(self, m: int) -> BlockData:
        """The first ``m`` samples (a view; for timing a few batches)."""
        out = copy.copy(self)
        out.x = self.x[:, :m] if self.kind == "features" else self.x[:m]
        out.n = min(m, self.n)
        return out

    def batch(self, idx: torch.Tensor, augment: torch.Generator | None = None):
        if self.kind == "features":
            return self.x[:, idx]
        xb = self.x[idx]
        if augment is not None:
            xb = random_crop_flip(xb, 4, augment)
        return [xb[:, :, r0:r1, c0:c1] for r0, r1, c0, c1 in self.partition.blocks]


def random_crop_flip(x: torch.Tensor, pad: int, gen: torch.Generator) -> torch.Tensor:
    """Per-sample RandomCrop(size, padding=pad) + RandomHorizontalFlip, vectorised."""
    b, c, h, w = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=gen, device=x.device)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=gen, device=x.device)
    flip = torch.rand(b, generator=gen, device=x.device) < 0.5
    rows = oy[:, None] + torch.arange(h, device=x.device)[None]
    cols = ox[:, None] + torch.arange(w, device=x.device)[None]
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    bi = torch.arange(b, device=x.device)[:, None, None]
    out = xp.permute(0, 2, 3, 1)[bi, rows[:, :, None], cols[:, None, :]]  # [b, h, w, c]
    return out.permute(0, 3, 1, 2).contiguous()


def _gen(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass(frozen=True)
class StageHP:
    """The hyper-parameters the trainer needs for one stage."""

    optimizer: str
    lr: float
    weight_decay: float
    momentum: float
    batch_size: int
    epochs: int
    schedule: str = "none"
    eta_min_ratio: float = 0.0


@dataclass(frozen=True)
class TrainPolicy:
    """The protocol's say in training (see docs/PROTOCOLS.md)."""

    per_batch_masks: bool
    shuffle: bool
    balanced_sampler: bool
    augment: bool
    stale_updates: bool = False


@dataclass
class TrainSet:
    """The training split as the trainer sees it. ``labeled`` ``[n]`` bool (None: all labeled)."""

    blocks: BlockData
    y: torch.Tensor
    obs: torch.Tensor
    labeled: torch.Tensor | None = None

    def pool(self, stage: Stage) -> torch.Tensor | None:
        """The sample indices a stage trains on (None: every sample, in index order)."""
        lab = self.labeled
        if stage.samples == "all":
            return None
        keep = lab if lab is not None else None
        if stage.samples == "complete":  # every fully observed sample, labeled or not
            return self.obs.all(1).nonzero().view(-1)
        if stage.samples == "aligned":
            full = self.obs.all(1)
            keep = full if keep is None else keep & full
        return None if keep is None else keep.nonzero().view(-1)


def stage_labels(data: TrainSet, stage: Stage) -> torch.Tensor | None:
    """The labels a stage trains with: None when it hides them; -1 on unlabeled samples when it
    trains on all samples of a semi-supervised run."""
    if not stage.labels:
        return None
    if stage.samples in ("all", "complete") and data.labeled is not None:
        return torch.where(data.labeled, data.y, torch.full_like(data.y, -1))
    return data.y


def balanced_weights(data: TrainSet, stage: Stage, pool: torch.Tensor | None, policy: TrainPolicy) -> torch.Tensor | None:
    """Per-sample draw weights of the class-balanced sampler (None: no balanced sampling)."""
    if not (policy.balanced_sampler and stage.labels):
        return None
    yp = data.y if pool is None else data.y[pool]
    return (1.0 / torch.bincount(yp, minlength=int(yp.max()) + 1).float())[yp]


class Callback:
    """Hooks around the step; override what you need. ``loop`` is the :class:`Loop` state."""

    def on_stage_start(self, loop: Loop) -> None: ...
    def before_step(self, loop: Loop, batch: Batch, loss: torch.Tensor) -> None: ...
    def after_step(self, loop: Loop, batch: Batch, loss: float) -> None: ...
    def on_epoch_end(self, loop: Loop) -> None: ...
    def on_stage_end(self, loop: Loop) -> None: ...
    def extras(self) -> dict[str, Any]:
        """Per-run scalars this callback adds to the CSV rows (e.g. epochs to a target)."""
        return {}


@dataclass
class History:
    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    stage: list[str] = field(default_factory=list)
    skipped_batches: int = 0


@dataclass
class Loop:
    """What callbacks can read: the method, the stage, its optimiser, the epoch, the history."""

    method: Method
    stage: Stage
    hp: StageHP
    optimizer: MaskedOptimizer
    history: History
    epoch: int = 0
    epochs: int = 0
    epoch_loss: float = float("nan")


def make_optimizer(method: Method, stage: Stage, hp: StageHP, policy: TrainPolicy) -> MaskedOptimizer:
    opt = MaskedOptimizer(
        method.store, method.module_params(), method.n_members, name=hp.optimizer, lr=hp.lr, weight_decay=hp.weight_decay,
        momentum=hp.momentum, groups=method.member_group, stale_updates=policy.stale_updates, trainable=method.trainable(stage),
    )
    opt.to(method.device)
    return opt


def epoch_order(pool: torch.Tensor | None, n: int, weights: torch.Tensor | None, shuffle: bool, gen: torch.Generator, device) -> torch.Tensor:
    """The epoch's sample order over ``pool`` (all ``n`` samples when None): class-balanced draws with
    replacement, a fresh permutation, or index order."""
    m = n if pool is None else len(pool)
    if weights is not None:
        order = torch.multinomial(weights, m, replacement=True, generator=gen)
    elif shuffle:
        order = torch.randperm(m, generator=gen, device=device)
    else:
        order = torch.arange(m, device=device)
    return order if pool is None else pool[order]


def stage_groups(stages) -> list[list[int]]:
    """Stage indices in the order they train: a stage alone, or consecutive stages sharing a ``group``
    name, which alternate epoch by epoch (epoch 1 of each, then epoch 2 of each, ...)."""
    out: list[list[int]] = []
    for i, st in enumerate(stages):
        if out and st.group is not None and stages[out[-1][-1]].group == st.group:
            out[-1].append(i)
        else:
            out.append([i])
    return out


class _StageRun:
    """One stage's optimiser, sample pool, random streams and epoch loop."""

    def __init__(self, method: Method, data: TrainSet, stage: Stage, index: int, hp: StageHP, policy: TrainPolicy, seeds, hist: History):
        device = data.obs.device
        suffix = "" if index == 0 else f"/{stage.name}"  # the first stage keeps the plain stream names
        self.method, self.data, self.stage, self.hp, self.policy, self.hist = method, data, stage, hp, policy, hist
        self.opt = make_optimizer(method, stage, hp, policy)
        self.loop = Loop(method, stage, hp, self.opt, hist, epochs=hp.epochs)
        self.batching = _gen(device, seeds("batching" + suffix))
        self.aug = _gen(device, seeds("augment" + suffix)) if policy.augment else None
        self.pool = data.pool(stage)
        self.y_all = stage_labels(data, stage)
        self.weights = balanced_weights(data, stage, self.pool, policy)

    def run_epoch(self, epoch: int, callbacks) -> None:
        method, data, hp, policy, opt, loop, hist, stage = self.method, self.data, self.hp, self.policy, self.opt, self.loop, self.hist, self.stage
        device = data.obs.device
        method.train(True)
        method.channel.mode = "train"
        t0 = time.perf_counter()
        loop.epoch = epoch
        if hp.schedule == "cosine":
            opt.lr = cosine_lr(hp.lr, epoch, hp.epochs, hp.eta_min_ratio)
        order = epoch_order(self.pool, data.blocks.n, self.weights, policy.shuffle, self.batching, device)
        ep = Epoch(stage, epoch, data.obs, order, hp.batch_size, policy.per_batch_masks)
        method.begin_epoch(ep)
        total, count = 0.0, 0
        for j, start in enumerate(range(0, len(order), hp.batch_size)):
            idx = order[start : start + hp.batch_size]
            ob = data.obs[idx]
            if policy.per_batch_masks:  # the batch carries the pattern of its first sample (authors' collate_fn)
                ob = ob[:1].expand(len(idx), -1)
            batch = Batch(data.blocks.batch(idx, self.aug), ob, None if self.y_all is None else self.y_all[idx], idx, j)
            method.channel.batch_idx = idx  # whose values cross the boundary in this step (a mechanism's accountant charges them)
            method.draw(batch, stage)
            method.store.begin()  # fresh views of the flat parameters for this forward
            loss, active = method.loss(batch, stage)
            if loss is None or not bool(active.any()):
                method.channel.discard()
                hist.skipped_batches += 1
                continue
            value = float(loss.detach())
            if not math.isfinite(value):  # stop before a NaN reaches the parameters
                raise TrainingDiverged(epoch + 1, value, stage.name if len(method.stages) > 1 else None)
            opt.zero_grad()
            loss.backward()
            for cb in callbacks:
                cb.before_step(loop, batch, loss)
            opt.step(active)
            method.channel.commit("train", backward=True)
            for cb in callbacks:
                cb.after_step(loop, batch, value)
            total += value
            count += 1
        method.end_epoch(ep)
        loop.epoch_loss = total / max(count, 1)
        hist.loss.append(loop.epoch_loss)
        hist.lr.append(opt.lr)
        hist.stage.append(stage.name)
        hist.seconds.append(time.perf_counter() - t0)
        for cb in callbacks:
            cb.on_epoch_end(loop)


def fit(method: Method, data: TrainSet, stage_hp: dict[str, StageHP], policy: TrainPolicy, seeds: Callable[[str], int], callbacks=()) -> History:
    """Train ``method`` through its stages. ``stage_hp[stage.name]`` holds each stage's settings.
    Stages that share a ``group`` alternate epoch by epoch (they must have equal epochs)."""
    hist = History()
    stages = method.stages
    if method.boundary is not None:
        method.boundary.start(data.blocks.n)
    for group in stage_groups(stages):
        runs = [_StageRun(method, data, stages[i], i, stage_hp[stages[i].name], policy, seeds, hist) for i in group]
        epochs = {r.hp.epochs for r in runs}
        if len(epochs) != 1:
            from .errors import VFLBenchError

            raise VFLBenchError(f"Stages {', '.join(r.stage.name for r in runs)} alternate epoch by epoch and need equal epochs; "
                                f"got {', '.join(f'{r.stage.name}={r.hp.epochs}' for r in runs)}.")
        for r in runs:
            for cb in callbacks:
                cb.on_stage_start(r.loop)
        for epoch in range(epochs.pop()):
            for r in runs:
                r.run_epoch(epoch, callbacks)
        for r in runs:
            for cb in callbacks:
                cb.on_stage_end(r.loop)
    method.train(False)
    return hist


@torch.no_grad()
def predict(method: Method, data: BlockData, obs: torch.Tensor, batch_size: int, tta: torch.Generator | None = None, phase: str = "eval"):
    """Concatenate the method's batch predictions over a split; returns numpy arrays. ``phase``
    "monitor" marks a measuring pass over the training set (its traffic is booked apart)."""
    was_training, was_mode = method.store.training, method.channel.mode
    method.train(False)
    method.channel.mode = phase
    method.store.begin()
    parts = []
    for j, start in enumerate(range(0, data.n, batch_size)):
        idx = torch.arange(start, min(start + batch_size, data.n), device=obs.device)
        method.channel.batch_idx = idx
        parts.append(method.predict(Batch(data.batch(idx, tta), obs[idx], None, idx, j)))
        method.channel.commit(phase, backward=False)
    method.channel.mode = was_mode
    if was_training:  # a pass in the middle of training (a target monitor, an evaluation at a budget)
        method.train(True)
    preds = torch.cat([p.preds for p in parts], 1).cpu().numpy()
    valid = torch.cat([p.valid for p in parts], 1).cpu().numpy()
    counted = torch.cat([p.counted for p in parts]).cpu().numpy()
    scores = None if parts[0].scores is None else torch.cat([p.scores for p in parts], 1).float().cpu().numpy()
    return preds, valid, scores, counted
