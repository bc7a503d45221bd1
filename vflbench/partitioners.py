"""Feature partitioners: how a sample's features are split into K party blocks.

A partitioner returns a :class:`Partition`, which records the realised split (feature indices or
image tiles) so that it can be written to the manifest and re-applied to train and test data alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .errors import VFLBenchError
from .registry import Registry


@dataclass
class Partition:
    kind: str  # "features" (tabular columns) or "tiles" (image rectangles)
    blocks: list  # features: list of int arrays; tiles: list of (r0, r1, c0, c1)
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def n_parties(self) -> int:
        return len(self.blocks)

    def widths(self) -> list[int]:
        if self.kind == "features":
            return [len(b) for b in self.blocks]
        return [(r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in self.blocks]

    def split(self, x: torch.Tensor | np.ndarray) -> list:
        """Split ``[n, D]`` or ``[n, C, H, W]`` data into K per-party arrays."""
        if self.kind == "features":
            return [x[:, np.asarray(b)] for b in self.blocks]
        return [x[:, :, r0:r1, c0:c1] for r0, r1, c0, c1 in self.blocks]

    def block_stats(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample mean and population variance of each block: two ``[n, K]`` arrays."""
        parts = [np.asarray(p, np.float64).reshape(len(x), -1) for p in self.split(x)]
        return np.stack([p.mean(1) for p in parts], 1), np.stack([p.var(1) for p in parts], 1)

    def describe(self) -> dict[str, Any]:
        blocks = [np.asarray(b).tolist() for b in self.blocks] if self.kind == "features" else [list(t) for t in self.blocks]
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
        raise VFLBenchError(f"Partitioner '{name}' needs image data; use 'contiguous', 'random' or 'importance' for tabular data.")


@PARTITIONERS.register("contiguous")
def contiguous(shape, k: int, rng: np.random.Generator, **_) -> Partition:
    """Equal contiguous column blocks of D // K features; the trailing D mod K features are dropped (LASER code)."""
    _need(shape, "tabular", "contiguous")
    d = shape[0]
    _check_k(k, d, "features")
    w = d // k
    return Partition("features", [np.arange(i * w, (i + 1) * w) for i in range(k)], "contiguous", {"dropped": list(range(w * k, d))})


@PARTITIONERS.register("random")
def random_blocks(shape, k: int, rng: np.random.Generator, **_) -> Partition:
    """A random permutation of the features cut into K equal blocks (D mod K features dropped)."""
    _need(shape, "tabular", "random")
    d = shape[0]
    _check_k(k, d, "features")
    perm = rng.permutation(d)
    w = d // k
    return Partition("features", [np.sort(perm[i * w : (i + 1) * w]) for i in range(k)], "random", {"dropped": np.sort(perm[w * k :]).tolist()})


@PARTITIONERS.register("importance")
def importance(shape, k: int, rng: np.random.Generator, alpha: float = 1.0, **_) -> Partition:
    """VertiBench-style importance control: party shares w ~ Dirichlet(alpha * 1_K), then each feature
    goes to party k with probability w_k (redrawn until every party has a feature). Small alpha gives
    very unequal parties; large alpha nearly equal ones."""
    _need(shape, "tabular", "importance")
    d = shape[0]
    _check_k(k, d, "features")
    if alpha <= 0:
        raise VFLBenchError(f"importance partitioner: alpha must be > 0, got {alpha}.")
    for _ in range(1000):
        w = rng.dirichlet(np.full(k, float(alpha)))
        owner = rng.choice(k, size=d, p=w)
        if len(np.unique(owner)) == k:
            break
    else:
        raise VFLBenchError(f"importance partitioner: could not give each of {k} parties a feature with alpha={alpha}; raise alpha.")
    return Partition("features", [np.flatnonzero(owner == i) for i in range(k)], "importance", {"alpha": alpha, "shares": w.tolist()})


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
    return Partition("tiles", [(r0, r1, c0, c1) for r0, r1 in _bands(h, rows) for c0, c1 in _bands(w, cols)], "grid", {"rows": rows, "cols": cols})


def partition_options(name: str) -> list[str]:
    """The options a partitioner takes (its keyword parameters)."""
    import inspect

    fn = PARTITIONERS.get(name)
    skip = {"shape", "k", "rng"}
    return [p.name for p in inspect.signature(fn).parameters.values() if p.name not in skip and p.kind is p.POSITIONAL_OR_KEYWORD]


def check_options(name: str, params: dict[str, Any]) -> None:
    known = partition_options(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        from .errors import VFLBenchError

        raise VFLBenchError(f"Partitioner '{name}' has no option {', '.join(unknown)}; its options: {', '.join(known) or 'none'}.")


def make_partition(name: str, shape: tuple[int, ...], k: int, rng: np.random.Generator, **params) -> Partition:
    check_options(name, params)
    fn = PARTITIONERS.get(name)
    part = fn(tuple(shape), int(k), rng, **params)
    part.params = {**params, **part.params}
    return part


def default_partitioner(kind: str) -> str:
    return "tiles" if kind == "image" else "contiguous"
