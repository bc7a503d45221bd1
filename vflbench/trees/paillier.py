"""Paillier encryption for SecureBoost's gradients, on raw integers (python-paillier's key generation and CRT
decryption, gmpy2 for the arithmetic; no ``EncryptedNumber`` on the hot path).

The label holder packs each row's fixed-point gradient, hessian and a 1 into one plaintext (SecureBoost+'s GH
packing, FATE's ``GHPacker``): ``m = (g + offset) << (bh + bc) | h << bc | 1``, each field wide enough for a sum over
every row, so a product of ciphertexts decrypts to the three sums at once (the count comes out of the decryption).
A party sums the ciphertexts of a bin by multiplying them modulo N^2, packs up to ``capacity`` bin sums into one
ciphertext (``c <- c^(2^b) c_next``: SecureBoost+'s cipher compression) and re-randomises what it sends (a fresh
``r^N``: without it the label holder, who made every row's ciphertext, could tell which rows share a bin). A
ciphertext is sent at a fixed width (N^2's bytes: 512 at 2,048 bits), so what is counted is what crosses.
Every operation is counted and timed (:attr:`Paillier.ops`, :attr:`Paillier.seconds`). The label holder's
encryptions run in ``workers`` processes (the run's ``--threads``): each draws its own obfuscators from the operating
system's randomness (:mod:`secrets`), so no two ciphertexts share one.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Packing:
    """The bit layout of one packed plaintext: the offset added to every g, and the field widths (bits) of the g
    sums, the h sums and the count; ``outputs`` g fields, then ``outputs`` h fields, then the count (SecureBoost+'s
    multi-output packing: one plaintext a row whatever the classes).

    :meth:`public` derives it from the number of training rows alone, so a feature party learns nothing of the labels
    from it (an offset set by the largest |g| would tell it the label prior in the first tree, and the largest
    residual in later ones)."""

    offset: int
    bg: int
    bh: int
    bc: int
    outputs: int = 1

    @classmethod
    def public(cls, n: int, outputs: int = 1) -> Packing:
        """The layout for ``n`` rows, from ``n`` alone. The fixed point (:class:`~.booster.FixedPoint`) keeps any sum
        of ``n`` values below 2^51, so every |g| and h is below 2^51 / n <= 2^(52 - n.bit_length()); the offset is
        twice that bound, and each field holds a sum over all ``n`` rows."""
        n = max(int(n), 1)
        offset = 1 << (53 - n.bit_length())
        return cls(offset, (2 * offset * n).bit_length(), (offset * n).bit_length(), n.bit_length(), int(outputs))

    @property
    def bits(self) -> int:
        return self.outputs * (self.bg + self.bh) + self.bc

    def check(self, g: np.ndarray, h: np.ndarray) -> None:
        """Refuse values the layout cannot hold (not reached by the fixed point of :meth:`public`'s bound)."""
        if g.size and (int(np.abs(g).max()) >= self.offset or int(h.min()) < 0 or int(h.max()) >= self.offset):
            raise ValueError(
                f"g/h beyond the public packing's bound 2^{self.offset.bit_length() - 1}: the fixed point was not "
                "chosen for this many rows"
            )

    def pack(self, g: np.ndarray, h: np.ndarray) -> list[int]:
        """One plaintext per row of ``g, h`` [n, outputs] (or [n] with one output)."""
        g = np.asarray(g, dtype=np.int64).reshape(len(g), -1)
        h = np.asarray(h, dtype=np.int64).reshape(len(h), -1)
        out = []
        for gs, hs in zip(g.tolist(), h.tolist(), strict=True):
            acc = 0
            for v in gs:
                acc = (acc << self.bg) | (v + self.offset)
            for v in hs:
                acc = (acc << self.bh) | v
            out.append((acc << self.bc) | 1)
        return out

    def unpack(self, p: int) -> tuple[list[int], list[int], int]:
        """(sums of g per output, sums of h per output, count) of a decrypted sum."""
        count = p & ((1 << self.bc) - 1)
        p >>= self.bc
        h = []
        for _ in range(self.outputs):
            h.append(p & ((1 << self.bh) - 1))
            p >>= self.bh
        g = []
        for _ in range(self.outputs):
            g.append((p & ((1 << self.bg) - 1)) - self.offset * count)
            p >>= self.bg
        return g[::-1], h[::-1], count


@dataclass
class Paillier:
    """One key pair (the label holder's; a party holds only the public part: ``n``)."""

    n: int
    private: object | None = None  # phe.PaillierPrivateKey at the label holder
    ops: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    workers: int = 1  # processes that encrypt (a batch of at least POOL_MIN plaintexts)

    @classmethod
    def generate(cls, bits: int) -> Paillier:
        try:
            import phe
        except ImportError:  # pragma: no cover - an extra of the install
            from ..core.errors import VFLBenchError

            raise VFLBenchError(
                "--method-opt encryption=paillier needs python-paillier and gmpy2: pip install 'vflbench[trees]'."
            ) from None
        pub, priv = phe.generate_paillier_keypair(n_length=int(bits))
        return cls(pub.n, priv)

    @classmethod
    def public(cls, n: int) -> Paillier:
        return cls(int(n))

    @property
    def nsquare(self) -> int:
        return self.n * self.n

    @property
    def width(self) -> int:
        """Bytes of one ciphertext on the wire (N^2's)."""
        return (self.nsquare.bit_length() + 7) // 8

    @property
    def usable_bits(self) -> int:
        """Plaintext bits that stay below N (a packed sum must)."""
        return self.n.bit_length() - 2

    def _count(self, what: str, n: int, t0: float) -> None:
        self.ops[what] = self.ops.get(what, 0) + n
        self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0

    def _noise(self) -> int:
        return int(_obfuscator(self.n, self.nsquare))

    def encrypt(self, plaintexts: list[int]) -> list[int]:
        t0 = time.perf_counter()
        plaintexts = [int(m) for m in plaintexts]
        if self.workers > 1 and len(plaintexts) >= POOL_MIN:
            from concurrent.futures import ProcessPoolExecutor

            step = -(-len(plaintexts) // self.workers)
            chunks = [plaintexts[i : i + step] for i in range(0, len(plaintexts), step)]
            with ProcessPoolExecutor(max_workers=len(chunks)) as pool:
                out = [c for part in pool.map(_encrypt_chunk, [self.n] * len(chunks), chunks) for c in part]
        else:
            out = _encrypt_chunk(self.n, plaintexts)
        self._count("encrypt", len(out), t0)
        return out

    def sum_groups(self, cts: list[int], order: np.ndarray, starts: np.ndarray) -> list[int]:
        """The products (homomorphic sums) of ``cts[order[starts[i]:starts[i+1]]]`` for every group i."""
        import gmpy2

        t0 = time.perf_counter()
        n2 = gmpy2.mpz(self.nsquare)
        mp = [gmpy2.mpz(c) for c in cts]
        out = []
        muls = 0
        for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            acc = mp[order[a]]
            for i in order[a + 1 : b].tolist():
                acc = acc * mp[i] % n2
            muls += b - a - 1
            out.append(int(acc))
        self._count("add", muls, t0)
        return out

    def compress(self, sums: list[int | None], shift_bits: int, capacity: int) -> list[int]:
        """Pack ``capacity`` sums per ciphertext, the first in the highest bits (an empty one, None, is a zero); each
        packed ciphertext re-randomised."""
        import gmpy2

        t0 = time.perf_counter()
        n2 = gmpy2.mpz(self.nsquare)
        shift = gmpy2.mpz(1) << shift_bits
        out = []
        for start in range(0, len(sums), capacity):
            acc = gmpy2.mpz(1)  # the encryption of 0 without noise
            for c in sums[start : start + capacity]:
                acc = gmpy2.powmod(acc, shift, n2)
                if c is not None:
                    acc = acc * c % n2
            out.append(acc)
        self._count("pack", len(sums), t0)
        t0 = time.perf_counter()
        out = [int(c * self._noise() % n2) for c in out]
        self._count("rerandomise", len(out), t0)
        return out

    def decrypt(self, cts: list[int]) -> list[int]:
        t0 = time.perf_counter()
        out = [int(self.private.raw_decrypt(int(c))) for c in cts]
        self._count("decrypt", len(out), t0)
        return out

    def to_bytes(self, cts: list[int]) -> np.ndarray:
        w = self.width
        return np.frombuffer(b"".join(int(c).to_bytes(w, "big") for c in cts), dtype=np.uint8).reshape(len(cts), w)

    def from_bytes(self, a: np.ndarray) -> list[int]:
        return [int.from_bytes(row.tobytes(), "big") for row in np.asarray(a, dtype=np.uint8)]


POOL_MIN = 256  # fewer plaintexts are encrypted in this process (a pool's start-up costs more)


def _encrypt_chunk(n: int, plaintexts: list[int]) -> list[int]:
    """``Enc(m) = (1 + n m) r^n mod n^2`` for each m, with a fresh obfuscator r from :mod:`secrets` each."""
    import gmpy2

    mn, n2 = gmpy2.mpz(n), gmpy2.mpz(n) * gmpy2.mpz(n)
    return [int((mn * m + 1) % n2 * _obfuscator(mn, n2) % n2) for m in plaintexts]


def _obfuscator(n, n2):
    """A fresh ``r^n mod n^2``, r uniform in [1, n) from the operating system's randomness."""
    import gmpy2

    return gmpy2.powmod(secrets.randbelow(int(n) - 1) + 1, n, n2)


def unpack_compressed(plain: list[int], n_sums: int, capacity: int, bits: int) -> list[int]:
    """The ``n_sums`` packed sums in the decryptions ``plain`` (``capacity`` a ciphertext, the first highest)."""
    out = []
    mask = (1 << bits) - 1
    for i, p in enumerate(plain):
        k = min(capacity, n_sums - i * capacity)
        out += [(p >> (bits * (k - 1 - j))) & mask for j in range(k)]
    return out
