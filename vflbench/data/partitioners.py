"""Feature partitioners: how a sample's features are split into K party blocks.

A partitioner returns a :class:`Partition`, which records the realised split (feature indices or
image tiles) so that it can be written to the manifest and re-applied to train and test data alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..core.registry import Registry


@dataclass
class Partition:
    kind: str  # "features" (tabular columns) or "tiles" (image rectangles)
    blocks: list  # features: list of int arrays; tiles: list of (r0, r1, c0, c1)
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def n_parties(self) -> int:
        return len(self.blocks)

    @property
    def party_names(self) -> list[str]:
        """Names from a parties file (partitioner ``columns``), else ``block 0`` ... ``block K-1``."""
        names = self.params.get("parties")
        return list(names) if names else [f"block {k}" for k in range(self.n_parties)]

    def widths(self) -> list[int]:
        if self.kind == "features":
            return [len(b) for b in self.blocks]
        return [(r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in self.blocks]

    def split(self, x: torch.Tensor | np.ndarray) -> list:
        """Split ``[n, D]`` or ``[n, C, H, W]`` data into K per-party arrays."""
        if self.kind == "features":
            return [x[:, np.asarray(b)] for b in self.blocks]
        return [x[:, :, r0:r1, c0:c1] for r0, r1, c0, c1 in self.blocks]

    def embedded(self, columns: dict[int, tuple[int, int]]) -> list[list[tuple[int, int, int]]]:
        """Per party, ``(position in its block, table rows, embedding size)`` of every embedded categorical column
        it holds (``columns``: the dataset's feature index -> (rows, size)); empty when there are none."""
        if self.kind != "features" or not columns:
            return []
        return [[(j, *columns[c]) for j, c in enumerate(np.asarray(b).tolist()) if c in columns] for b in self.blocks]

    def block_stats(
        self, x: np.ndarray, codes: set[int] | frozenset[int] = frozenset()
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample mean and population variance of each block: two ``[n, K]`` arrays. ``codes``: feature
        indices holding categorical codes, left out (a code is a name, not a quantity); a block of codes only has
        mean and variance 0."""
        if codes and self.kind == "features":
            blocks = [
                np.asarray([c for c in np.asarray(b).tolist() if c not in codes], dtype=np.int64) for b in self.blocks
            ]
            parts = [np.asarray(x[:, b], np.float64) if len(b) else np.zeros((len(x), 1)) for b in blocks]
        else:
            parts = [np.asarray(p, np.float64).reshape(len(x), -1) for p in self.split(x)]
        return np.stack([p.mean(1) for p in parts], 1), np.stack([p.var(1) for p in parts], 1)

    def describe(self) -> dict[str, Any]:
        blocks = (
            [np.asarray(b).tolist() for b in self.blocks] if self.kind == "features" else [list(t) for t in self.blocks]
        )
        return {"name": self.name, "kind": self.kind, "params": self.params, "widths": self.widths(), "blocks": blocks}


PARTITIONERS: Registry = Registry("partitioner")


def _check_k(k: int, n_units: int, what: str) -> None:
    if k < 1:
        raise VFLBenchError(f"--parties must be >= 1, got {k}.")
    if k > n_units:
        raise VFLBenchError(f"Cannot split {n_units} {what} into {k} parties; use at most {n_units} parties.")


def _need(shape: tuple[int, ...], kind: str, name: str) -> None:
    is_image = len(shape) == 3
    if kind == "tabular" and is_image:
        raise VFLBenchError(f"Partitioner '{name}' needs tabular data; use 'tiles' or 'grid' for images.")
    if kind == "image" and not is_image:
        raise VFLBenchError(
            f"Partitioner '{name}' needs image data; use 'contiguous', 'random' or 'importance' for tabular data."
        )


@PARTITIONERS.register("contiguous")
def contiguous(shape, k: int, rng: np.random.Generator, **_) -> Partition:
    """Equal contiguous column blocks of D // K features; the trailing D mod K features are dropped (LASER code)."""
    _need(shape, "tabular", "contiguous")
    d = shape[0]
    _check_k(k, d, "features")
    w = d // k
    return Partition(
        "features", [np.arange(i * w, (i + 1) * w) for i in range(k)], "contiguous", {"dropped": list(range(w * k, d))}
    )


@PARTITIONERS.register("random")
def random_blocks(shape, k: int, rng: np.random.Generator, **_) -> Partition:
    """A random permutation of the features cut into K equal blocks (D mod K features dropped)."""
    _need(shape, "tabular", "random")
    d = shape[0]
    _check_k(k, d, "features")
    perm = rng.permutation(d)
    w = d // k
    return Partition(
        "features",
        [np.sort(perm[i * w : (i + 1) * w]) for i in range(k)],
        "random",
        {"dropped": np.sort(perm[w * k :]).tolist()},
    )


@PARTITIONERS.register("importance")
def importance(shape, k: int, rng: np.random.Generator, alpha: float = 1.0, **_) -> Partition:
    """VertiBench-style importance control: party shares w ~ Dirichlet(alpha * 1_K); each party first gets one
    feature drawn uniformly without replacement (so no party is empty, at any K up to D), then every other feature
    goes to party k with probability w_k (VertiBench's ``ImportanceSplitter`` without empty parties). Small alpha
    gives very unequal parties; large alpha nearly equal ones."""
    _need(shape, "tabular", "importance")
    d = shape[0]
    _check_k(k, d, "features")
    if alpha <= 0:
        raise VFLBenchError(f"importance partitioner: alpha must be > 0, got {alpha}.")
    w = rng.dirichlet(np.full(k, float(alpha)))
    if not np.isfinite(w).all() or w.sum() <= 0:  # alpha so small that every share underflowed: one party gets all
        w = np.eye(k)[rng.integers(k)]
    first = rng.choice(d, size=k, replace=False)
    owner = rng.choice(k, size=d, p=w / w.sum())
    owner[first] = np.arange(k)
    return Partition(
        "features", [np.flatnonzero(owner == i) for i in range(k)], "importance", {"alpha": alpha, "shares": w.tolist()}
    )


# ----------------------------------------------------------------------------- users' column groups


def read_parties_file(path: str | Path, k: int) -> dict[str, list[str]]:
    """``parties.yaml``: party name -> list of column names or glob patterns, in party order."""
    import yaml

    from ..core import yamlio
    from ..core.paths import user_path

    p = user_path(path)
    fix = (
        "it maps each party name to a list of column names or glob patterns, e.g.\n  bank: [age, income, "
        "'loan_*']\n  insurer: [claims, policy]"
    )
    if not p.is_file():
        raise VFLBenchError(f"Parties file {p} does not exist; write one: {fix}")
    try:
        spec = yamlio.load(p.read_text())
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise VFLBenchError(f"Parties file {p} is not valid YAML{at}: {getattr(e, 'problem', e)}; {fix}") from None
    except UnicodeDecodeError:
        raise VFLBenchError(f"Parties file {p} is not a text file; {fix}") from None
    if isinstance(spec, dict) and isinstance(spec.get("parties"), dict) and "source" in spec:
        spec = spec["parties"]  # a suite table's file (experiments/suite/NAME.yaml): its parties
    if not isinstance(spec, dict) or not spec:
        raise VFLBenchError(f"Parties file {p} must be a mapping; {fix}")
    out: dict[str, list[str]] = {}
    for name, cols in spec.items():
        if isinstance(cols, str):
            cols = [cols]
        if cols is None or not isinstance(cols, list) or not all(isinstance(c, (str, int, float)) for c in cols):
            raise VFLBenchError(
                f"Parties file {p}: party '{name}' must list column names (a YAML list of strings); {fix}"
            )
        if not cols:
            raise VFLBenchError(f"Parties file {p}: party '{name}' has no columns; give it at least one, or remove it.")
        out[str(name)] = [str(c) for c in cols]
    if len(out) != k:
        raise VFLBenchError(
            f"Parties file {p} defines {len(out)} parties ({', '.join(out)}) but the run has --parties {k}; "
            f"set --parties {len(out)} or edit the file."
        )
    return out


def _source_columns(data, d: int) -> list[str]:
    if data is not None and getattr(data, "feature_sources", None):
        return list(data.feature_sources)
    if data is not None and data.feature_names:
        return list(data.feature_names)
    return [f"x{i}" for i in range(d)]


@PARTITIONERS.register("columns")
def columns(
    shape, k: int, rng: np.random.Generator, file: str | None = None, file_sha256: str = "", data=None, **_
) -> Partition:
    """Each party holds named columns, listed (names or glob patterns) in a YAML file. After one-hot
    encoding a party keeps every encoded column of its source columns. Columns no party names are
    dropped, with a warning that lists them. ``file_sha256`` is set by vflbench (the file's content
    is part of the run key)."""
    import difflib
    import fnmatch
    import warnings

    from ..core.errors import VFLBenchWarning

    _need(shape, "tabular", "columns")
    if not file:
        raise VFLBenchError(
            "Partitioner 'columns' needs a parties file: --part-opt file=parties.yaml (party name -> column names)."
        )
    groups = read_parties_file(file, k)
    sources = _source_columns(data, shape[0])
    cols = list(dict.fromkeys(sources))
    prep = getattr(data, "preprocessing", None) or {}
    not_features = {prep.get("target"): "the target"}
    # columns left out before the split (drop=, among them a suite table's audit verdicts; constant, all missing or an
    # ID; a group column that is not an input): a party that lists one loses it, with a warning, and only a party
    # left with no column is refused
    split = prep.get("split") or {}
    left_out = {c: "dropped with drop=" for c in prep.get("dropped_columns", [])}
    left_out |= {c: "dropped by the loader as useless" for c in prep.get("auto_dropped_columns", [])}
    if split.get("group") and not split.get("group_input"):
        left_out[split["group"]] = "the group column (the entity the split keeps on one side; not an input)"
    owner: dict[str, str] = {}
    lost: dict[str, list[str]] = {}
    for party, pats in groups.items():
        for pat in pats:
            glob = any(ch in pat for ch in "*?[")
            hits = [c for c in cols if fnmatch.fnmatchcase(c, pat)] if glob else ([pat] if pat in cols else [])
            if not hits and pat in left_out:
                lost.setdefault(party, []).append(pat)
                continue
            if not hits:
                if pat in not_features:
                    raise VFLBenchError(
                        f"Parties file {file}: party '{party}' lists '{pat}', which is {not_features[pat]}; parties "
                        "hold feature columns only."
                    )
                close = difflib.get_close_matches(pat, cols, n=1)
                what = f"pattern '{pat}' matches no column" if glob else f"unknown column '{pat}'"
                raise VFLBenchError(
                    f"Parties file {file}: party '{party}': {what}"
                    + (f" (closest: '{close[0]}')" if close else "")
                    + f". Columns: {', '.join(cols)}."
                )
            for c in hits:
                if owner.get(c, party) != party:
                    raise VFLBenchError(
                        f"Parties file {file}: column '{c}' is given to two parties ('{owner[c]}' and '{party}'); "
                        "each column belongs to one party."
                    )
                owner[c] = party
    for party, cs in lost.items():
        warnings.warn(
            f"Parties file {file}: party '{party}' loses " + ", ".join(f"'{c}' ({left_out[c]})" for c in cs) + ".",
            VFLBenchWarning,
            stacklevel=2,
        )
    for party in groups:
        if party not in owner.values():
            why = f" (its columns {', '.join(lost[party])} were left out by the loader)" if party in lost else ""
            raise VFLBenchError(f"Parties file {file}: party '{party}' ends up with no columns{why}.")
    unassigned = [c for c in cols if c not in owner]
    if unassigned:
        warnings.warn(
            f"{len(unassigned)} column(s) belong to no party in {file} and are dropped: {', '.join(unassigned)}",
            VFLBenchWarning,
            stacklevel=2,
        )
    blocks = [
        np.asarray([i for i, s in enumerate(sources) if owner.get(s) == party], dtype=np.int64) for party in groups
    ]
    return Partition(
        "features",
        blocks,
        "columns",
        {
            "file": str(file),
            "parties": list(groups),
            "columns": {party: [c for c in cols if owner.get(c) == party] for party in groups},
            "dropped": unassigned,
        },
    )


# ----------------------------------------------------------------------------- correlation (VertiBench)


def inter_party_correlation(corr: np.ndarray, owner: np.ndarray) -> float:
    """Mean absolute correlation between features held by different parties (0: the parties' views
    are unrelated; the larger, the more each party's features say about the others')."""
    a = np.abs(corr)
    cross = owner[:, None] != owner[None, :]
    return float(a[cross].mean()) if cross.any() else 0.0


@PARTITIONERS.register("correlation")
def correlation(shape, k: int, rng: np.random.Generator, beta: float = 0.5, data=None, **_) -> Partition:
    """VertiBench's second splitter, simplified: ``beta`` in [0, 1] sets how correlated the parties'
    features are with each other. Equal-size blocks (D mod K features dropped, as ``contiguous``).
    From the training data's absolute Spearman correlations it builds the split with the lowest
    inter-party correlation score it can find (correlated features kept together: greedy, then
    improving swaps) and the one with the highest (spread apart), then swaps features between parties until the score
    reaches
    ``low + beta * (high - low)``. The realised score is recorded (``score``, ``score_range``)."""
    _need(shape, "tabular", "correlation")
    d = shape[0]
    _check_k(k, d, "features")
    if not 0.0 <= float(beta) <= 1.0:
        raise VFLBenchError(f"correlation partitioner: beta must be in [0, 1], got {beta}.")
    if data is None:
        raise VFLBenchError(
            "correlation partitioner: needs the training data (use it through vflbench run / sweep / masks)."
        )
    corr = _spearman(np.asarray(data.x_train, dtype=np.float64))
    w = d // k
    keep = np.sort(rng.permutation(d)[: w * k])
    c = corr[np.ix_(keep, keep)]
    low = _swap_towards(c, _low_split(c, k, w, rng), 0.0, rng)  # then improved by swaps: as low / as high as swaps get
    high = _swap_towards(c, _high_split(low, k), 1.0, rng)
    s_lo, s_hi = inter_party_correlation(c, low), inter_party_correlation(c, high)
    target = s_lo + float(beta) * (s_hi - s_lo)
    owner = _swap_towards(c, low.copy(), target, rng)
    score = inter_party_correlation(c, owner)
    blocks = [keep[owner == i] for i in range(k)]
    dropped = np.setdiff1d(np.arange(d), keep).tolist()
    return Partition(
        "features",
        blocks,
        "correlation",
        {"beta": float(beta), "score": score, "score_range": [s_lo, s_hi], "target_score": target, "dropped": dropped},
    )


def _spearman(x: np.ndarray) -> np.ndarray:
    r = np.argsort(np.argsort(x, axis=0, kind="stable"), axis=0).astype(np.float64)
    r -= r.mean(0)
    sd = np.sqrt((r**2).sum(0))
    sd[sd == 0] = 1.0
    r /= sd
    return np.nan_to_num(r.T @ r)


def _low_split(c: np.ndarray, k: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy: seed each party with a feature, then give each party in turn the free feature most
    correlated with what it holds (equal sizes)."""
    a = np.abs(c)
    d = len(a)
    owner = np.full(d, -1)
    free = list(rng.permutation(d))
    members: list[list[int]] = [[] for _ in range(k)]
    for i in range(k):  # seeds: mutually least correlated features, greedily
        j = free[0] if i == 0 else min(free, key=lambda f: max(a[f, m[0]] for m in members if m))
        members[i].append(j)
        owner[j] = i
        free.remove(j)
    while free:
        for i in range(k):
            if len(members[i]) >= w or not free:
                continue
            j = max(free, key=lambda f: a[f, members[i]].mean())
            members[i].append(j)
            owner[j] = i
            free.remove(j)
    return owner


def _high_split(low: np.ndarray, k: int) -> np.ndarray:
    """Deal each low-split party's features round-robin over all parties: correlated groups end up
    spread across parties."""
    owner = np.empty_like(low)
    pos = 0
    for i in range(k):
        for j in np.flatnonzero(low == i):
            owner[j] = pos % k
            pos += 1
    return owner


def _swap_towards(
    c: np.ndarray, owner: np.ndarray, target: float, rng: np.random.Generator, max_iter: int = 20000, batch: int = 512
) -> np.ndarray:
    """Random feature swaps between parties, kept when they bring the score closer to ``target``.

    A swap's change of score is computed in O(D) (pairs not involving the two features keep theirs). The
    candidate pairs are drawn ``batch`` at a time and scored together against the current owners; the
    first one that improves the score is made, and the generator is rewound to just after it. So the
    swaps, the scores and the generator's state afterwards are those of drawing and testing one pair at
    a time (tests/test_tables.py checks them against that loop)."""
    a = np.abs(c).copy()
    np.fill_diagonal(a, 0.0)
    cross = owner[:, None] != owner[None, :]
    n_cross = cross.sum() / 2  # unordered pairs held by different parties (swaps keep it)
    total = a[cross].sum() / 2
    d = len(owner)
    k = int(owner.max()) + 1 if d else 0
    held = (owner[None, :] == np.arange(k)[:, None]).astype(np.float64)  # [party, feature] one-hot
    done = 0
    while done < max_iter:
        score = total / n_cross if n_cross else 0.0
        if abs(score - target) < 1e-4:
            break
        m = min(batch, max_iter - done)
        before = rng.bit_generator.state
        ij = rng.integers(0, d, size=(m, 2))
        i, j = ij[:, 0], ij[:, 1]
        p, q = owner[i], owner[j]
        sign = held[p] - held[q]
        rows = np.arange(m)
        sign[rows, i] = 0.0
        sign[rows, j] = 0.0
        new = total + ((a[i] - a[j]) * sign).sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            better = (p != q) & (np.abs(new / n_cross - target) < abs(score - target))
        if not better.any():
            done += m
            continue
        r = int(better.argmax())  # the first improving pair; those before it were rejected one at a time
        rng.bit_generator.state = before
        rng.integers(0, d, size=(r + 1, 2))  # consume exactly the pairs up to and including it
        si, sj, sp, sq = int(i[r]), int(j[r]), int(p[r]), int(q[r])
        owner[si], owner[sj] = sq, sp
        held[sp, si], held[sq, si], held[sq, sj], held[sp, sj] = 0.0, 1.0, 0.0, 1.0
        total = float(new[r])
        done += r + 1
    return owner


def _bands(n: int, parts: int) -> list[tuple[int, int]]:
    """Split n pixels into `parts` bands, larger bands first (32 -> 11, 11, 10)."""
    edges = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(n), parts)])
    return [(int(edges[i]), int(edges[i + 1])) for i in range(parts)]


def laser_tiles(h: int, w: int, k: int) -> list[tuple[int, int, int, int]]:
    """LASER-VFL-style tiling: c = ceil(sqrt(K)) tiles per row, rows = ceil(K / c), the last row holds
    the remainder, tiles ordered row-major. Gives quadrants TL, TR, BL, BR for K=4; TL, TR + bottom half
    for K=3; a 3x3 grid with 11/11/10-pixel bands for K=9 on 32x32 (as in the authors' code)."""
    c = math.ceil(math.sqrt(k))
    rows = math.ceil(k / c)
    per_row = [c] * (rows - 1) + [k - c * (rows - 1)]
    tiles = []
    for (r0, r1), n_cols in zip(_bands(h, rows), per_row, strict=True):
        tiles += [(r0, r1, c0, c1) for c0, c1 in _bands(w, n_cols)]
    return tiles


@PARTITIONERS.register("tiles")
def tiles(shape, k: int, rng: np.random.Generator, **_) -> Partition:
    _need(shape, "image", "tiles")
    _, h, w = shape
    _check_k(k, min(h, w), "pixel rows")
    return Partition("tiles", laser_tiles(h, w, k), "tiles")


@PARTITIONERS.register("grid")
def grid(shape, k: int, rng: np.random.Generator, rows: int | None = None, cols: int | None = None, **_) -> Partition:
    """A rows x cols grid of equal tiles, row-major (FALSE-VFL Fashion-MNIST: 2 x 4 tiles of 14 x 7)."""
    _need(shape, "image", "grid")
    _, h, w = shape
    if rows is None and cols is None:
        rows = 2 if k % 2 == 0 and k > 2 else 1
    if rows is None:
        rows = k // int(cols)
    if cols is None:
        cols = k // int(rows)
    rows, cols = int(rows), int(cols)
    if rows * cols != k:
        raise VFLBenchError(f"grid partitioner: rows x cols = {rows}x{cols} must equal --parties {k}.")
    if rows > h or cols > w:
        raise VFLBenchError(f"grid partitioner: {rows}x{cols} tiles do not fit a {h}x{w} image.")
    return Partition(
        "tiles",
        [(r0, r1, c0, c1) for r0, r1 in _bands(h, rows) for c0, c1 in _bands(w, cols)],
        "grid",
        {"rows": rows, "cols": cols},
    )


def partition_options(name: str) -> list[str]:
    """The options a partitioner takes (its keyword parameters)."""
    import inspect

    fn = PARTITIONERS.get(name)
    skip = {"shape", "k", "rng", "data"}
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name not in skip and p.kind is p.POSITIONAL_OR_KEYWORD
    ]


def check_options(name: str, params: dict[str, Any]) -> None:
    known = partition_options(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        from ..core.errors import VFLBenchError

        raise VFLBenchError(
            f"Partitioner '{name}' has no option {', '.join(unknown)}; its options: {', '.join(known) or 'none'}."
        )
    typed_options(name, params)


def typed_options(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Each option as the type its parameter declares (``alpha: float``, ``rows: int | None``): a
    number given as text is converted, anything else that does not fit is one clear error."""
    import inspect

    from ..core.errors import VFLBenchError

    sig = inspect.signature(PARTITIONERS.get(name)).parameters
    out = dict(params)
    for key, value in params.items():
        ann = str(sig[key].annotation) if key in sig else ""
        want = "int" if ann.startswith("int") else "float" if ann.startswith("float") else None
        if want is None or value is None:
            continue
        ok = (
            isinstance(value, int) and not isinstance(value, bool)
            if want == "int"
            else isinstance(value, (int, float)) and not isinstance(value, bool)
        )
        if ok:
            continue
        try:
            out[key] = int(str(value)) if want == "int" else float(str(value))
        except ValueError:
            what = "an integer" if want == "int" else "a number"
            raise VFLBenchError(f"Partitioner '{name}': option {key} must be {what}, got {value!r}.") from None
    return out


@PARTITIONERS.register("files")
def files(shape, k: int, rng: np.random.Generator, data=None, **_) -> Partition:
    """Each party holds the columns of its own file (``--party-data``): the blocks are the parties'
    column ranges, in the order the files were named."""
    widths = getattr(data, "party_widths", None)
    if widths is None:
        raise VFLBenchError(
            "Partitioner 'files' is for parties that bring their own files: use --party-data name=path,... ."
        )
    if len(widths) != k:
        raise VFLBenchError(f"--party-data names {len(widths)} parties; give --parties {len(widths)}.")
    ends = np.cumsum(widths)
    blocks = [np.arange(e - w, e) for e, w in zip(ends, widths, strict=True)]
    return Partition("features", blocks, "files", {"parties": list(data.party_names)})


def make_partition(
    name: str, shape: tuple[int, ...], k: int, rng: np.random.Generator, data=None, **params
) -> Partition:
    """``data``: the loaded :class:`~vflbench.data.datasets.Dataset`, for partitioners that read column
    names (``columns``) or the training values (``correlation``)."""
    check_options(name, params)
    params = typed_options(name, params)
    fn = PARTITIONERS.get(name)
    part = fn(tuple(shape), int(k), rng, data=data, **params)
    part.params = {**params, **part.params}
    return part


def default_partitioner(kind: str) -> str:
    return "tiles" if kind == "image" else "contiguous"
