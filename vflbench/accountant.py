"""Privacy accounting for methods that release one noisy sum of party embeddings per sample.

Two mechanisms release such sums: PBM-VFL's Poisson Binomial Mechanism (each observed party sends
``Binomial(b, 1/2 + beta*h/C)`` counts per coordinate; only their sum is revealed) and the LDP
baseline (each party adds ``N(0, sigma^2)`` to its own embedding). The accountant follows the
releases of a training run, per sample and by how many parties took part (under missing blocks a
sample's sum may come from fewer parties, and fewer parties means less noise hiding each one), and
reports (epsilon, delta) for

* **feature privacy** (PBM-VFL Thm 6.1: neighbouring data differ in one party's features of a
  record), and
* **sample privacy** (Thm 6.2: one record differs at every party), plus the Remark 6.3 value
  ``E * c0 * P * b * beta^2 * alpha``, which is below the Thm 6.2 bound.

The API follows Opacus's accountants: :meth:`step` after each release, :meth:`get_epsilon`,
:meth:`state_dict` / :meth:`load_state_dict`.

Modes (``mode``):

``paper``  the paper's closed forms with the unspecified constant ``c0`` exposed (default 8, the
           Gaussian-equivalent value; the paper's own LDP calibration implies 1).
``exact``  per-coordinate Renyi divergences of the actual output distributions, computed in log
           space: for feature privacy ``Bin(b, 1/2+beta) * Bin((n-1)b, p_o)`` against
           ``Bin(b, 1/2-beta) * Bin((n-1)b, p_o)`` maximised over a grid of ``p_o`` (the other parties'
           probabilities), for sample privacy the closed form of ``Bin(nb, 1/2+beta)`` against
           ``Bin(nb, 1/2-beta)``; both capped by the pure-DP bound ``b log((1+2beta)/(1-2beta))``
           (times n for samples).
``pld``    the same two distributions composed exactly with Google's ``dp-accounting`` privacy-loss
           distributions (no RDP conversion).

Conversion of RDP to (epsilon, delta): Mironov 2017 Prop. 3 (default; closed form when the RDP is
linear in alpha), or ``cks`` (Canonne-Kamath-Steinke / Balle et al. 2020, via ``dp-accounting``).
Subsampling amplification never applies: in VFL every party knows which samples each batch holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import binom

from .errors import VFLBenchError

ORDERS = np.array([1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 256, 512, 1024], dtype=float)  # the spec's grid (its golden values use it)
MODES = ("paper", "exact", "pld")
CONVERSIONS = ("mironov", "cks")
KINDS = ("feature", "sample", "sample_lower")


# ---------------------------------------------------------------- closed forms (PBM-VFL Section 6)
def s_m(m: int, alpha):
    """Thm 6.2's S_M(alpha); S_1(alpha) = alpha."""
    alpha = np.asarray(alpha, dtype=float)
    if m == 1:
        return alpha
    return (2.0 ** (m + 1) - 2.0 ** (m - 1) - 2) * alpha - (3 * 2.0 ** (m - 1) - 3 * m) + (2.0 ** (m - 1) - 1) / (2.0 ** (m - 2) * (alpha - 1))


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
    a = np.asarray(alpha, dtype=float)[:, None]
    return logsumexp(a * log_p[None] + (1 - a) * log_q[None], axis=1) / (a[:, 0] - 1)


def log_convolve(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """log of the convolution of two PMFs given as logs (no underflow in the tails)."""
    n = len(la) + len(lb) - 1
    grid = la[:, None] + lb[None, :]
    out = np.full(n, -np.inf)
    for s in range(n):  # anti-diagonals; sizes are at most a few hundred
        i = np.arange(max(0, s - len(lb) + 1), min(len(la), s + 1))
        out[s] = logsumexp(grid[i, s - i])
    return out


def feature_pmfs(b: int, beta: float, n: int, p_o: float) -> tuple[np.ndarray, np.ndarray]:
    """log PMFs of the revealed count sum when one of ``n`` parties moves from +C to -C and the other
    n-1 sit at probability ``p_o`` (their Binomials add up to one Binomial((n-1)b, p_o))."""
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
    d = n * b / (a - 1) * np.logaddexp(a * math.log(p) + (1 - a) * math.log(q), a * math.log(1 - p) + (1 - a) * math.log(1 - q))
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


@dataclass(frozen=True)
class AccountantSpec:
    """What is released: ``mechanism`` "pbm" (b, beta, C) or "ldp" (sigma); ``parties`` M; ``dim`` P."""

    mechanism: str
    parties: int
    dim: int
    b: int = 1
    beta: float = 0.0
    C: float = 1.0
    sigma: float = 0.0
    c0: float = 8.0
    mode: str = "paper"
    conversion: str = "mironov"
    feature_adjacency: str = "record"  # "column_block": a whole party column changes -> x N

    def check(self) -> None:
        if self.mechanism not in ("pbm", "ldp"):
            raise VFLBenchError(f"Accountant mechanism must be pbm or ldp, got {self.mechanism!r}.")
        if self.mode not in MODES:
            raise VFLBenchError(f"Accountant mode must be one of {', '.join(MODES)}, got {self.mode!r}.")
        if self.conversion not in CONVERSIONS:
            raise VFLBenchError(f"Conversion must be one of {', '.join(CONVERSIONS)}, got {self.conversion!r}.")
        if self.c0 <= 0 or not math.isfinite(self.c0):
            raise VFLBenchError(f"c0 must be a finite number > 0, got {self.c0}.")
        if self.feature_adjacency not in ("record", "column_block"):
            raise VFLBenchError(f"feature_adjacency must be record or column_block, got {self.feature_adjacency!r}.")


class NoisySumAccountant:
    """Counts, for every training sample, how many sums it took part in and with how many parties,
    and converts that history into (epsilon, delta). ``n_samples`` is the training-set size."""

    def __init__(self, spec: AccountantSpec, n_samples: int, device: torch.device | str = "cpu"):
        spec.check()
        self.spec = spec
        self.n = int(n_samples)
        # releases[i, k]: times sample i's sum was released with k parties taking part
        self.releases = torch.zeros(self.n, spec.parties + 1, dtype=torch.int64, device=device)
        self._cache: dict[Any, float] = {}

    # -- Opacus-style API
    def step(self, idx: torch.Tensor, n_parties: torch.Tensor) -> None:
        """One release: the samples ``idx`` ``[B]`` had their sums revealed, each over ``n_parties``
        ``[B]`` parties (0: nothing was sent for that sample)."""
        self.releases.index_put_((idx, n_parties.to(torch.long)), torch.ones_like(idx, dtype=torch.int64), accumulate=True)

    def state_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.__dict__, "releases": self.releases.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.spec = AccountantSpec(**state["spec"])
        self.releases = state["releases"].to(self.releases.device)
        self._cache = {}

    def epochs(self) -> float:
        """E: the largest number of releases of any one sample (= epochs with epoch-wise shuffling)."""
        return float(self.releases[:, 1:].sum(1).max()) if self.n else 0.0

    def get_epsilon(self, delta: float = 1e-5, kind: str = "feature") -> float:
        """Epsilon at ``delta`` of the worst-off sample so far."""
        if not 0 < delta < 1:
            raise VFLBenchError(f"delta must be in (0, 1), got {delta}.")
        if kind not in KINDS:
            raise VFLBenchError(f"Privacy kind must be one of {', '.join(KINDS)}, got {kind!r}.")
        hist = self.releases.cpu().numpy()[:, 1:]  # [N, M]: releases with k = 1..M parties
        if not hist.any():
            return 0.0
        patterns = np.unique(hist, axis=0)  # distinct release histories; usually one or a few
        key = (kind, delta, patterns.tobytes(), patterns.shape)
        if key not in self._cache:
            self._cache[key] = float(max(self._epsilon(row, delta, kind) for row in patterns))
        eps = self._cache[key]
        if kind == "feature" and self.spec.feature_adjacency == "column_block":
            eps = eps * self.n if self.spec.mode != "pld" else eps  # pld mode composes N times itself
        return eps

    # -- internals
    def _per_release_rdp(self, k: int, kind: str, orders: np.ndarray) -> np.ndarray:
        """RDP of one sample's release over k parties (all P coordinates)."""
        s = self.spec
        if s.mechanism == "ldp":  # Gaussian: 2 alpha C^2 P / sigma^2 per party that changes
            per_party = 2 * orders * s.C**2 * s.dim / s.sigma**2
            return per_party * (k if kind == "sample" else 1)
        base = s.c0 * s.dim * s.b * s.beta**2
        if kind == "sample_lower":  # Remark 6.3's quantity, a closed form in every mode
            return base * orders
        if s.mode == "paper":
            return base * (orders if kind == "feature" else s_m(k, orders)) / k
        if kind == "feature":
            return s.dim * exact_feature_rdp(s.b, s.beta, k, orders)
        return s.dim * exact_sample_rdp(s.b, s.beta, k, orders)

    def _epsilon(self, counts: np.ndarray, delta: float, kind: str) -> float:
        s = self.spec
        ks = [k for k in range(1, s.parties + 1) if counts[k - 1]]
        if s.mode == "pld" and kind != "sample_lower":
            return self._pld_epsilon(counts, delta, kind)
        linear = s.mechanism == "ldp" or kind == "sample_lower" or (s.mode == "paper" and kind == "feature")
        if linear and s.conversion == "mironov":
            c = sum(counts[k - 1] * float(self._per_release_rdp(k, kind, np.array([1.0]))[0]) for k in ks)
            return mironov_linear(c, delta)
        rdp = sum(counts[k - 1] * self._per_release_rdp(k, kind, ORDERS) for k in ks)
        return mironov(rdp, ORDERS, delta) if s.conversion == "mironov" else cks(rdp, ORDERS, delta)

    def _pld_epsilon(self, counts: np.ndarray, delta: float, kind: str) -> float:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        s = self.spec
        total = None
        for k in range(1, s.parties + 1):
            n = int(counts[k - 1])
            if not n:
                continue
            times = n * s.dim * (self.n if kind == "feature" and s.feature_adjacency == "column_block" else 1)
            if s.mechanism == "ldp":
                sens = 2 * s.C * (math.sqrt(k) if kind == "sample" else 1.0)
                one = pld_lib.from_gaussian_mechanism(s.sigma, sensitivity=sens, value_discretization_interval=1e-3)
            else:
                if kind == "feature":  # worst p_o of the exact-mode grid
                    grid = np.linspace(0.5 - s.beta, 0.5 + s.beta, 5)
                    p_o = max(grid, key=lambda p: float(np.max(renyi(*feature_pmfs(s.b, s.beta, k, p), np.array([2.0, 8.0])))))
                    la, lb = feature_pmfs(s.b, s.beta, k, p_o)
                else:
                    support = np.arange(k * s.b + 1)
                    la, lb = binom.logpmf(support, k * s.b, 0.5 + s.beta), binom.logpmf(support, k * s.b, 0.5 - s.beta)
                one = pld_lib.from_two_probability_mass_functions(
                    {i: float(v) for i, v in enumerate(la)}, {i: float(v) for i, v in enumerate(lb)},
                    value_discretization_interval=1e-3, log_mass_truncation_bound=-50, symmetric=kind != "feature")
            comp = one.self_compose(times)
            total = comp if total is None else total.compose(comp)
        return float(total.get_epsilon_for_delta(delta))


def ldp_sigma(parties: int, b: int, beta: float, C: float = 1.0, c0: float = 1.0, match: str = "paper") -> float:
    """The LDP baseline's per-party Gaussian noise std. ``paper``: sigma^2 = 2M/(b beta^2) (the paper's
    formula, which equals the general one with C = 1 and c0 = 1); ``c0``: 2 C^2 M / (c0 b beta^2)."""
    if match == "paper":
        return math.sqrt(2 * parties / (b * beta**2))
    return math.sqrt(2 * C**2 * parties / (c0 * b * beta**2))
