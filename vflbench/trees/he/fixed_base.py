"""Fixed-base exponentiation (Brickell, Gordon, McCurley and Wilson, EUROCRYPT 1992; the windowed table every fast
Paillier and OU library keeps for its public bases): a base that never changes, raised to many random exponents.

The table holds ``base^(d * 2^(w i)) mod m`` for every window i of the exponent and every digit d < 2^w, so an
exponent of ``bits`` bits costs one modular product per non-zero window (about ``bits / w``) and no squaring at
all. Windows are built as they are first needed, so a table serves exponents of any length."""

from __future__ import annotations

import gmpy2
from gmpy2 import mpz

DEFAULT_WINDOW = 12  # 4,096 entries a window: at 2,048 bits, 1 MB a window


class FixedBase:
    """``base^e mod modulus`` for many exponents ``e`` (non-negative). ``window``: the bits a table row covers."""

    def __init__(self, base, modulus, window: int = DEFAULT_WINDOW):
        self.m = mpz(modulus)
        self.w = int(window)
        self.mask = (1 << self.w) - 1
        self.rows: list[list] = []
        self._next = mpz(base) % self.m  # base^(2^(w * len(rows)))

    def _grow(self, windows: int) -> None:
        m = self.m
        while len(self.rows) < windows:
            b = self._next
            row = [mpz(1), b]
            acc = b
            for _ in range(2, 1 << self.w):
                acc = acc * b % m
                row.append(acc)
            self.rows.append(row)
            self._next = acc * b % m  # b^(2^w)

    def pow(self, e) -> mpz:
        e = int(e)
        mask, w = self.mask, self.w
        digits = []
        while e:
            digits.append(e & mask)
            e >>= w
        return self.pow_digits(digits)

    def pow_digits(self, digits: list[int]) -> mpz:
        """``base^e`` for the exponent whose base-2^w digits, lowest first, are ``digits``."""
        if len(digits) > len(self.rows):
            self._grow(len(digits))
        m = self.m
        out = None
        for row, d in zip(self.rows, digits, strict=False):  # (rows may outnumber the digits)
            if d:
                out = row[d] if out is None else out * row[d] % m
        return mpz(1) if out is None else out

    def entries(self) -> int:
        return len(self.rows) << self.w


def crt_pair(ap, aq, p2, q2, q2_inv_p2):
    """The x mod p2 q2 with x = ap mod p2 and x = aq mod q2 (Garner), given q2^-1 mod p2."""
    return aq + q2 * ((ap - aq) * q2_inv_p2 % p2)


def random_prime(bits: int, rng, mod4: int | None = None) -> mpz:
    """A random prime of exactly ``bits`` bits (its top two bits set, so a product of two has twice the bits),
    from ``rng`` (a :class:`secrets.SystemRandom`); ``mod4``: also p = mod4 (mod 4)."""
    while True:
        c = mpz(rng.getrandbits(bits)) | (mpz(3) << (bits - 2)) | 1
        if mod4 is not None:
            c = c - (c % 4) + mod4
            if c.bit_length() != bits:
                continue
        if gmpy2.is_prime(c, 40):
            return c
