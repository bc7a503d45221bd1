"""The losses the methods share: cross-entropy over the samples a predictor counts (with the sign of the gap for
the FALSE-VFL losses), its masked mean, and zeroed inputs for missing blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gap_signs(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[..., 2]``: the weights that turn a two-class logit pair into the signed gap whose softplus is the
    cross-entropy, (-1, +1) for class 0 and (+1, -1) for class 1 (a method that knows its epoch's labels
    computes them once per epoch and passes them to :func:`cross_entropy`)."""
    sign = 1.0 - 2.0 * (y == 1).to(dtype)
    return torch.stack([-sign, sign], -1)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element cross-entropy over the last axis (``y`` broadcast to ``logits.shape[:-1]``).
    For two classes it is softplus of the signed logit gap: the same value, about half the cost;
    ``signs``: :func:`gap_signs` of ``y`` when the caller has them already (``y`` is then not read)."""
    if logits.shape[-1] == 2:
        # softplus(l0 - l1) for class 1, softplus(l1 - l0) for class 0, as the sum of the logits times -1 or +1: the
        # products are exact and the two-term sum rounds once, so the values and gradients of where(y == 1, -gap, gap)
        if signs is None:
            signs = gap_signs(y, logits.dtype)
        ce = F.softplus((logits * signs).sum(-1))
        return ce if ce.shape == logits.shape[:-1] else ce.expand(logits.shape[:-1])
    y = y.expand(logits.shape[:-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none").view(y.shape)


def masked_mean_ce(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per-predictor CE averaged over the samples with weight 1: logits ``[P, B, C]``, weight ``[P, B]``
    -> ``[P]`` (zero where a predictor has no sample)."""
    p, b, c = logits.shape
    ce = F.cross_entropy(logits.reshape(p * b, c), y.repeat(p), reduction="none").view(p, b)
    w = weight.float()
    return (ce * w).sum(1) / w.sum(1).clamp_min(1.0)


def zero_missing_inputs(blocks, use: torch.Tensor):
    """Blocks with the features of unused parties set to zero: ``use`` ``[K, B]``; tabular ``[K, B, w]``
    or a list of K image tiles ``[B, C, h, w]``."""
    if isinstance(blocks, torch.Tensor):
        return blocks * use[:, :, None].to(blocks.dtype)
    return [t * use[k].view(-1, *([1] * (t.ndim - 1))).to(t.dtype) for k, t in enumerate(blocks)]
