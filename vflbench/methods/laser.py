"""LASER-VFL (Valdeira, Wang & Chi, ICLR 2025): K extractors and K heads with shared parameters;
head i fuses the *mean* of a subset's representations. Per sample with observed set O, for every
head i in O and every size s = 1..|O|, one subset S with i in S, S in O, |S| = s is drawn uniformly,
and its loss is weighted by C(|O|-1, s-1)/s; the losses are summed (paper eqs. (7)-(8)). In
expectation this equals the sum over all non-empty S in O of the head-averaged loss of S.



``A[b, i, s, k]``. As heads are linear and fusion is a mean, every head is applied once to every
representation (one matrix product) and the tasks are fused in class space by a broadcast sum.
"""

from __future__ import annotations

import math

import torch

from .base import METHODS, BatchPrediction, Method, cross_entropy


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


def sample_subsets(obs: torch.Tensor, gen: torch.Generator, shared: bool, tables=None) -> torch.Tensor:
    """Draw the LASER tasks. Returns ``chosen[b, i, s-1]``, the bitmask of the subset of size s drawn
    for head i, uniformly among the subsets of O that contain i (independently per head and
    size, like the authors' ``random.sample``). Entries for heads outside O or sizes above |O| are
    empty (their loss weight is 0). ``shared=True`` draws one subset per (head, size) for the whole
    batch (the authors' per-batch code; all rows of ``obs`` are then equal)."""
    b, k = obs.shape
    table, count = tables if tables is not None else subset_table(k)
    bits = torch.arange(k, device=obs.device)
    pattern = (obs.long() << bits).sum(1)  # [B]
    cnt = count[pattern]  # [B, head, size]
    u = torch.rand((1 if shared else b, k, k), generator=gen, device=obs.device)
    r = (u * cnt).long()  # uniform in 0..cnt-1 (u < 1); 0 where cnt = 0 -> the empty entry
    chosen = table[pattern].gather(-1, r[..., None]).squeeze(-1)  # [B, head, size] bitmask
    return chosen


def bitmask_members(chosen: torch.Tensor, k: int) -> torch.Tensor:
    """Bitmasks ``[...]`` -> membership ``[..., K]`` (bool)."""
    return ((chosen[..., None] >> torch.arange(k, device=chosen.device)) & 1).bool()


@METHODS.register("laser")
class LaserVFL(Method):
    name, display, hp_key, f1_rule = "laser", "LASER-VFL", "laser", "per_predictor_mean"
    option_defaults = {"laser_subsets": "sample"}

    def build(self) -> None:
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.head, _ = self.heads("head", self.k, self.ctx.model.cut)
        self.wtable = laser_weights(self.k).to(self.device)
        if self.k > 12:
            from ..errors import VFLBenchError

            raise VFLBenchError(f"LASER-VFL with K={self.k}: the subset tables grow as 3^K; use K <= 12.")
        self.tables = tuple(t.to(self.device) for t in subset_table(self.k))
        masks = torch.arange(2**self.k)
        member = bitmask_members(masks, self.k).float()
        # bitmask -> fusion weights (1/|S| on the members of S): agg = frac[chosen]
        self.frac = (member / member.sum(1, keepdim=True).clamp_min(1)).to(self.device)
        # observed pattern -> loss weights [head, size]: C(|O|-1, s-1)/s for head in O, s <= |O|
        n_obs = member.sum(1).long()
        self.wpat = (laser_weights(self.k)[n_obs][:, 1:][:, None, :] * member[:, :, None]).to(self.device)
        self.bits = torch.arange(self.k, device=self.device)

    def task_weights(self, obs: torch.Tensor) -> torch.Tensor:
        """``[B, K(head), K(size)]`` loss weights: C(|O|-1, s-1)/s where head in O and s <= |O|."""
        n_obs = obs.sum(1)
        w = self.wtable[n_obs][:, 1:]  # [B, K sizes]
        return w[:, None, :] * obs[:, :, None].float()

    def loss_and_active(self, blocks, obs, y):
        seen = obs.any(0)
        active = torch.cat([seen, seen])
        rows = obs.any(1)
        if not bool(rows.any()):
            return None, active
        chosen = sample_subsets(obs, self.gen, shared=self.options["laser_subsets"] == "batch", tables=self.tables)
        agg = self.frac[chosen]  # [B, head, size, block]: 1/s on the drawn subset
        emb = self.ext(blocks, need=seen)  # [K, B, D]
        k, b, d = emb.shape
        # Heads are linear and fusion is a mean, so project first and fuse in class space (C << D):
        # proj[b, i, j] = head_i(emb_j[b]) without bias; logits[b, i, s] = sum_j agg[b, i, s, j] proj[b, i, j] + bias_i
        w = self.head.weight  # [head, D, C]
        proj = (emb.reshape(k * b, d) @ w.permute(1, 0, 2).reshape(d, k * self.c)).view(k, b, k, self.c)
        proj = proj.permute(1, 2, 0, 3).contiguous()  # [B, head, block, C]
        logits = torch.matmul(agg, proj) + self.head.bias[None, :, None, :]  # [B, head, size, C]
        ce = cross_entropy(logits, y[:, None, None])  # [B, head, size]
        pattern = (obs.long() << self.bits).sum(1)
        loss = (ce * self.wpat[pattern]).sum() / rows.sum()
        return loss, active

    def exact_logits(self, blocks, obs) -> torch.Tensor:
        emb = self.ext(blocks, need=obs.any(0))  # [K, B, D]
        o = obs.float()
        fused = torch.einsum("bk,kbd->bd", o / o.sum(1, keepdim=True).clamp_min(1), emb)
        return self.head(fused[None].expand(self.k, -1, -1))  # every head on mean(emb of O): [K, B, C]

    @torch.no_grad()
    def predict_batch(self, blocks, obs):
        lg = self.exact_logits(blocks, obs)
        return BatchPrediction(lg.argmax(-1), obs.T.clone(), self.score(lg), obs.any(1))
