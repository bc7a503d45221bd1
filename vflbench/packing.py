"""Seed packing: train several runs that differ only in their seed as one model bank.

A training step of a tabular run is about 2 ms of operator dispatch around very little arithmetic, so
N runs stepped together cost far less than N steps. Packing keeps every run's own randomness: each
member of a pack is a complete :class:`~vflbench.methods.Method` built from its own seed (its
initialisation, split, masks, batch order, task draws and dropout all come from its own named
streams), and only the arithmetic is shared:

* the members' flat parameter vectors are stacked into one ``[N, P]`` leaf, updated by one
  :class:`~vflbench.optim.MaskedOptimizer` with a pack axis (each member keeps its own step counts,
  moments and active members);
* the method's loss runs once per step under ``torch.func.vmap`` over the member axis, on the
  members' own batches, masks and draws. A method can be packed when its loss is a pure function
  of the batch, the parameters and the attributes it names in ``pack_state`` (draws made in
  ``begin_epoch`` or ``draw``), with no branch on the data;
* traffic crosses each member's own channel, so every run reports its own bytes.

Runs leave a pack with their own CSV rows and manifest (which records the pack), evaluated one by
one exactly as a run trained alone. Results agree with the same run trained alone up to float
rounding (batched kernels sum in another order): ``tests/test_packing.py`` checks every packable
method. ``benchmarks/pack_probe.py`` measured the gain before this module was written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .channel import Channel
from .errors import TrainingDiverged
from .methods import Batch, Epoch, Method
from .optim import MaskedOptimizer, cosine_lr
from .training import (
    Callback,
    History,
    Loop,
    StageHP,
    TrainPolicy,
    TrainSet,
    _gen,
    balanced_weights,
    epoch_order,
    stage_labels,
)


def why_not_packable(method: Method) -> str | None:
    """None when ``method`` (built) can train in a pack; else the reason, in words."""
    cls = type(method)
    if not cls.packable:
        return f"{cls.display}'s loss is not written for packing"
    if method.module_members or any(e.modules is not None for e in method.extractor_sets):
        return "module (image) extractors are trained one run at a time"
    if len(method.stages) != 1:
        return "runs with more than one training stage (e.g. pretraining) are trained one at a time"
    if cls.end_epoch is not Method.end_epoch:
        return f"{cls.display} acts at the end of every epoch (end_epoch), which a pack does not call"
    if type(method.channel) is not Channel:
        return "a mechanism at the party-to-server boundary is applied one run at a time"
    return None


class _Capture(Channel):
    """Stands in for the template's channel inside the vmapped loss: it records what each crossing
    sent (returned from the vmapped call, then booked on each member's own channel)."""

    def __init__(self, k: int):  # no totals: nothing is booked here
        self.k, self.mode, self.calls = k, "train", 0
        self.log: list[tuple[torch.Tensor, torch.Tensor | None, float, float]] = []

    def count(self, reps, sent, party_of=None) -> None:
        per_value = reps.shape[-1] if reps.ndim == 3 else 1
        b = float(reps.element_size())
        self.log.append((sent, party_of, per_value * b, per_value * b))


class _State:
    """The members' ``pack_state`` attributes, stacked along the pack axis; restacked only when a
    member's attribute changed (epoch draws: once per epoch; batch draws: every step)."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        self.ids: list | None = None
        self.spec = None
        self.leaves: list = []  # per leaf: a stacked tensor, or the (shared) non-tensor value
        self.is_tensor: list[bool] = []

    def update(self, methods: Sequence[Method]) -> None:
        values = [tuple(getattr(m, n) for n in self.names) for m in methods]
        ids = [tuple(id(v) for v in vals) for vals in values]
        if ids == self.ids:
            return
        flat0, self.spec = tree_flatten(values[0])
        per = [tree_flatten(v)[0] for v in values]
        self.is_tensor = [isinstance(x, torch.Tensor) for x in flat0]
        self.leaves = [torch.stack([p[j] for p in per]) if t else flat0[j] for j, t in enumerate(self.is_tensor)]
        self.ids = ids

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(x for x, t in zip(self.leaves, self.is_tensor, strict=True) if t)

    def rebuild(self, tensors: Sequence[torch.Tensor]) -> tuple:
        it = iter(tensors)
        flat = [next(it) if t else x for x, t in zip(self.leaves, self.is_tensor, strict=True)]
        return tree_unflatten(flat, self.spec)


def _blocks(sets: Sequence[TrainSet], shared: bool, idx: torch.Tensor) -> torch.Tensor:
    """The members' tabular blocks for batch ``idx`` ``[N, B]`` -> ``[N, K, B, w]``."""
    if shared:
        return sets[0].blocks.x[:, idx].transpose(0, 1)
    return torch.stack([s.blocks.x[:, i] for s, i in zip(sets, idx, strict=True)])


def fit_packed(methods: Sequence[Method], sets: Sequence[TrainSet], stage_hp: dict[str, StageHP], policy: TrainPolicy,
               seeds: Sequence[Callable[[str], int]], callbacks: Sequence[Sequence[Callback]] = ()) -> list[History]:
    """Train the members of a pack together; the same as :func:`vflbench.training.fit` on each
    member, up to float rounding. Callbacks may use the epoch and stage hooks (not the step hooks)."""
    n = len(methods)
    tmpl = methods[0]
    stage = tmpl.stages[0]
    hp = stage_hp[stage.name]
    callbacks = list(callbacks) or [[] for _ in methods]
    device = sets[0].obs.device
    store = tmpl.store
    names = list(store._specs)
    shapes = [store._specs[k][1] for k in names]
    numel = [int(torch.Size(s).numel()) for s in shapes]
    flat = torch.nn.Parameter(torch.stack([m.store.flat.detach() for m in methods]))
    opt = MaskedOptimizer(None, [(flat, store.member_of)], tmpl.n_members, name=hp.optimizer, lr=hp.lr, weight_decay=hp.weight_decay,
                          momentum=hp.momentum, groups=tmpl.member_group, stale_updates=policy.stale_updates, trainable=tmpl.trainable(stage), pack=n)
    opt.to(device)
    hists = [History() for _ in methods]
    loops = [Loop(m, stage, hp, opt, h, epochs=hp.epochs) for m, h in zip(methods, hists, strict=True)]
    batching = [_gen(device, s("batching")) for s in seeds]
    pools = [d.pool(stage) for d in sets]
    weights = [balanced_weights(d, stage, pool, policy) for d, pool in zip(sets, pools, strict=True)]
    shared_x = all(d.blocks.x is sets[0].blocks.x or torch.equal(d.blocks.x, sets[0].blocks.x) for d in sets[1:])
    obs_all = torch.stack([d.obs for d in sets])  # [N, n, K]
    y_all = torch.stack([stage_labels(d, stage) for d in sets]) if stage.labels else None
    rows = torch.arange(n, device=device)[:, None]
    state = _State(type(tmpl).pack_state)
    draws = type(tmpl).draw is not Method.draw
    number = 0
    crossings: list = []  # (party_of, bytes up, bytes down) of each crossing of the last step

    def member_loss(flat_i, blocks, obs, y, idx, *state_tensors):
        store._cache = {k: p.view(s) for k, p, s in zip(names, flat_i.split(numel), shapes, strict=True)}
        store.transposed = True  # the pack's N x K small products are faster posed wide (models.affine)
        for k, v in zip(state.names, state.rebuild(state_tensors), strict=True):
            setattr(tmpl, k, v)
        cap = tmpl.channel = _Capture(tmpl.k)
        loss, active = tmpl.loss(Batch(blocks, obs, y, idx, number), stage)
        crossings[:] = [meta for _, *meta in cap.log]
        return loss, active, tuple(s for s, *_ in cap.log)

    step = torch.func.vmap(member_loss)
    for m in methods:
        m.train(True)
        m.channel.mode = "train"
    for cbs, loop in zip(callbacks, loops, strict=True):
        for cb in cbs:
            cb.on_stage_start(loop)
    for epoch in range(hp.epochs):
        t0 = time.perf_counter()
        if hp.schedule == "cosine":
            opt.lr = cosine_lr(hp.lr, epoch, hp.epochs, hp.eta_min_ratio)
        orders = [epoch_order(p, d.blocks.n, w, policy.shuffle, g, device) for p, d, w, g in zip(pools, sets, weights, batching, strict=True)]
        if len({len(o) for o in orders}) != 1:
            raise ValueError("the members of a pack train on different numbers of samples")
        for m, d, o in zip(methods, sets, orders, strict=True):
            m.begin_epoch(Epoch(stage, epoch, d.obs, o, hp.batch_size, policy.per_batch_masks))
        order = torch.stack(orders)
        total = torch.zeros(n, dtype=torch.float64, device=device)
        count = torch.zeros(n, dtype=torch.long, device=device)
        for j, start in enumerate(range(0, order.shape[1], hp.batch_size)):
            number = j
            idx = order[:, start : start + hp.batch_size]  # [N, B]
            ob = obs_all[rows, idx]  # [N, B, K]
            if policy.per_batch_masks:
                ob = ob[:, :1].expand(-1, idx.shape[1], -1)
            yb = None if y_all is None else y_all[rows, idx]
            blocks = _blocks(sets, shared_x, idx)
            if draws:
                for i, m in enumerate(methods):
                    m.draw(Batch(blocks[i], ob[i], None if yb is None else yb[i], idx[i], j), stage)
            state.update(methods)
            own = {"channel": tmpl.channel, **{k: getattr(tmpl, k) for k in state.names}}  # the template's own, restored below
            try:
                losses, active, sent = step(flat, blocks, ob, yb, idx, *state.tensors())
            finally:
                store._cache, store.transposed = None, False
                for k, v in own.items():
                    setattr(tmpl, k, v)
            took = active.any(1)  # [N]: members for which this batch trains something
            values = losses.detach().double()
            bad = took & ~torch.isfinite(values)
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                raise TrainingDiverged(epoch + 1, float(values[i]), None)
            flat.grad = None
            losses.sum().backward()
            opt.step(active)
            for i, (m, t) in enumerate(zip(methods, took.tolist(), strict=True)):  # each member books its own traffic
                if t:
                    m.channel._step = [(s[i], party_of, up, down) for s, (party_of, up, down) in zip(sent, crossings, strict=True)]
                    m.channel.commit("train", backward=True)
            total += torch.where(took, values, 0.0)
            count += took.long()
        skipped = order.shape[1] // hp.batch_size + (order.shape[1] % hp.batch_size > 0) - count
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            for i, m in enumerate(methods):
                m.store.flat.copy_(flat[i])
        for i, (h, loop, cbs) in enumerate(zip(hists, loops, callbacks, strict=True)):
            h.skipped_batches += int(skipped[i])
            loop.epoch = epoch
            loop.epoch_loss = float(total[i] / max(int(count[i]), 1))
            h.loss.append(loop.epoch_loss)
            h.lr.append(opt.lr)
            h.stage.append(stage.name)
            h.seconds.append(seconds)  # the whole pack's epoch
            for cb in cbs:
                cb.on_epoch_end(loop)
    for cbs, loop in zip(callbacks, loops, strict=True):
        for cb in cbs:
            cb.on_stage_end(loop)
    for m in methods:
        m.train(False)
    return hists

