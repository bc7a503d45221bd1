"""What an additively homomorphic scheme offers SecureBoost (:class:`Scheme`), whichever it is: encryption and
decryption at the key holder (the label party), and at anyone holding the public key the homomorphic sum (a product
of ciphertexts), the shift of a plaintext by whole bits (a power of two as exponent: SecureBoost+'s cipher
compression) and re-randomisation (a product with a fresh encryption of zero). Ciphertexts are integers; on the wire
each is ``width`` bytes, big-endian, whatever its value, so what is counted is what crosses.

Every batch operation is counted and timed (:attr:`Scheme.ops`, :attr:`Scheme.seconds`: wall seconds of the batch,
wherever it ran) and runs in the scheme's :class:`~.pool.Pool` (the run's ``--threads`` processes; one: this
process). A scheme crosses into a worker as its :meth:`spec` (integers only: the public key, and the secret one at
the key holder); the worker rebuilds it once and keeps its fixed-base tables."""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

import numpy as np
from gmpy2 import mpz

SECURITY_BITS = 112  # NIST SP 800-57 Part 1 Rev. 5, Table 2: what every default below is sized for
EXP_BITS = 2 * SECURITY_BITS  # a short random exponent's bits: generic attacks on it cost 2^(bits / 2)

_RNG = secrets.SystemRandom()


def random_digits(count: int, bits: int, window: int) -> list[list[int]]:
    """``count`` fresh random exponents of at least ``bits`` bits, each as its base-2^window digits (lowest first,
    ``ceil(bits / window)`` of them, every one uniform): what a fixed-base table multiplies by, drawn straight from
    the operating system's randomness (:func:`secrets.token_bytes`) with no big integer in between. Every obfuscator
    of every scheme draws its exponent here."""
    windows = -(-int(bits) // int(window))
    raw = np.frombuffer(secrets.token_bytes(4 * windows * count), dtype=np.uint32).reshape(count, windows)
    return (raw & np.uint32((1 << window) - 1)).tolist()


class Scheme:
    """One key of an additively homomorphic scheme. Subclasses set :attr:`name`, :attr:`modulus` (of the
    ciphertexts) and the per-ciphertext operations; this class batches them."""

    name: ClassVar[str] = ""
    public_names: ClassVar[tuple[str, ...]] = ()  # the public key's integers, in the setup message's order

    def __init__(self, exp_bits: int = EXP_BITS):
        self.exp_bits = int(exp_bits)
        self.ops: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.pool = None  # a pool.Pool with this key installed (None: every batch in this process)
        self.key_id = f"{self.name}-{secrets.token_hex(6)}"

    # ---- what a subclass defines
    modulus: mpz
    holder: bool = False  # holds the secret key

    def public_ints(self) -> dict[str, int]:
        raise NotImplementedError

    def secret_ints(self) -> dict[str, int]:
        raise NotImplementedError

    @classmethod
    def from_ints(cls, ints: dict[str, int], exp_bits: int) -> Scheme:
        raise NotImplementedError

    def encrypt_many(self, ms: list[int]) -> list:
        """Fresh encryptions of the plaintexts ``ms`` (each its own random exponent)."""
        raise NotImplementedError

    def encrypt_one(self, m: int) -> mpz:
        return self.encrypt_many([m])[0]

    def decrypt_one(self, c) -> int:
        raise NotImplementedError

    def zeros(self, count: int) -> list:
        """``count`` fresh encryptions of 0 (the obfuscators a re-randomisation multiplies in)."""
        raise NotImplementedError

    def zero(self) -> mpz:
        return self.zeros(1)[0]

    @property
    def usable_bits(self) -> int:
        """Plaintext bits a packed sum may fill and still decrypt to itself."""
        raise NotImplementedError

    # ---- sizes and the wire
    @property
    def key_bits(self) -> int:
        """The key's size as the option names it (Paillier: N's bits; OU: n's, 3 x |p|)."""
        raise NotImplementedError

    @property
    def width(self) -> int:
        """Bytes of one ciphertext on the wire (fixed by the key's size, whatever the value)."""
        return wire_width(self.name, self.key_bits)

    def to_bytes(self, cts) -> np.ndarray:
        w = self.width
        return np.frombuffer(b"".join(int(c).to_bytes(w, "big") for c in cts), dtype=np.uint8).reshape(len(cts), w)

    def from_bytes(self, a: np.ndarray) -> list:
        return ints_from_bytes(a)

    def public_fields(self) -> dict[str, np.ndarray]:
        """The public key as the setup message's fields (one big-endian byte array an integer)."""
        w = self.width  # every public integer is below the ciphertexts' modulus: sent at their width
        return {
            f"pk_{k}": np.frombuffer(int(v).to_bytes(w, "big"), dtype=np.uint8) for k, v in self.public_ints().items()
        }

    @classmethod
    def from_public_fields(cls, fields: dict, exp_bits: int = EXP_BITS) -> Scheme:
        ints = {k: int.from_bytes(np.asarray(fields[f"pk_{k}"], np.uint8).tobytes(), "big") for k in cls.public_names}
        return cls.from_ints(ints, exp_bits)

    def spec(self) -> tuple:
        """What rebuilds this key in a worker: (class, integers, exp_bits); the secret ones only at the holder."""
        ints = dict(self.public_ints())
        if self.holder:
            ints.update(self.secret_ints())
        return type(self), ints, self.exp_bits

    # ---- counted batches
    def _count(self, what: str, n: int, t0: float) -> None:
        self.ops[what] = self.ops.get(what, 0) + int(n)
        self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0

    def attach(self, pool) -> None:
        """Run this key's batches in ``pool``: its workers rebuild the key once (without workers, the key itself)."""
        self.pool = pool
        if pool.processes:
            pool.broadcast(install_key, self.key_id, self.spec())
        else:
            pool.state[self.key_id] = self

    def _batch(self, task, items: list, chunk: int) -> list:
        if self.pool is None or not self.pool.processes or len(items) < 2 * chunk:
            return task({self.key_id: self}, self.key_id, items)
        parts = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        return [x for part in self.pool.map(task, [(self.key_id, p) for p in parts]) for x in part]

    def encrypt(self, plaintexts) -> list:
        t0 = time.perf_counter()
        out = self._batch(encrypt_task, [int(m) for m in plaintexts], 512)
        self._count("encrypt", len(out), t0)
        return out

    def decrypt(self, cts) -> list[int]:
        t0 = time.perf_counter()
        out = self._batch(decrypt_task, [int(c) for c in cts], 64)
        self._count("decrypt", len(out), t0)
        return out

    def compress(self, sums: list, shift_bits: int, capacity: int) -> list:
        """Pack ``capacity`` sums a ciphertext, the first in the highest bits (Horner: c <- c^(2^bits) c_next), each
        packed ciphertext re-randomised (a fresh encryption of 0 multiplied in)."""
        t0 = time.perf_counter()
        groups = [[int(c) if c else 0 for c in sums[i : i + capacity]] for i in range(0, len(sums), capacity)]
        out = self._batch(compress_task, [(int(shift_bits), g) for g in groups], 16)
        self._count("pack", len(sums), t0)
        self.ops["rerandomise"] = self.ops.get("rerandomise", 0) + len(out)
        return out

    def sum_groups(self, cts: list, order: np.ndarray, starts: np.ndarray) -> list:
        """The products (homomorphic sums) of ``cts[order[starts[i]:starts[i+1]]]`` for every group i."""
        t0 = time.perf_counter()
        out, muls = group_products([mpz(c) for c in cts], order, starts, self.modulus)
        self._count("add", muls, t0)
        return out


def wire_width(scheme: str, key_bits: int) -> int:
    """Bytes of a ciphertext of ``scheme`` with a key of ``key_bits``: Paillier's are below N^2, OU's below n."""
    return (2 * int(key_bits) + 7) // 8 if scheme == "paillier" else (int(key_bits) + 7) // 8


def usable_bits(scheme: str, key_bits: int) -> int:
    """Plaintext bits a packed sum may fill: below N (Paillier), below p (OU: |p| = key_bits / 3)."""
    return int(key_bits) - 2 if scheme == "paillier" else int(key_bits) // 3 - 1


def ints_from_bytes(a: np.ndarray) -> list:
    a = np.asarray(a, dtype=np.uint8)
    raw, w = a.tobytes(), a.shape[1] if a.ndim == 2 else 0
    return [mpz(int.from_bytes(raw[i : i + w], "big")) for i in range(0, len(raw), w)] if w else []


def group_products(vals: list, order: np.ndarray, starts: np.ndarray, modulus) -> tuple[list, int]:
    """Per group i the product of ``vals[order[starts[i]:starts[i+1]]]`` mod ``modulus``, and the products taken."""
    m = mpz(modulus)
    out = []
    idx = order.tolist()
    bounds = starts.tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        acc = vals[idx[a]]
        for i in idx[a + 1 : b]:
            acc = acc * vals[i] % m
        out.append(acc)
    return out, int(bounds[-1] - bounds[0] - (len(bounds) - 1))


# ----------------------------------------------------------------------------- tasks a worker runs (or this process)


def install_key(state: dict, key_id: str, spec: tuple) -> None:
    cls, ints, exp_bits = spec
    state[key_id] = cls.from_ints(ints, exp_bits)


def encrypt_task(state: dict, key_id: str, items: list) -> list:
    return state[key_id].encrypt_many(items)


def decrypt_task(state: dict, key_id: str, items: list) -> list:
    he = state[key_id]
    return [he.decrypt_one(c) for c in items]


def compress_task(state: dict, key_id: str, items: list) -> list:
    """Each (shift_bits, group): the group's sums packed by Horner's rule (an empty sum, 0, adds nothing), times a
    fresh encryption of 0."""
    he = state[key_id]
    m = he.modulus
    out = []
    zeros = he.zeros(len(items))
    for (shift_bits, group), z in zip(items, zeros, strict=True):
        e = mpz(1) << shift_bits
        acc = None
        for c in group:
            if acc is not None:
                acc = pow(acc, e, m)
                if c:
                    acc = acc * c % m
            elif c:
                acc = mpz(c)
        out.append(z if acc is None else acc * z % m)
    return out
