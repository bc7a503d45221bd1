"""Compressors of what crosses the party-to-server boundary (``--compress SPEC``), after C-VFL (Castiglia, Das, Wang &
Patterson, "Compressed-VFL: Communication-Efficient Learning with Vertically Partitioned Data", ICML 2022).

A compressor turns one party's message, the ``[rows, D]`` representations it sends for a batch, into what the server
reconstructs, and says how many bits the payload takes. Every compressor here works on all parties at once:
``roundtrip(x [M, B, D], sent [M, B], party [M], gen)`` gives the reconstruction and the payload bits per sender.

- ``quant:bits=B[,scale=message|row]``: uniform scalar quantisation with stochastic rounding. The range of a party's
  message, ``[min, max]`` over its rows that cross (C-VFL scales each party's message by its maximum; ``scale=row``
  takes every vector's own range), is cut into ``2^B - 1`` steps, and each value goes to one of its two nearest
  levels with the probabilities that make the reconstruction unbiased. Payload: B bits a value plus two float32
  (min, max) per message (or per vector).
- ``topk:ratio=R``: every vector keeps its ``k = max(1, round(R D))`` largest-magnitude values, the rest read 0.
  Payload: k float32 values and k indices of ``ceil(log2 D)`` bits each, a vector. Biased (the dropped values are
  lost), as top-k is.
- ``vq:codes=C[,dim=2]``: product vector quantisation. Each vector is cut into sub-vectors of ``dim`` values and each
  sub-vector is sent as the index (``ceil(log2 C)`` bits) of its nearest codeword in the party's codebook of C
  codewords. The codebook is learned by k-means on the party's own representations: initialised from the party's
  first message, then moved once per epoch to the mean of the sub-vectors assigned to each codeword (Lloyd's step;
  a codeword nobody chose keeps its place), and sent to the server when it changes (C x dim float32, counted).
  C-VFL quantises vectors on a fixed lattice (A2); a learned codebook is the choice here, as the issue asks.

The gradients that come down can be compressed with the same compressor (``down=1``); by default they go down as
float32.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..core.registry import Registry
from .spec import CompressionSpec

F32_BITS = 32


class Compressor:
    """One compression rule; subclasses implement :meth:`roundtrip`."""

    name: ClassVar[str] = ""  # its entry in .spec.COMPRESSORS: help, whether it is unbiased, parameters

    def __init__(self, spec: CompressionSpec, k: int):
        self.spec, self.k = spec, int(k)
        self.p = dict(spec.params)

    def roundtrip(
        self, x: torch.Tensor, sent: torch.Tensor, gen: torch.Generator | None, train: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reconstruction [M, B, D], payload bits [M])`` of the messages ``x`` ``[M, B, D]`` whose rows ``sent``
        ``[M, B]`` cross. ``train``: a training step (a learned codebook may learn from it)."""
        raise NotImplementedError

    def end_epoch(self) -> None:
        """Between epochs (a learned codebook takes its step here)."""


COMPRESSORS: Registry[type[Compressor]] = Registry("compressor")


@COMPRESSORS.register("none")
class NoCompression(Compressor):
    name = "none"

    def roundtrip(self, x, sent, gen, train=True):
        return x, sent.sum(1).to(torch.float64) * x.shape[-1] * F32_BITS


@COMPRESSORS.register("quant")
class Quantise(Compressor):
    name = "quant"

    def roundtrip(self, x, sent, gen, train=True):
        levels = (1 << int(self.p["bits"])) - 1  # steps between the message's smallest and largest value
        v = x.detach()
        w = sent[..., None]
        big = torch.finfo(v.dtype).max
        lo = torch.where(w, v, torch.full_like(v, big)).amin(-1, keepdim=True)  # [M, B, 1]
        hi = torch.where(w, v, torch.full_like(v, -big)).amax(-1, keepdim=True)
        if self.p["scale"] == "message":  # one range a party's message (C-VFL scales the message by its maximum)
            lo, hi = lo.amin(1, keepdim=True), hi.amax(1, keepdim=True)
        empty = lo > hi  # a sender with no row that crosses
        lo = torch.where(empty, torch.zeros_like(lo), lo)
        hi = torch.where(empty, torch.zeros_like(hi), hi)
        step = (hi - lo) / levels
        step = torch.where(step > 0, step, torch.ones_like(step))
        pos = (v - lo) / step  # in [0, levels] on the rows that cross
        u = torch.rand(pos.shape, generator=gen, device=pos.device, dtype=pos.dtype)
        code = torch.floor(pos + u).clamp_(0, levels)  # up with probability frac(pos): E[code] = pos (unbiased)
        xhat = code * step + lo
        rows = sent.sum(1).to(torch.float64)
        ranges = rows if self.p["scale"] == "row" else (rows > 0).to(torch.float64)
        return xhat, rows * x.shape[-1] * int(self.p["bits"]) + ranges * 2 * F32_BITS  # codes, and (min, max)


@COMPRESSORS.register("topk")
class TopK(Compressor):
    name = "topk"

    def keep(self, d: int) -> int:
        return max(1, min(d, round(float(self.p["ratio"]) * d)))

    def roundtrip(self, x, sent, gen, train=True):
        d = x.shape[-1]
        k = self.keep(d)
        idx = x.detach().abs().topk(k, dim=-1).indices
        mask = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, idx, True)
        xhat = torch.where(mask, x.detach(), torch.zeros_like(x))
        index_bits = max(1, math.ceil(math.log2(d))) if d > 1 else 0
        return xhat, sent.sum(1).to(torch.float64) * k * (F32_BITS + index_bits)


@COMPRESSORS.register("vq")
class VectorQuantise(Compressor):
    name = "vq"

    def __init__(self, spec: CompressionSpec, k: int):
        super().__init__(spec, k)
        self.book: torch.Tensor | None = None  # [K, C, dim]
        self.sums: torch.Tensor | None = None  # k-means accumulators of the epoch
        self.counts: torch.Tensor | None = None
        self.fresh = torch.ones(k, dtype=torch.bool)  # the server lacks this party's current codebook

    def _subvectors(self, x: torch.Tensor) -> torch.Tensor:
        m, b, d = x.shape
        dim = int(self.p["dim"])
        pad = (-d) % dim
        if pad:
            x = torch.cat([x, x.new_zeros(m, b, pad)], -1)
        return x.reshape(m, b * ((d + pad) // dim), dim)  # [M, B * S, dim]

    def roundtrip(self, x, sent, gen, train=True):
        m, b, d = x.shape
        c, dim = int(self.p["codes"]), int(self.p["dim"])
        sub = self._subvectors(x.detach())  # [M, N, dim]
        per = sub.shape[1] // b  # sub-vectors a row
        rows = sent[..., None].expand(m, b, per).reshape(m, -1)  # [M, N]: sub-vectors that cross
        if self.book is None:  # each party's first message: C of its sent sub-vectors, drawn from the run's stream
            self.book = torch.zeros(m, c, dim, dtype=x.dtype, device=x.device)
            for j in range(m):
                pool = sub[j][rows[j]]
                if len(pool) == 0:
                    pool = sub[j]
                pick = torch.randint(len(pool), (c,), generator=gen, device=pool.device)
                self.book[j] = pool[pick]
            self.sums = torch.zeros_like(self.book)
            self.counts = torch.zeros(m, c, dtype=x.dtype, device=x.device)
        dist = torch.cdist(sub, self.book)  # [M, N, C]
        code = dist.argmin(-1)  # [M, N]
        xhat = torch.gather(self.book, 1, code[..., None].expand(-1, -1, dim))  # [M, N, dim]
        xhat = xhat.reshape(m, b, -1)[..., :d]
        if train:  # the epoch's k-means statistics, over the sub-vectors that crossed
            w = rows.to(x.dtype)
            one_hot = torch.zeros(m, sub.shape[1], c, dtype=x.dtype, device=x.device)
            one_hot.scatter_(-1, code[..., None], 1.0)
            one_hot = one_hot * w[..., None]
            self.counts += one_hot.sum(1)
            self.sums += one_hot.transpose(1, 2) @ sub
        n = sent.sum(1).to(torch.float64)
        bits = n * per * max(1, math.ceil(math.log2(c)))
        book_bits = self.fresh.to(torch.float64) * (n > 0).to(torch.float64) * c * dim * F32_BITS
        self.fresh &= ~(n > 0).cpu()  # sent once with the party's first message after each change
        return xhat, bits + book_bits.to(bits.device)

    def end_epoch(self) -> None:
        if self.book is None or self.counts is None:
            return
        moved = self.counts > 0
        new = torch.where(moved[..., None], self.sums / self.counts.clamp_min(1)[..., None], self.book)
        changed = (new != self.book).any(-1).any(-1).cpu()
        self.book = new
        self.fresh |= changed
        self.sums.zero_()
        self.counts.zero_()


def make_compressor(spec: CompressionSpec, k: int) -> Compressor:
    return COMPRESSORS.get(spec.name)(spec, k)
