"""Missingness mechanisms: which party blocks each sample has.

A mechanism produces a boolean *observed* mask of shape ``[n_samples, K]`` (True = the block is
available; note FALSE-VFL writes m=1 for missing). Mechanisms are named by compact spec strings,
usable on the CLI and in YAML:

==================  ===============================================================================
``none``            every block observed
``mcar:0.1``        each block missing independently with p = 0.1
``mcar:.1,.2,.5,0`` per-block missing probabilities (one per party)
``mcar-beta:2,2``   per-block missing probability drawn once per mask set from Beta(a, b)
``mar1[:T0,D]``     FALSE-VFL Alg. 1, "stop at the first highly informative piece" (T0=1.1, D=0.15)
``mar2[:T0,B0,D]``  FALSE-VFL Alg. 2, "accumulate moderately informative pieces" (0.5, 0.7, 0.15)
``mnar:0.7``        missing with p if the block's mean < 0, else with 1 - p (FALSE-VFL)
==================  ===============================================================================

MAR and MNAR read the (normalised) block values; MCAR-type mechanisms do not, and only those can be
drawn per batch (one pattern per consecutive batch of samples, as the LASER-VFL code does).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from ..core.registry import Registry

MECHANISMS: Registry = Registry("missingness mechanism")


@dataclass
class Mechanism:
    spec: str
    needs_data = False

    def sample(self, n: int, k: int, rng: np.random.Generator, mean=None, var=None) -> np.ndarray:
        raise NotImplementedError

    def realised(self) -> dict[str, Any]:
        return {}

    def check_stats(self, mean: np.ndarray, var: np.ndarray) -> str | None:
        """Why the data's block statistics ``[n, K]`` cannot drive this mechanism, or None."""
        return None


def _floats(args: str, spec: str, n: int | None = None) -> list[float]:
    try:
        vals = [float(v) for v in args.split(",")] if args else []
    except ValueError:
        raise VFLBenchError(f"Bad missingness spec '{spec}': parameters must be numbers.") from None
    if n is not None and len(vals) not in (0, n):
        raise VFLBenchError(f"Bad missingness spec '{spec}': expected {n} comma-separated numbers.")
    return vals


def _prob(p: float, spec: str) -> float:
    if not 0.0 <= p <= 1.0:
        raise VFLBenchError(f"Bad missingness spec '{spec}': probability {p} is outside [0, 1].")
    return p


@MECHANISMS.register("none")
@dataclass
class NoMissing(Mechanism):
    def sample(self, n, k, rng, mean=None, var=None):
        return np.ones((n, k), dtype=bool)


@MECHANISMS.register("mcar")
@dataclass
class MCAR(Mechanism):
    p: list[float] = field(default_factory=lambda: [0.0])

    @classmethod
    def parse(cls, spec, args):
        ps = _floats(args, spec)
        if not ps:
            raise VFLBenchError(
                f"Bad missingness spec '{spec}': write mcar:P or mcar:P1,P2,... (P = missing probability)."
            )
        return cls(spec, [_prob(p, spec) for p in ps])

    def probs(self, k: int) -> np.ndarray:
        if len(self.p) == 1:
            return np.full(k, self.p[0])
        if len(self.p) != k:
            raise VFLBenchError(
                f"Missingness '{self.spec}' gives {len(self.p)} probabilities but there are {k} parties."
            )
        return np.asarray(self.p)

    def sample(self, n, k, rng, mean=None, var=None):
        return rng.random((n, k)) >= self.probs(k)[None, :]


@MECHANISMS.register("mcar-beta")
@dataclass
class MCARBeta(Mechanism):
    a: float = 2.0
    b: float = 2.0
    drawn: list[float] | None = None

    @classmethod
    def parse(cls, spec, args):
        v = _floats(args, spec, 2) or [2.0, 2.0]
        if min(v) <= 0:
            raise VFLBenchError(f"Bad missingness spec '{spec}': Beta parameters must be > 0.")
        return cls(spec, v[0], v[1])

    def sample(self, n, k, rng, mean=None, var=None):
        if self.drawn is None or len(self.drawn) != k:  # drawn once per mask set
            self.drawn = rng.beta(self.a, self.b, size=k).tolist()
        return rng.random((n, k)) >= np.asarray(self.drawn)[None, :]

    def realised(self):
        return {"p_miss_per_block": self.drawn}


@MECHANISMS.register("mnar")
@dataclass
class MNAR(Mechanism):
    p: float = 0.7
    needs_data = True

    @classmethod
    def parse(cls, spec, args):
        v = _floats(args, spec, 1)
        if not v:
            raise VFLBenchError(f"Bad missingness spec '{spec}': write mnar:P (e.g. mnar:0.7).")
        return cls(spec, _prob(v[0], spec))

    def check_stats(self, mean, var):
        if np.all(np.ptp(mean, axis=0) == 0):
            return (
                "every block has the same mean in every sample (constant blocks), so MNAR's sign test cannot "
                "depend on the data"
            )
        return None

    def sample(self, n, k, rng, mean=None, var=None):
        p_miss = np.where(mean < 0, self.p, 1.0 - self.p)
        return rng.random((n, k)) >= p_miss


def _visit_order(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    return np.argsort(rng.random((n, k)), axis=1)  # an independent random permutation per sample


def _observe_first(order: np.ndarray, count: np.ndarray) -> np.ndarray:
    n, k = order.shape
    seen_rank = np.arange(k)[None, :] < count[:, None]  # [n, K] in visiting order
    obs = np.zeros((n, k), dtype=bool)
    np.put_along_axis(obs, order, seen_rank, axis=1)
    return obs


class _VarianceMAR(Mechanism):
    """The FALSE-VFL MAR mechanisms: visit blocks in random order, stop by the blocks' variances."""

    def check_stats(self, mean, var):
        if np.all(var == 0):
            return (
                "every block has zero variance within every sample (blocks of one feature, or constant blocks), so the "
                "MAR stopping rule never depends on the data"
            )
        return None


@MECHANISMS.register("mar1")
@dataclass
class MAR1(_VarianceMAR):
    t0: float = 1.1
    delta: float = 0.15
    needs_data = True

    @classmethod
    def parse(cls, spec, args):
        v = _floats(args, spec, 2) or [1.1, 0.15]
        return cls(spec, *v)

    def sample(self, n, k, rng, mean=None, var=None):
        order = _visit_order(n, k, rng)
        v = np.take_along_axis(var, order, axis=1)
        thresholds = self.t0 - self.delta * np.arange(k)
        stop = v > thresholds[None, :]
        # observed count = position of the first informative piece + 1, or all K
        count = np.where(stop.any(1), stop.argmax(1) + 1, k)
        return _observe_first(order, count)


@MECHANISMS.register("mar2")
@dataclass
class MAR2(_VarianceMAR):
    t0: float = 0.5
    b0: float = 0.7
    delta: float = 0.15
    needs_data = True

    @classmethod
    def parse(cls, spec, args):
        v = _floats(args, spec, 3) or [0.5, 0.7, 0.15]
        return cls(spec, *v)

    def sample(self, n, k, rng, mean=None, var=None):
        order = _visit_order(n, k, rng)
        v = np.take_along_axis(var, order, axis=1)
        thresholds = self.t0 - self.delta * np.arange(k)
        spent = np.cumsum(np.where(v > thresholds, v - thresholds, 0.0), axis=1)
        stop = self.b0 - spent <= 0
        count = np.where(stop.any(1), stop.argmax(1) + 1, k)
        return _observe_first(order, count)


class MissingSpec(str):
    """A missingness setting parsed once: it *is* its canonical label (so it keys, prints and compares
    as the text always did), and carries what parsing found: ``name``, ``args`` (floats), ``p_key``
    and the parsed mechanism, of which :meth:`mechanism` hands out fresh copies."""

    name: str
    args: tuple[float, ...]
    p_key: float | str
    _proto: Mechanism

    def __new__(cls, spec) -> MissingSpec:
        if isinstance(spec, MissingSpec):
            return spec
        proto = parse_mechanism(spec)
        obj = super().__new__(cls, _label(spec))
        name, _, args = str(obj).partition(":")
        obj.name, obj.args, obj._proto = name, tuple(float(v) for v in args.split(",")) if args else (), proto
        obj.p_key = _p_key(str(obj))
        return obj

    def mechanism(self) -> Mechanism:
        """A fresh mechanism object for one draw (mechanisms record what they realised)."""
        import copy

        return copy.deepcopy(self._proto)


def split_specs(text: str) -> list[str]:
    """``none,mcar:0.1,0.2,0.5,0,mar1`` -> ``['none', 'mcar:0.1,0.2,0.5,0', 'mar1']``: numeric tokens
    continue the previous spec's parameter list."""
    from ..core.textlists import split_items

    out: list[str] = []
    for tok in split_items(text, "--test-missing", "none,mcar:0.1,mcar:0.5"):
        try:
            float(tok)
            is_num = True
        except ValueError:
            is_num = False
        if is_num and out:
            out[-1] += "," + tok
        else:
            out.append(tok)
    return out


def test_settings(value) -> tuple[MissingSpec, ...]:
    """Test-time settings: a comma-separated text (``none,mcar:0.1``) or a list; each parsed once,
    at least one, none twice."""
    items = split_specs(value) if isinstance(value, str) else list(value or [])
    if not items:
        raise VFLBenchError("Give at least one --test-missing setting.")
    specs = tuple(MissingSpec(s) for s in items)
    dupes = sorted({s for s in specs if specs.count(s) > 1})
    if dupes:
        raise VFLBenchError(f"Test setting(s) {', '.join(dupes)} given more than once; list each test setting once.")
    return specs


def canonical(spec: str) -> str:
    """The one label of a setting: lower-case name, parameters as shortest numbers
    (``MCAR:0.10`` -> ``mcar:0.1``, ``mcar:.1,.2`` -> ``mcar:0.1,0.2``). Validates the spec."""
    return MissingSpec(spec)


def _label(spec: str) -> str:
    name, _, args = spec.strip().partition(":")
    name = name.strip().lower()
    if not args.strip():
        return name
    return name + ":" + ",".join(f"{float(v):g}" for v in args.split(","))


def p_key(spec: str) -> float | str:
    """The missing probability a setting is known by in presets, CSV columns and the papers' tables:
    ``none`` -> 0.0, ``mcar:0.1`` -> 0.1, ``mcar-beta:2,2`` -> ``beta(2,2)``, any other -> its label."""
    return MissingSpec(spec).p_key


def _p_key(label: str) -> float | str:
    name, _, args = label.partition(":")
    if name == "none":
        return 0.0
    if name == "mcar" and args and "," not in args:
        return float(args)
    if name == "mcar-beta":
        a, b = (args or "2,2").split(",")
        return f"beta({a},{b})"
    return label


def parse_mechanism(spec: str) -> Mechanism:
    """Parse a spec string such as ``mcar:0.1`` into a fresh mechanism object (a :class:`MissingSpec`
    hands out a copy of the one it parsed)."""
    if isinstance(spec, MissingSpec):
        return spec.mechanism()
    if not isinstance(spec, str) or not spec.strip():
        raise VFLBenchError("Empty missingness spec; use e.g. none, mcar:0.1, mcar-beta:2,2, mar1, mar2, mnar:0.7.")
    spec = spec.strip()
    name, _, args = spec.partition(":")
    cls = MECHANISMS.get(name.strip().lower())
    if hasattr(cls, "parse"):
        return cls.parse(spec, args.strip())
    if args:
        raise VFLBenchError(f"Bad missingness spec '{spec}': '{name}' takes no parameters.")
    return cls(spec)


@dataclass
class Masks:
    observed: np.ndarray  # [n, K] bool
    spec: str
    granularity: str
    info: dict[str, Any]
    labeled: np.ndarray | None = None  # indices of labeled samples (FALSE-VFL setting), None = all
    reserve: np.ndarray | None = None  # indices of the fully aligned reserve inside the labeled samples


def generate_masks(
    spec: str,
    n: int,
    k: int,
    rng: np.random.Generator,
    *,
    block_mean: np.ndarray | None = None,
    block_var: np.ndarray | None = None,
    granularity: str = "sample",
    batch_size: int | None = None,
    all_missing: str = "keep",
) -> Masks:
    """Draw an observed-mask for ``n`` samples and ``k`` parties.

    ``granularity='batch'`` draws one pattern per consecutive block of ``batch_size`` samples.
    ``all_missing='resample'`` redraws samples (or batches) with no observed block until none remain;
    ``'keep'`` leaves them (evaluation skips them). The count is reported in ``info``.
    """
    mech = parse_mechanism(spec)
    if granularity not in ("sample", "batch"):
        raise VFLBenchError(f"Unknown granularity '{granularity}'. Choices: sample, batch.")
    if all_missing not in ("keep", "resample"):
        raise VFLBenchError(f"Unknown all-missing policy '{all_missing}'. Choices: keep, resample.")
    if mech.needs_data and (block_mean is None or block_var is None):
        raise ValueError(f"{spec} needs the block statistics")
    if mech.needs_data and n:
        why = mech.check_stats(np.asarray(block_mean), np.asarray(block_var))
        if why:
            raise VFLBenchError(
                f"Missingness '{spec}' cannot be used on this data: {why}. Use MCAR (e.g. mcar:0.5), or blocks of two "
                "or more varying features."
            )
    if granularity == "batch":
        if mech.needs_data:
            raise VFLBenchError(
                f"Missingness '{spec}' depends on each sample's values and cannot be drawn per batch; draw it per "
                "sample (`--protocol-opt train_granularity=sample` / `test_granularity=sample` for runs, "
                "`--granularity sample` for `vflbench masks`)."
            )
        if not batch_size or batch_size < 1:
            raise VFLBenchError("Per-batch masks need a positive batch size.")
        units = -(-n // batch_size)
    else:
        units = n

    def draw(idx: np.ndarray | None) -> np.ndarray:
        m = block_mean if idx is None or block_mean is None else block_mean[idx]
        v = block_var if idx is None or block_var is None else block_var[idx]
        size = units if idx is None else len(idx)
        return mech.sample(size, k, rng, m, v)

    obs = draw(None)
    resampled = 0
    if all_missing == "resample":
        if isinstance(mech, MCAR) and np.all(mech.probs(k) >= 1.0):
            raise VFLBenchError(f"Under '{spec}' every block is always missing; nothing can be resampled.")
        for _ in range(10_000):
            bad = np.flatnonzero(~obs.any(1))
            if len(bad) == 0:
                break
            resampled += len(bad)
            obs[bad] = draw(bad)
        else:
            raise VFLBenchError(f"Could not avoid all-missing patterns under '{spec}'; use --all-missing keep.")
    if granularity == "batch":
        obs = np.repeat(obs, batch_size, axis=0)[:n]
    info = {
        "mechanism": spec,
        "granularity": granularity,
        "all_missing_policy": all_missing,
        "resampled": int(resampled),
        **mech.realised(),
    }
    if granularity == "batch":
        info["batch_size"] = int(batch_size)
    return Masks(obs, spec, granularity, info)


def labeled_split(n: int, n_labeled: int, n_aligned: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """FALSE-VFL 3.5: a uniformly random labeled subset, and inside it a fully aligned reserve."""
    if not 0 <= n_aligned <= n_labeled <= n:
        raise VFLBenchError(f"Need 0 <= aligned ({n_aligned}) <= labeled ({n_labeled}) <= training samples ({n}).")
    labeled = np.sort(rng.choice(n, size=n_labeled, replace=False))
    aligned = np.sort(rng.choice(labeled, size=n_aligned, replace=False))
    return labeled, aligned


def apply_aligned_reserve(observed: np.ndarray, aligned: np.ndarray) -> np.ndarray:
    out = observed.copy()
    out[aligned] = True
    return out


def mask_stats(observed: np.ndarray, top: int = 8) -> dict[str, Any]:
    n, k = observed.shape
    patterns = Counter("".join("1" if b else "0" for b in row) for row in observed) if n <= 200_000 else Counter()
    return {
        "n": int(n),
        "parties": int(k),
        "observed_rate_per_block": observed.mean(0).round(4).tolist(),
        "fully_observed_fraction": float(observed.all(1).mean()),
        "all_missing_count": int((~observed.any(1)).sum()),
        "mean_observed_blocks": float(observed.sum(1).mean()),
        "top_patterns": [{"pattern": p, "count": c, "fraction": round(c / n, 4)} for p, c in patterns.most_common(top)],
    }
