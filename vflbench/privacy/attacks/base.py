"""What an attack is: an adversary of the threat model (the server, or a passive party), what it observes at the
party-to-server boundary (taken from the channel, :meth:`vflbench.privacy.channel.Channel.watch`), the side
knowledge it is given (options such as ``known``), and the metric that scores its success against the truth.

An attack is a *tap* on the run's channel: ``on_up`` sees what the server received in a training step, ``on_down``
the gradients a party got back for the rows it sent (after any label defense). At the end of every epoch
``end_epoch`` closes what the epoch observed; ``results`` gives ``(adversary, metric, value)`` for an evaluated
epoch. The harness (:mod:`vflbench.training.attacking`) holds the truth (labels, plain blocks) to score it; an
attack infers only from what it observed and its side knowledge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ...core.errors import VFLBenchError
from ...core.registry import Registry


@dataclass(frozen=True)
class AttackOption:
    """One option of an attack: its type, default, and the open interval or choices it must be in."""

    name: str
    type: type
    default: Any
    help: str
    low: float | None = None  # exclusive
    high: float | None = None  # exclusive
    choices: tuple[Any, ...] | None = None

    def parse(self, value: Any, attack: str) -> Any:
        try:
            v = self.type(str(value).strip()) if self.type is not str else str(value).strip()
        except ValueError:
            raise VFLBenchError(f"--attack {attack}: {self.name} takes {self.type.__name__}, got {value!r}.") from None
        if self.choices is not None and v not in self.choices:
            raise VFLBenchError(
                f"--attack {attack}: {self.name}={v} is not one of {', '.join(map(str, self.choices))}."
            )
        if (self.low is not None and not v > self.low) or (self.high is not None and not v < self.high):
            raise VFLBenchError(
                f"--attack {attack}: {self.name} must be in ({self.low:g}, {self.high:g}), got {v}."
                if self.high is not None
                else f"--attack {attack}: {self.name} must be > {self.low:g}, got {v}."
            )
        return v


KNOWN = AttackOption(
    "known",
    float,
    0.01,
    "the share of training samples the adversary knows (their label, or the target's plain block)",
    low=0.0,
    high=1.0,
)
TARGET = AttackOption("target", str, "all", "the party attacked (an index), or all: one row each", choices=None)


@dataclass
class AttackContext:
    """What the harness gives an attack: the training split's truth (to score it) and the adversary's means."""

    n: int  # training samples
    k: int  # parties
    n_classes: int
    positive: int  # the positive class of a binary task
    y: torch.Tensor  # [n] true training labels (cpu; before any randomized response): the harness's truth
    observed: torch.Tensor  # [n, K] bool: which party holds which sample's block (the training masks)
    block: Callable[[int], np.ndarray]  # party k's plain block [n, w_k] (the truth an inversion is scored on)
    party_reps: Callable[[int], np.ndarray | None]  # party k's bottom model on its own block now ([n, D]; None: none)
    initial_reps: Callable[[int], np.ndarray | None]  # the same before any gradient reached it
    seed: int  # the attack's own stream (fits of heads and decoders)
    known_order: torch.Tensor  # [n] a permutation: the first round(known * n) samples are known (nested shares)
    here: tuple[int, ...] | None = None  # across processes: the parties this process attacks as (None: every one)

    def known(self, share: float) -> torch.Tensor:
        """[n] bool: the samples whose label (or plain record) the adversary knows."""
        mask = torch.zeros(self.n, dtype=torch.bool)
        mask[self.known_order[: int(round(share * self.n))]] = True
        return mask


ATTACKS: Registry[type[Attack]] = Registry("attack")


class Attack:
    """Base class of a registered attack (one file each under ``vflbench/privacy/attacks/``)."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    adversary: ClassVar[str] = "party"  # "party": each passive party k attacks; "server": the server attacks party k
    observes: ClassVar[str] = ""
    side_knowledge: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[tuple[AttackOption, ...]] = (KNOWN,)
    labels: ClassVar[bool] = True  # a label attack (scored against the labels)
    binary_only: ClassVar[bool] = False
    min_known: ClassVar[int] = 1  # the fewest known samples it can work with (per class for label attacks)
    # what it observes: "boundary" (the neural methods' channel: on_up / on_down) or "secureboost" (SecureBoost's
    # messages to a party, tree by tree: :meth:`on_tree`); a method offers one surface (Method.attack_surface)
    surface: ClassVar[str] = "boundary"

    def __init__(self, opts: dict[str, Any], ctx: AttackContext):
        self.opts, self.ctx = opts, ctx
        self.known = ctx.known(float(opts["known"]))
        self.history: dict[int, dict[int, float]] = {}  # party -> epoch -> per-epoch score (label attacks)

    # -- refusals before training
    @classmethod
    def refusal(cls, opts: dict[str, Any], traits: dict[str, Any]) -> str | None:
        """Why this attack cannot run on this run (``traits``: gradients_cross, representations_cross,
        n_classes, parties); None: it can. A method without one bottom model per party is refused
        by the harness, which asks the built method (``Method.party_representations``)."""
        surface = traits.get("surface", "boundary")
        if surface != cls.surface:
            if surface == "none":
                return f"{traits['display']} has no parties: nothing crosses to attack"
            if cls.surface == "boundary":
                return (
                    f"it observes representations and gradients at the neural boundary, which {traits['display']} "
                    "does not have; its messages are attacked by leaves and gradients (docs/ATTACKS.md)"
                )
            return f"it observes SecureBoost's messages; {traits['display']} has none (it is not SecureBoost)"
        if cls.labels and not traits["gradients_cross"]:
            return f"{traits['display']} returns no gradient to the parties (they train alone): nothing to attack"
        if not cls.labels and not traits["representations_cross"]:
            return f"{traits['display']} sends no training representation to the server: there is nothing to invert"
        if cls.binary_only and traits["n_classes"] not in (0, 2):
            return f"it scores binary tasks only; this dataset has {traits['n_classes']} classes"
        target = opts.get("target", "all")
        if target != "all" and not (target.isdigit() and int(target) < traits["parties"]):
            return f"target={target} is not a party of this run (0 .. {traits['parties'] - 1}, or all)"
        return None

    def check_known(self) -> None:
        """Refuse, before training, a ``known`` share that leaves the attack too few known samples."""
        n = int(self.known.sum())
        if self.labels:
            counts = torch.bincount(self.ctx.y[self.known], minlength=self.ctx.n_classes)
            if self.binary_only:
                counts = counts[self.ctx.positive : self.ctx.positive + 1]
            if int(counts.min()) < self.min_known:
                raise VFLBenchError(
                    f"--attack {self.name}: known={self.opts['known']:g} gives {n} known samples of "
                    f"{self.ctx.n}, too few: it needs at least {self.min_known} of "
                    f"{'the positive class' if self.binary_only else 'every class'}; raise known."
                )
        elif n < self.min_known:
            raise VFLBenchError(
                f"--attack {self.name}: known={self.opts['known']:g} gives {n} known records of {self.ctx.n}; it needs "
                f"at least {self.min_known}; raise known."
            )

    def targets(self) -> list[int]:
        """The parties this attack is run for (its ``target`` option: one, or all)."""
        t = self.opts.get("target", "all")
        return list(range(self.ctx.k)) if t == "all" else [int(t)]

    def parties(self) -> list[int]:
        """The targets this process plays (all of them in one process; across processes a party plays itself)."""
        here = self.ctx.here
        return [k for k in self.targets() if here is None or k in here]

    def adversary_of(self, k: int) -> str:
        return f"party {k}" if self.adversary == "party" else "server"

    # -- the boundary, in training steps
    def on_up(self, values: torch.Tensor, sent, party_of, idx, summed: bool) -> None: ...
    def on_down(self, grads: torch.Tensor, sent, party_of, idx, summed: bool) -> None: ...

    # -- SecureBoost's messages, tree by tree (surface "secureboost")
    def on_tree(self, k: int, rows: np.ndarray, leaf: np.ndarray, g: np.ndarray | None) -> None:
        """After a tree: what party ``k`` holds of it. ``rows`` its training samples, ``leaf`` the leaf each of them
        reached (from the route messages and its own splits), ``g`` the g it was sent for them in clear ([n_k,
        outputs], fixed point; None under Paillier)."""

    # -- epochs
    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        """Close what the epoch observed (label attacks score every epoch: their rows give the mean and max)."""

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        """(adversary, metric, value) at an evaluated epoch."""
        return []

    def history_rows(self, epoch: int) -> list[tuple[str, str, float]]:
        """A label attack scored every epoch (``history``): per party its AUC at ``epoch``, and the mean and the best
        over the epochs up to it."""
        out = []
        for k, h in self.history.items():
            upto = [v for e, v in h.items() if e <= epoch and not np.isnan(v)]
            out += [
                (self.adversary_of(k), "auc", h.get(epoch, float("nan"))),
                (self.adversary_of(k), "auc_mean", float(np.mean(upto)) if upto else float("nan")),
                (self.adversary_of(k), "auc_max", float(np.max(upto)) if upto else float("nan")),
            ]
        return out


def party_rows(
    t: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None, k: int, summed: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """What crossed for party ``k`` in one step: the batch rows it sent ``[B]`` bool and, for those rows, the
    values (or gradients) ``[b, W]``: its own sender's row; every sender's of a party with several (concatenated,
    zeros where one sent nothing); the sum's row when the crossing is a sum (``summed``: ``t`` is ``[B, D]``)."""
    sent = sent.to(t.device)
    if summed:
        rows = sent[k]
        return rows, t[rows]
    if party_of is None:
        rows = sent[k]
        return rows, t[k][rows]
    senders = (party_of.to(t.device) == k).nonzero().view(-1)
    s = sent[senders]  # [S, B]
    rows = s.any(0)
    vec = (t[senders] * s[..., None].to(t.dtype)).permute(1, 0, 2).reshape(t.shape[1], -1)
    return rows, vec[rows]


def oriented_auc(score: np.ndarray, known: np.ndarray, positive: np.ndarray) -> float:
    """The AUC, on the samples whose label the adversary does not know, of a score it orients by the ones it does
    (positives the high end); NaN when none is unknown."""
    kp, kn = known & positive, known & ~positive
    sign = -1 if kp.any() and kn.any() and score[kp].mean() < score[kn].mean() else 1
    return auc(sign * score[~known], positive[~known]) if (~known).any() else float("nan")


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC of scores against binary truth (NaN when one class is absent)."""
    from sklearn.metrics import roc_auc_score

    if positive.all() or not positive.any():
        return float("nan")
    return float(roc_auc_score(positive, scores))
