"""Okamoto-Uchiyama (Okamoto & Uchiyama, EUROCRYPT 1998) in the form of Coron, Naccache and Paillier ("Accelerating
Okamoto-Uchiyama's public-key cryptosystem", Electronics Letters 35(4), 1999), as SecretFlow HEU's ``ou`` (the
scheme SecretFlow's SecureBoost uses by default):

- keys: n = p^2 q with |p| = |q| = ``bits`` / 3; p - 1 = t u with t a prime of 2 x 112 = 224 bits; g with g^(p-1)
  of order p modulo p^2, G = g^u mod n, H = g'^(n u) mod n for another random g'. Public: (n, G, H); secret: p, q, t;
- Enc(m) = G^m H^r mod n for 0 <= m < p and a short random r of ``exp_bits`` bits; both are fixed-base
  exponentiations (:class:`~.fixed_base.FixedBase`), and the label party computes them modulo p^2 and q (CRT);
- Dec(c) = L(c^t mod p^2) / L(G^t mod p^2) mod p with L(x) = (x - 1) / p: H^t = 1 modulo p^2, so the obfuscator
  vanishes with an exponent of 224 bits instead of p - 1. Textbook OU's decryption (with G as its g) gives the same m.

Ciphertexts live modulo n (2,049 bits by default, against Paillier's 4,096-bit N^2): cheaper products and half the
bytes, but a plaintext below p (682 usable bits), so fewer packed sums fit in one.

Security: factoring n = p^2 q and the p-subgroup assumption (Okamoto-Uchiyama's), with a short r (the 2 x 112-bit
rule of :mod:`.paillier`). |p| = 683 bits keeps the elliptic-curve method, which depends on the smallest factor,
near 2^112 and n's number field sieve at 2,048-bit RSA's 112 bits (NIST SP 800-57 Part 1 Rev. 5, Table 2); three
factors of 683 bits is the multi-prime RSA limit for 2,048-bit moduli (Lenstra, "Unbelievable security", ASIACRYPT
2001). The p-subgroup assumption has had far less study than Paillier's composite residuosity: docs/TREES.md says
when it is acceptable."""

from __future__ import annotations

import gmpy2
from gmpy2 import mpz

from .fixed_base import DEFAULT_WINDOW, FixedBase, crt_pair, random_prime
from .scheme import _RNG, EXP_BITS, SECURITY_BITS, Scheme, random_digits, usable_bits

KEY_BITS_FLOOR = 2049  # n = p^2 q with 683-bit p and q (HEU's "2,048-bit" OU key)
SUBGROUP_BITS = 2 * SECURITY_BITS  # t, the order of H modulo p^2: a generic search for it costs 2^112


def check_key_bits(bits: int) -> str | None:
    """Why ``bits`` is not an OU modulus size (None: it is): n = p^2 q with |p| = |q| = bits / 3."""
    if bits % 3:
        near = f"{bits - bits % 3} or {bits - bits % 3 + 3}"
        return f"must be a multiple of 3 (n = p^2 q with p and q of bits / 3 each: {near})"
    if bits < KEY_BITS_FLOOR:
        return f"must be >= {KEY_BITS_FLOOR} (683-bit p and q: 112-bit security, docs/TREES.md)"
    return None


class OkamotoUchiyama(Scheme):
    name = "ou"
    public_names = ("n", "g", "h")

    def __init__(self, n, g, h, p=None, q=None, t=None, exp_bits: int = EXP_BITS):
        super().__init__(exp_bits)
        self.n, self.g, self.h = mpz(n), mpz(g), mpz(h)
        self.modulus = self.n
        self.holder = p is not None
        self.p, self.q, self.t = (mpz(p), mpz(q), mpz(t)) if self.holder else (None, None, None)
        self._tables = None
        if self.holder:
            self.p2 = self.p * self.p
            self.q_inv = gmpy2.invert(self.q, self.p2)
            self.dinv = gmpy2.invert((gmpy2.powmod(self.g % self.p2, self.t, self.p2) - 1) // self.p, self.p)

    @classmethod
    def generate(cls, bits: int = KEY_BITS_FLOOR, exp_bits: int = EXP_BITS) -> OkamotoUchiyama:
        bits = int(bits)
        k = bits // 3
        if bits % 3 or k < 2 * SUBGROUP_BITS:
            raise ValueError(f"an OU modulus has 3 x |p| bits, |p| >= {2 * SUBGROUP_BITS}: not {bits}")
        t = random_prime(SUBGROUP_BITS, _RNG)
        while True:
            u = mpz(_RNG.getrandbits(k - SUBGROUP_BITS)) | (mpz(3) << (k - SUBGROUP_BITS - 2))
            u -= u % 2  # p = t u + 1 odd
            p = t * u + 1
            if p.bit_length() == k and gmpy2.is_prime(p, 40):
                break
        while True:
            q = random_prime(k, _RNG)
            if q != p:
                break
        n = p * p * q
        p2 = p * p
        while True:
            g = mpz(_RNG.randrange(2, int(n)))
            if g % p and gmpy2.powmod(g % p2, p - 1, p2) != 1:  # g^(p-1) of order p modulo p^2
                break
        while True:
            g2 = mpz(_RNG.randrange(2, int(n)))
            if g2 % p and g2 % q:
                break
        return cls(n, gmpy2.powmod(g, u, n), gmpy2.powmod(g2, n * u, n), p, q, t, exp_bits)

    def public_ints(self) -> dict[str, int]:
        return {"n": int(self.n), "g": int(self.g), "h": int(self.h)}

    def secret_ints(self) -> dict[str, int]:
        return {"p": int(self.p), "q": int(self.q), "t": int(self.t)}

    @classmethod
    def from_ints(cls, ints: dict[str, int], exp_bits: int) -> OkamotoUchiyama:
        return cls(ints["n"], ints["g"], ints["h"], ints.get("p"), ints.get("q"), ints.get("t"), exp_bits)

    @property
    def key_bits(self) -> int:
        """3 x |p|: n = p^2 q has 3 |p| bits or one or two fewer (p and q have their top two bits set)."""
        return 3 * -(-int(self.n.bit_length()) // 3)

    @property
    def usable_bits(self) -> int:
        return usable_bits(self.name, self.key_bits)

    def _holder_tables(self):
        if self._tables is None:
            p2, q = self.p2, self.q
            self._tables = (
                FixedBase(self.g % p2, p2),
                FixedBase(self.h % p2, p2),
                FixedBase(self.g % q, q),
                FixedBase(self.h % q, q),
            )
        return self._tables

    def zeros(self, count: int) -> list:
        """``count`` fresh encryptions of 0: H^r, modulo p^2 and q at the key holder."""
        digits = random_digits(count, self.exp_bits, DEFAULT_WINDOW)
        if self.holder:
            _, hp, _, hq = self._holder_tables()
            return [crt_pair(hp.pow_digits(d), hq.pow_digits(d), self.p2, self.q, self.q_inv) for d in digits]
        if self._tables is None:
            self._tables = (FixedBase(self.g, self.n), FixedBase(self.h, self.n))
        return [self._tables[1].pow_digits(d) for d in digits]

    def encrypt_many(self, ms: list[int]) -> list:
        """Enc(m) = G^m H^r mod n for each m (0 <= m < p)."""
        digits = random_digits(len(ms), self.exp_bits, DEFAULT_WINDOW)
        if not self.holder:
            z = self.zeros(len(ms))
            return [self._tables[0].pow(m) * zi % self.n for m, zi in zip(ms, z, strict=True)]
        gp, hp, gq, hq = self._holder_tables()
        p2, q, inv = self.p2, self.q, self.q_inv
        out = []
        for m, d in zip(ms, digits, strict=True):
            cp = gp.pow(m) * hp.pow_digits(d) % p2
            cq = gq.pow(m) * hq.pow_digits(d) % q
            out.append(crt_pair(cp, cq, p2, q, inv))
        return out

    def decrypt_one(self, c) -> int:
        x = gmpy2.powmod(mpz(c) % self.p2, self.t, self.p2)
        return int((x - 1) // self.p * self.dinv % self.p)
