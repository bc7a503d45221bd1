"""LASER-VFL (Valdeira, Wang & Chi, ICLR 2025): K extractors and K heads with shared parameters;
head i fuses the *mean* of a subset's representations. Per sample with observed set O, for every
head i in O and every size s = 1..|O|, one subset S with i in S, S in O, |S| = s is drawn uniformly,
and its loss is weighted by C(|O|-1, s-1)/s; the losses are summed (paper eqs. (7)-(8)). In
expectation this equals the sum over all non-empty S in O of the head-averaged loss of S.

``heads=one`` is the single-active-party variant the FALSE-VFL paper runs (one fusion model): for
every size s = 1..|O| one subset of O of size s is drawn uniformly and weighted by
C(|O|, s)/(2^|O| - 1), so the loss is an unbiased estimate of the mean loss over all non-empty
subsets of O. Prediction fuses the observed blocks. With a 2-layer fusion head (the model's
``head_hidden``) the subsets are fused in representation space; with Linear heads in class space.

Vectorised: every task of an epoch is drawn at once (one uniform per sample, head and size, looked up in a
table of subsets) and kept as fusion weights ``A[b, i, s, k]`` (1/|S| on the members of the drawn subset S,
1 with sum fusion). With Linear heads, every head is applied once to every representation (one matrix product)
and each task's logits are the batched product of ``A`` with those projections, plus the bias once: the logits of
fusing first (up to rounding), because a Linear map commutes with a weighted sum.
"""

from __future__ import annotations

import functools
import math

import torch

from ..core.errors import VFLBenchError
from .base import (
    METHODS,
    Batch,
    BatchPrediction,
    Epoch,
    Method,
    Option,
    Stage,
    cross_entropy,
    fusion_option,
    gap_signs,
)
from .simsiam import PRETRAIN, PRETRAIN_OPTION, simsiam_for, with_pretraining

TABLE_ORDER_K = 12  # up to here a task is drawn as the former 3^K subset tables drew it (the same numbers)
CACHED_K = 8  # up to here the unranked subsets of every (pattern, head, size, rank) are kept (SlotCache: <= 4.6 MB)
MAX_K = 64  # the largest subset count, C(64, 32), still fits in int64


def laser_weights(k: int) -> torch.Tensor:
    """``W[o, s]`` = C(o-1, s-1)/s for o observed blocks and subset size s (1-based; 0 elsewhere)."""
    w = torch.zeros(k + 1, k + 1)
    for o in range(1, k + 1):
        for s in range(1, o + 1):
            w[o, s] = math.comb(o - 1, s - 1) / s
    return w


def one_weights(k: int) -> torch.Tensor:
    """``W[o, s]`` = C(o, s)/(2^o - 1) for o observed blocks and size s (heads=one; 0 for s > o)."""
    return torch.tensor(
        [[math.comb(o, s) / (2**o - 1) if 1 <= s <= o else 0.0 for s in range(1, k + 1)] for o in range(k + 1)]
    )


@functools.cache
def _binomials(n: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([[math.comb(m, j) for j in range(n + 1)] for m in range(n + 1)], dtype=dtype, device=device)


def binomials(n: int, device="cpu", dtype: torch.dtype = torch.long) -> torch.Tensor:
    """``B[m, j]`` = C(m, j) for 0 <= m, j <= n (int64: exact up to n = 66; built once per size, device, dtype)."""
    return _binomials(n, str(device), dtype)


def candidates(obs: torch.Tensor, heads: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every (sample, head, size) task: the blocks a subset is drawn from besides the head ``[B, h, K]``, how
    many of them it takes ``[B, h, K]``, and how many such subsets there are ``[B, h, K]`` (0: no task: a head
    outside O, or a size above |O|). ``heads``: per_party (head i draws s-1 blocks of O \\ {i}), one (s blocks of
    O), active (head 0 only, s-1 blocks of O \\ {0})."""
    b, k = obs.shape
    size = torch.arange(1, k + 1, device=obs.device)
    n_obs = obs.sum(1)
    binom = binomials(k, obs.device)
    if heads == "one":
        others = obs[:, None, :]
        take = size[None, None, :].expand(b, 1, k)
        count = binom[n_obs[:, None, None].expand(b, 1, k), take]
        return others, take, count
    eye = torch.eye(k, dtype=torch.bool, device=obs.device)
    if heads == "active":
        eye = eye[:1]
    others = obs[:, None, :] & ~eye[None]  # [B, h, K]
    take = (size - 1)[None, None, :].expand(b, eye.shape[0], k)
    has_head = obs[:, : eye.shape[0]]  # head i is in O
    count = binom[(n_obs - 1).clamp_min(0)[:, None, None].expand_as(take), take] * has_head[:, :, None]
    return others, take, count


def draw_ranks(count: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A uniform rank in ``0 .. count-1`` per task (0 where count is 0): the former tables' float draw
    ``floor(u * count)``, one float32 uniform per (sample, head, size) in that order (the same numbers as then). Up to
    K = 12 every count is below float32's 2^24, so every rank can be drawn; above, LASER-VFL draws nested subsets
    (:meth:`LaserVFL._nested_orders`) and no rank."""
    flat = count.reshape(count.shape[0], -1)
    u = torch.rand(flat.shape, generator=gen, device=count.device)
    return (u * flat).long().view_as(count)


def unrank(others: torch.Tensor, take: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """The subset at ``rank`` in the former tables' order: the rank-th largest bitmask among the ``take``-subsets of
    ``others`` (the submasks of O were enumerated from the largest down). ``others``: the candidates ``[..., K]``
    (bool), ``take`` and ``rank``: ``[..., S]`` (S draws from the same candidates) -> membership ``[..., S, K]``.
    The combinatorial number system unranks a subset in colex order, which is the ascending order of the bitmasks:
    scanning the blocks from the highest, a candidate is taken when the rank left is at least C(c, j), c the
    candidates below it and j the blocks still to take. K steps of one gather each: no table."""
    k = others.shape[-1]
    dt = torch.int32 if k <= TABLE_ORDER_K else torch.long  # counts below 2^31: int32 halves the memory traffic
    binom = binomials(k, others.device, dt).reshape(-1)  # C(c, j) at c * (k + 1) + j
    below = others.to(dt).cumsum(-1) - others.to(dt)  # candidates below each block
    m = others.sum(-1, keepdim=True).to(dt)
    j = take.to(dt)
    n = torch.gather(binom, 0, (m * (k + 1) + j).reshape(-1).long()).view_as(j) - 1 - rank.to(dt)  # ascending rank
    cols = []
    for b in range(k - 1, -1, -1):
        val = torch.gather(binom, 0, (below[..., b : b + 1] * (k + 1) + j).reshape(-1).long()).view_as(j)
        t = others[..., b : b + 1] & (n >= val)  # (with no block left to take, n = 0 < C(c, 0) = 1)
        cols.append(t)
        n = n - val * t
        j = j - t.to(dt)
    return torch.stack(cols[::-1], -1)


class SlotCache:
    """For small K, the fusion weights of every draw, unranked once (not enumerated: :func:`unrank` over every
    (pattern, head, size, rank)), so that a draw is two gathers, as with the former tables: at K = 8 it holds
    256 x 8 x 8 x 35 slots (the counts' maximum C(7, 3) = 35) of 8 weights. The same draws as :func:`draw_tasks`,
    bit for bit (one float32 uniform per task); above :data:`CACHED_K` the draws are unranked per task."""

    def __init__(self, k: int, heads: str, fusion, device):
        obs = ((torch.arange(2**k, device=device)[:, None] >> torch.arange(k, device=device)) & 1).bool()
        others, take, count = candidates(obs, heads)
        if heads == "one":
            count = count * obs.any(1)[:, None, None]
        b, h, _ = count.shape
        width = max(int(count.max()), 1)
        self.count = count.reshape(b, h * k)  # [pattern, head*size]
        member = torch.stack(
            [unrank(others.expand(b, h, k), take.expand(b, h, k), torch.where(r < count, r, 0)) for r in range(width)],
            -2,
        )  # [pattern, head, size, rank, K]
        if heads != "one":
            member = member | torch.eye(k, dtype=torch.bool, device=device)[:h][None, :, None, None, :]
        member = member & (torch.arange(width, device=device)[None, None, None, :] < count[..., None])[..., None]
        self.frac = fusion(member.transpose(-2, -3)).transpose(-2, -3).reshape(-1, k)  # [slot, K]
        self.first = (torch.arange(b, device=device)[:, None] * (h * k) + torch.arange(h * k, device=device)) * width
        self.width, self.h, self.k = width, h, k

    def draw(self, obs: torch.Tensor, gen: torch.Generator, order=None) -> torch.Tensor:
        """Fusion weights ``[B, h, size, K]`` of one draw per row of ``obs`` (``order``: returned in that order)."""
        pattern = (obs.long() << torch.arange(self.k, device=obs.device)).sum(1)
        cnt = torch.index_select(self.count, 0, pattern)
        u = torch.rand(cnt.shape, generator=gen, device=obs.device)
        slots = torch.index_select(self.first, 0, pattern) + (u * cnt).long()
        if order is not None:
            slots = torch.index_select(slots, 0, order)
        return torch.index_select(self.frac, 0, slots.reshape(-1)).view(slots.shape[0], self.h, self.k, self.k)


def draw_tasks(obs: torch.Tensor, gen: torch.Generator, heads: str, shared: bool = False, order=None) -> torch.Tensor:
    """Draw the LASER tasks: ``[B, h, K, K]`` membership of the subset drawn for every (sample, head, size), uniform
    among the subsets of O of that size that contain the head (``heads=one``: among all), independently per task
    like the authors' ``random.sample``; empty where there is no task. ``shared``: one draw per (head, size) for
    the whole batch (the authors' per-batch code; the rows of ``obs`` are equal, one row comes back). ``order``:
    the draws are made in sample order and returned in this order."""
    if obs.shape[1] > TABLE_ORDER_K:
        raise ValueError(
            f"independent task draws stop at K = {TABLE_ORDER_K} (K = {obs.shape[1]} given); above, LASER-VFL draws "
            "nested subsets (LaserVFL._nested_orders)"
        )
    if shared:
        obs = obs[:1]
    others, take, count = candidates(obs, heads)
    rank = draw_ranks(count, gen)  # drawn in sample order
    b, h, k = count.shape
    others = others.expand(b, h, k)
    if order is not None:
        others, take, count, rank = (
            torch.index_select(t, 0, order) for t in (others, take.expand(b, h, k), count, rank)
        )
    flat = unrank(others, take, rank)  # [B, h, size, K]
    valid = (count > 0)[..., None]
    if heads != "one":  # the head itself
        eye = torch.eye(k, dtype=torch.bool, device=obs.device)[:h]
        return (flat | eye[None, :, None, :]) & valid
    return flat & valid


@METHODS.register("laser")
class LaserVFL(Method):
    @classmethod
    def loss_refusal(cls, options):
        return None  # survives a lost party: fusion over the observed subsets

    name, display, hp_key, f1_rule = "laser", "LASER-VFL", "laser", "per_predictor_mean"
    search_space = {"fusion": ("choice", ("mean", "sum"))}  # vflbench tune
    packable = True
    pack_state = ("_epoch",)
    paper = "LASER-VFL (Valdeira, Wang & Chi, ICLR 2025)"
    assumptions = (
        "heads=one (FALSE-VFL protocol): per size s one uniform subset of the observed set, weight C(|O|, s)/(2^|O| - "
        "1), "
        "an unbiased estimate of the mean loss over all non-empty subsets (the FALSE-VFL spec's recommendation)",
    )
    option_specs = (
        Option(
            "laser_subsets",
            str,
            "sample",
            "draw one subset per (head, size) per sample, or once per batch (the authors' code)",
            choices=("batch", "sample"),
            protocol="laser_subsets",
        ),
        fusion_option(),
        Option(
            "heads",
            str,
            "per_party",
            "one fusion head per party (the paper), one fusion model trained on every subset "
            "(the single-active-party variant the FALSE-VFL paper runs), or 'active': one fusion model trained only on "
            "subsets that hold the active party's block 0 (head 0 of the authors' code)",
            choices=("per_party", "one", "active"),
            protocol="laser_heads",
        ),
        PRETRAIN_OPTION,
        # Readings of the FALSE-VFL paper's LASER-VFL baseline (results/false/README.md, controlled runs)
        Option(
            "samples",
            str,
            "labeled",
            "train on every labeled sample, or only on the fully aligned labeled ones",
            choices=("labeled", "aligned"),
        ),
        Option(
            "missing",
            str,
            "subset",
            "fuse a subset by the mean of its blocks' representations (LASER-VFL), or "
            "zero-impute the missing blocks (the mean over all K parties with zeros)",
            choices=("subset", "zero"),
        ),
        Option(
            "freeze", bool, False, "with pretrain=simsiam: keep the pretrained extractors frozen while the head trains"
        ),
        Option(
            "loss_weights",
            str,
            "paper",
            "the tasks' loss weights: the paper's C(|O|-1, s-1)/s (a sample's weights sum to 2^|O| - 1, the number of "
            "its subsets), or those divided per sample by their sum (every sample weighs 1; docs/SCALING.md)",
            choices=("paper", "per_sample"),
        ),
    )

    @classmethod
    def stages_for(cls, options):
        return with_pretraining(options, (Stage(samples=options.get("samples", "labeled")),))

    @classmethod
    def validate_options(cls, options):
        if options.get("freeze") and options.get("pretrain", "none") != "simsiam":
            return "freeze=true keeps pretrained extractors frozen; it needs pretrain=simsiam"
        return None

    def trainable(self, stage: Stage) -> torch.Tensor:
        t = super().trainable(stage)
        if self.options["freeze"] and stage.name != PRETRAIN.name:
            t[self.ext.member_ids] = False
        return t

    @classmethod
    def pack_refusal(cls, run) -> str | None:
        if run.parties > TABLE_ORDER_K:
            return (
                f"LASER-VFL above K = {TABLE_ORDER_K} draws its tasks inside each step (nested subsets), "
                "which a pack's vectorised step does not"
            )
        return None

    def build(self) -> None:
        if self.k > MAX_K:
            raise VFLBenchError(
                f"LASER-VFL with K={self.k}: its subset counts (up to C(K, K/2)) pass 64-bit integers above K = "
                f"{MAX_K}; use K <= {MAX_K}."
            )
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.one = self.options["heads"] == "one"
        self.active_head = self.options["heads"] == "active"
        self.heads_mode = self.options["heads"]
        self.n_heads = 1 if self.one or self.active_head else self.k
        self.head, _ = self.heads("head", self.n_heads, self.ctx.model.cut)
        # above K = 12 every head's subsets are nested: one uniform order of O \ {i} per (sample, head), the subset
        # of size s its first s - 1 blocks (each still exactly uniform; docs/SCALING.md): O(K^2) a sample, not K^3
        self.nested = self.k > TABLE_ORDER_K
        self.mean = self.fusion_is_mean()
        self.zero_impute = self.options["missing"] == "zero"
        self.per_sample = self.options["loss_weights"] == "per_sample"
        if self.one:  # observed count -> loss weights [1, size]: C(|O|, s)/(2^|O| - 1) for s <= |O|
            self.wobs = one_weights(self.k).to(self.device)
        else:  # observed count -> loss weights [size]: C(|O|-1, s-1)/s for s <= |O| (times: the head is in O)
            self.wobs = laser_weights(self.k)[:, 1:].contiguous().to(self.device)
        self._epoch = None  # the current epoch's task draws (set by begin_epoch)
        self._slots: SlotCache | None = None  # K <= 8: every draw's fusion weights, unranked on first use
        self.ssl = simsiam_for(self, self.ext)

    def _weights(self, obs: torch.Tensor) -> torch.Tensor:
        """The loss weights ``[B, head, size]`` of a batch's tasks (0 for a head outside O or a size above |O|);
        ``loss_weights=per_sample``: divided by their sum per sample, so every sample with a task weighs 1."""
        w = torch.index_select(self.wobs, 0, obs.sum(1))  # [B, size]
        if self.one:
            w = w[:, None, :]
        else:
            heads = obs[:, : self.n_heads].to(w.dtype)  # head i in O (active: head 0)
            w = w[:, None, :] * heads[:, :, None]
        if self.per_sample:
            w = w / w.sum((1, 2), keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
        return w

    def display_loss(self, batch: Batch, value: float) -> float:
        """The step's loss as the weighted mean of its task losses (cross-entropies): the paper's weights sum to
        2^|O| - 1 per sample, so the loss itself reaches 1e19 at K = 64 (the optimised loss is unchanged)."""
        obs = batch.obs
        if self.per_sample or obs.shape[0] == 0:
            return value
        shared = self.options["laser_subsets"] == "batch"
        total = float(self._weights(obs[:1]).sum()) * obs.shape[0] if shared else float(self._weights(obs).sum())
        count = max(int(obs.any(1).sum()), 1)
        return value * count / total if total > 0 else value

    def _fusion(self, member: torch.Tensor) -> torch.Tensor:
        """Membership ``[..., K]`` -> fusion weights: 1/|S| on the members of S (mean), 1/K (zero-imputed mean), or
        1 (sum)."""
        m = member.to(self.store.flat.dtype)
        if not self.mean:
            return m
        if self.zero_impute:
            return m / self.k
        # a drawn subset of size s has s members (an empty draw none): the same float32 quotients as m / m.sum(-1)
        size = torch.arange(1, self.k + 1, device=m.device, dtype=m.dtype)
        return m / size[:, None]

    def begin_epoch(self, epoch: Epoch):
        """Draw every task of the epoch at once: per sample, or per batch (authors' code, where a batch
        carries its first sample's pattern). With them, what the steps would otherwise recompute from the batch:
        each batch's active members and count of samples with an observed block, and (two classes) the
        :func:`gap_signs` of every position's label. Batches then only slice the precomputed tensors. Above
        K = 12 the tasks are drawn in each step (nested subsets); only the batch statistics are precomputed."""
        obs, order, batch_size = epoch.obs, epoch.order, epoch.batch_size
        self._batch_size = batch_size
        active, count = self._batch_stats(epoch)
        signs = None
        if epoch.y is not None and self.c == 2:
            signs = gap_signs(torch.index_select(epoch.y, 0, order), self.store.flat.dtype)  # [n, 2]
        if self.nested:
            self._epoch = ("nested", None, None, active, count, signs)
            return
        if epoch.per_batch or self.options["laser_subsets"] == "batch":
            first = obs[order[::batch_size]]  # [n_batches, K]
            if self.options["laser_subsets"] == "batch":
                agg, w = self._draw(first)
                self._epoch = ("batch", agg[:, None], w[:, None], active, count, signs)
                return
            # per-batch masks, per-sample subsets: position p of the epoch carries its batch's pattern
            draws = self._draw(first.repeat_interleave(batch_size, 0)[: len(order)])
        else:  # drawn by sample index, then laid out in the epoch's order: a batch is a slice, not a gather
            draws = self._draw(obs, order)
        self._epoch = ("position", *draws, active, count, signs)

    def _batch_stats(self, epoch: Epoch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per batch of the epoch, as :meth:`_step_stats` computes them from the batch's masks: the active
        members ``[n_batches, members]`` and the loss's denominator ``[n_batches]`` (the samples with an
        observed block, at least 1)."""
        obs = torch.index_select(epoch.obs, 0, epoch.order)  # [n, K] in the epoch's order
        n, k, bs = obs.shape[0], obs.shape[1], epoch.batch_size
        nb = -(-n // bs)
        if epoch.per_batch:  # a batch carries its first sample's pattern (the trainer's batches)
            seen = obs[::bs]
            sizes = torch.full((nb,), bs, dtype=torch.long, device=obs.device)
            if nb:
                sizes[-1] = n - (nb - 1) * bs
            rows = seen.any(1).long() * sizes
        else:
            padded = torch.zeros(nb * bs, k, dtype=torch.bool, device=obs.device)
            padded[:n] = obs
            padded = padded.view(nb, bs, k)
            seen, rows = padded.any(1), padded.any(2).sum(1)
        head = (rows > 0)[:, None] if self.one else seen[:, :1] if self.active_head else seen
        parts = [seen, head]
        if self.ssl is not None:
            parts.append(torch.zeros(nb, self.ssl.n_members, dtype=torch.bool, device=obs.device))
        return torch.cat(parts, 1), rows.clamp_min(1)

    def _draw(self, obs, order=None):
        """(fusion weights, loss weights) of one task draw per row of ``obs``; ``order``: returned in that order."""
        if self.k <= CACHED_K:
            if self._slots is None:
                self._slots = SlotCache(self.k, self.heads_mode, self._fusion, self.device)
            agg = self._slots.draw(obs, self.gen, order)
        else:
            agg = self._fusion(draw_tasks(obs, self.gen, self.heads_mode, order=order))
        if order is not None:
            obs = torch.index_select(obs, 0, order)
        return agg, self._weights(obs)

    def _tasks(self, batch: Batch):
        """(fusion weights [B|1, head, size, block], loss weights [B|1, head, size], active members, the loss's
        denominator, the labels' :func:`gap_signs` [B, 2] or None) for this batch: sliced from the epoch's draws,
        or drawn and computed now when no epoch was begun (a lone batch). Nested draws (K > 12): no fusion weights
        (the loss draws them)."""
        if self._epoch is not None:
            kind, agg, w, active, count, signs = self._epoch
            j, start = batch.number, batch.number * self._batch_size
            stop = start + batch.size
            if signs is not None:
                signs = signs[start:stop]
            if kind == "nested":
                return None, None, active[j], count[j], signs
            if kind == "batch":
                return agg[j], w[j], active[j], count[j], signs
            return agg[start:stop], w[start:stop], active[j], count[j], signs
        obs = batch.obs
        if self.nested:
            return None, None, *self._step_stats(obs), None
        shared = self.options["laser_subsets"] == "batch"
        agg, w = self._draw(obs[:1] if shared else obs)
        return agg, w, *self._step_stats(obs), None

    def _nested_orders(self, obs: torch.Tensor) -> torch.Tensor:
        """Per (sample, head) a uniform order of the blocks: the head first, then the other observed blocks in a
        random order, then the rest ``[B, head, K]``. The subset of size s is its first s blocks. The order sorts
        62-bit random keys (ties: about K^2 / 2^63, broken by block index)."""
        shared = self.options["laser_subsets"] == "batch"
        rows = obs[:1] if shared else obs
        b, k = rows.shape
        h = self.n_heads
        keys = torch.randint(0, 1 << 62, (b, h, k), generator=self.gen, device=obs.device)
        if self.one:
            cand = rows[:, None, :]
        else:
            eye = torch.eye(k, dtype=torch.bool, device=obs.device)[:h]
            cand = rows[:, None, :] & ~eye[None]
            keys = torch.where(eye[None], torch.full_like(keys, -1), keys)
        keys = torch.where(cand | (keys < 0), keys, torch.full_like(keys, 1 << 62))
        perm = torch.argsort(keys, dim=-1, stable=True)
        return perm.expand(obs.shape[0], h, k) if shared else perm

    def _nested_logits(self, emb: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, head, size, C], loss weights [B, head, size]) of nested tasks: the running sums of the blocks
        in each (sample, head)'s order give every size's fusion at once (O(K^2) a sample)."""
        k, b, d = emb.shape
        h = self.n_heads
        perm = self._nested_orders(obs)  # [B, h, K]
        size = torch.arange(1, k + 1, device=emb.device, dtype=emb.dtype)
        div = (torch.full_like(size, float(k)) if self.zero_impute else size) if self.mean else torch.ones_like(size)
        if self.head.linear:
            w = self.head.weight  # [head, D, C]
            proj = (emb.reshape(k * b, d) @ w.permute(1, 0, 2).reshape(d, h * self.c)).view(k, b, h, self.c)
            proj = proj.permute(1, 2, 0, 3)  # [B, head, block, C]
            run = torch.gather(proj, 2, perm[..., None].expand(-1, -1, -1, self.c)).cumsum(2)
            logits = run / div[None, None, :, None] + self.head.bias[:, None, :]
        else:
            e = emb.permute(1, 0, 2)[:, None].expand(b, h, k, d)
            fused = torch.gather(e, 2, perm[..., None].expand(-1, -1, -1, d)).cumsum(2) / div[None, None, :, None]
            logits = self.head(fused.permute(1, 0, 2, 3).reshape(h, b * k, d)).view(h, b, k, self.c).permute(1, 0, 2, 3)
        return logits, self._weights(obs)

    def _step_stats(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(active members, the loss's denominator: the samples with an observed block, at least 1) of a batch."""
        seen = obs.any(0)
        rows = obs.any(1)
        head_active = rows.any()[None] if self.one else obs[:, :1].any(0) if self.active_head else seen
        active = torch.cat([seen, head_active])
        if self.ssl is not None:
            active = torch.cat([active, torch.zeros(self.ssl.n_members, dtype=torch.bool, device=active.device)])
        return active, rows.sum().clamp_min(1)

    def loss(self, batch: Batch, stage: Stage):
        if stage.name == PRETRAIN.name:
            return self.ssl.loss(batch)
        obs, y = batch.obs, batch.y
        agg, wts, active, count, signs = self._tasks(batch)  # agg [B or 1, head, size, block]: 1/s on the drawn subset
        emb = self.send(self.ext(batch.blocks, need=obs.T), obs.T)  # [K, B, D]
        k, b, d = emb.shape
        h = self.n_heads
        if agg is None:  # nested tasks (K > 12)
            logits, wts = self._nested_logits(emb, obs)
        elif self.head.linear:
            # Heads are linear and fusion is a mean, so project first and fuse in class space (C << D):
            # proj[b, i, j] = head_i(emb_j[b]) without bias; logits[b, i, s] = sum_j agg[b, i, s, j] proj[b, i, j] +
            # bias_i
            w = self.head.weight  # [head, D, C]
            proj = (emb.reshape(k * b, d) @ w.permute(1, 0, 2).reshape(d, h * self.c)).view(k, b, h, self.c)
            proj = proj.permute(
                1, 2, 0, 3
            )  # [B, head, block, C], a strided view (its batch dims flatten without a copy)
            logits = torch.matmul(agg, proj) + self.head.bias[:, None, :]  # [B, head, size, C]
        else:  # an MLP head: fuse each task's representations, then apply the head
            fused = torch.matmul(agg.expand(b, -1, -1, -1), emb.permute(1, 0, 2)[:, None])  # [B, head, size, D]
            logits = self.head(fused.permute(1, 0, 2, 3).reshape(h, b * k, d)).view(h, b, k, self.c).permute(1, 0, 2, 3)
        ce = cross_entropy(logits, y[:, None, None], None if signs is None else signs[:, None, None])  # [B, head, size]
        loss = (ce * wts).sum() / count  # 0 for a batch with no observed block (nothing active; skipped)
        return loss, active

    def exact_logits(self, blocks, obs) -> torch.Tensor:
        emb = self.send(self.ext(blocks, need=obs.T), obs.T)  # [K, B, D]
        o = obs.float()
        w = (o / self.k if self.zero_impute else o / o.sum(1, keepdim=True).clamp_min(1)) if self.mean else o
        fused = torch.einsum("bk,kbd->bd", w, emb)
        return self.head(fused[None].expand(self.n_heads, -1, -1))  # every head on mean(emb of O): [head, B, C]

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        lg = self.exact_logits(batch.blocks, obs)
        valid = obs.any(1)[None].clone() if self.one or self.active_head else obs.T.clone()
        return BatchPrediction(lg.argmax(-1), valid, self.score(lg), obs.any(1))
