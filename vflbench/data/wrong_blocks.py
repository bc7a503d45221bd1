"""Blocks that are present but wrong: corrupted values and misaligned rows, beside missing blocks.

A missing block is absent (:mod:`vflbench.data.missingness`); a *wrong* block arrives, and the model reads it. Two
families, each named by a compact spec (CLI and YAML), at training (``--train-corrupt``, ``--train-misalign``) and at
test (``--test-corrupt``, ``--test-misalign``, comma lists):

=======================  ==============================================================================================
``none``                 no block is wrong
``gauss:RATE:SEVERITY``  Gaussian noise added to each feature, scaled by the feature's training standard deviation:
                         severity 1-5 is a scale of 0.1, 0.2, 0.4, 0.6, 0.8 (MARS-VFL's five severities, on
                         standardised features)
``stuck:RATE``           the block reads a constant: every affected row carries one training row's block (drawn once
                         per party), the sensor stuck at a value it once read
``scale:RATE:FACTOR``    the block's values multiplied by FACTOR on the model's input scale (a unit change of a
                         feature centred at its training mean)
``permute:RATE``         misaligned: the affected rows of a party exchange that party's block among themselves by a
                         derangement (no row keeps its own; MARS-VFL's permutation)
``near:RATE``            misaligned, near miss: an affected row gets the party's block of another row that shares its
                         *key*, the party's own coarse attribute that its fuzzy record linkage confuses
                         (:func:`key_column`); a row that shares it with no other gets the row of the nearest key value
=======================  ==============================================================================================

``RATE`` is the share of rows affected, exactly ``round(RATE * n)`` rows drawn without replacement **per party**
(each eligible party independently). ``@any`` after the spec affects ``round(RATE * n)`` rows in **one** eligible
party each (drawn uniformly); ``@1+3`` names the eligible parties. The label party (party 0, which holds the labels
and the row identity the others are matched to) is never affected unless named. The rows and values come from named
random streams (``wrong/<split>/corrupt/<spec>``, ``wrong/<split>/misalign/<spec>``), so every method of a seed sees
the same wrong blocks, in one process and across processes (every process prepares the run the same way).

A corrupted embedded categorical column (a code) keeps its code under ``gauss`` and ``scale`` (a code is a name, not a
quantity); ``stuck`` copies the stuck row's code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from ..core.textlists import split_items

SEVERITY_SCALE = (0.1, 0.2, 0.4, 0.6, 0.8)  # MARS-VFL's Gaussian-noise severities 1..5 (x the feature's std)
LABEL_PARTY = 0

CORRUPTIONS = ("gauss", "stuck", "scale")
MISALIGNMENTS = ("permute", "near")
_EXAMPLE = {"gauss": "gauss:0.5:3", "stuck": "stuck:0.2", "scale": "scale:0.2:10", "permute": "permute:0.5",
            "near": "near:0.05"}  # fmt: skip
_ARGS = {"gauss": ("RATE", "SEVERITY"), "stuck": ("RATE",), "scale": ("RATE", "FACTOR"), "permute": ("RATE",),
         "near": ("RATE",)}  # fmt: skip
_FORMS = {
    "corrupt": "none, gauss:RATE:SEVERITY (severity 1-5), stuck:RATE, scale:RATE:FACTOR",
    "misalign": "none, permute:RATE, near:RATE",
}


class WrongSpec(str):
    """A corruption or misalignment setting parsed once; it *is* its canonical label (``gauss:0.5:3``,
    ``permute:0.2@any``), and carries ``family`` ("corrupt" | "misalign"), ``kind``, ``rate``, ``param`` and the
    eligible ``parties`` (None: every party but the label party) or ``any_party``."""

    family: str
    kind: str
    rate: float
    param: float | None
    parties: tuple[int, ...] | None
    any_party: bool

    def __new__(cls, spec: Any, family: str) -> WrongSpec:
        if isinstance(spec, WrongSpec) and spec.family == family:
            return spec
        text = str(spec).strip().lower() if spec is not None else ""
        flag = "--test-corrupt/--train-corrupt" if family == "corrupt" else "--test-misalign/--train-misalign"
        if not text:
            raise VFLBenchError(f"Empty {family} spec for {flag}; write one of: {_FORMS[family]}.")
        body, _, where = text.partition("@")
        kind, *args = body.split(":")
        kinds = CORRUPTIONS if family == "corrupt" else MISALIGNMENTS
        if kind == "none":
            if args or where:
                raise VFLBenchError(f"Bad {family} spec '{spec}': 'none' takes no parameters.")
            return cls._make("none", family, "none", 0.0, None, None, False)
        if kind not in kinds:
            other = "misalign" if family == "corrupt" else "corrupt"
            hint = (
                f" ('{kind}' is a {other} kind: give it to --test-{other})"
                if kind in (*CORRUPTIONS, *MISALIGNMENTS)
                else ""
            )
            raise VFLBenchError(f"Unknown {family} kind '{kind}' in '{spec}'{hint}; write one of: {_FORMS[family]}.")
        want = _ARGS[kind]
        if len(args) != len(want):
            raise VFLBenchError(f"Bad {family} spec '{spec}': write {kind}:{':'.join(want)} (e.g. {_EXAMPLE[kind]}).")
        try:
            vals = [float(a) for a in args]
        except ValueError:
            raise VFLBenchError(f"Bad {family} spec '{spec}': {', '.join(want)} must be numbers.") from None
        rate = vals[0]
        if not 0.0 <= rate <= 1.0 or not np.isfinite(rate):
            raise VFLBenchError(f"Bad {family} spec '{spec}': the rate {rate:g} is outside [0, 1].")
        param = vals[1] if len(vals) > 1 else None
        if kind == "gauss" and (param not in (1, 2, 3, 4, 5)):
            raise VFLBenchError(f"Bad {family} spec '{spec}': the severity {param:g} is not one of 1, 2, 3, 4, 5.")
        if kind == "scale" and (not np.isfinite(param) or param == 1.0):
            raise VFLBenchError(f"Bad {family} spec '{spec}': the factor must be a finite number other than 1.")
        parties, any_party = None, False
        if where == "any":
            any_party = True
        elif where:
            try:
                parties = tuple(sorted({int(p) for p in where.split("+")}))
            except ValueError:
                raise VFLBenchError(
                    f"Bad {family} spec '{spec}': after '@' write 'any' or the parties' numbers joined by '+' (e.g. "
                    "@1+3)."
                ) from None
            if min(parties) < 0:
                raise VFLBenchError(f"Bad {family} spec '{spec}': party numbers start at 0.")
        num = ":".join(f"{v:g}" for v in vals)
        label = f"{kind}:{num}" + ("@any" if any_party else (f"@{'+'.join(map(str, parties))}" if parties else ""))
        return cls._make(label, family, kind, rate, param, parties, any_party)

    def __getnewargs__(self):  # pickled (a sweep's worker processes): parsed again from its label and family
        return (str(self), self.family)

    @classmethod
    def _make(cls, label, family, kind, rate, param, parties, any_party) -> WrongSpec:
        obj = super().__new__(cls, label)
        obj.family, obj.kind, obj.rate, obj.param, obj.parties, obj.any_party = (
            family, kind, rate, param, parties, any_party,
        )  # fmt: skip
        return obj

    @property
    def none(self) -> bool:
        return self.kind == "none"

    def eligible(self, k: int) -> list[int]:
        """The parties this spec may affect in a run of ``k`` parties (refused when there is none, or a named party
        does not exist)."""
        if self.parties is not None:
            bad = [p for p in self.parties if p >= k]
            if bad:
                raise VFLBenchError(f"'{self}' names party {bad[0]}, but the run has parties 0-{k - 1}.")
            return list(self.parties)
        out = [p for p in range(k) if p != LABEL_PARTY]
        if not out:
            what = "misaligns" if self.family == "misalign" else "corrupts"
            raise VFLBenchError(
                f"'{self}' {what} no block: the run has one party, the label party, whose rows define the alignment"
                + (" (misalignment needs two or more parties)." if self.family == "misalign" else "; name it (@0).")
            )
        return out


def corrupt_spec(value: Any) -> WrongSpec:
    return WrongSpec(value, "corrupt")


def misalign_spec(value: Any) -> WrongSpec:
    return WrongSpec(value, "misalign")


def wrong_settings(value: Any, family: str) -> tuple[WrongSpec, ...]:
    """A test setting list (``none,gauss:0.5:3``): each parsed once, at least one, none twice."""
    flag = f"--test-{family}"
    items = split_items(value, flag, "none,gauss:0.5:3" if family == "corrupt" else "none,permute:0.5") if isinstance(
        value, str
    ) else [str(v) for v in (value or [])]  # fmt: skip
    if not items:
        raise VFLBenchError(f"Give at least one {flag} setting (none for clean blocks).")
    specs = tuple(WrongSpec(s, family) for s in items)
    dupes = sorted({s for s in specs if specs.count(s) > 1})
    if dupes:
        raise VFLBenchError(f"{flag} lists {', '.join(dupes)} more than once; list each setting once.")
    return specs


@dataclass
class Wrong:
    """What was done to one split: ``affected`` [n, K] (the block of that row and party is wrong), per family, and
    for misalignment the ``source`` row of each block [n, K] (its own row where aligned)."""

    corrupt: WrongSpec
    misalign: WrongSpec
    corrupted: np.ndarray
    misaligned: np.ndarray
    source: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def affected(self) -> np.ndarray:
        return self.corrupted | self.misaligned


def draw_affected(spec: WrongSpec, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, K] bool: the rows and parties ``spec`` affects (exactly ``round(rate * n)`` rows a party, or in total under
    ``@any``)."""
    out = np.zeros((n, k), dtype=bool)
    if spec.none or n == 0:
        return out
    parties = spec.eligible(k)
    m = int(round(spec.rate * n))
    if spec.any_party:
        rows = rng.choice(n, size=m, replace=False)
        out[rows, np.asarray(parties)[rng.integers(0, len(parties), size=m)]] = True
        return out
    for p in parties:
        out[rng.choice(n, size=m, replace=False), p] = True
    return out


def block_columns(partition, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Each party's columns in the split's rows flattened to ``[n, D]`` (tabular blocks as they are; an image tile's
    pixels over every channel)."""
    if partition.kind == "features":
        return [np.asarray(b, dtype=np.int64) for b in partition.blocks]
    flat = np.arange(int(np.prod(shape))).reshape(shape)
    return [flat[:, r0:r1, c0:c1].ravel() for r0, r1, c0, c1 in partition.blocks]


def key_column(x_label: np.ndarray, n: int) -> int:
    """The near-miss key: of a party's columns, the one with the most distinct values among those with at
    least 2 and at most ``sqrt(n)`` of them (a coarse attribute such as a birth year or a region, which a fuzzy
    identifier shares with its neighbours); the column of fewest distinct values (at least 2) if none is that
    coarse; -1 when every column is constant."""
    levels = np.array([len(np.unique(x_label[:, j])) for j in range(x_label.shape[1])])
    coarse = np.flatnonzero((levels >= 2) & (levels <= max(2, int(np.sqrt(n)))))
    if len(coarse):
        return int(coarse[np.argmax(levels[coarse])])
    varied = np.flatnonzero(levels >= 2)
    return int(varied[np.argmin(levels[varied])]) if len(varied) else -1


def _derangement(m: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly drawn permutation of ``m`` items with no fixed point (m >= 2), by rejection."""
    while True:
        p = rng.permutation(m)
        if not (p == np.arange(m)).any():
            return p


def _near_sources(rows: np.ndarray, key: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each affected row, another row with the same key value (uniformly among them), else a row of the nearest
    key value."""
    n = len(key)
    order = np.lexsort((rng.random(n), key))  # by key, ties in random order
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    sk = key[order]
    start = np.searchsorted(sk, sk, side="left")
    stop = np.searchsorted(sk, sk, side="right")
    p = pos[rows]
    size = (stop - start)[p]
    offset = rng.integers(1, np.maximum(size, 2), size=len(rows))  # 1..size-1: never the row itself
    same = start[p] + (p - start[p] + offset) % np.maximum(size, 1)
    neighbour = np.where(p + 1 < n, p + 1, p - 1)  # a singleton: the adjacent key value's row
    return order[np.where(size > 1, same, neighbour)]


def apply_wrong(
    x: np.ndarray,
    partition,
    corrupt: WrongSpec,
    misalign: WrongSpec,
    rng_corrupt: np.random.Generator,
    rng_misalign: np.random.Generator,
    spread: np.ndarray,
    stuck_from: np.ndarray,
    codes: frozenset[int] | set[int] = frozenset(),
) -> tuple[np.ndarray, Wrong]:
    """A copy of ``x`` (``[n, D]`` or ``[n, C, H, W]``) with its blocks misaligned, then corrupted (what a party's
    pipeline breaks is what arrived), and the record of what was done. ``spread`` [D]: each feature's training
    standard deviation; ``stuck_from`` the training rows a stuck block may read; ``codes`` the features holding
    categorical codes."""
    n, k = len(x), partition.n_parties
    out = np.array(x, copy=True)
    flat = out.reshape(n, -1)
    cols = block_columns(partition, x.shape[1:])
    source = np.repeat(np.arange(n)[:, None], k, axis=1)
    misaligned = draw_affected(misalign, n, k, rng_misalign)
    info: dict[str, Any] = {}
    if not misalign.none:
        clean = flat.copy()
        keys = {}
        # a near miss draws from one stream a party (spawned, so independent of what another party's draws consumed:
        # a party process knows only its own block, and how many draws a near miss takes depends on its keys); a
        # permutation's draws depend on the row counts alone, from the one stream
        party_rng = rng_misalign.spawn(k) if misalign.kind == "near" else None
        for p in range(k):
            rows = np.flatnonzero(misaligned[:, p])
            if not len(rows):
                continue
            if len(rows) < 2 and misalign.kind == "permute":
                misaligned[rows, p] = False  # one row cannot be deranged
                continue
            if misalign.kind == "near":  # the party's own coarse attribute: what its record linkage confuses
                own = clean[:, cols[p]]
                j = key_column(own, n)
                key = own[:, j] if j >= 0 else np.zeros(n)
                keys[p] = {"column": int(cols[p][j]) if j >= 0 else None, "levels": int(len(np.unique(key)))}
                src = _near_sources(rows, key, party_rng[p])
            else:
                src = rows[_derangement(len(rows), rng_misalign)]
            source[rows, p] = src
            flat[np.ix_(rows, cols[p])] = clean[np.ix_(src, cols[p])]
    corrupted = draw_affected(corrupt, n, k, rng_corrupt)
    if not corrupt.none:
        sflat = np.asarray(spread, dtype=np.float64).reshape(-1)
        for p in range(k):
            rows = np.flatnonzero(corrupted[:, p])
            if not len(rows):
                continue
            c = cols[p]
            real = np.asarray([j for j in c.tolist() if j not in codes], dtype=np.int64)
            if corrupt.kind == "gauss":
                scale = SEVERITY_SCALE[int(corrupt.param) - 1] * sflat[real]
                noise = rng_corrupt.standard_normal((len(rows), len(real))) * scale[None, :]
                flat[np.ix_(rows, real)] = (flat[np.ix_(rows, real)] + noise).astype(flat.dtype)
            elif corrupt.kind == "scale":
                flat[np.ix_(rows, real)] = (flat[np.ix_(rows, real)] * corrupt.param).astype(flat.dtype)
            else:  # stuck: one training row's block, drawn once per party
                at = stuck_from[int(rng_corrupt.integers(len(stuck_from)))].reshape(-1)
                flat[np.ix_(rows, c)] = at[c][None, :]
    if not misalign.none and misalign.kind == "near":
        info["near_key"] = keys
    info.update({
        "corrupt": str(corrupt), "misalign": str(misalign),
        "corrupted_rate_per_block": corrupted.mean(0).round(4).tolist() if n else [],
        "misaligned_rate_per_block": misaligned.mean(0).round(4).tolist() if n else [],
    })  # fmt: skip
    return out, Wrong(corrupt, misalign, corrupted, misaligned, source, info)
