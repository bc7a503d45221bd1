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


def laser_weights(k: int) -> torch.Tensor:
    """``W[o, s]`` = C(o-1, s-1)/s for o observed blocks and subset size s (1-based; 0 elsewhere)."""
    w = torch.zeros(k + 1, k + 1)
    for o in range(1, k + 1):
        for s in range(1, o + 1):
            w[o, s] = math.comb(o - 1, s - 1) / s
    return w


def subset_table(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lookup tables for uniform subset sampling.

    ``table[O, i, s-1, r]`` is the r-th subset (as a bitmask) of observed set O (bitmask) that contains
    head i and has size s; ``count[O, i, s-1]`` how many there are (C(|O|-1, s-1) when i is in O).
    Built by enumerating every pair S <= O once (3^K pairs).
    """
    width = max(math.comb(k - 1, j) for j in range(k))
    table = torch.zeros(2**k, k, k, width, dtype=torch.long)
    count = torch.zeros(2**k, k, k, dtype=torch.long)
    for o in range(1, 2**k):
        sub = o
        while sub:  # every non-empty submask of o
            size = sub.bit_count()
            for i in range(k):
                if sub >> i & 1:
                    c = count[o, i, size - 1]
                    table[o, i, size - 1, c] = sub
                    count[o, i, size - 1] = c + 1
            sub = (sub - 1) & o
    return table, count


def subset_table_any(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`subset_table` for one head that every subset serves: ``table[O, 0, s-1, r]`` is the
    r-th subset of O of size s, ``count[O, 0, s-1]`` = C(|O|, s)."""
    width = max(math.comb(k, j) for j in range(k + 1))
    table = torch.zeros(2**k, 1, k, width, dtype=torch.long)
    count = torch.zeros(2**k, 1, k, dtype=torch.long)
    for o in range(1, 2**k):
        sub = o
        while sub:
            size = sub.bit_count()
            c = count[o, 0, size - 1]
            table[o, 0, size - 1, c] = sub
            count[o, 0, size - 1] = c + 1
            sub = (sub - 1) & o
    return table, count


def subset_slots(pattern: torch.Tensor, gen: torch.Generator, tables) -> torch.Tensor:
    """The draw behind :func:`sample_subsets`, as slots of the subset table: ``[B, head*size]`` indices
    into ``table.view(-1)``. One uniform per (sample, head, size), ``r = floor(u * count)``; the table of
    each pattern's first slots is built once per tables (gathers by ``index_select``: the same values as
    advanced indexing, several times faster on CPU)."""
    table, count = tables[0], tables[1]
    h, k = table.shape[1], table.shape[2]
    if len(tables) < 3:
        raise ValueError("subset_slots needs tables from slot_tables()")
    first = tables[2]  # [2^K, head*size]: pattern * (h k width) + j * width
    cnt = torch.index_select(count.view(-1, h * k), 0, pattern)  # [B, head*size]
    u = torch.rand((pattern.shape[0], h * k), generator=gen, device=pattern.device)
    r = (u * cnt).long()  # uniform in 0..cnt-1 (u < 1); 0 where cnt = 0 -> the empty entry
    return torch.index_select(first, 0, pattern) + r


def slot_tables(tables) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(table, count, first slots per pattern) for :func:`subset_slots`."""
    table, count = tables[0], tables[1]
    h, k, width = table.shape[1], table.shape[2], table.shape[-1]
    patterns = torch.arange(table.shape[0], device=table.device)
    first = patterns[:, None] * (h * k * width) + torch.arange(h * k, device=table.device)[None] * width
    return table, count, first


def sample_subsets(
    obs: torch.Tensor, gen: torch.Generator, shared: bool, tables=None, pattern: torch.Tensor | None = None
) -> torch.Tensor:
    """Draw the LASER tasks. Returns ``chosen[b, i, s-1]``, the bitmask of the subset of size s drawn
    for head i, uniformly among the subsets of O that contain i (independently per head and
    size, like the authors' ``random.sample``). Entries for heads outside O or sizes above |O| are
    empty (0; their loss weight is 0 too). ``shared=True`` draws one subset per (head, size) for the
    whole batch (the authors' per-batch code): ``obs`` rows must then be equal, and one row comes back."""
    tables = tables if tables is not None else subset_table(obs.shape[1])
    table, count = tables[0], tables[1]
    h, k = table.shape[1], table.shape[2]  # heads, sizes (= blocks)
    if shared:
        obs = obs[:1]
        pattern = None if pattern is None else pattern[:1]
    if pattern is None:
        pattern = (obs.long() << torch.arange(k, device=obs.device)).sum(1)  # [B]
    slots = subset_slots(
        pattern, gen, tables if tables is not None and len(tables) > 2 else slot_tables((table, count))
    )
    return torch.index_select(table.view(-1), 0, slots.view(-1)).view(pattern.shape[0], h, k)


def bitmask_members(chosen: torch.Tensor, k: int) -> torch.Tensor:
    """Bitmasks ``[...]`` -> membership ``[..., K]`` (bool)."""
    return ((chosen[..., None] >> torch.arange(k, device=chosen.device)) & 1).bool()


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

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.one = self.options["heads"] == "one"
        self.active_head = self.options["heads"] == "active"
        self.n_heads = 1 if self.one or self.active_head else self.k
        self.head, _ = self.heads("head", self.n_heads, self.ctx.model.cut)
        if self.k > 12:
            raise VFLBenchError(f"LASER-VFL with K={self.k}: the subset tables grow as 3^K; use K <= 12.")
        tables = subset_table_any(self.k) if self.one else subset_table(self.k)
        if self.active_head:  # head 0 only: the subsets that contain block 0
            tables = (tables[0][:, :1].contiguous(), tables[1][:, :1].contiguous())
        self.tables = slot_tables(tuple(t.to(self.device) for t in tables))
        masks = torch.arange(2**self.k)
        member = bitmask_members(masks, self.k).float()
        # bitmask -> fusion weights (1/|S| on the members of S): agg = frac[chosen]
        self.mean = self.fusion_is_mean()
        self.zero_impute = self.options["missing"] == "zero"
        if self.zero_impute:  # a subset's mean over all K parties, zeros for the others
            self.frac = (member / self.k if self.mean else member).to(self.device)
        else:
            self.frac = (member / member.sum(1, keepdim=True).clamp_min(1) if self.mean else member).to(self.device)
        n_obs = member.sum(1).long()
        if self.one:  # observed pattern -> loss weights [1, size]: C(|O|, s)/(2^|O| - 1) for s <= |O|
            w = torch.tensor(
                [
                    [math.comb(o, s) / (2**o - 1) if 1 <= s <= o else 0.0 for s in range(1, self.k + 1)]
                    for o in range(self.k + 1)
                ]
            )
            self.wpat = w[n_obs][:, None, :].to(self.device)
        else:  # observed pattern -> loss weights [head, size]: C(|O|-1, s-1)/s for head in O, s <= |O|
            self.wpat = (laser_weights(self.k)[n_obs][:, 1:][:, None, :] * member[:, :, None]).to(self.device)
            if self.active_head:
                self.wpat = self.wpat[:, :1].contiguous()
        self.bits = torch.arange(self.k, device=self.device)
        # every table slot's fusion weights (frac of the subset in the slot): a draw's weights in one gather
        self.slot_frac = torch.index_select(self.frac, 0, self.tables[0].reshape(-1))
        self._epoch = None  # the current epoch's task draws (set by begin_epoch)
        self.ssl = simsiam_for(self, self.ext)

    def begin_epoch(self, epoch: Epoch):
        """Draw every task of the epoch at once: per sample, or per batch (authors' code, where a batch
        carries its first sample's pattern). With them, what the steps would otherwise recompute from the batch:
        each batch's active members and count of samples with an observed block, and (two classes) the
        :func:`gap_signs` of every position's label. Batches then only slice the precomputed tensors."""
        obs, order, batch_size = epoch.obs, epoch.order, epoch.batch_size
        self._batch_size = batch_size
        active, count = self._batch_stats(epoch)
        signs = None
        if epoch.y is not None and self.c == 2:
            signs = gap_signs(torch.index_select(epoch.y, 0, order), self.store.flat.dtype)  # [n, 2]
        if epoch.per_batch or self.options["laser_subsets"] == "batch":
            pattern = (obs[order[::batch_size]].long() << self.bits).sum(1)  # [n_batches]
            if self.options["laser_subsets"] == "batch":
                agg, w = self._draw(pattern)
                self._epoch = ("batch", agg[:, None], w[:, None], active, count, signs)
                return
            # per-batch masks, per-sample subsets: position p of the epoch carries its batch's pattern
            draws = self._draw(pattern.repeat_interleave(batch_size)[: len(order)])
        else:  # drawn by sample index, then laid out in the epoch's order: a batch is a slice, not a gather
            draws = self._draw((obs.long() << self.bits).sum(1), order)
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

    def _draw(self, pattern, order=None):
        """(fusion weights, loss weights) of one subset draw per entry of ``pattern``; ``order``: returned in
        that order (the small index tensors are reordered before the lookup, not the weights after it)."""
        slots = subset_slots(pattern, self.gen, self.tables)  # the subsets of sample_subsets, as table slots
        if order is not None:
            slots, pattern = torch.index_select(slots, 0, order), torch.index_select(pattern, 0, order)
        h, k = self.tables[0].shape[1], self.tables[0].shape[2]
        agg = torch.index_select(self.slot_frac, 0, slots.reshape(-1)).view(slots.shape[0], h, k, self.frac.shape[-1])
        return agg, torch.index_select(self.wpat, 0, pattern)

    def _tasks(self, batch: Batch):
        """(fusion weights [B|1, head, size, block], loss weights [B|1, head, size], active members, the loss's
        denominator, the labels' :func:`gap_signs` [B, 2] or None) for this batch: sliced from the epoch's draws,
        or drawn and computed now when no epoch was begun (a lone batch)."""
        if self._epoch is not None:
            kind, agg, w, active, count, signs = self._epoch
            j, start = batch.number, batch.number * self._batch_size
            stop = start + batch.size
            if signs is not None:
                signs = signs[start:stop]
            if kind == "batch":
                return agg[j], w[j], active[j], count[j], signs
            return agg[start:stop], w[start:stop], active[j], count[j], signs
        obs = batch.obs
        shared = self.options["laser_subsets"] == "batch"
        pattern = (obs.long() << self.bits).sum(1)
        if shared:  # per-batch masks: every row has the same pattern
            pattern = pattern[:1]
        chosen = sample_subsets(obs, self.gen, shared=shared, tables=self.tables, pattern=pattern)
        return self.frac[chosen], self.wpat[pattern], *self._step_stats(obs), None

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
        if self.head.linear:
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
