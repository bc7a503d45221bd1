"""Privacy mechanisms at the party-to-server boundary, for any method.

Every representation a party sends crosses :meth:`vflbench.privacy.channel.Channel.up` (a method calls
``self.send``), and a method that fuses by summing asks for the server's view of the sum with
:meth:`~vflbench.privacy.channel.Channel.aggregate`. A mechanism is a channel installed there, plus an
accountant owned by the run (the pattern of Flower's DP wrappers, which act around any strategy):

* ``none`` / ``npq``: the exact float32 values (no privacy, no quantisation).
* ``pbm``: the Poisson Binomial Mechanism. Each value ``h`` (bounded to ``[-C, C]``) becomes
  ``Binomial(b, 1/2 + beta*h/C)`` counts. Released *per party* (``up``: the server reads every
  party's representation, as LASER-VFL, PlugVFL or Standard VFL need) the server unbiases each count,
  ``C/(beta b) (q - b/2)``; released as a *sum* (``aggregate``: PBM-VFL's server), the counts are
  summed, optionally under pairwise-masking secure aggregation (:mod:`vflbench.privacy.secagg`), and the
  server unbiases the sum over the ``|O|`` parties that took part, ``C/(beta b) (sum - b |O| / 2)``.
* ``ldp`` (alias ``gaussian``): each party adds ``N(0, sigma^2)`` to its bounded representation.

Gradients pass straight through: the server's gradient at the released value flows to the exact
representation (PBM-VFL Algorithm 2, lines 11-18). Every release of a training sample feeds the
run's :class:`~vflbench.privacy.accountant.NoisySumAccountant` (training steps, and the passes that monitor a
training target); evaluation releases concern test samples and are not counted. Per-party releases
are accounted as such (``AccountantSpec.release="each"``: no other party's noise hides a value).

``--mechanism pbm:b=32,beta=0.1 --secagg masked`` is parsed once into a :class:`MechanismSpec`;
:func:`attach` installs it on a built method and returns the run's :class:`Boundary` (channel,
accountant, CSV columns, manifest section). ``--method pbm`` is the summing method (``sum``) with
this mechanism attached from its own options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.errors import VFLBenchError
from .accountant import UNIT_COLUMNS, AccountantSpec, NoisySumAccountant
from .channel import PHASES, Channel
from .mechanism_spec import (
    MECHANISM_PARAMS,
    MechanismSpec,
    check_support,
    parse_mechanism,
    parse_secagg,
)
from .secagg import PairwiseMasking, modulus_bits

F_BITS = 32  # bits per float on the wire (the paper's F)
CHARGED_PHASES = ("train", "monitor")  # releases of training samples: both cost privacy


# ----------------------------------------------------------------------------- channels
def bounded(reps: torch.Tensor, C: float, how: str) -> torch.Tensor:
    """``reps`` in ``[-C, C]``: clamped (the gradient then passes straight through to ``reps``) or C*tanh."""
    if how == "tanh":
        return C * torch.tanh(reps / C)
    return reps + (reps.detach().clamp(-C, C) - reps.detach())


class AccountedChannel(Channel):
    """A channel whose training releases are charged to an accountant. ``gens`` maps a phase (train,
    eval, monitor) to its own generator, so that evaluating, or monitoring a training target, never
    changes the noise that training draws. The accountant is made at the first charged release
    (it learns the values per release and whether they were summed or sent one by one)."""

    def __init__(
        self,
        n_parties: int,
        gens: dict[str, torch.Generator],
        spec: MechanismSpec | None = None,
        party_gens: dict[str, list[torch.Generator]] | None = None,
    ):
        super().__init__(n_parties)
        self.gens = gens
        self.party_gens = (
            party_gens  # noise=party: each party's own stream per phase (None: one stream draws every party's)
        )
        self.spec = spec
        self.accountant: NoisySumAccountant | None = None
        self.n_samples: int | None = None  # the training set's size (set by the Boundary before training)
        self.release: str | None = None  # "sum" or "each", fixed by the first release
        self.dim: int | None = None
        self._releases: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def gen(self) -> torch.Generator:
        return self.gens[self.mode]

    def draw(
        self,
        shape_like: torch.Tensor,
        one: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
        rows: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Noise for ``shape_like`` ``[K, ...]``: ``one(part, generator)`` draws for a part; from one
        stream for every party (noise=shared), or row k from party k's own (noise=party; ``rows``: only
        these parties' rows are drawn, the others are zeros, as in party k's own process)."""
        if self.party_gens is None:
            return one(shape_like, self.gen)
        gens = self.party_gens[self.mode]
        return torch.stack(
            [
                one(shape_like[k], gens[k]) if rows is None or k in rows else torch.zeros_like(shape_like[k])
                for k in range(shape_like.shape[0])
            ]
        )

    def note_release(self, idx: torch.Tensor | None, sent: torch.Tensor, dim: int, kind: str) -> None:
        if self.release is None:
            self.release, self.dim = kind, int(dim)
        elif self.release != kind:
            raise VFLBenchError(
                "A method both summed and sent single representations through one private mechanism; "
                "the accountant charges one kind of release per run."
            )
        if idx is not None:
            self._releases.append((idx, sent.sum(0)))

    def accountant_spec(self) -> AccountantSpec:
        raise NotImplementedError

    def _charge(self, phase: str) -> None:
        if phase in CHARGED_PHASES and self._releases:
            if self.accountant is None:
                if self.n_samples is None:
                    raise VFLBenchError(
                        "internal: a private channel released training samples before the run set its size"
                    )
                self.accountant = NoisySumAccountant(
                    self.accountant_spec(), self.n_samples, self._releases[0][0].device
                )
            for idx, n in self._releases:
                self.accountant.step(idx, n)
        self._releases = []

    def commit(self, phase: str, backward: bool) -> None:
        self._charge(phase)
        super().commit(phase, backward)

    def discard(self) -> None:
        self._releases = []
        super().discard()

    def abandon(self) -> None:
        """A training step dropped after its values crossed (a party lost mid-step, across processes): the
        server saw its releases, so they are charged (an upper bound), and nothing else is booked."""
        self._charge("train")
        self.discard()


class LDPChannel(AccountedChannel):
    """Local DP: Gaussian noise of std ``sigma`` on every coordinate a party sends."""

    def __init__(
        self,
        n_parties: int,
        sigma: float,
        gens: dict[str, torch.Generator],
        spec: MechanismSpec | None = None,
        party_gens: dict[str, list[torch.Generator]] | None = None,
    ):
        super().__init__(n_parties, gens, spec, party_gens)
        self.sigma = float(sigma)
        self.C = spec["C"] if spec is not None else 1.0
        self.bound = spec["bound"] if spec is not None else "clip"

    def accountant_spec(self) -> AccountantSpec:
        s = self.spec
        return AccountantSpec(
            "ldp",
            self.k,
            self.dim,
            C=s["C"],
            sigma=self.sigma,
            c0=s["c0"],
            mode=s["accountant"],
            conversion=s["conversion"],
            release=self.release,
        )

    def _noisy(self, reps: torch.Tensor) -> torch.Tensor:
        return (
            reps
            + self.draw(reps, lambda r, g: torch.randn(r.shape, generator=g, device=r.device, dtype=r.dtype))
            * self.sigma
        )

    def transform(self, reps, sent, party_of):
        if party_of is not None:
            raise VFLBenchError(
                "A private mechanism charges one release per party and sample; this method sends several "
                "representations per party."
            )
        self.note_release(self.batch_idx, sent, reps.shape[-1], "each")
        return self._noisy(bounded(reps, self.C, self.bound))

    def aggregate(self, reps, sent, idx=None):
        self.note_release(idx, sent, reps.shape[-1], "sum")
        self.count(reps, sent)
        return (self.watch(self._noisy(reps), sent) * sent[..., None].to(reps.dtype)).sum(0)


class PBMChannel(AccountedChannel):
    """Poisson Binomial Mechanism: per-party releases (:meth:`up`) or a (securely) summed release
    (:meth:`aggregate`)."""

    bytes_down_per_value = F_BITS / 8

    def __init__(
        self,
        n_parties: int,
        b: int,
        beta: float,
        C: float,
        gens: dict[str, torch.Generator],
        secagg: PairwiseMasking | None = None,
        spec: MechanismSpec | None = None,
        party_gens: dict[str, list[torch.Generator]] | None = None,
    ):
        super().__init__(n_parties, gens, spec, party_gens)
        self.b, self.beta, self.C = int(b), float(beta), float(C)
        self.bound = spec["bound"] if spec is not None else "clip"
        self.secagg = secagg
        self.bits = modulus_bits(n_parties, b)
        self.bytes_up_per_value = self.bits / 8  # one masked integer in Z_R per value (summed releases)
        self.released = 0
        self.last_upload: torch.Tensor | None = None  # what the server saw last (masked mode), for tests

    def accountant_spec(self) -> AccountantSpec:
        s = self.spec
        return AccountantSpec(
            "pbm",
            self.k,
            self.dim,
            b=self.b,
            beta=self.beta,
            C=self.C,
            c0=s["c0"],
            mode=s["accountant"],
            conversion=s["conversion"],
            release=self.release,
        )

    def quantise(self, reps: torch.Tensor, rows: Sequence[int] | None = None) -> torch.Tensor:
        """Binomial(b, 1/2 + beta*h/C) counts per coordinate (h clamped to [-C, C]); ``rows``: see :meth:`draw`."""
        p = 0.5 + (self.beta / self.C) * reps.detach().clamp(-self.C, self.C)
        return self.draw(p, lambda q, g: torch.binomial(torch.full_like(q, float(self.b)), q, generator=g), rows)

    def up(self, reps, sent, party_of=None):
        # one count in {0..b} per value: ceil(log2(b+1)) bits up
        self.count(reps, sent, party_of, up_bytes=math.ceil(math.log2(self.b + 1)) / 8)
        return self.watch(self.transform(reps, sent, party_of), sent, party_of)

    def transform(self, reps, sent, party_of):
        if party_of is not None:
            raise VFLBenchError(
                "A private mechanism charges one release per party and sample; this method sends several "
                "representations per party."
            )
        if self.secagg is not None:
            raise VFLBenchError(
                "secagg=masked hides every single party's upload, but this method reads each party's representation; "
                "use --secagg plain, or a method that fuses by summing (sum, pbm)."
            )
        self.note_release(self.batch_idx, sent, reps.shape[-1], "each")
        h = bounded(reps, self.C, self.bound)
        est = self.C / (self.beta * self.b) * (self.quantise(h) - self.b / 2)
        return est + (h - h.detach())  # forward: the estimate; gradient: to the exact (bounded) value

    def aggregate(self, reps, sent, idx=None):
        self.count(reps, sent)
        self.note_release(idx, sent, reps.shape[-1], "sum")
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
        return self.watch(est + (exact - exact.detach()), sent, None, summed=True)


# ----------------------------------------------------------------------------- the run's boundary
def phase_generators(streams, device) -> dict[str, torch.Generator]:
    """One noise stream per phase (``mechanism``, ``mechanism/eval``, ``mechanism/monitor``):
    evaluation never shifts training's draws."""
    gens = {}
    for phase in PHASES:
        gens[phase] = torch.Generator(device=device)
        gens[phase].manual_seed(streams.seed_for("mechanism" if phase == "train" else f"mechanism/{phase}"))
    return gens


OBSERVERS = ("server", "parties", "observer")


def epsilon_scope(release: str | None, secagg: str, runtime: str, noise_source: str) -> dict[str, dict[str, Any]]:
    """Against whom a run's certified epsilon holds: the server, the other parties, an outside observer
    (who sees the trained model and its predictions, not the run's messages). Each entry: ``holds``
    and ``why``. The threat model is honest-but-curious and non-colluding (docs/RUNTIME.md): an active
    server that substitutes SecAgg public keys is out of scope (the parties' key fingerprints expose it)."""
    seeded = noise_source != "secret"
    sim = runtime != "processes"
    if seeded:
        who = (
            "every process of the run resolves the run seed"
            if not sim
            else "one program draws every party's noise (a simulation)"
        )
        server = (
            False,
            f"seeded noise: {who}, so the server can regenerate it (secret noise: --runtime processes --noise-source "
            "secret)",
        )
        parties = (False, f"seeded noise: {who}, so every party can regenerate the others' noise")
        observer = (True, "only without the run seed, which the manifest records: seeded noise is derivable from it")
    else:
        if release == "sum" and secagg != "masked":
            server = (
                False,
                "secagg=plain shows the server each party's counts, while epsilon is charged for their sum; use "
                "--secagg masked",
            )
        else:
            server = (
                True,
                "secret noise drawn inside each party; the server sees "
                + ("only the masked sum" if release == "sum" else "each noisy release, charged one by one"),
            )
        parties = (
            True,
            "secret noise; a party sees only gradients of what the server received (post-processing), if parties do "
            "not collude",
        )
        observer = (True, "the trained model and its predictions are post-processing of the releases")
    out = {}
    for name, (holds, why) in zip(OBSERVERS, (server, parties, observer), strict=True):
        out[name] = {"holds": holds, "why": why}
    return out


def holds_against_text(scope: dict[str, dict[str, Any]], noise_source: str) -> str:
    """The CSV form: the observers epsilon holds against, e.g. ``server,parties,observer``; with seeded
    noise the observer entry reads ``observer-without-seed``."""
    names = [
        n if not (n == "observer" and noise_source != "secret") else "observer-without-seed"
        for n in OBSERVERS
        if scope[n]["holds"]
    ]
    return ",".join(names) or "none"


class Boundary:
    """The mechanism a run installed at its party-to-server boundary, and the run's accountant.
    :meth:`extras` gives the privacy columns of the CSV rows, :meth:`manifest` the manifest section.
    ``runtime`` and ``noise_source`` (set by the pipeline) say against whom the epsilon holds."""

    def __init__(self, spec: MechanismSpec, secagg: str, channel: Channel, sigma: float | None = None):
        self.spec, self.secagg, self.channel, self.sigma = spec, secagg, channel, sigma
        self.runtime, self.noise_source = "inprocess", "seeded"

    def scope(self) -> dict[str, dict[str, Any]]:
        release = (
            self.accountant.spec.release if self.accountant is not None else getattr(self.channel, "release", None)
        )
        return epsilon_scope(release, self.secagg, self.runtime, self.noise_source)

    @property
    def accountant(self) -> NoisySumAccountant | None:
        return getattr(self.channel, "accountant", None)

    def start(self, n_samples: int) -> None:
        """Before training: the training set's size (the accountant's sample axis)."""
        if isinstance(self.channel, AccountedChannel) and self.channel.n_samples is None:
            self.channel.n_samples = int(n_samples)

    def extras(self) -> dict[str, Any]:
        s = self.spec
        delta = s["delta"] if s.private else 1e-5
        acc = self.accountant
        if acc is not None:
            return {
                "accountant": s["accountant"],
                "privacy_upper_bound": acc.spec.upper_bound,
                "delta": delta,
                "noise_source": self.noise_source,
                "epsilon_holds_against": holds_against_text(self.scope(), self.noise_source),
                "epsilon_column_block": acc.get_epsilon(delta, "column_block"),
                "epsilon_feature_record_no_local_training": acc.get_epsilon(delta, "feature_record"),
                "epsilon_sample_record_no_local_training": acc.get_epsilon(delta, "sample_record"),
                "privacy_releases": acc.epochs(),
            }
        return {
            "accountant": s["accountant"] if s.private else "none",
            "delta": delta,
            **{
                f"epsilon_{u}": float("inf")
                for u in ("column_block", "feature_record_no_local_training", "sample_record_no_local_training")
            },
        }

    def manifest(self) -> dict[str, Any] | None:
        acc = self.accountant
        if acc is None:
            return None
        return {
            "mechanism": str(self.spec),
            "secagg": self.secagg,
            "release": acc.spec.release,
            "spec": dict(acc.spec.__dict__),
            "noise_source": self.noise_source,
            "runtime": self.runtime,
            "holds_against": self.scope(),
            "threat_model": "honest-but-curious server and parties, no collusion; an active server that substitutes "
            "SecAgg public keys "
            "is out of scope (docs/RUNTIME.md)",
            "upper_bound": acc.spec.upper_bound,
            "units": UNIT_COLUMNS,
            "samples": acc.n,
            "max_releases_per_sample": acc.epochs(),
            "note": "releases counted per sample and by the number of parties that took part; no subsampling "
            "amplification",
        }


def party_generators(streams, device, k: int) -> dict[str, list[torch.Generator]]:
    """noise=party: party k's own noise stream per phase (``mechanism/party<k>``, ``.../eval``, ``.../monitor``)."""
    out: dict[str, list[torch.Generator]] = {}
    for phase in PHASES:
        out[phase] = []
        for j in range(k):
            g = torch.Generator(device=device)
            g.manual_seed(streams.seed_for(f"mechanism/party{j}" + ("" if phase == "train" else f"/{phase}")))
            out[phase].append(g)
    return out


def make_channel(
    spec: MechanismSpec, k: int, streams, device, secagg: str = "plain", sigma: float | None = None
) -> Channel:
    """The channel that carries ``spec`` for ``k`` parties (``sigma`` overrides the LDP noise)."""
    if spec.name in ("none", "npq"):
        return Channel(k)
    gens = phase_generators(streams, device)
    per_party = party_generators(streams, device, k) if spec["noise"] == "party" else None
    if spec.name == "pbm":
        sec = PairwiseMasking(k, spec["b"], streams.seed_for("secagg"), device) if secagg == "masked" else None
        return PBMChannel(k, spec["b"], spec["beta"], spec["C"], gens, sec, spec, per_party)
    if secagg == "masked":
        raise VFLBenchError("--secagg masked carries integer counts (pbm); ldp sends noisy floats. Use --secagg plain.")
    return LDPChannel(k, spec["sigma"] if sigma is None else sigma, gens, spec, per_party)


def attach(method, spec: MechanismSpec, secagg: str = "plain", sigma: float | None = None) -> Boundary:
    """Install ``spec`` at ``method``'s party-to-server boundary (after it was built, or from its own
    ``build``); returns the run's :class:`Boundary`, also kept as ``method.boundary``."""
    method.channel = make_channel(spec, method.k, method.ctx.streams, method.device, secagg, sigma)
    method.boundary = Boundary(
        spec, secagg, method.channel, sigma if sigma is not None else (spec["sigma"] if spec.name == "ldp" else None)
    )
    method.on_attach(method.boundary)
    return method.boundary


def paper_comm_bits(
    epochs: float, n_train: int, batch: int, parties: int, dim: int, b: int | None, mechanism: str
) -> float:
    """The communication cost as PBM-VFL's Tables 1-3 compute it (natural log, F = 32):
    ``E * ceil(N/B) * B * M * P * (ln(b M) + F)`` for PBM, ``... * 2F`` for NPQ and LDP."""
    per_value = math.log(b * parties) + F_BITS if mechanism == "pbm" else 2 * F_BITS
    return float(epochs) * math.ceil(n_train / batch) * batch * parties * dim * per_value


__all__ = [
    "MECHANISM_PARAMS",
    "MechanismSpec",
    "parse_mechanism",
    "parse_secagg",
    "attach",
    "check_support",
    "Boundary",
    "PBMChannel",
    "LDPChannel",
    "AccountedChannel",
    "make_channel",
    "phase_generators",
    "paper_comm_bits",
    "epsilon_scope",
]
