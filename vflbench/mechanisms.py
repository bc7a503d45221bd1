"""Release mechanisms for sums of party embeddings, as party-to-server channels.

A method that fuses by summing calls :meth:`vflbench.channel.Channel.aggregate` where the parties'
embeddings cross to the server; the channel installed on it decides what the server learns:

* :class:`~vflbench.channel.Channel` (NPQ: no privacy, no quantisation): the exact float sum.
* :class:`LDPChannel`: each party adds ``N(0, sigma^2)`` to its own embedding; the server sums.
* :class:`PBMChannel`: each party quantises with the Poisson Binomial Mechanism, the counts are
  summed (optionally through :class:`~vflbench.secagg.PairwiseMasking`), and the server unbiases
  the sum: ``C/(beta b) * (sum - b |O| / 2)`` over the ``|O|`` parties that took part.

Gradients pass straight through: the server's gradient at the released sum flows to every party's
exact embedding (PBM-VFL Algorithm 2, lines 11-18). Every release of a training sample's sum feeds
the :class:`~vflbench.accountant.NoisySumAccountant` when one is attached: the training steps and
the passes that monitor a training target (the server sees those noisy sums too). Evaluation
releases concern test samples and are not counted.
"""

from __future__ import annotations

import math

import torch

from .accountant import NoisySumAccountant
from .channel import Channel
from .secagg import PairwiseMasking, modulus_bits

F_BITS = 32  # bits per float on the wire (the paper's F)
CHARGED_PHASES = ("train", "monitor")  # releases of training samples' sums: both cost privacy


class AccountedChannel(Channel):
    """A channel whose training releases are reported to an accountant (set ``accountant``).
    ``gens`` maps a phase (train, eval, monitor) to its own generator, so that evaluating, or
    monitoring a training target, never changes the noise that training draws."""

    accountant: NoisySumAccountant | None = None

    def __init__(self, n_parties: int, gens: dict[str, torch.Generator]):
        super().__init__(n_parties)
        self.gens = gens
        self._releases: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def gen(self) -> torch.Generator:
        return self.gens[self.mode]

    def note_release(self, idx: torch.Tensor | None, sent: torch.Tensor) -> None:
        if idx is not None:
            self._releases.append((idx, sent.sum(0)))

    def commit(self, phase: str, backward: bool) -> None:
        if phase in CHARGED_PHASES and self.accountant is not None:
            for idx, n in self._releases:
                self.accountant.step(idx, n)
        self._releases = []
        super().commit(phase, backward)

    def discard(self) -> None:
        self._releases = []
        super().discard()


class LDPChannel(AccountedChannel):
    """Local DP baseline: Gaussian noise of std ``sigma`` on every coordinate a party sends."""

    def __init__(self, n_parties: int, sigma: float, gens: dict[str, torch.Generator]):
        super().__init__(n_parties, gens)
        self.sigma = float(sigma)

    def transform(self, reps, sent, party_of):
        noise = torch.randn(reps.shape, generator=self.gen, device=reps.device, dtype=reps.dtype) * self.sigma
        return reps + noise

    def aggregate(self, reps, sent, idx=None):
        self.note_release(idx, sent)
        return super().aggregate(reps, sent, idx)


class PBMChannel(AccountedChannel):
    """Poisson Binomial Mechanism with (optionally masked) secure summation."""

    bytes_down_per_value = F_BITS / 8

    def __init__(self, n_parties: int, b: int, beta: float, C: float, gens: dict[str, torch.Generator], secagg: PairwiseMasking | None = None):
        super().__init__(n_parties, gens)
        self.b, self.beta, self.C = int(b), float(beta), float(C)
        self.secagg = secagg
        self.bits = modulus_bits(n_parties, b)
        self.bytes_up_per_value = self.bits / 8  # one masked integer in Z_R per value
        self.released = 0
        self.last_upload: torch.Tensor | None = None  # what the server saw last (masked mode), for tests

    def quantise(self, reps: torch.Tensor) -> torch.Tensor:
        """Binomial(b, 1/2 + beta*h/C) counts per coordinate (h clamped to [-C, C])."""
        p = 0.5 + (self.beta / self.C) * reps.detach().clamp(-self.C, self.C)
        return torch.binomial(torch.full_like(p, float(self.b)), p, generator=self.gen)

    def aggregate(self, reps, sent, idx=None):
        self.count(reps, sent)
        self.note_release(idx, sent)
        w = sent[..., None].to(reps.dtype)
        q = self.quantise(reps) * w  # a party that holds no block sends nothing
        if self.secagg is not None:
            y = self.secagg.upload(q.to(torch.int64), sent, self.released)
            self.last_upload = y
            qsum = self.secagg.aggregate(y).to(reps.dtype)
        else:
            qsum = q.sum(0)
        self.released += 1
        n = sent.sum(0).to(reps.dtype)[:, None]  # [B, 1] parties that took part
        est = self.C / (self.beta * self.b) * (qsum - self.b * n / 2)
        exact = (reps * w).sum(0)
        # straight-through: the forward value is exactly the estimate (a function of the released
        # counts only), the gradient flows to the exact embeddings
        return est + (exact - exact.detach())


def paper_comm_bits(epochs: float, n_train: int, batch: int, parties: int, dim: int, b: int | None, mechanism: str) -> float:
    """The communication cost as PBM-VFL's Tables 1-3 compute it (natural log, F = 32):
    ``E * ceil(N/B) * B * M * P * (ln(b M) + F)`` for PBM, ``... * 2F`` for NPQ and LDP."""
    per_value = math.log(b * parties) + F_BITS if mechanism == "pbm" else 2 * F_BITS
    return float(epochs) * math.ceil(n_train / batch) * batch * parties * dim * per_value
