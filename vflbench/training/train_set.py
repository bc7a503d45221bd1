"""What the trainer is fed: each party's block of columns (:class:`BlockData`), the training split with its labels,
observation mask and labelled samples (:class:`TrainSet`), the protocol's say in training (:class:`TrainPolicy`),
image augmentation, and the per-sample weights of the class-balanced sampler. The loop that consumes them is
:mod:`vflbench.training.trainer`."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from ..data.partitioners import Partition
from ..methods import Stage


class BlockData:
    """Per-party views of one split. Tabular: ``[K, n, w]`` stacked (zero-padded to the widest block).
    Images: the full ``[n, C, H, W]`` tensor, tiled per batch (after augmentation, as the authors)."""

    def __init__(self, x: np.ndarray, partition: Partition, device: torch.device):
        self.partition = partition
        self.kind = partition.kind
        xt = torch.as_tensor(x)
        if self.kind == "features":
            w = max(partition.widths())
            stacked = torch.zeros(partition.n_parties, len(xt), w)
            for k, cols in enumerate(partition.blocks):
                stacked[k, :, : len(cols)] = xt[:, torch.as_tensor(np.asarray(cols), dtype=torch.long)]
            self.x = stacked.to(device)
            self.n = len(xt)
        else:
            self.x = xt.to(device)
            self.n = len(xt)

    @classmethod
    def stacked(cls, x: torch.Tensor) -> BlockData:
        """Tabular blocks already stacked as ``[K, n, w]`` (tests, synthetic data)."""
        out = cls.__new__(cls)
        out.partition, out.kind, out.x, out.n = None, "features", x, x.shape[1]
        return out

    def head(self, m: int) -> BlockData:
        """The first ``m`` samples (a view; for timing a few batches)."""
        out = copy.copy(self)
        out.x = self.x[:, :m] if self.kind == "features" else self.x[:m]
        out.n = min(m, self.n)
        return out

    def batch(self, idx: torch.Tensor, augment: torch.Generator | None = None):
        if self.kind == "features":
            return self.x[:, idx]
        xb = self.x[idx]
        if augment is not None:
            xb = random_crop_flip(xb, 4, augment)
        return [xb[:, :, r0:r1, c0:c1] for r0, r1, c0, c1 in self.partition.blocks]


def random_crop_flip(x: torch.Tensor, pad: int, gen: torch.Generator) -> torch.Tensor:
    """Per-sample RandomCrop(size, padding=pad) + RandomHorizontalFlip, vectorised."""
    b, c, h, w = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=gen, device=x.device)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=gen, device=x.device)
    flip = torch.rand(b, generator=gen, device=x.device) < 0.5
    rows = oy[:, None] + torch.arange(h, device=x.device)[None]
    cols = ox[:, None] + torch.arange(w, device=x.device)[None]
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    bi = torch.arange(b, device=x.device)[:, None, None]
    out = xp.permute(0, 2, 3, 1)[bi, rows[:, :, None], cols[:, None, :]]  # [b, h, w, c]
    return out.permute(0, 3, 1, 2).contiguous()


def generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass(frozen=True)
class TrainPolicy:
    """The protocol's say in training (see docs/PROTOCOLS.md)."""

    per_batch_masks: bool
    shuffle: bool
    balanced_sampler: bool
    augment: bool
    stale_updates: bool = False
    local_steps: int = 1  # parameter updates per exchange (--local-steps; vflbench.training.local_steps.StaleExchange)


@dataclass
class TrainSet:
    """The training split as the trainer sees it. ``labeled`` ``[n]`` bool (None: all labeled)."""

    blocks: BlockData
    y: torch.Tensor
    obs: torch.Tensor
    labeled: torch.Tensor | None = None

    def pool(self, stage: Stage) -> torch.Tensor | None:
        """The sample indices a stage trains on (None: every sample, in index order)."""
        lab = self.labeled
        if stage.samples == "all":
            return None
        keep = lab if lab is not None else None
        if stage.samples == "complete":  # every fully observed sample, labeled or not
            return self.obs.all(1).nonzero().view(-1)
        if stage.samples == "aligned":
            full = self.obs.all(1)
            keep = full if keep is None else keep & full
        return None if keep is None else keep.nonzero().view(-1)


def stage_labels(data: TrainSet, stage: Stage) -> torch.Tensor | None:
    """The labels a stage trains with: None when it hides them; -1 on unlabeled samples when it
    trains on all samples of a semi-supervised run."""
    if not stage.labels:
        return None
    if stage.samples in ("all", "complete") and data.labeled is not None:
        return torch.where(data.labeled, data.y, torch.full_like(data.y, -1))
    return data.y


def balanced_weights(
    data: TrainSet, stage: Stage, pool: torch.Tensor | None, policy: TrainPolicy
) -> torch.Tensor | None:
    """Per-sample draw weights of the class-balanced sampler (None: no balanced sampling)."""
    if not (policy.balanced_sampler and stage.labels):
        return None
    yp = data.y if pool is None else data.y[pool]
    return (1.0 / torch.bincount(yp, minlength=int(yp.max()) + 1).float())[yp]


def class_weights(y: np.ndarray, n_classes: int, balanced: bool) -> np.ndarray:
    """Per sample the weight of its class: ``n / (C n_c)`` when the run samples classes in balance (the neural
    methods' class-balanced sampler draws each class equally often), else 1."""
    if not balanced:
        return np.ones(len(y))
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    return len(y) / (n_classes * np.maximum(counts, 1))[y]
