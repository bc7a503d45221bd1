"""SecureBoost+'s packing of a row's gradients into plaintexts (FATE's ``GHPacker``), and of bin sums into
ciphertexts (cipher compression).

A row's plaintext is ``m = (g_1 + offset) .. (g_k + offset) | h_1 .. h_k | 1`` (k outputs' g fields, their h fields,
then the count), each field wide enough for a sum over every row, so a product of ciphertexts decrypts to the sums
and the count at once. The fields come from the row count alone (:meth:`Packing.public`): a feature party learns
nothing of the labels from them. When every output's fields do not fit under the key's usable bits (many classes,
or OU's smaller plaintexts), the outputs are split into ``lanes``: a row is then ``lanes`` plaintexts, each with its
own count, encrypted and summed apart."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Packing:
    """The bit layout: the offset added to every g, the field widths (bits) of the g sums, the h sums and the count,
    the outputs, and the lanes they are split into (the first ``outputs % lanes`` lanes hold one output more)."""

    offset: int
    bg: int
    bh: int
    bc: int
    outputs: int = 1
    lanes: int = 1

    @classmethod
    def public(cls, n: int, outputs: int = 1, usable_bits: int | None = None) -> Packing:
        """The layout for ``n`` rows, from ``n`` alone. The fixed point (:class:`~..booster.FixedPoint`) keeps any
        sum of ``n`` values below 2^51, so every |g| and h is below 2^51 / n <= 2^(52 - n.bit_length()); the offset is
        twice that bound, and each field holds a sum over all ``n`` rows. ``usable_bits``: the key's; the fewest
        lanes whose widest fits it."""
        n = max(int(n), 1)
        offset = 1 << (53 - n.bit_length())
        bg, bh, bc = (2 * offset * n).bit_length(), (offset * n).bit_length(), n.bit_length()
        lanes = 1
        if usable_bits is not None:
            if bg + bh + bc > usable_bits:
                raise ValueError(f"one output's packed sum needs {bg + bh + bc} bits; the key holds {usable_bits}")
            while -(-int(outputs) // lanes) * (bg + bh) + bc > usable_bits:
                lanes += 1
        return cls(offset, bg, bh, bc, int(outputs), lanes)

    def lane_outputs(self, lane: int) -> range:
        """The outputs of lane ``lane``."""
        base, extra = divmod(self.outputs, self.lanes)
        start = lane * base + min(lane, extra)
        return range(start, start + base + (1 if lane < extra else 0))

    @property
    def bits(self) -> int:
        """The width of one lane's packed sum (the widest lane's): the slot a sum takes in a compressed ciphertext."""
        return -(-self.outputs // self.lanes) * (self.bg + self.bh) + self.bc

    def check(self, g: np.ndarray, h: np.ndarray) -> None:
        """Refuse values the layout cannot hold (not reached by the fixed point of :meth:`public`'s bound)."""
        if g.size and (int(np.abs(g).max()) >= self.offset or int(h.min()) < 0 or int(h.max()) >= self.offset):
            raise ValueError(
                f"g/h beyond the public packing's bound 2^{self.offset.bit_length() - 1}: the fixed point was not "
                "chosen for this many rows"
            )

    def pack(self, g: np.ndarray, h: np.ndarray) -> list[int]:
        """The plaintexts of the rows of ``g, h`` [n, outputs] (or [n] with one output), lane-major: every row's lane
        0, then every row's lane 1, ..."""
        g = np.asarray(g, dtype=np.int64).reshape(len(g), -1)
        h = np.asarray(h, dtype=np.int64).reshape(len(h), -1)
        out = []
        for lane in range(self.lanes):
            cols = self.lane_outputs(lane)
            gl, hl = g[:, cols.start : cols.stop].tolist(), h[:, cols.start : cols.stop].tolist()
            for gs, hs in zip(gl, hl, strict=True):
                acc = 0
                for v in gs:
                    acc = (acc << self.bg) | (v + self.offset)
                for v in hs:
                    acc = (acc << self.bh) | v
                out.append((acc << self.bc) | 1)
        return out

    def unpack(self, p: int, lane: int = 0) -> tuple[list[int], list[int], int]:
        """(sums of g per output, sums of h per output, count) of one lane's decrypted sum."""
        k = len(self.lane_outputs(lane))
        count = p & ((1 << self.bc) - 1)
        p >>= self.bc
        h = []
        for _ in range(k):
            h.append(p & ((1 << self.bh) - 1))
            p >>= self.bh
        g = []
        for _ in range(k):
            g.append((p & ((1 << self.bg) - 1)) - self.offset * count)
            p >>= self.bg
        return g[::-1], h[::-1], count

    def fields(self) -> dict[str, int]:
        return {
            "offset": self.offset,
            "bg": self.bg,
            "bh": self.bh,
            "bc": self.bc,
            "outputs": self.outputs,
            "lanes": self.lanes,
        }


def capacity(usable_bits: int, slot_bits: int) -> int:
    """Packed sums a ciphertext holds."""
    return max(1, int(usable_bits) // int(slot_bits))


def unpack_compressed(plain: list[int], n_sums: int, capacity: int, bits: int) -> list[int]:
    """The ``n_sums`` packed sums in the decryptions ``plain`` (``capacity`` a ciphertext, the first highest)."""
    out = []
    mask = (1 << bits) - 1
    for i, p in enumerate(plain):
        k = min(capacity, n_sums - i * capacity)
        out += [(p >> (bits * (k - 1 - j))) & mask for j in range(k)]
    return out
