"""Compressors of what crosses the party-to-server boundary (``--compress SPEC``), after C-VFL (Castiglia, Das, Wang &
Patterson, "Compressed-VFL: Communication-Efficient Learning with Vertically Partitioned Data", ICML 2022).

A compressor turns each party's message, the ``[rows, D]`` representations it sends for a batch, into a payload of
tensors (what crosses the wire: :meth:`Compressor.encode`), and the payload back into what the server reconstructs
(:meth:`Compressor.decode`). In one process the same numbers come from :meth:`Compressor.roundtrip`, vectorised over
the parties; :meth:`Compressor.nbytes` is the payload's size, byte for byte what the wire carries across processes.

- ``quant:bits=B[,scale=message|row]``: uniform scalar quantisation with stochastic rounding. The range of a party's
  message, ``[min, max]`` over its rows that cross (C-VFL scales each party's message by its maximum; ``scale=row``
  takes every vector's own range), is cut into ``2^B - 1`` steps, and each value goes to one of its two nearest
  levels with the probabilities that make the reconstruction unbiased. Payload: the codes, B bits each, packed, and
  two float32 (min, max) a message (or a vector).
- ``topk:ratio=R``: every vector keeps its ``k = max(1, round(R D))`` largest-magnitude values, the rest read 0.
  Payload: k float32 values a vector and their indices, ``ceil(log2 D)`` bits each, packed. Biased (the dropped
  values are lost), as top-k is.
- ``vq:codes=C[,dim=2]``: product vector quantisation. Each vector is cut into sub-vectors of ``dim`` values and each
  sub-vector is sent as the index (``ceil(log2 C)`` bits, packed) of its nearest codeword in the party's codebook of C
  codewords. The codebook is learned by k-means on the party's own representations: initialised from the party's
  first message, then moved once per epoch to the mean of the sub-vectors assigned to each codeword (Lloyd's step;
  a codeword nobody chose keeps its place). It goes to the server with the party's first message of every epoch (C x
  dim float32, counted). C-VFL quantises vectors on a fixed lattice (A2); a learned codebook is the choice here.

The gradients that come down can be compressed with the same compressor (``down=1``, in one process and across
processes, after any label defense changed them); by default they go down as float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..core.registry import Registry
from .spec import CompressionSpec


def payload_bytes(expected: list[list[tuple[tuple[int, ...], torch.dtype]]], sent: torch.Tensor) -> torch.Tensor:
    """Bytes per sender ``[M]`` (float64) of payloads of the given shapes and dtypes (:meth:`Compressor.expects`);
    none where a sender sends no row (``sent`` ``[M, B]``)."""
    rows = sent.sum(1).tolist()
    return torch.tensor(
        [sum(math.prod(shape) * torch.empty(0, dtype=dt).element_size() for shape, dt in e) if n else 0
         for e, n in zip(expected, rows, strict=True)],
        dtype=torch.float64,
    )  # fmt: skip


def packed_bytes(n_codes: int, bits: int) -> int:
    return math.ceil(n_codes * bits / 8)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Non-negative integer ``codes`` below ``2^bits``, ``bits`` bits each, packed into ``uint8`` (little-endian bit
    order): :func:`packed_bytes` bytes."""
    c = codes.reshape(-1).to(torch.int64)
    planes = (c[:, None] >> torch.arange(bits, device=c.device)) & 1  # [N, bits]
    flat = planes.reshape(-1)
    pad = (-len(flat)) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = 1 << torch.arange(8, device=c.device)
    return (flat.reshape(-1, 8) * weights).sum(1).to(torch.uint8)


def unpack(data: torch.Tensor, n_codes: int, bits: int) -> torch.Tensor:
    """The ``n_codes`` integers :func:`pack` packed (int64)."""
    b = data.reshape(-1).to(torch.int64)
    flat = ((b[:, None] >> torch.arange(8, device=b.device)) & 1).reshape(-1)[: n_codes * bits]
    return (flat.reshape(n_codes, bits) << torch.arange(bits, device=b.device)).sum(1)


@dataclass
class Prepared:
    """One crossing's compression, for every sender: what :meth:`Compressor.prepare` computed."""

    sent: torch.Tensor  # [M, B]
    d: int
    parts: dict[str, Any] = field(default_factory=dict)


class Compressor:
    """One compression rule. :meth:`prepare` does a crossing's work for every sender at once (draws, codes);
    :meth:`reconstruct` is what the server gets in one process; :meth:`encode` / :meth:`decode` are one sender's
    payload on the wire and back, with the same numbers."""

    name: ClassVar[str] = ""  # its entry in .spec.COMPRESSORS: help, whether it is unbiased, parameters

    def __init__(self, spec: CompressionSpec, k: int):
        self.spec, self.k = spec, int(k)
        self.p = dict(spec.params)

    def prepare(self, x: torch.Tensor, sent: torch.Tensor, gen: torch.Generator | None, train: bool) -> Prepared:
        raise NotImplementedError

    def reconstruct(self, st: Prepared) -> torch.Tensor:
        """What the server receives ``[M, B, D]`` (rows that do not cross: anything; they are masked)."""
        raise NotImplementedError

    def nbytes(self, st: Prepared) -> torch.Tensor:
        """The payload's bytes per sender ``[M]`` (float64), as :meth:`encode` produces them: the sizes
        :meth:`expects` declares (what a receiver reads)."""
        return payload_bytes([self.expects(m, int(n), st.d) for m, n in enumerate(st.sent.sum(1).tolist())], st.sent)

    def encode(self, st: Prepared, j: int) -> list[torch.Tensor]:
        """Sender ``j``'s payload: the tensors that cross, for its rows that cross."""
        raise NotImplementedError

    def expects(self, j: int, n: int, d: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """The shapes and dtypes of sender ``j``'s payload for ``n`` rows of ``d`` values (the receiver's side)."""
        raise NotImplementedError

    def decode(self, parts: list[torch.Tensor], j: int, n: int, d: int) -> torch.Tensor:
        """Sender ``j``'s ``[n, d]`` rows from its payload."""
        raise NotImplementedError

    def after_message(self, sent: torch.Tensor) -> None:
        """After a crossing, on both sides (state that decides the next payload's shape)."""

    def end_epoch(self) -> None:
        """Between epochs, on both sides (a learned codebook takes its step here)."""

    def roundtrip(
        self, x: torch.Tensor, sent: torch.Tensor, gen: torch.Generator | None, train: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reconstruction [M, B, D], payload bytes [M])`` of the messages ``x`` ``[M, B, D]`` whose rows ``sent``
        ``[M, B]`` cross, in one process. ``train``: a training step (a learned codebook learns from it)."""
        st = self.prepare(x, sent, gen, train)
        out = self.reconstruct(st), self.nbytes(st)
        self.after_message(sent)
        return out


COMPRESSORS: Registry[type[Compressor]] = Registry("compressor")


@COMPRESSORS.register("none")
class NoCompression(Compressor):
    name = "none"

    def prepare(self, x, sent, gen, train):
        return Prepared(sent, x.shape[-1], {"x": x.detach()})

    def reconstruct(self, st):
        return st.parts["x"]

    def encode(self, st, j):
        return [st.parts["x"][j][st.sent[j]].to(torch.float32)]

    def expects(self, j, n, d):
        return [((n, d), torch.float32)]

    def decode(self, parts, j, n, d):
        return parts[0]


@COMPRESSORS.register("quant")
class Quantise(Compressor):
    name = "quant"

    @property
    def levels(self) -> int:
        return (1 << int(self.p["bits"])) - 1  # steps between the message's smallest and largest value

    @staticmethod
    def _step(lo: torch.Tensor, hi: torch.Tensor, levels: int) -> torch.Tensor:
        step = (hi - lo) / levels
        return torch.where(step > 0, step, torch.ones_like(step))

    def prepare(self, x, sent, gen, train):
        v = x.detach()
        w = sent[..., None]
        big = torch.finfo(v.dtype).max
        lo = torch.where(w, v, torch.full_like(v, big)).amin(-1, keepdim=True)  # [M, B, 1]
        hi = torch.where(w, v, torch.full_like(v, -big)).amax(-1, keepdim=True)
        if self.p["scale"] == "message":  # one range a party's message (C-VFL scales the message by its maximum)
            lo, hi = lo.amin(1, keepdim=True), hi.amax(1, keepdim=True)
        empty = lo > hi  # a sender (or row) with nothing that crosses
        lo = torch.where(empty, torch.zeros_like(lo), lo)
        hi = torch.where(empty, torch.zeros_like(hi), hi)
        step = self._step(lo, hi, self.levels)
        pos = (v - lo) / step  # in [0, levels] on the rows that cross
        u = torch.rand(pos.shape, generator=gen, device=pos.device, dtype=pos.dtype)
        code = torch.floor(pos + u).clamp_(0, self.levels)  # up with probability frac(pos): E[code] = pos (unbiased)
        return Prepared(sent, x.shape[-1], {"code": code, "lo": lo, "hi": hi})

    def reconstruct(self, st):
        lo, hi = st.parts["lo"], st.parts["hi"]
        return st.parts["code"] * self._step(lo, hi, self.levels) + lo

    def encode(self, st, j):
        r = st.sent[j]
        code = st.parts["code"][j][r].to(torch.int64)
        lo, hi = st.parts["lo"][j], st.parts["hi"][j]
        ranges = torch.cat([lo[r], hi[r]], -1) if self.p["scale"] == "row" else torch.cat([lo[0], hi[0]])
        return [pack(code, int(self.p["bits"])), ranges.to(torch.float32)]

    def expects(self, j, n, d):
        ranges = (n, 2) if self.p["scale"] == "row" else (2,)
        return [((packed_bytes(n * d, int(self.p["bits"])),), torch.uint8), (ranges, torch.float32)]

    def decode(self, parts, j, n, d):
        code = unpack(parts[0], n * d, int(self.p["bits"])).view(n, d).to(torch.float32)
        r = parts[1].reshape(-1, 2)
        lo, hi = r[:, :1], r[:, 1:]
        return code * self._step(lo, hi, self.levels) + lo


@COMPRESSORS.register("topk")
class TopK(Compressor):
    name = "topk"

    def keep(self, d: int) -> int:
        return max(1, min(d, round(float(self.p["ratio"]) * d)))

    @staticmethod
    def index_bits(d: int) -> int:
        return max(1, math.ceil(math.log2(d))) if d > 1 else 1

    def prepare(self, x, sent, gen, train):
        v = x.detach()
        idx = v.abs().topk(self.keep(v.shape[-1]), dim=-1).indices  # [M, B, k]
        return Prepared(sent, v.shape[-1], {"x": v, "idx": idx, "values": torch.gather(v, -1, idx)})

    def reconstruct(self, st):
        x = st.parts["x"]
        return torch.zeros_like(x).scatter_(-1, st.parts["idx"], st.parts["values"])

    def encode(self, st, j):
        r = st.sent[j]
        return [st.parts["values"][j][r].to(torch.float32), pack(st.parts["idx"][j][r], self.index_bits(st.d))]

    def expects(self, j, n, d):
        k = self.keep(d)
        return [((n, k), torch.float32), ((packed_bytes(n * k, self.index_bits(d)),), torch.uint8)]

    def decode(self, parts, j, n, d):
        k = self.keep(d)
        idx = unpack(parts[1], n * k, self.index_bits(d)).view(n, k)
        return torch.zeros(n, d, dtype=torch.float32).scatter_(-1, idx, parts[0])


@COMPRESSORS.register("vq")
class VectorQuantise(Compressor):
    name = "vq"

    def __init__(self, spec: CompressionSpec, k: int):
        super().__init__(spec, k)
        self.book: torch.Tensor | None = None  # [K, C, dim]: each party's codebook (the server's copy, receiving)
        self.sums: torch.Tensor | None = None  # k-means accumulators of the epoch
        self.counts: torch.Tensor | None = None
        self.fresh = torch.ones(k, dtype=torch.bool)  # the codebook goes with the party's next message

    @property
    def code_bits(self) -> int:
        return max(1, math.ceil(math.log2(int(self.p["codes"]))))

    def per_row(self, d: int) -> int:
        return math.ceil(d / int(self.p["dim"]))

    def _subvectors(self, x: torch.Tensor) -> torch.Tensor:
        m, b, d = x.shape
        dim = int(self.p["dim"])
        pad = (-d) % dim
        if pad:
            x = torch.cat([x, x.new_zeros(m, b, pad)], -1)
        return x.reshape(m, b * ((d + pad) // dim), dim)  # [M, B * S, dim]

    def _init_books(self, sub: torch.Tensor, rows: torch.Tensor, gen) -> None:
        """Each party's first message: C of its sent sub-vectors, drawn from the run's stream."""
        m, c, dim = sub.shape[0], int(self.p["codes"]), int(self.p["dim"])
        self.book = torch.zeros(m, c, dim, dtype=sub.dtype, device=sub.device)
        for j in range(m):
            pool = sub[j][rows[j]]
            if len(pool) == 0:
                pool = sub[j]
            self.book[j] = pool[torch.randint(len(pool), (c,), generator=gen, device=pool.device)]
        self.sums = torch.zeros_like(self.book)
        self.counts = torch.zeros(m, c, dtype=sub.dtype, device=sub.device)

    def prepare(self, x, sent, gen, train):
        m, b, d = x.shape
        c = int(self.p["codes"])
        sub = self._subvectors(x.detach())  # [M, N, dim]
        per = sub.shape[1] // b
        rows = sent[..., None].expand(m, b, per).reshape(m, -1)  # [M, N]: sub-vectors that cross
        if self.book is None:
            self._init_books(sub, rows, gen)
        code = torch.cdist(sub, self.book).argmin(-1)  # [M, N]
        if train:  # the epoch's k-means statistics, over the sub-vectors that crossed
            one_hot = torch.zeros(m, sub.shape[1], c, dtype=x.dtype, device=x.device)
            one_hot.scatter_(-1, code[..., None], 1.0)
            one_hot = one_hot * rows[..., None].to(x.dtype)
            self.counts += one_hot.sum(1)
            self.sums += one_hot.transpose(1, 2) @ sub
        return Prepared(sent, d, {"code": code, "book": self.book, "fresh": self.fresh.clone()})

    def reconstruct(self, st):
        book, code = st.parts["book"], st.parts["code"]
        m, dim = code.shape[0], book.shape[-1]
        xhat = torch.gather(book, 1, code[..., None].expand(-1, -1, dim))  # [M, N, dim]
        b = st.sent.shape[1]
        return xhat.reshape(m, b, -1)[..., : st.d]

    def encode(self, st, j):
        b = st.sent.shape[1]
        per = self.per_row(st.d)
        code = st.parts["code"][j].view(b, per)[st.sent[j]]
        out = [pack(code, self.code_bits)]
        if bool(st.parts["fresh"][j]):
            out.append(st.parts["book"][j].to(torch.float32))
        return out

    def expects(self, j, n, d):
        out = [((packed_bytes(n * self.per_row(d), self.code_bits),), torch.uint8)]
        if bool(self.fresh[j]):
            out.append(((int(self.p["codes"]), int(self.p["dim"])), torch.float32))
        return out

    def decode(self, parts, j, n, d):
        code = unpack(parts[0], n * self.per_row(d), self.code_bits)
        if len(parts) > 1:  # a codebook came with the message: the server's copy of party j's
            if self.book is None:
                self.book = torch.zeros(self.k, *parts[1].shape, dtype=parts[1].dtype)
            self.book[j] = parts[1]
        return self.book[j][code].reshape(n, -1)[:, :d]

    def after_message(self, sent):
        self.fresh &= ~sent.any(1).cpu()

    def end_epoch(self) -> None:
        self.fresh[:] = True  # every party's codebook goes again with its first message of the next epoch
        if self.counts is None or self.sums is None or self.book is None:
            return
        moved = self.counts > 0
        self.book = torch.where(moved[..., None], self.sums / self.counts.clamp_min(1)[..., None], self.book)
        self.sums.zero_()
        self.counts.zero_()


def make_compressor(spec: CompressionSpec, k: int) -> Compressor:
    return COMPRESSORS.get(spec.name)(spec, k)
