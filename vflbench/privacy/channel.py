"""The party-to-server boundary.

Every representation that leaves a party goes through one call, :meth:`Channel.up`, made by the
method at the point where it would cross the network in a real deployment. The base channel passes
the tensor through unchanged and counts what crossed: the values sent up, and, for the training
steps that back-propagate, the gradients the server returns for them. A privacy mechanism, a
quantiser or a different cost model subclasses :class:`Channel` and is installed on any method with
``method.channel = MyChannel(...)``: the method's code does not change (the pattern of Flower's
differential-privacy wrappers, which act around any strategy).

Counting is cheap: the hot path only keeps a reference to each crossing's ``sent`` mask; the masks
are summed in one reduction per group when the totals are folded (every 512 crossings).
"""

from __future__ import annotations

from typing import Any

import torch

PHASES = ("train", "eval", "monitor")  # monitor: passes over the training set that only measure


class Channel:
    """Counts the bytes each party sends up (representations) and receives down (their gradients).

    ``bytes_up_per_value`` / ``bytes_down_per_value`` default to the element size of the tensors
    that cross (4 for float32). Subclasses that encode values differently override them."""

    bytes_up_per_value: float | None = None  # None: the tensor's element size
    bytes_down_per_value: float | None = None
    taps: list[Any] | tuple = ()  # (instances get their own lists; a stand-in channel that skips __init__ has none)
    down_hooks: list[Any] | tuple = ()

    def __init__(self, n_parties: int):
        self.k = int(n_parties)
        self._step: list[
            tuple[torch.Tensor, torch.Tensor | None, float, float]
        ] = []  # (sent [M, B], party_of, bytes up, bytes down per row)
        self._pending: dict[tuple[str, bool], list[tuple[torch.Tensor, torch.Tensor | None, float, float]]] = {}
        self._n_pending = 0
        self.totals = {
            f"{phase}_{d}": torch.zeros(self.k, dtype=torch.float64) for phase in PHASES for d in ("up", "down")
        }
        self.calls = 0
        self.epoch = 0  # the epoch in flight (set by the trainer; for messages)
        self.mode = "train"  # set by the trainer and the evaluator: which phase the next crossings belong to
        self.batch_idx: torch.Tensor | None = (
            None  # the sample indices of the batch in flight (set by the trainer; accountants read it)
        )
        # what watches the boundary in training (vflbench.privacy.attacks): ``taps`` observe what the server
        # receives (``on_up``) and the gradients the parties get back (``on_down``); ``down_hooks`` (label
        # defenses, vflbench.privacy.defenses) change those gradients before they go down
        self.taps: list[Any] = []
        self.down_hooks: list[Any] = []

    # -- the boundary
    # local steps (--local-steps): the training schedule's replay of the exchange (vflbench.training.local_steps,
    # installed by the trainer): ``keep`` it is given what crossed in a training step, and while it is
    # ``replaying`` it answers a crossing with what the exchange received (``replay``)
    stale: Any = None

    def up(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None = None) -> torch.Tensor:
        """``reps`` ``[M, B, D]``: what M senders computed for a batch; ``sent`` ``[M, B]`` bool: which
        of them actually cross (observed, not dropped; kept by reference until the totals are folded, so
        it must not be modified in place afterwards); ``party_of`` ``[M]``: the party each sender
        belongs to (default: sender m is party m). Returns what the server receives."""
        if self.stale is not None and self.stale.replaying:
            return self.stale.replay(reps)
        self.count(reps, sent, party_of)
        return self.kept(self.watch(self.transform(reps, sent, party_of), sent, party_of))

    def kept(self, received: torch.Tensor) -> torch.Tensor:
        """``received`` as it goes on to the server's computation; a training exchange followed by local steps keeps
        it and, when the backward reaches it, the gradient the parties get for it (the replay of
        :mod:`vflbench.training.local_steps`). Evaluation and monitoring crossings are never kept."""
        return received if self.stale is None or self.mode != "train" else self.stale.keep(received)

    def watch(
        self,
        received: torch.Tensor,
        sent: torch.Tensor,
        party_of: torch.Tensor | None = None,
        summed: bool = False,
        down=None,
    ) -> torch.Tensor:
        """A training crossing as the two sides see it: the taps observe ``received`` (what the server holds:
        ``[M, B, D]``, or ``[B, D]`` for a sum, ``summed``), and, through a hook on it, the gradient that goes
        back down for it: the label defenses change it first, then ``down`` (a compressor's, ``--compress
        ...,down=1``) turns it into what crosses, and the taps observe what the parties receive. Returns
        ``received`` (the same tensor)."""
        if self.mode != "train" or not (self.taps or self.down_hooks or down is not None):
            return received
        idx = self.batch_idx
        for tap in self.taps:
            tap.on_up(received.detach(), sent, party_of, idx, summed)
        if received.requires_grad:
            hooks, taps = list(self.down_hooks), list(self.taps)

            def hook(g: torch.Tensor) -> torch.Tensor:
                for h in hooks:
                    g = h(g, sent, party_of, summed)
                if down is not None:
                    g = down(g)
                for tap in taps:
                    tap.on_down(g.detach(), sent, party_of, idx, summed)
                return g

            received.register_hook(hook)
        return received

    def count(
        self,
        reps: torch.Tensor,
        sent: torch.Tensor,
        party_of: torch.Tensor | None = None,
        up_bytes: float | None = None,
    ) -> None:
        """Book the traffic of one crossing without transforming it (what :meth:`up` counts);
        ``up_bytes`` overrides the bytes per value sent up."""
        self.calls += 1
        per_value = reps.shape[-1] if reps.ndim == 3 else 1
        up_b = float(
            up_bytes
            if up_bytes is not None
            else self.bytes_up_per_value
            if self.bytes_up_per_value is not None
            else reps.element_size()
        )
        down_b = float(self.bytes_down_per_value if self.bytes_down_per_value is not None else reps.element_size())
        self._step.append((sent, party_of, per_value * up_b, per_value * down_b))

    def book(self, crossings: list[tuple[torch.Tensor, torch.Tensor | None, float, float]]) -> None:
        """Set the open step's crossings ``(sent, party_of, bytes up, bytes down per row)`` recorded
        elsewhere (a model bank computes its members' steps together and books each one's own)."""
        self._step = list(crossings)

    def transform(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None) -> torch.Tensor:
        """What the server receives; the identity here. Override to quantise, add noise or aggregate."""
        return reps

    def aggregate(self, reps: torch.Tensor, sent: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """For methods that fuse by summing: the server's view of ``sum_m sent[m] * reps[m]``
        (``[B, D]``). Here the exact sum of what :meth:`up` delivers; a secure-aggregation or
        quantising channel (:mod:`vflbench.privacy.mechanisms`) overrides it. ``idx``: the batch's sample
        indices (for accountants)."""
        return (self.up(reps, sent) * sent[..., None].to(reps.dtype)).sum(0)

    def book_bytes(
        self, up: torch.Tensor | None, down: torch.Tensor | None = None, party_of: torch.Tensor | None = None
    ) -> None:
        """Book payload bytes ``[M]`` per sender that are not so many bytes a row (a compressed message: its codes,
        its range, a codebook; a compressed gradient going down), with the open step, in its phase (down only when
        the step back-propagates)."""
        as64 = lambda b: None if b is None else b.detach().to("cpu", torch.float64)  # noqa: E731
        self._step.append((None, party_of, as64(up), as64(down)))

    # -- the step, as the trainer drives it (a runtime that puts the boundary between processes overrides these)
    def step_loss(self, method, batch, stage):
        """The step's ``(loss, active members)``: the method's loss (a runtime whose parties are
        processes forms it from what crosses, :mod:`vflbench.federation.runtime`)."""
        return method.loss(batch, stage)

    def report(self, method, prediction):
        """A batch's predictions as the evaluating side holds them (here, in one process, as they are)."""
        return prediction

    def agree(self, value: float | None, n_active: int) -> float | None:
        """The step's loss value as every process will use it (here, in one process, the value itself)."""
        return value

    def agree_order(self, order: torch.Tensor, derived: bool = False) -> torch.Tensor:
        """The epoch's sample order as every process will use it (the label holder's: a class-balanced
        sampler reads the labels). ``derived``: every process draws the same order from its replica of the run's
        streams (no labels read), so only a fingerprint need cross."""
        return order

    def message_link(self):
        """A transport of byte messages between the server and each party process, for a method whose protocol is
        messages rather than crossings of representations (SecureBoost): ``None`` here, where every party is in this
        process; across processes, the wire's (vflbench.federation.wire.WireMessages)."""
        return None

    def begin_epoch(self, epoch: int) -> None:
        """The trainer starts epoch ``epoch`` (0-based, per stage group): what the channel's messages say, and where
        a channel with state per epoch moves it (a learned codebook, vflbench.compression.channel)."""
        self.epoch = epoch

    def epoch_boundary(self, boundary) -> None:
        """Between two epochs of a run that can lose a party (``boundary``: a
        :class:`vflbench.training.trainer.EpochBoundary`). Across processes a party checkpoints its state here and
        a restarted one is re-admitted (vflbench.federation.wire); in one process nothing crosses."""

    def resume(self):
        """Where a restarted party process takes up training (None: from the start; vflbench.federation.wire)."""
        return None

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate the step's loss through both sides of the boundary."""
        loss.backward()

    def exact_sum(self, reps: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
        """The exact sum ``sum_m sent[m] * reps[m]`` (``[B, D]``) of float values sent up as they are,
        whatever mechanism the channel carries otherwise (e.g. PBM-VFL's ``exact`` evaluation variant):
        counted at the values' own size."""
        self.count(reps, sent, up_bytes=reps.element_size())
        return (self.transform_exact(reps, sent) * sent[..., None].to(reps.dtype)).sum(0)

    def transform_exact(self, reps: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
        """What the server receives of values sent exactly (the identity in one process)."""
        return reps

    # -- bookkeeping, called by the trainer and the evaluator
    def commit(self, phase: str, backward: bool) -> None:
        """Close a step: its traffic counts as ``phase`` ("train" or "eval"); gradients come down only
        when the step back-propagated."""
        if self._step:
            self._pending.setdefault((phase, backward), []).extend(self._step)
            self._n_pending += len(self._step)
            self._step = []
            if self._n_pending >= 512:
                self.flush()

    def abandon(self) -> None:
        """A training step dropped after its values crossed the boundary (a party lost mid-step, across
        processes; it is redone without the party): a private channel charges what was released, then the step
        is discarded."""
        self.discard()

    def discard(self) -> None:
        """Forget the open step (a batch that trained nothing)."""
        self._step = []

    def flush(self) -> None:
        for (phase, backward), recs in self._pending.items():
            groups: dict[tuple, list[torch.Tensor]] = {}
            for sent, party_of, up_b, down_b in recs:
                if sent is None:  # bytes per sender, as they are (book_bytes)
                    for direction, b in (("up", up_b), ("down", down_b)):
                        if b is None or (direction == "down" and not backward):
                            continue
                        per_party = torch.zeros(self.k, dtype=torch.float64)
                        if party_of is None:
                            per_party[: len(b)] += b
                        else:
                            per_party.index_add_(0, party_of.to("cpu"), b)
                        self.totals[f"{phase}_{direction}"] += per_party
                    continue
                key = (id(party_of) if party_of is not None else None, tuple(sent.shape), up_b, down_b)
                groups.setdefault(key, []).append((sent, party_of))
            for (_, (m, _b), up_b, down_b), items in groups.items():
                total = torch.stack([c for c, _ in items]).sum((0, 2), dtype=torch.float64).to("cpu")  # [M]
                party_of = items[0][1]
                per_party = torch.zeros(self.k, dtype=torch.float64)
                if party_of is None:
                    per_party[:m] += total
                else:
                    per_party.index_add_(0, party_of.to("cpu"), total)
                self.totals[f"{phase}_up"] += per_party * up_b
                if backward:
                    self.totals[f"{phase}_down"] += per_party * down_b
        self._pending, self._n_pending = {}, 0

    # -- results
    def summary(self) -> dict[str, Any]:
        """Per-party and total bytes, by phase (for the manifest)."""
        self.flush()
        out: dict[str, Any] = {"model": type(self).__name__}
        for key, v in self.totals.items():
            out[f"bytes_{key}_per_party"] = [int(round(x)) for x in v.tolist()]
            out[f"bytes_{key}"] = int(round(float(v.sum())))
        return out

    def extras(self) -> dict[str, float]:
        """Per-run scalars for the tidy CSV: training traffic, the cost that the papers report."""
        self.flush()
        return {
            "comm_bytes_up": int(round(float(self.totals["train_up"].sum()))),
            "comm_bytes_down": int(round(float(self.totals["train_down"].sum()))),
        }
