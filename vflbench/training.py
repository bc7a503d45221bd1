"""Training and prediction loops. Data stays in memory as tensors on the run's device; the only
Python loop is over batches (and epochs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .methods import Method
from .optim import cosine_lr
from .partitioners import Partition


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


def _gen(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass
class History:
    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    skipped_batches: int = 0


def fit(
    method: Method,
    data: BlockData,
    y: torch.Tensor,
    obs: torch.Tensor,
    hp: dict,
    proto: dict,
    seeds: Callable[[str], int],
    on_epoch: Callable[[int, float], None] | None = None,
) -> History:
    """Train ``method`` for ``hp['epochs']`` epochs. ``obs`` is the ``[n, K]`` training mask."""
    device = obs.device
    n, bs, epochs = data.n, int(hp["batch_size"]), int(hp["epochs"])
    batching = _gen(device, seeds("batching"))
    aug = _gen(device, seeds("augment")) if proto["augment"] else None
    weights = None
    if proto["balanced_sampler"]:
        counts = torch.bincount(y, minlength=int(y.max()) + 1).float()
        weights = (1.0 / counts)[y]
    per_batch = proto["train_granularity"] == "batch"
    hist = History()
    method.train(True)
    for epoch in range(epochs):
        t0 = time.perf_counter()
        if hp.get("schedule") == "cosine":
            method.set_lr(cosine_lr(float(hp["lr"]), epoch, epochs, float(hp.get("eta_min_ratio", 0.0))))
        if weights is not None:
            order = torch.multinomial(weights, n, replacement=True, generator=batching)
        elif proto["shuffle"]:
            order = torch.randperm(n, generator=batching, device=device)
        else:
            order = torch.arange(n, device=device)
        total, count = 0.0, 0
        method.begin_epoch(obs, order, bs, per_batch)
        for j, start in enumerate(range(0, n, bs)):
            idx = order[start : start + bs]
            ob = obs[idx]
            if per_batch:  # the batch carries the pattern of its first sample (authors' collate_fn)
                ob = ob[:1].expand(len(idx), -1)
            loss = method.train_step(data.batch(idx, aug), ob, y[idx], idx=idx, batch_no=j)
            if loss is None:
                hist.skipped_batches += 1
            else:
                total += loss
                count += 1
        hist.loss.append(total / max(count, 1))
        hist.lr.append(method.opt.lr)
        hist.seconds.append(time.perf_counter() - t0)
        if on_epoch is not None:
            on_epoch(epoch, hist.loss[-1])
    method.train(False)
    return hist


@torch.no_grad()
def predict(method: Method, data: BlockData, obs: torch.Tensor, batch_size: int, tta: torch.Generator | None = None):
    """Concatenate the method's batch predictions over a split; returns numpy arrays."""
    method.train(False)
    method.store.begin()
    parts = []
    for start in range(0, data.n, batch_size):
        idx = torch.arange(start, min(start + batch_size, data.n), device=obs.device)
        parts.append(method.predict_batch(data.batch(idx, tta), obs[idx]))
    preds = torch.cat([p.preds for p in parts], 1).cpu().numpy()
    valid = torch.cat([p.valid for p in parts], 1).cpu().numpy()
    counted = torch.cat([p.counted for p in parts]).cpu().numpy()
    scores = None if parts[0].scores is None else torch.cat([p.scores for p in parts], 1).float().cpu().numpy()
    return preds, valid, scores, counted
