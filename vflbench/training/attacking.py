"""The harness around a run's attacks and label defenses (``--attack``, ``--label-defense``).

:class:`AttackHarness` is a trainer callback. Before training it builds each attack from its spec and the run's
truth (the true training labels, each party's plain block: what scores the attack, never what it infers from),
refuses a ``known`` share too small to work with, and installs the attacks as taps on the run's channel
(:meth:`vflbench.privacy.channel.Channel.watch`), so that they observe exactly what crosses the boundary. At the
end of every epoch each attack closes its observations; at every evaluated epoch (``--eval-epochs`` and the last)
it gives ``(adversary, metric, value)`` rows, ``attack:NAME:METRIC`` in the run's CSV.

:func:`apply_label_defense` installs a label defense: randomized response replaces the training labels before
training (its certified ``epsilon_label`` goes into the rows and the manifest); the gradient defenses become a
hook on the channel where the gradients go down."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..methods import METHODS, Method
from ..privacy.attacks import ATTACKS, AttackContext, parse_attack
from ..privacy.defenses import make_defense
from ..runs.config import ResolvedRun
from .inputs import RunInputs
from .trainer import Callback


def attack_specs(run: ResolvedRun) -> list[str]:
    value = run.settings.get("attack", "none")
    return [] if value == "none" else value.split(";")


def apply_label_defense(run: ResolvedRun, inputs: RunInputs, method: Method) -> dict[str, Any]:
    """Install ``--label-defense`` on a built method; returns the extras its rows carry (``label_defense``,
    ``epsilon_label``). Randomized response redraws the training labels here, before training."""
    spec = run.settings.get("label_defense")
    if spec is None or spec.name == "none":
        return {}
    streams = inputs.prep.streams
    defense = make_defense(spec, streams.torch("label_defense"))
    if defense.on_gradients:
        method.channel.down_hooks.append(defense.gradient)
    else:
        gen = streams.torch("label_defense/labels")
        y = inputs.train.y
        inputs.train.y = defense.randomize(y.cpu(), inputs.prep.data.n_classes, gen).to(y.device, y.dtype)
    out: dict[str, Any] = {"label_defense": str(spec)}
    if defense.epsilon_label() is not None:
        out["epsilon_label"] = defense.epsilon_label()
    return out


class Extras(Callback):
    """Per-run scalars for the rows (the label defense and its certified epsilon)."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    def extras(self) -> dict[str, Any]:
        return dict(self.values)


class AttackHarness(Callback):
    """A run's attacks: built before training (their truth taken before any label defense or placement), observing
    the channel, scored at every evaluated epoch."""

    def __init__(self, run: ResolvedRun, inputs: RunInputs, truth_y: torch.Tensor, blocks: list[np.ndarray], wire=None):
        self.run, self.inputs, self.wire = run, inputs, wire
        # across processes each attack runs in its adversary's process, on what that process received: a party
        # plays itself in the label attacks, the server runs the inversions
        self.rank = None if wire is None else int(wire.rank)
        here = None if self.rank in (None, 0) else (self.rank - 1,)
        mcls = METHODS.get(run.method)
        epochs = sum(h.epochs for h in run.stage_hp.values()) or int(run.hp.epochs)
        self.total = mcls.rounds({**{o.name: o.default for o in mcls.option_specs}, **run.method_options}, epochs)[0]
        self.evaluated = set(run.eval_epochs or ()) | {self.total}
        self.seen = 0
        self.method: Method | None = None
        self._initial: dict[int, np.ndarray | None] = {}
        data = inputs.prep.data
        positive = data.info.positive_class if data.info.positive_class is not None else 1
        streams = inputs.prep.streams
        self.ctx = AttackContext(
            n=len(truth_y),
            k=inputs.prep.partition.n_parties,
            n_classes=data.n_classes,
            positive=int(positive),
            y=truth_y.cpu().long(),
            observed=inputs.train.obs.cpu().bool(),
            block=lambda k: blocks[k],
            party_reps=self._party_reps,
            initial_reps=lambda k: self._initial.get(k),
            seed=streams.seed_for("attack"),
            known_order=torch.randperm(len(truth_y), generator=streams.torch("attack/known")),
            here=here,
        )
        self.attacks = []
        for text in attack_specs(run):
            name, opts = parse_attack(text)
            attack = ATTACKS.get(name)(opts, self.ctx)
            attack.check_known()
            self.attacks.append((text, attack))
        self.local = [(t, a) for t, a in self.attacks if self._runs_here(a)]
        self.rows: dict[int, list[tuple[str, str, str, float]]] = {}

    def _runs_here(self, attack) -> bool:
        if self.rank is None:
            return True
        if self.rank == 0:
            return attack.adversary == "server"
        return attack.adversary == "party" and bool(attack.parties())

    def install(self, method: Method) -> None:
        """Tap the method's channel, and keep each party's bottom model output before any gradient (the
        baseline of model completion). Refuses an attack that needs a bottom model the method lacks."""
        self.method = method
        if any(a.name == "completion" for _, a in self.local):
            for k in range(self.ctx.k) if self.ctx.here is None else self.ctx.here:
                self._initial[k] = self._party_reps(k)
                if self._initial[k] is None:
                    raise VFLBenchError(
                        f"--attack completion: {method.display} exposes no bottom model per party to complete."
                    )
        method.channel.taps.extend(a for _, a in self.local)

    @torch.no_grad()
    def _party_reps(self, k: int) -> np.ndarray | None:
        """Party k's bottom model on its own block, every training sample (what the party can compute itself)."""
        m = self.method
        data = self.inputs.train.blocks
        n, step = data.n, max(self.run.eval_batch_size, 1)
        was = m.store.training
        m.train(False)
        parts = []
        try:
            for start in range(0, n, step):
                idx = torch.arange(start, min(start + step, n), device=self.inputs.device)
                obs = torch.ones(len(idx), m.k, dtype=torch.bool, device=idx.device)
                r = m.party_representations(data.batch(idx), obs)
                if r is None:
                    return None
                parts.append(r[k].float().cpu().numpy())
        finally:
            m.train(was)
        return np.concatenate(parts)

    def on_epoch_end(self, loop) -> None:
        self.seen += 1
        evaluated = self.seen in self.evaluated
        for _, attack in self.local:
            attack.end_epoch(self.seen, evaluated)
        if not evaluated:
            return
        rows = self.rows.setdefault(self.seen, [])
        for text, attack in self.local:
            rows += [(who, f"attack:{attack.name}:{m}", text, v) for who, m, v in attack.results(self.seen)]
        if self.rank is not None:
            self._gather(rows)

    def _gather(self, rows: list) -> None:
        """Across processes: each party sends the server its label attacks' values at an evaluated epoch (a
        control message, in the order of the attacks and their metrics); the server files them as that party's."""
        from ..core.role import SERVER

        wire = self.wire
        theirs = [(t, a) for t, a in self.attacks if a.adversary == "party"]
        if self.rank != SERVER:
            values = [v for _, _, _, v in rows]
            if values:
                wire.send(torch.tensor(values, dtype=torch.float64), SERVER, None)
            rows.clear()  # the server records them
            return
        for k in range(self.ctx.k):
            mine = [(t, a) for t, a in theirs if k in a.targets()]
            n = sum(len(a.metrics) for _, a in mine)
            if not n:
                continue
            got = wire.recv((n,), torch.float64, k + 1, None).tolist()
            for t, a in mine:
                for m in a.metrics:
                    rows.append((a.adversary_of(k), f"attack:{a.name}:{m}", t, got.pop(0)))
