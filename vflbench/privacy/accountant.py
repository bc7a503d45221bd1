"""Privacy accounting for methods that release one noisy sum of party embeddings per sample.

Two mechanisms release such sums: PBM-VFL's Poisson Binomial Mechanism (each observed party sends
``Binomial(b, 1/2 + beta*h/C)`` counts per coordinate; only their sum is revealed) and the LDP
baseline (each party adds ``N(0, sigma^2)`` to its own embedding). The accountant follows the
releases of a training run, per sample and by how many parties took part (under missing blocks a
sample's sum may come from fewer parties, and fewer parties means less noise hiding each one), and
reports (epsilon, delta) for three units of protection (:data:`UNITS`):

* ``column_block``: neighbouring data differ in one party's whole column block. Every release that
  party took part in composes. This is the unit that holds for PBM-VFL's Algorithm 2 as trained,
  where a party's data also enter its own (noise-free) local updates and so every later release.
* ``feature_record`` (Thm 6.1's unit): one party's features of one record differ, and only that
  record's releases compose. Valid only if the record does not enter local training.
* ``sample_record`` (Thm 6.2's unit): one record differs at every party; the same assumption.

The API follows Opacus's accountants: :meth:`step` after each release, :meth:`get_epsilon`,
:meth:`state_dict` / :meth:`load_state_dict`.

Modes (``mode``):

``pld``    (default, certified) Google's ``dp-accounting`` privacy-loss distributions with
           pessimistic rounding: PBM's feature pair ``Bin(b, 1/2+beta) * Bin((n-1)b, p_o)`` against
           ``Bin(b, 1/2-beta) * Bin((n-1)b, p_o)``, both directions, the worst ``p_o`` of a grid over
           the other parties' range; the sample pair ``Bin(nb, 1/2+beta)`` against
           ``Bin(nb, 1/2-beta)``; for LDP the exact Gaussian (mu-GDP) formula. The column-block unit
           composes millions of releases, beyond a PLD's support, and uses the ``exact`` RDP instead.
``exact``  (certified, looser) per-coordinate Renyi divergences of the same distributions, computed
           in log space and capped by the pure-DP bound, then an RDP-to-DP conversion.
``paper``  the paper's closed forms with the unspecified constant ``c0`` (default 8): NOT an upper
           bound (below the PLD value at every Table 3 setting), kept to compare with the paper.

Conversion of RDP to (epsilon, delta): Mironov 2017 Prop. 3 (default; closed form when the RDP is
linear in alpha), or ``cks`` (Canonne-Kamath-Steinke / Balle et al. 2020, via ``dp-accounting``).
Subsampling amplification never applies: in VFL every party knows which samples each batch holds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from ..core.errors import VFLBenchError

ORDERS = np.array(
    [1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 256, 512, 1024], dtype=float
)  # the spec's grid (its golden values use it)
MODES = ("paper", "exact", "pld")
CONVERSIONS = ("mironov", "cks")


# ---------------------------------------------------------------- closed forms (PBM-VFL Section 6)
def s_m(m: int, alpha):
    """Thm 6.2's S_M(alpha); S_1(alpha) = alpha."""
    alpha = np.asarray(alpha, dtype=float)
    if m == 1:
        return alpha
    return (
        (2.0 ** (m + 1) - 2.0 ** (m - 1) - 2) * alpha
        - (3 * 2.0 ** (m - 1) - 3 * m)
        + (2.0 ** (m - 1) - 1) / (2.0 ** (m - 2) * (alpha - 1))
    )


def s_m_recursive(m: int, alpha: float) -> float:
    """The recursion behind Thm 6.2 (Mironov's weak triangle inequality), for cross-checking."""
    if m == 1:
        return float(alpha)
    return alpha * (2 * alpha - 1) / (alpha - 1) + s_m_recursive(m - 1, 2 * alpha - 1)


def pure_dp_cap(b: int, beta: float) -> float:
    """Pure-DP epsilon of one Binomial(b, 1/2 +- beta) release: an upper bound on any RDP order."""
    return b * math.log((1 + 2 * beta) / (1 - 2 * beta))


def renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """D_alpha(P||Q) for distributions on a common support, log-space, for every order in ``alpha``."""
    from scipy.special import logsumexp  # scipy costs a run's start; only private runs account

    a = np.asarray(alpha, dtype=float)[:, None]
    return logsumexp(a * log_p[None] + (1 - a) * log_q[None], axis=1) / (a[:, 0] - 1)


def log_convolve(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """log of the convolution of two PMFs given as logs (no underflow in the tails)."""
    from scipy.special import logsumexp

    n = len(la) + len(lb) - 1
    grid = la[:, None] + lb[None, :]
    out = np.full(n, -np.inf)
    for s in range(n):  # anti-diagonals; sizes are at most a few hundred
        i = np.arange(max(0, s - len(lb) + 1), min(len(la), s + 1))
        out[s] = logsumexp(grid[i, s - i])
    return out


@lru_cache(maxsize=512)
def feature_pmfs(b: int, beta: float, n: int, p_o: float) -> tuple[np.ndarray, np.ndarray]:
    """log PMFs of the revealed count sum when one of ``n`` parties moves from +C to -C and the other
    n-1 sit at probability ``p_o`` (their Binomials add up to one Binomial((n-1)b, p_o)). Memoised per
    process (a pure function; the arrays are read-only): every accounting of a run, and every run of a
    sweep, asks for the same few."""
    hi, lo = _feature_pmfs(b, beta, n, p_o)
    hi.setflags(write=False)
    lo.setflags(write=False)
    return hi, lo


def _feature_pmfs(b: int, beta: float, n: int, p_o: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy.stats import (
        binom,  # scipy.stats costs every run's start 0.7 s; only privacy runs need it
    )

    k = np.arange(b + 1)
    hi, lo = binom.logpmf(k, b, 0.5 + beta), binom.logpmf(k, b, 0.5 - beta)
    if n == 1:
        return hi, lo
    rest = binom.logpmf(np.arange((n - 1) * b + 1), (n - 1) * b, p_o)
    return log_convolve(hi, rest), log_convolve(lo, rest)


def exact_feature_rdp(b: int, beta: float, n: int, alpha, grid: int = 5) -> np.ndarray:
    """Per-coordinate feature-privacy RDP of one PBM sum over ``n`` parties (max over a p_o grid and
    both directions), capped by the pure-DP bound."""
    alpha = np.atleast_1d(np.asarray(alpha, dtype=float))
    best = np.zeros_like(alpha)
    for p_o in np.linspace(0.5 - beta, 0.5 + beta, grid):
        la, lb = feature_pmfs(b, beta, n, p_o)
        best = np.maximum(best, np.maximum(renyi(la, lb, alpha), renyi(lb, la, alpha)))
    return np.minimum(best, pure_dp_cap(b, beta))


def exact_sample_rdp(b: int, beta: float, n: int, alpha) -> np.ndarray:
    """Per-coordinate sample-privacy RDP when all ``n`` parties flip from -C to +C: Bin(nb, p) against
    Bin(nb, q) tensorises, D = nb/(alpha-1) log(p^a q^(1-a) + (1-p)^a (1-q)^(1-a)); capped."""
    a = np.atleast_1d(np.asarray(alpha, dtype=float))
    p, q = 0.5 + beta, 0.5 - beta
    d = (
        n
        * b
        / (a - 1)
        * np.logaddexp(a * math.log(p) + (1 - a) * math.log(q), a * math.log(1 - p) + (1 - a) * math.log(1 - q))
    )
    return np.minimum(d, n * pure_dp_cap(b, beta))


# ---------------------------------------------------------------- RDP -> (epsilon, delta)
def mironov(rdp: np.ndarray, orders: np.ndarray, delta: float) -> float:
    return float(np.min(rdp + math.log(1 / delta) / (orders - 1)))


def mironov_linear(c: float, delta: float) -> float:
    """Mironov's conversion for RDP(alpha) = c * alpha, minimised in closed form."""
    if c <= 0:
        return 0.0
    return c + 2 * math.sqrt(c * math.log(1 / delta))


def cks(rdp: np.ndarray, orders: np.ndarray, delta: float) -> float:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    return float(compute_epsilon(list(orders), list(rdp), delta)[0])


# ---------------------------------------------------------------- the Gaussian (LDP) mechanism, exactly
def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of a mu-GDP mechanism (Dong, Roth & Su 2019; Balle & Wang 2018):
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), solved for eps. A composition of
    Gaussian releases with sensitivities Delta_i and noise sigma is exactly mu-GDP with
    mu = sqrt(sum Delta_i^2) / sigma, so this is the tight value, not a bound on it."""
    if mu <= 0:
        return 0.0

    from scipy.special import log_ndtr

    def log_delta(eps: float) -> float:
        a = log_ndtr(-eps / mu + mu / 2)
        b = eps + log_ndtr(-eps / mu - mu / 2)
        return a + math.log1p(-math.exp(min(b - a, 0.0))) if b < a else -math.inf

    target = math.log(delta)
    if log_delta(0.0) <= target:
        return 0.0
    lo, hi = 0.0, max(1.0, mu * mu)
    while log_delta(hi) > target:
        hi *= 2
    for _ in range(200):  # delta(eps) decreases in eps: bisect, ending on the safe (upper) side
        mid = (lo + hi) / 2
        if log_delta(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return hi


UNITS = ("feature_record", "sample_record", "column_block")
ALIASES = {"feature": "feature_record", "sample": "sample_record"}  # names of interface v2


@dataclass(frozen=True)
class AccountantSpec:
    """What is released: ``mechanism`` "pbm" (b, beta, C) or "ldp" (sigma); ``parties`` M; ``dim`` P.

    ``mode``: ``pld`` (default; certified: dp-accounting's pessimistically rounded privacy-loss
    distributions for PBM, the exact Gaussian formula for LDP), ``exact`` (certified, looser: numeric
    RDP of the output distributions and an RDP-to-DP conversion) or ``paper`` (the paper's closed
    forms with the unknown constant ``c0``: *not* an upper bound, kept to compare with the paper)."""

    mechanism: str
    parties: int
    dim: int
    b: int = 1
    beta: float = 0.0
    C: float = 1.0
    sigma: float = 0.0
    c0: float = 8.0
    mode: str = "pld"
    conversion: str = "mironov"
    # "sum": the server sees only the sum over the parties; "each": every party's values (a mechanism at any method's
    # boundary)
    release: str = "sum"

    @property
    def upper_bound(self) -> bool:
        """Whether this mode's epsilon is a certified upper bound (``paper`` is not)."""
        return self.mode != "paper"

    def check(self) -> None:
        if self.mechanism not in ("pbm", "ldp"):
            raise VFLBenchError(f"Accountant mechanism must be pbm or ldp, got {self.mechanism!r}.")
        if self.mode not in MODES:
            raise VFLBenchError(f"Accountant mode must be one of {', '.join(MODES)}, got {self.mode!r}.")
        if self.conversion not in CONVERSIONS:
            raise VFLBenchError(f"Conversion must be one of {', '.join(CONVERSIONS)}, got {self.conversion!r}.")
        if self.c0 <= 0 or not math.isfinite(self.c0):
            raise VFLBenchError(f"c0 must be a finite number > 0, got {self.c0}.")
        if self.release not in ("sum", "each"):
            raise VFLBenchError(f"Release must be sum or each, got {self.release!r}.")
        if self.mechanism == "ldp" and not self.sigma > 0:
            raise VFLBenchError(f"The LDP accountant needs a noise std sigma > 0, got {self.sigma}.")


# p_o of the other parties, as a share of beta below 1/2: by the mirror symmetry of the Binomials,
# p_o and 1 - p_o give the same pair with directions swapped, and both directions are composed
P_O_GRID = (1.0, 0.5, 0.0)  # the worst has been 1/2 - beta in every case checked; tests search a 9-point grid


@lru_cache(maxsize=256)
def _pbm_feature_pld(spec: AccountantSpec, k: int, p_o: float):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    la, lb = feature_pmfs(spec.b, spec.beta, k, p_o)
    return pld_lib.from_two_probability_mass_functions(
        {i: float(v) for i, v in enumerate(la)},
        {i: float(v) for i, v in enumerate(lb)},
        pessimistic_estimate=True,
        value_discretization_interval=PLD_INTERVAL,
        log_mass_truncation_bound=PLD_TRUNCATION,
        symmetric=False,
    )


@lru_cache(maxsize=256)
def _pbm_sample_pld(spec: AccountantSpec, k: int):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from scipy.stats import binom

    support = np.arange(k * spec.b + 1)
    la, lb = binom.logpmf(support, k * spec.b, 0.5 + spec.beta), binom.logpmf(support, k * spec.b, 0.5 - spec.beta)
    return pld_lib.from_two_probability_mass_functions(
        {i: float(v) for i, v in enumerate(la)},
        {i: float(v) for i, v in enumerate(lb)},
        pessimistic_estimate=True,
        value_discretization_interval=PLD_INTERVAL,
        log_mass_truncation_bound=PLD_TRUNCATION,
        symmetric=True,
    )


PLD_INTERVAL = 1e-3  # discretisation of the privacy loss; pessimistic rounding keeps the bound valid
PLD_TRUNCATION = -50  # outcomes of log-mass below this count as infinite loss (pessimistic)


def per_release_rdp(spec: AccountantSpec, k: int, unit: str, orders: np.ndarray) -> np.ndarray:
    """RDP at ``orders`` of one sample's release over ``k`` parties (all P coordinates), for ``unit``
    (column_block charges each release like a record's feature change)."""
    s = spec
    sample = unit == "sample_record"
    if s.mechanism == "ldp":  # Gaussian: 2 alpha C^2 P / sigma^2 per party that changes
        return 2 * orders * s.C**2 * s.dim / s.sigma**2 * (k if sample else 1)
    if s.mode == "paper":
        return s.c0 * s.dim * s.b * s.beta**2 * (s_m(k, orders) if sample else orders) / k
    return s.dim * (exact_sample_rdp(s.b, s.beta, k, orders) if sample else exact_feature_rdp(s.b, s.beta, k, orders))


def as_released(spec: AccountantSpec, rows: np.ndarray, unit: str) -> np.ndarray:
    """Release histories as the unit sees them. Values released one party at a time (``release="each"``)
    are hidden by no other party's noise: for the feature and column units every release is a
    one-party release. The sample unit is unchanged: k parties' independent counts Bin(b, p) carry the
    same likelihood ratio as their sum Bin(kb, p) (the sum is sufficient), and Gaussians compose alike."""
    rows = np.asarray(rows, dtype=np.int64)
    if spec.release != "each" or unit == "sample_record":
        return rows
    out = np.zeros_like(rows)
    out[..., 0] = rows.sum(-1)
    return out


def epsilon(spec: AccountantSpec, counts, delta: float, unit: str) -> float:
    """(epsilon, delta) of ``counts[k-1]`` releases over k parties (k = 1..M) for ``unit``.

    For the record units ``counts`` is one sample's release history; for ``column_block`` it is the
    total over every sample (a party's whole block changes, so all its releases compose)."""
    s = spec
    counts = as_released(s, np.asarray(counts, dtype=np.int64), unit)
    ks = [k for k in range(1, s.parties + 1) if counts[k - 1]]
    if not ks:
        return 0.0
    if s.mode == "pld" and s.mechanism == "ldp":  # exact: the releases compose to one Gaussian
        per = [counts[k - 1] * s.dim * (k if unit == "sample_record" else 1) for k in ks]
        return gaussian_epsilon(2 * s.C * math.sqrt(float(sum(per))) / s.sigma, delta)
    if s.mode == "pld" and unit != "column_block":
        return _pbm_pld_epsilon(s, counts, ks, delta, unit)
    linear = s.mechanism == "ldp" or (s.mode == "paper" and unit != "sample_record")
    if linear and s.conversion == "mironov":
        return mironov_linear(
            sum(counts[k - 1] * float(per_release_rdp(s, k, unit, np.array([1.0]))[0]) for k in ks), delta
        )
    rdp = sum(counts[k - 1] * per_release_rdp(s, k, unit, ORDERS) for k in ks)
    return mironov(rdp, ORDERS, delta) if s.conversion == "mironov" else cks(rdp, ORDERS, delta)


def _pbm_pld_epsilon(s: AccountantSpec, counts: np.ndarray, ks: list[int], delta: float, unit: str) -> float:
    """PLD composition of one sample's releases. Feature privacy: the other parties sit at a common
    probability p_o; the worst p_o of the grid (both directions) is reported."""
    grid = [0.5 - f * s.beta for f in P_O_GRID] if unit == "feature_record" else [None]
    worst = 0.0
    for p_o in grid:
        total = None
        for k in ks:
            comp = _composed_pld(s, k, p_o, int(counts[k - 1]) * s.dim)
            total = comp if total is None else total.compose(comp)
        worst = max(worst, pld_epsilon(total, delta))
    return worst


@lru_cache(maxsize=128)  # a composed PLD can hold 1e5 probabilities: a bounded memo
def _composed_pld(s: AccountantSpec, k: int, p_o: float | None, times: int):
    """One release over ``k`` parties composed ``times`` times. The PLDs here are memoised per process (pure
    functions of their arguments; dp-accounting's compose and self_compose return new objects and never change
    their operands), so the many release histories of one run, and the runs of a sweep, build each once."""
    one = _pbm_feature_pld(s, k, p_o) if p_o is not None else _pbm_sample_pld(s, k)
    return one.self_compose(times)


def pld_epsilon(pld, delta: float) -> float:
    """Epsilon at ``delta`` of a dp-accounting PLD. Its own ``get_epsilon_for_delta`` can return inf
    for a finite answer (a ratio of a denormal mass overflows: b = 32, beta = 0.25, M = 5 after 10
    releases of 16 coordinates); then bisect on ``get_delta_for_epsilon``, which is monotone and
    stable, and return the upper end (a valid bound)."""
    with warnings.catch_warnings():  # the overflow below is handled, not a user's concern
        warnings.simplefilter("ignore", RuntimeWarning)
        eps = float(pld.get_epsilon_for_delta(delta))
    if math.isfinite(eps):
        return eps
    if pld.get_delta_for_epsilon(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while pld.get_delta_for_epsilon(hi) > delta:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf  # infinite loss with mass above delta
    while hi - lo > 1e-9 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pld.get_delta_for_epsilon(mid) > delta else (lo, mid)
    return hi


class NoisySumAccountant:
    """Counts, for every training sample, how many sums it took part in and with how many parties,
    and converts that history into (epsilon, delta) for each unit of protection (:data:`UNITS`).
    ``n_samples`` is the training-set size."""

    def __init__(self, spec: AccountantSpec, n_samples: int, device: torch.device | str = "cpu"):
        spec.check()
        self.spec = spec
        self.n = int(n_samples)
        # releases[i, k]: times sample i's sum was released with k parties taking part
        self.releases = torch.zeros(self.n, spec.parties + 1, dtype=torch.int64, device=device)

    # -- Opacus-style API
    def step(self, idx: torch.Tensor, n_parties: torch.Tensor) -> None:
        """One release: the samples ``idx`` ``[B]`` had their sums revealed, each over ``n_parties``
        ``[B]`` parties (0: nothing was sent for that sample)."""
        self.releases.index_put_(
            (idx, n_parties.to(torch.long)), torch.ones_like(idx, dtype=torch.int64), accumulate=True
        )

    def state_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.__dict__, "releases": self.releases.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.spec = AccountantSpec(**state["spec"])
        self.releases = state["releases"].to(self.releases.device)

    def epochs(self) -> float:
        """The largest number of releases of any one sample (= epochs with epoch-wise shuffling, twice
        that when every epoch also has a charged monitoring pass)."""
        return float(self.releases[:, 1:].sum(1).max()) if self.n else 0.0

    def get_epsilon(self, delta: float = 1e-5, kind: str = "feature_record") -> float:
        """Epsilon at ``delta`` for the unit ``kind`` (:data:`UNITS`; the record units report the
        worst-off sample so far)."""
        if not 0 < delta < 1:
            raise VFLBenchError(f"delta must be in (0, 1), got {delta}.")
        kind = ALIASES.get(kind, kind)
        if kind not in UNITS:
            raise VFLBenchError(f"Privacy unit must be one of {', '.join(UNITS)}, got {kind!r}.")
        hist = self.releases.cpu().numpy()[:, 1:]  # [N, M]: releases with k = 1..M parties
        if not hist.any():
            return 0.0
        rows = hist.sum(0, keepdims=True) if kind == "column_block" else np.unique(hist, axis=0)
        return worst_epsilon(self.spec, rows, delta, kind)  # memoised on (spec, rows, delta, kind)


CANDIDATES = {
    "pld": 1,
    "exact": 8,
    "paper": 8,
}  # histories given the mode's full computation; the others are bounded by the RDP screen


def worst_epsilon(spec: AccountantSpec, rows, delta: float, unit: str) -> float:
    """An upper bound on the worst epsilon over the release histories ``rows`` (:func:`_worst_epsilon`),
    memoised per process on its arguments: the in-process and the processes run of one request, or the
    seeds of a sweep with equal release histories, account once."""
    rows = np.ascontiguousarray(np.asarray(rows, dtype=np.int64).reshape(-1, spec.parties))
    return _worst_epsilon_memo(spec, rows.tobytes(), rows.shape, float(delta), unit)


@lru_cache(maxsize=64)  # an entry holds a run's distinct histories (up to ~1 MB for Credit)
def _worst_epsilon_memo(spec: AccountantSpec, data: bytes, shape: tuple[int, int], delta: float, unit: str) -> float:
    return _worst_epsilon(spec, np.frombuffer(data, dtype=np.int64).reshape(shape), delta, unit)


def _worst_epsilon(spec: AccountantSpec, rows: np.ndarray, delta: float, unit: str) -> float:
    """An upper bound on ``max(epsilon(spec, row, delta, unit) for row in rows)`` that stays cheap when
    there are thousands of distinct release histories (under missing blocks nearly every sample has
    its own). The rows are screened by an RDP bound computed for all of them at once (the exact RDP
    for ``pld``; the mode's own for the others) with Mironov's conversion, which is at least the
    mode's value for every row; the ``CANDIDATES`` worst get the mode's own computation, and any
    other row is bounded by the largest screen value left. Gaussian (LDP) epsilons grow with one
    number per row, so their worst row is found directly."""
    rows = as_released(spec, np.asarray(rows, dtype=np.int64).reshape(-1, spec.parties), unit)
    rows = rows[rows.any(1)]
    if len(rows) == 0:
        return 0.0
    if len(rows) == 1:
        return epsilon(spec, rows[0], delta, unit)
    ks = np.arange(1, spec.parties + 1)
    if spec.mechanism == "ldp" and spec.mode == "pld":
        weight = ks if unit == "sample_record" else np.ones_like(ks)
        return epsilon(spec, rows[int(np.argmax(rows @ weight))], delta, unit)
    screen = replace(spec, mode="exact") if spec.mode == "pld" else spec
    per_k = np.stack([per_release_rdp(screen, int(k), unit, ORDERS) for k in ks])  # [M, orders]
    bound = np.min(rows @ per_k + math.log(1 / delta) / (ORDERS - 1), axis=1)  # Mironov on the grid, per row
    order = np.argsort(-bound, kind="stable")
    n = CANDIDATES[spec.mode]
    worst = max(epsilon(spec, rows[i], delta, unit) for i in order[:n])
    rest = float(bound[order[n]]) if len(order) > n else 0.0
    return max(worst, rest)


def match_ldp_sigma(pbm: AccountantSpec, counts, delta: float, unit: str = "feature_record") -> float:
    """The LDP noise std whose epsilon (same mode, same releases ``counts``, same unit) equals PBM's,
    by bisection on log sigma (epsilon falls as sigma grows); ends on the more private side."""
    target = epsilon(pbm, counts, delta, unit)

    def ldp(sig: float) -> AccountantSpec:
        return AccountantSpec(
            "ldp", pbm.parties, pbm.dim, C=pbm.C, sigma=sig, c0=pbm.c0, mode=pbm.mode, conversion=pbm.conversion
        )

    lo, hi = 1e-6, 1e6
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if epsilon(ldp(mid), counts, delta, unit) > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return hi


def ldp_sigma(parties: int, b: int, beta: float, C: float = 1.0, c0: float = 1.0, match: str = "paper") -> float:
    """The LDP baseline's per-party Gaussian noise std. ``paper``: sigma^2 = 2M/(b beta^2) (the paper's
    formula, which equals the general one with C = 1 and c0 = 1); ``c0``: 2 C^2 M / (c0 b beta^2).
    (``epsilon``, equal certified epsilon, is :func:`match_ldp_sigma`.)"""
    if match == "paper":
        return math.sqrt(2 * parties / (b * beta**2))
    return math.sqrt(2 * C**2 * parties / (c0 * b * beta**2))


UNIT_COLUMNS = {  # CSV column -> what it protects
    "epsilon_feature_record_no_local_training": "one party's features of one record, assuming the record does not "
    "enter local training (Thm 6.1's unit)",
    "epsilon_sample_record_no_local_training": "one record at every party, same assumption (Thm 6.2's unit)",
    "epsilon_column_block": "one party's whole column block (holds for Algorithm 2 as trained)",
}


def describe(extras: dict[str, Any]) -> list[str]:
    """Lines that state a run's privacy numbers with their mode and unit (for the CLI's summary)."""
    if "accountant" not in extras or extras.get("accountant") == "none":
        return []
    mode = extras["accountant"]
    bound = (
        "certified upper bounds" if extras.get("privacy_upper_bound") else "the paper's closed forms, NOT upper bounds"
    )
    lines = [
        f"privacy, accountant={mode} ({bound}), delta={extras.get('delta', float('nan')):g}, "
        f"{extras.get('privacy_releases', 0):g} releases per sample:"
    ]
    for col, what in UNIT_COLUMNS.items():
        if col in extras:
            lines.append(f"  {col} = {extras[col]:.6g}  [{what}]")
    if "epsilon_feature_paper_formula" in extras:
        lines.append(
            f"  epsilon_feature_paper_formula = {extras['epsilon_feature_paper_formula']:.6g}  "
            f"[Thm 6.1 with c0={extras.get('c0', float('nan')):g}: for comparison, not an upper bound]"
        )
    if "ldp_sigma" in extras:
        lines.append(f"  LDP noise std sigma = {extras['ldp_sigma']:.6g}")
    if "epsilon_holds_against" in extras:
        lines.append(
            f"  holds against: {extras['epsilon_holds_against']} (noise {extras.get('noise_source', '?')}; "
            "honest-but-curious, non-colluding; manifest privacy.holds_against says why)"
        )
    return lines
