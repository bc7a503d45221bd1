"""Seed packing: train several runs that differ only in their seed as one model bank.

A training step of a tabular run is about 2 ms of operator dispatch around very little arithmetic, so
N runs stepped together cost far less than N steps. Packing keeps every run's own randomness: each
member of a pack is a complete :class:`~vflbench.methods.Method` built from its own seed (its
initialisation, split, masks, batch order, task draws and dropout all come from its own named
streams), and only the arithmetic is shared:

* the members' flat parameter vectors are stacked into one ``[N, P]`` leaf, updated by one
  :class:`~vflbench.nn.optim.MaskedOptimizer` with a pack axis (each member keeps its own step counts,
  moments and active members);
* the method's loss runs once per step under ``torch.func.vmap`` over the member axis, on the
  members' own batches, masks and draws. A method can be packed when its loss is a pure function
  of the batch, the parameters and the attributes it names in ``pack_state`` (draws made in
  ``begin_epoch`` or ``draw``), with no branch on the data;
* traffic crosses each member's own channel, so every run reports its own bytes.

Runs leave a pack with their own CSV rows and manifest (which records the pack), evaluated one by
one exactly as a run trained alone. Results agree with the same run trained alone up to float
rounding (batched kernels sum in another order), and a member's numbers are bit-identical in packs
of any size: ``tests/test_packing.py`` checks every packable method. ``benchmarks/pack_probe.py@f5ab53e``
measured the gain before this module was written.

This module holds only the bank's layout and its vectorised step (:class:`VectorisedStep`); the loop
that drives it is :func:`vflbench.training.trainer.fit`, the same loop that trains a run alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..methods import Batch, Method, Stage
from ..nn.optim import MaskedOptimizer
from ..privacy.channel import Channel
from .trainer import StageHP, TrainPolicy, TrainSet


def why_not_packable(run) -> str | None:
    """None when the resolved ``run`` can train in a bank with other runs (vectorised); else the
    reason, in words. The one capability check: the sweep asks it to group runs, the pipeline before
    it trains a pack."""
    from ..methods import METHODS

    cls = METHODS.get(run.method)
    if not cls.packable:
        return f"{cls.display}'s loss is not written for packing"
    refusal = getattr(cls, "pack_refusal", None)
    if refusal is not None and (why := refusal(run)):
        return why
    if any(hp.patience for hp in run.stage_hp.values()):
        return "a run that stops early on validation (patience) trains alone: its epochs are its own"
    if run.model.get("arch") != "mlp":
        return "module (image) extractors are trained one run at a time"
    if len(cls.stages_for(run.method_options)) != 1:
        return "runs with more than one training stage (e.g. pretraining) are trained one at a time"
    if cls.end_epoch is not Method.end_epoch:
        return f"{cls.display} acts at the end of every epoch (end_epoch), which a pack does not call"
    if run.settings.get("runtime", "inprocess") != "inprocess":
        return "a run whose parties are processes is trained alone"
    if run.settings.get("fail_party", "none") != "none":
        return "a run with scheduled party failures (--fail-party) is trained alone"
    mech = run.settings.get("mechanism")
    if mech is not None and mech.name not in ("none", "npq"):
        return "a mechanism at the party-to-server boundary is applied one run at a time"
    if run.settings.get("attack", "none") != "none":
        return "a run with attacks (--attack) observes its own boundary and is trained alone"
    defense = run.settings.get("label_defense")
    if defense is not None and defense.name != "none":
        return "a run with a label defense (--label-defense) is trained alone"
    comp = run.settings.get("compress")
    if comp is not None and comp.name != "none":
        return "a run whose boundary compresses (--compress) is trained alone"
    if int(run.settings.get("local_steps", 1)) != 1:
        return "a run with local steps (--local-steps) is trained alone"
    return None


class _Capture(Channel):
    """Stands in for the template's channel inside the vmapped loss: it records what each crossing
    sent (returned from the vmapped call, then booked on each member's own channel)."""

    def __init__(self, k: int):  # no totals: nothing is booked here
        self.k, self.mode, self.calls, self.batch_idx = k, "train", 0, None
        self.log: list[tuple[torch.Tensor, torch.Tensor | None, float, float]] = []

    def count(self, reps, sent, party_of=None, up_bytes=None) -> None:
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


class VectorisedStep:
    """How a bank of N runs computes a step: the members' flat parameter vectors stacked as one
    ``[N, P]`` leaf, the template method's loss vmapped over the member axis on the members' own
    batches, masks and draws, one optimiser with a pack axis. Used by :func:`vflbench.training.trainer.fit`."""

    def __init__(self, methods: Sequence[Method], sets: Sequence[TrainSet]):
        self.methods, self.sets, self.n = list(methods), list(sets), len(methods)
        tmpl = self.tmpl = methods[0]
        self.flat = torch.nn.Parameter(torch.stack([m.store.flat.detach() for m in methods]))
        self.shared_x = all(
            d.blocks.x is sets[0].blocks.x or torch.equal(d.blocks.x, sets[0].blocks.x) for d in sets[1:]
        )
        self.obs_all = torch.stack([d.obs for d in sets])  # [N, n, K]
        self.rows = torch.arange(self.n, device=sets[0].obs.device)[:, None]
        self.state = _State(type(tmpl).pack_state)
        self.draws = type(tmpl).draw is not Method.draw
        self.crossings: list = []  # (party_of, bytes up, bytes down) of each crossing of the last step
        self.sent: tuple = ()
        self.number = 0
        self._vmapped = torch.func.vmap(self._member_loss)
        self.stage: Stage | None = None
        self.y_all: torch.Tensor | None = None

    def optimizer(self, stage: Stage, hp: StageHP, policy: TrainPolicy) -> MaskedOptimizer:
        t = self.tmpl
        opt = MaskedOptimizer(
            None,
            [(self.flat, t.store.member_of)],
            t.n_members,
            name=hp.optimizer,
            lr=hp.lr,
            weight_decay=hp.weight_decay,
            momentum=hp.momentum,
            groups=t.member_group,
            stale_updates=policy.stale_updates,
            trainable=t.trainable(stage),
            pack=self.n,
        )
        return opt

    def batches(self, idx: list[torch.Tensor], j: int, y: list, aug: list, per_batch: bool) -> list[Batch]:
        idx_all = torch.stack(idx)  # [N, B]
        ob = self.obs_all[self.rows, idx_all]  # [N, B, K]
        if per_batch:
            ob = ob[:, :1].expand(-1, idx_all.shape[1], -1)
        if self.y_all is None or self.y_all[0] is not y:  # labels of this stage, stacked once
            self.y_all = (y, None if y[0] is None else torch.stack(y))
        yb = None if self.y_all[1] is None else self.y_all[1][self.rows, idx_all]
        if self.shared_x:
            blocks = self.sets[0].blocks.x[:, idx_all].transpose(0, 1)  # [N, K, B, w]
        else:
            blocks = torch.stack([s.blocks.x[:, i] for s, i in zip(self.sets, idx_all, strict=True)])
        self.stacked = (blocks, ob, yb, idx_all)
        self.number = j
        return [Batch(blocks[i], ob[i], None if yb is None else yb[i], idx_all[i], j) for i in range(self.n)]

    def _member_loss(self, flat_i, blocks, obs, y, idx, *state_tensors):
        tmpl = self.tmpl
        with tmpl.store.bound_to(
            tmpl.store.views(flat_i), transposed=True
        ):  # the pack's N x K small products are faster posed wide (models.affine)
            for k, v in zip(self.state.names, self.state.rebuild(state_tensors), strict=True):
                setattr(tmpl, k, v)
            cap = tmpl.channel = _Capture(tmpl.k)
            loss, active = tmpl.loss(Batch(blocks, obs, y, idx, self.number), self.stage)
        self.crossings[:] = [meta for _, *meta in cap.log]
        return loss, active, tuple(s for s, *_ in cap.log)

    def forward(self, stage: Stage, batches: list[Batch]):
        self.stage = stage
        tmpl = self.tmpl
        self.state.update(self.methods)
        own = {
            "channel": tmpl.channel,
            **{k: getattr(tmpl, k) for k in self.state.names},
        }  # the template's own, restored below
        try:
            losses, active, self.sent = self._vmapped(self.flat, *self.stacked, *self.state.tensors())
        finally:
            for k, v in own.items():
                setattr(tmpl, k, v)
        took = active.any(1).tolist()  # members for which this batch trains something
        values = losses.detach().double().tolist()
        return losses, active, [v if t else None for v, t in zip(values, took, strict=True)]

    def backward(self, opt: MaskedOptimizer, losses: torch.Tensor) -> None:
        self.flat.grad = None
        losses.sum().backward()

    def commit(self, took: list[bool]) -> None:
        for i, (m, t) in enumerate(zip(self.methods, took, strict=True)):  # each member books its own traffic
            if t:
                m.channel.book(
                    [
                        (s[i], party_of, up, down)
                        for s, (party_of, up, down) in zip(self.sent, self.crossings, strict=True)
                    ]
                )
                m.channel.commit("train", backward=True)

    @torch.no_grad()
    def end_epoch(self) -> None:
        for i, m in enumerate(self.methods):  # members are evaluated (and monitored) with their own parameters
            m.store.flat.copy_(self.flat[i])
