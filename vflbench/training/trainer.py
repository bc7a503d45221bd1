"""The trainer: stages, then epochs, then batches; backward, the optimiser step and the schedule;
callbacks around the step and at the end of each epoch. Data stays in memory as tensors on the
run's device; the only Python loop is over batches (and epochs and stages).

A method (:mod:`vflbench.methods`) supplies only the maths: the loss of a :class:`Batch` at a stage
and the members it trains, and predictions. :func:`fit` below is the only training loop: it trains a
bank of N >= 1 runs in lockstep (a run alone is N = 1); how a step is computed for the bank is a
step object's job (:class:`DirectStep`, or :class:`vflbench.training.packing.VectorisedStep` under vmap)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..core.errors import TrainingDiverged, VFLBenchError
from ..methods import Batch, Epoch, Method, Stage
from ..nn.optim import MaskedOptimizer, cosine_lr
from ..runs.faults import PartyFaults, PartyLost
from ..runs.hparams import HParams
from .local_steps import StaleExchange
from .train_set import (  # noqa: F401  (re-exported: the trainer's inputs)
    BlockData,
    TrainPolicy,
    TrainSet,
    balanced_weights,
    class_weights,
    generator,
    random_crop_flip,
    stage_labels,
)

StageHP = HParams  # one hyper-parameter type (vflbench.runs.hparams); the trainer reads one per stage


class Callback:
    """Hooks around the step; override what you need. ``loop`` is the :class:`Loop` state."""

    def on_prepared(self, inputs) -> None:
        """After the run's data are prepared (split, partition, masks, alignment), before the model is built."""

    def on_stage_start(self, loop: Loop) -> None: ...
    def before_step(self, loop: Loop, batch: Batch, loss: torch.Tensor) -> None: ...
    def after_step(self, loop: Loop, batch: Batch, loss: float) -> None: ...
    def on_epoch_end(self, loop: Loop) -> None: ...
    def on_stage_end(self, loop: Loop) -> None: ...
    def on_finished(self, run, inputs, method: Method) -> None:
        """After the run is evaluated, before it is recorded (e.g. saving the trained model: --save-model)."""

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
    shown_loss: float = float("nan")  # the epoch's loss as the bar shows it (Method.display_loss)
    stop: bool = False  # a callback's request to end the stage after this epoch (early stopping)


def make_optimizer(method: Method, stage: Stage, hp: StageHP, policy: TrainPolicy) -> MaskedOptimizer:
    opt = MaskedOptimizer(
        method.store,
        method.module_params(),
        method.n_members,
        name=hp.optimizer,
        lr=hp.lr,
        weight_decay=hp.weight_decay,
        momentum=hp.momentum,
        groups=method.member_group,
        stale_updates=policy.stale_updates,
        trainable=method.trainable(stage),
    )
    return opt


def epoch_order(
    pool: torch.Tensor | None, n: int, weights: torch.Tensor | None, shuffle: bool, gen: torch.Generator, device
) -> torch.Tensor:
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


class DirectStep:
    """How a bank of one run computes a step: the method's own loss on its own parameters. (A bank of
    several runs is computed by :class:`vflbench.training.packing.VectorisedStep`, the same interface.)"""

    def __init__(self, methods: Sequence[Method], sets: Sequence[TrainSet]):
        if len(methods) != 1:
            raise ValueError(
                "DirectStep trains one run; a bank of several is vectorised (vflbench.training.packing.VectorisedStep)"
            )
        self.method, self.data = methods[0], sets[0]
        self.faults: PartyFaults | None = None

    def optimizer(self, stage: Stage, hp: StageHP, policy: TrainPolicy) -> MaskedOptimizer:
        return make_optimizer(self.method, stage, hp, policy)

    def batches(self, idx: list[torch.Tensor], j: int, y: list, aug: list, per_batch: bool) -> list[Batch]:
        d, i = self.data, idx[0]
        ob = d.obs[i]
        if self.faults is not None:  # a lost party's block is missing (vflbench.runs.faults)
            ob = self.faults.mask(ob)
        if per_batch:  # the batch carries the pattern of its first sample (authors' collate_fn)
            ob = ob[:1].expand(len(i), -1)
        return [Batch(d.blocks.batch(i, aug[0]), ob, None if y[0] is None else y[0][i], i, j)]

    def forward(self, stage: Stage, batches: list[Batch]):
        """``(losses, active, values)``: per member its loss tensor, active members and, when the step
        trains something, the loss as a float (else None)."""
        self.method.store.begin()  # fresh views of the flat parameters for this forward
        loss, active = self.method.channel.step_loss(self.method, batches[0], stage)
        value = None if loss is None or not bool(active.any()) else float(loss.detach())
        return [loss], active, [self.method.channel.agree(value, int(active.sum()))]  # one process: the value itself

    def backward(self, opt: MaskedOptimizer, losses: list[torch.Tensor]) -> None:
        opt.zero_grad()
        self.method.channel.backward(losses[0])  # across the boundary (vflbench.federation.runtime: between processes)

    def commit(self, took: list[bool]) -> None:
        ch = self.method.channel
        if took[0]:
            ch.commit("train", backward=True)
        else:
            ch.discard()

    def start_exchange(self) -> None:
        """Before an exchange that local steps will follow: its crossings are kept (StaleExchange)."""
        ch = self.method.channel
        if ch.stale is None:
            ch.stale = StaleExchange()
        ch.stale.start_exchange()

    def local_step(self, stage: Stage, batches: list[Batch]):
        """One local step after an exchange: the loss again on the same minibatch with the exchange's crossings
        replayed (nothing crosses); ``(losses, active)``, or None when it trains nothing."""
        ch = self.method.channel
        ch.stale.start_replay()
        try:
            self.method.store.begin()
            loss, active = self.method.loss(batches[0], stage)
        finally:
            ch.stale.stop()
        if loss is None or not bool(active.any()):
            return None
        return [loss], active

    def end_epoch(self) -> None: ...


class _StageRun:
    """One stage of a bank: its optimiser, every member's sample pool and random streams, the epoch loop."""

    def __init__(
        self,
        step,
        methods: Sequence[Method],
        sets: Sequence[TrainSet],
        stage: Stage,
        index: int,
        hp: StageHP,
        policy: TrainPolicy,
        seeds: Sequence[Callable[[str], int]],
        hists: Sequence[History],
    ):
        device = sets[0].obs.device
        suffix = "" if index == 0 else f"/{stage.name}"  # the first stage keeps the plain stream names
        self.step, self.methods, self.sets, self.stage, self.hp, self.policy, self.hists = (
            step,
            methods,
            sets,
            stage,
            hp,
            policy,
            hists,
        )
        self.opt = step.optimizer(stage, hp, policy)
        self.loops = [Loop(m, stage, hp, self.opt, h, epochs=hp.epochs) for m, h in zip(methods, hists, strict=True)]
        self.batching = [generator(device, s("batching" + suffix)) for s in seeds]
        self.aug = [generator(device, s("augment" + suffix)) if policy.augment else None for s in seeds]
        self.pools = [d.pool(stage) for d in sets]
        self.y_all = [stage_labels(d, stage) for d in sets]
        self.weights = [balanced_weights(d, stage, p, policy) for d, p in zip(sets, self.pools, strict=True)]
        self.several_stages = len(methods[0].stages) > 1
        self.faults: PartyFaults | None = None
        self._lost_seen: list[bool] | None = None  # the lost parties the pools were drawn for

    def _sets(self) -> Sequence[TrainSet]:
        """The training sets as this epoch sees them: with a lost party's block missing for every sample
        (the pools and sampler weights follow; nothing changes while no party is lost)."""
        f = self.faults
        if f is None or not f.any_lost:
            if self._lost_seen is not None and any(self._lost_seen):  # every party back: the stage's own pools
                self.pools = [d.pool(self.stage) for d in self.sets]
                self.weights = [
                    balanced_weights(d, self.stage, p, self.policy) for d, p in zip(self.sets, self.pools, strict=True)
                ]
            self._lost_seen = None if f is None else list(f.lost)
            return self.sets
        sets = [TrainSet(d.blocks, d.y, f.mask(d.obs), d.labeled) for d in self.sets]
        if self._lost_seen != f.lost:
            self.pools = [d.pool(self.stage) for d in sets]
            self.weights = [
                balanced_weights(d, self.stage, p, self.policy) for d, p in zip(sets, self.pools, strict=True)
            ]
            self._lost_seen = list(f.lost)
        return sets

    def local_updates(self, batches: list[Batch]) -> None:
        """``--local-steps Q``: Q - 1 more updates on the exchange's minibatch, nothing crossing
        (:class:`~vflbench.training.local_steps.StaleExchange`)."""
        for _ in range(self.policy.local_steps - 1):
            local = self.step.local_step(self.stage, batches)
            if local is None:
                break
            self.step.backward(self.opt, local[0])
            self.opt.step(local[1])

    def run_epoch(self, epoch: int, callbacks: Sequence[Sequence[Callback]]) -> None:
        hp, policy, opt, stage, step, n = self.hp, self.policy, self.opt, self.stage, self.step, len(self.methods)
        device = self.sets[0].obs.device
        for m, loop in zip(self.methods, self.loops, strict=True):
            m.train(True)
            m.channel.mode = "train"
            m.channel.begin_epoch(epoch)
            loop.epoch = epoch
        t0 = time.perf_counter()
        if hp.schedule == "cosine":
            opt.lr = cosine_lr(hp.lr, epoch, hp.epochs, hp.eta_min_ratio)
        faults = self.faults
        if faults is not None:
            faults.begin_epoch()  # the schedule's failures and rejoins at this epoch (vflbench.runs.faults)
        sets = self._sets()
        orders = [
            m.channel.agree_order(epoch_order(p, d.blocks.n, w, policy.shuffle, g, device), derived=w is None)
            for m, p, d, w, g in zip(self.methods, self.pools, sets, self.weights, self.batching, strict=True)
        ]
        if len({len(o) for o in orders}) != 1:
            raise ValueError("the members of a bank train on different numbers of samples")
        epochs = [
            Epoch(stage, epoch, d.obs, o, hp.batch_size, policy.per_batch_masks, y)
            for d, o, y in zip(sets, orders, self.y_all, strict=True)
        ]
        for m, ep in zip(self.methods, epochs, strict=True):
            m.begin_epoch(ep)
        total, shown, count, skipped = [0.0] * n, [0.0] * n, [0] * n, [0] * n
        start, j, j0 = 0, 0, 0  # j: the batch's number in the epoch; j0: where the method's epoch draws began
        while start < len(orders[0]):
            batches = step.batches(
                [o[start : start + hp.batch_size] for o in orders],
                j - j0,
                self.y_all,
                self.aug,
                policy.per_batch_masks,
            )
            for m, b in zip(self.methods, batches, strict=True):
                m.channel.batch_idx = (
                    b.idx
                )  # whose values cross the boundary in this step (a mechanism's accountant charges them)
                m.draw(b, stage)
            if policy.local_steps > 1:
                step.start_exchange()
            try:
                losses, active, values = step.forward(stage, batches)
            except PartyLost as e:  # across processes: a party stopped during this step; it is redone without it
                if faults is None:
                    raise
                for m in self.methods:
                    m.channel.abandon()  # (a private channel charges what the server already saw)
                for p in e.parties:
                    faults.lose(p, j, e.cause)
                sets = self._sets()
                rest = [o[start:] for o in orders]
                for m, d, o, y in zip(
                    self.methods, sets, rest, self.y_all, strict=True
                ):  # the method redraws what is left
                    m.begin_epoch(Epoch(stage, epoch, d.obs, o, hp.batch_size, policy.per_batch_masks, y))
                j0 = j
                continue
            start, j = start + hp.batch_size, j + 1
            took = [v is not None for v in values]
            if not any(took):
                step.commit(took)
                skipped = [s + 1 for s in skipped]
                continue
            for v in values:
                if v is not None and not math.isfinite(v):  # stop before a NaN reaches the parameters
                    raise TrainingDiverged(epoch + 1, v, stage.name if self.several_stages else None)
            step.backward(opt, losses)
            for cbs, loop, b, loss, t in zip(callbacks, self.loops, batches, losses, took, strict=True):
                for cb in cbs if t else ():
                    cb.before_step(loop, b, loss)
            opt.step(active)
            step.commit(took)
            self.local_updates(batches)
            for i, (cbs, loop, b, v) in enumerate(zip(callbacks, self.loops, batches, values, strict=True)):
                if v is None:
                    skipped[i] += 1
                    continue
                for cb in cbs:
                    cb.after_step(loop, b, v)
                total[i] += v
                shown[i] += loop.method.display_loss(b, v) if len(self.methods) == 1 else v
                count[i] += 1
        for m, ep in zip(self.methods, epochs, strict=True):
            m.end_epoch(ep)
        step.end_epoch()
        seconds = time.perf_counter() - t0  # a bank's members share their epoch's time
        for i, (h, loop, cbs) in enumerate(zip(self.hists, self.loops, callbacks, strict=True)):
            h.skipped_batches += skipped[i]
            loop.epoch_loss = total[i] / max(count[i], 1)
            loop.shown_loss = shown[i] / max(count[i], 1)
            h.loss.append(loop.epoch_loss)
            h.lr.append(opt.lr)
            h.stage.append(stage.name)
            h.seconds.append(seconds)
            for cb in cbs:
                cb.on_epoch_end(loop)


@dataclass
class EpochBoundary:
    """The start of epoch ``epoch`` (0-based) of stage group ``group`` (:func:`stage_groups`) in a run that can
    lose a party: what the channel sees there (:meth:`vflbench.privacy.channel.Channel.epoch_boundary`). A party
    process checkpoints :meth:`state` (its models and optimiser state); a restarted one takes
    :meth:`streams` (every random stream of the run, in step in every process) from the server."""

    group: int
    epoch: int
    method: Method
    runs: list[_StageRun]
    faults: PartyFaults

    def state(self) -> dict[str, Any]:
        return {"method": self.method, "optimizers": [r.opt for r in self.runs]}

    def streams(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "batching": [r.batching for r in self.runs],
            "augment": [r.aug for r in self.runs],
        }


def fit(
    methods: Method | Sequence[Method],
    data: TrainSet | Sequence[TrainSet],
    stage_hp: dict[str, StageHP],
    policy: TrainPolicy,
    seeds: Callable[[str], int] | Sequence[Callable[[str], int]],
    callbacks=(),
    step=None,
    faults: PartyFaults | None = None,
) -> History | list[History]:
    """Train a bank of N >= 1 runs through their stages; ``stage_hp[stage.name]`` holds each stage's
    settings, and stages that share a ``group`` alternate epoch by epoch (equal epochs required).

    One run: ``fit(method, data, ..., seeds, callbacks)`` returns its :class:`History`. A bank:
    lists of methods, training sets, seed functions and callback lists (one per member), returning
    one History per member. ``step`` is the class that computes a step of the bank: :class:`DirectStep`
    (the default: one run) or :class:`vflbench.training.packing.VectorisedStep`, which computes the members'
    steps together and which the caller passes in (packing sits above the trainer; a bank of one
    vectorised is how a sweep trains a lone packable run, so its numbers never depend on grouping).
    Every member keeps its own streams, draws, optimiser state and traffic. ``faults``
    (:class:`vflbench.runs.faults.PartyFaults`, one run only): the party losses the run meets; a lost party's block is
    missing from the batch it is lost at."""
    single = isinstance(methods, Method)
    if single:
        methods, data, seeds, callbacks = [methods], [data], [seeds], [list(callbacks)]
    else:
        methods, data, seeds = list(methods), list(data), list(seeds)
        callbacks = [list(c) for c in callbacks] or [[] for _ in methods]
    step_of = step or DirectStep
    if faults is not None and (len(methods) > 1 or step_of is not DirectStep):
        raise ValueError("fit: party faults apply to a run trained alone (not a pack)")
    if len(methods) > 1 and step_of is DirectStep:
        raise ValueError(
            "fit: a bank of several runs needs a vectorised step (vflbench.training.packing.VectorisedStep)"
        )
    hists = [History() for _ in methods]
    for m, d in zip(methods, data, strict=True):
        if m.boundary is not None:
            m.boundary.start(d.blocks.n)
    stages = methods[0].stages
    channel = methods[0].channel
    resume = channel.resume() if faults is not None else None  # a restarted party process: where it takes up
    for gi, group in enumerate(stage_groups(stages)):
        if resume is not None and gi < resume.group:
            continue
        runs = [
            _StageRun(
                step_of(methods, data), methods, data, stages[i], i, stage_hp[stages[i].name], policy, seeds, hists
            )
            for i in group
        ]
        for r in runs:
            r.faults = r.step.faults = faults
        epochs = {r.hp.epochs for r in runs}
        if len(epochs) != 1:
            raise VFLBenchError(
                f"Stages {', '.join(r.stage.name for r in runs)} alternate epoch by epoch and need equal epochs; "
                f"got {', '.join(f'{r.stage.name}={r.hp.epochs}' for r in runs)}."
            )
        for r in runs:
            for cbs, loop in zip(callbacks, r.loops, strict=True):
                for cb in cbs:
                    cb.on_stage_start(loop)
        first = 0
        if resume is not None:  # restore its checkpoint and the run's streams, then train on from there
            first = resume.epoch
            resume.apply(EpochBoundary(gi, first, methods[0], runs, faults))
            resume = None
        for epoch in range(first, epochs.pop()):
            if faults is not None:  # across processes: checkpoints, and restarted parties re-admitted
                channel.epoch_boundary(EpochBoundary(gi, epoch, methods[0], runs, faults))
            for r in runs:
                r.run_epoch(epoch, callbacks)
            if all(loop.stop for r in runs for loop in r.loops):  # every member asked to stop (early stopping)
                break
        for r in runs:
            for cbs, loop in zip(callbacks, r.loops, strict=True):
                for cb in cbs:
                    cb.on_stage_end(loop)
    for m in methods:
        m.train(False)
    return hists[0] if single else hists


@torch.no_grad()
def predict(
    method: Method,
    data: BlockData,
    obs: torch.Tensor,
    batch_size: int,
    tta: torch.Generator | None = None,
    phase: str = "eval",
):
    """Concatenate the method's batch predictions over a split; returns numpy arrays. ``phase``
    "monitor" marks a measuring pass over the training set (its traffic is booked apart)."""
    was_training, was_mode = method.store.training, method.channel.mode
    faults = getattr(method, "faults", None)
    if faults is not None:  # a party lost when training ended (or now, at an evaluation on the way) is missing
        obs = faults.mask(obs)
    method.train(False)
    method.channel.mode = phase
    method.store.begin()
    parts = []
    for j, start in enumerate(range(0, data.n, batch_size)):
        idx = torch.arange(start, min(start + batch_size, data.n), device=obs.device)
        method.channel.batch_idx = idx
        parts.append(method.channel.report(method, method.predict(Batch(data.batch(idx, tta), obs[idx], None, idx, j))))
        method.channel.commit(phase, backward=False)
    method.channel.mode = was_mode
    if was_training:  # a pass in the middle of training (a target monitor, an evaluation at a budget)
        method.train(True)
    preds = torch.cat([p.preds for p in parts], 1).cpu().numpy()
    valid = torch.cat([p.valid for p in parts], 1).cpu().numpy()
    counted = torch.cat([p.counted for p in parts]).cpu().numpy()
    scores = None if parts[0].scores is None else torch.cat([p.scores for p in parts], 1).float().cpu().numpy()
    return preds, valid, scores, counted


def fit_at_once(method: Method, data: TrainSet, balanced: bool, callbacks: Sequence[Callback] = ()) -> History:
    """Train a method that takes the whole training set at once (:attr:`Method.trains_whole`: gradient-boosted
    trees): each party's columns, the labels, the training mask and the class weights, in one call. Each round
    (a tree) is an "epoch" for the callbacks and the history (the progress bar counts trees)."""
    if data.blocks.kind != "features":
        raise VFLBenchError(f"{method.display} reads tabular blocks; this dataset's blocks are image tiles.")
    x = data.blocks.x
    widths = method.ctx.widths
    blocks = [x[k, :, : widths[k]].float().cpu().numpy() for k in range(len(widths))]
    y = data.y.cpu().numpy().astype(np.int64)
    obs = data.obs.cpu().numpy().astype(bool)
    hist = History()
    stage = method.stages[0]
    loop = Loop(method, stage, None, None, hist)
    last = [time.perf_counter()]

    def progress(done: int, total: int, loss: float) -> bool:
        """A round grown: the callbacks see it as an epoch; True asks the method to grow no more (early stopping)."""
        now = time.perf_counter()
        loop.epochs, loop.epoch = total, done - 1
        loop.epoch_loss = loop.shown_loss = float(loss)
        hist.loss.append(float(loss))
        hist.seconds.append(now - last[0])
        hist.lr.append(float("nan"))
        hist.stage.append(stage.name)
        last[0] = now
        if done == 1:
            for cb in callbacks:
                cb.on_stage_start(loop)
        for cb in callbacks:
            cb.on_epoch_end(loop)
        return loop.stop

    method.fit_whole(blocks, y, obs, class_weights(y, method.c, balanced), progress)
    for cb in callbacks:
        cb.on_stage_end(loop)
    return hist
