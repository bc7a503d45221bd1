"""Paillier (Paillier, EUROCRYPT 1999) with g = N + 1 and Damgård-Jurik-Nielsen's obfuscator (DJN 2010, section 4.2
of "A generalization of Paillier's public-key system with applications to electronic voting", IJIS 9(6)), as
SecretFlow HEU's ``z-paillier`` does it:

- keys: N = p q with p = q = 3 (mod 4), gcd(p - 1, q - 1) = 2 (Blum primes, each half of N's bits); a random x and
  h = -x^2 mod N; the public key is (N, h_s = h^N mod N^2), the secret key p and q;
- Enc(m) = (1 + m N) h_s^r mod N^2 with r a short random exponent of ``exp_bits`` bits (not a full r^N): h_s^r is
  an N-th residue, so any Paillier decryption (python-paillier's among them) recovers m;
- h_s never changes, so h_s^r is a fixed-base exponentiation (:class:`~.fixed_base.FixedBase`): one product a
  12-bit window of r. The label party, which holds p and q, computes it modulo p^2 and q^2 (half-size numbers) and
  recombines them (CRT); a feature party, which re-randomises what it sends, works modulo N^2;
- Dec(c) with CRT (as python-paillier): m_p = L_p(c^(p-1) mod p^2) h_p mod p, the same modulo q, recombined.

Security: N's factoring (2,048 bits: 112 bits, NIST SP 800-57 Part 1 Rev. 5, Table 2) and DJN's decisional
assumption that h_s^r with a short r is indistinguishable from a random N-th residue. r's length (224 bits by
default) is the rule NIST SP 800-56A Rev. 3 (5.6.1.1.1) and RFC 7919 (5.2) set for a short private exponent: twice
the security level, since the generic attacks on an exponent of b bits (Pollard's kangaroo, baby-step giant-step)
cost 2^(b/2). DJN and HEU use half of N's bits (1,024), more than that rule asks; ``exp_bits`` raises it."""

from __future__ import annotations

import gmpy2
from gmpy2 import mpz

from .fixed_base import DEFAULT_WINDOW, FixedBase, crt_pair, random_prime
from .scheme import _RNG, EXP_BITS, Scheme, random_digits, usable_bits

KEY_BITS_FLOOR = 2048  # N's bits for 112-bit security (NIST SP 800-57 Part 1 Rev. 5, Table 2)


class Paillier(Scheme):
    name = "paillier"
    public_names = ("n", "hs")

    def __init__(self, n, hs, p=None, q=None, exp_bits: int = EXP_BITS):
        super().__init__(exp_bits)
        self.n, self.hs = mpz(n), mpz(hs)
        self.nsquare = self.n * self.n
        self.modulus = self.nsquare
        self.p, self.q = (mpz(p), mpz(q)) if p is not None else (None, None)
        self.holder = p is not None
        self._table = None
        if self.holder:
            p, q = self.p, self.q
            self.p2, self.q2 = p * p, q * q
            self.q2_inv = gmpy2.invert(self.q2, self.p2)
            self.q_inv = gmpy2.invert(q, p)
            g = self.n + 1
            self.hp = gmpy2.invert((gmpy2.powmod(g, p - 1, self.p2) - 1) // p, p)
            self.hq = gmpy2.invert((gmpy2.powmod(g, q - 1, self.q2) - 1) // q, q)
            self._tp = self._tq = None

    @classmethod
    def generate(cls, bits: int = KEY_BITS_FLOOR, exp_bits: int = EXP_BITS) -> Paillier:
        bits = int(bits)
        if bits % 2:
            raise ValueError("a Paillier modulus has an even number of bits (two primes of half each)")
        while True:
            p = random_prime(bits // 2, _RNG, mod4=3)
            q = random_prime(bits // 2, _RNG, mod4=3)
            if p != q and gmpy2.gcd(p - 1, q - 1) == 2 and (p * q).bit_length() == bits:
                break
        n = p * q
        while True:
            x = mpz(_RNG.randrange(2, int(n) - 1))
            if gmpy2.gcd(x, n) == 1:
                break
        h = (-x * x) % n
        # h^N mod N^2 through the CRT (the key holder's shortcut)
        hs = crt_pair(gmpy2.powmod(h, n, p * p), gmpy2.powmod(h, n, q * q), p * p, q * q, gmpy2.invert(q * q, p * p))
        return cls(n, hs, p, q, exp_bits)

    # ---- the key as integers (a worker rebuilds it from them)
    def public_ints(self) -> dict[str, int]:
        return {"n": int(self.n), "hs": int(self.hs)}

    def secret_ints(self) -> dict[str, int]:
        return {"p": int(self.p), "q": int(self.q)}

    @classmethod
    def from_ints(cls, ints: dict[str, int], exp_bits: int) -> Paillier:
        return cls(ints["n"], ints["hs"], ints.get("p"), ints.get("q"), exp_bits)

    @property
    def key_bits(self) -> int:
        return int(self.n.bit_length())

    @property
    def usable_bits(self) -> int:
        return usable_bits(self.name, self.key_bits)

    # ---- per ciphertext
    def _tables(self):
        if self.holder and self._tp is None:
            self._tp = FixedBase(self.hs % self.p2, self.p2)
            self._tq = FixedBase(self.hs % self.q2, self.q2)
        if not self.holder and self._table is None:
            self._table = FixedBase(self.hs, self.nsquare)

    def zeros(self, count: int) -> list:
        """``count`` fresh encryptions of 0: h_s^r, modulo p^2 and q^2 at the key holder."""
        self._tables()
        digits = random_digits(count, self.exp_bits, DEFAULT_WINDOW)
        if self.holder:
            p2, q2, inv = self.p2, self.q2, self.q2_inv
            return [crt_pair(self._tp.pow_digits(d), self._tq.pow_digits(d), p2, q2, inv) for d in digits]
        return [self._table.pow_digits(d) for d in digits]

    def encrypt_many(self, ms: list[int]) -> list:
        """Enc(m) = (1 + m N) h_s^r mod N^2 for each m (0 <= m < N)."""
        self._tables()
        digits = random_digits(len(ms), self.exp_bits, DEFAULT_WINDOW)
        out = []
        if self.holder:
            p2, q2, inv, tp, tq = self.p2, self.q2, self.q2_inv, self._tp, self._tq
            for m, d in zip(ms, digits, strict=True):
                gm = 1 + int(m) * self.n  # (1 + N)^m mod N^2, exactly
                out.append(crt_pair(gm % p2 * tp.pow_digits(d) % p2, gm % q2 * tq.pow_digits(d) % q2, p2, q2, inv))
            return out
        n2 = self.nsquare
        return [(1 + int(m) * self.n) % n2 * self._table.pow_digits(d) % n2 for m, d in zip(ms, digits, strict=True)]

    def decrypt_one(self, c) -> int:
        c = mpz(c)
        p, q = self.p, self.q
        mp = (gmpy2.powmod(c % self.p2, p - 1, self.p2) - 1) // p * self.hp % p
        mq = (gmpy2.powmod(c % self.q2, q - 1, self.q2) - 1) // q * self.hq % q
        return int(mq + q * ((mp - mq) * self.q_inv % p))
