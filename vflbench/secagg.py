"""Secure aggregation by pairwise masking: Bonawitz et al.'s Protocol 0, simulated.

Each pair of parties {m, m'} shares a seed. For every release (iteration t) and every masked value
(sample, coordinate) they derive, from that seed, fresh masks ``u[m, m']`` and ``u[m', m]`` uniform on
Z_R, and party m uploads ``y_m = (q_m + sum_{m' != m} (u[m, m'] - u[m', m])) mod R``. The masks cancel in
the server's sum, ``sum_m y_m mod R = sum_m q_m`` (exact while ``sum_m q_m < R``), and for two or more
parties each ``y_m`` on its own is uniform on Z_R, so the server learns only the sum.

* ``R = 2^ceil(log2(M*b + 1))``: the sum of M counts in {0..b} fits, and an upload is that many bits.
* Under missing blocks only the parties that hold a sample's block take part for that sample: the
  pairs are formed among them, so a lone party's upload is its plain count (the accountant counts it
  as a release by one party).
* In one process (:class:`PairwiseMasking`) pairwise seeds come from the run's seeded random streams
  (one per unordered pair, hashed with the iteration), not from a key agreement: this simulates the
  arithmetic and what the server sees. Across processes (``--runtime processes``,
  :class:`KeyedMasking`) the pair keys come from an X25519 agreement and the masks from ChaCha20. Dropout recovery (secret-shared seeds) is out of scope, as in the PBM-VFL paper.
"""

from __future__ import annotations

import hashlib
import math

import torch


def modulus_bits(parties: int, b: int) -> int:
    """Bits of one masked upload: ceil(log2(M*b + 1))."""
    return max(1, math.ceil(math.log2(parties * b + 1)))


class PairwiseMasking:
    def __init__(self, parties: int, b: int, master_seed: int, device: torch.device | str = "cpu"):
        self.m = int(parties)
        self.bits = modulus_bits(parties, b)
        self.R = 1 << self.bits
        self.master = int(master_seed)
        self.device = torch.device(device)
        self.pairs = [(i, j) for i in range(self.m) for j in range(i + 1, self.m)]
        self.uploads_seen = 0

    def _pair_seed(self, i: int, j: int, t: int) -> int:
        h = hashlib.blake2b(f"{self.master}:{i}:{j}:{t}".encode(), digest_size=8).digest()
        return int.from_bytes(h, "little") & ((1 << 63) - 1)

    def masks(self, t: int, shape: tuple[int, ...]) -> torch.Tensor:
        """``[M, M, *shape]`` int64: entry [m, m'] is u[m, m'] for release ``t`` (fresh per t, value)."""
        u = torch.zeros(self.m, self.m, *shape, dtype=torch.int64, device=self.device)
        g = torch.Generator(device=self.device)
        for i, j in self.pairs:  # M(M-1)/2 pairs; a simulation of per-pair PRGs
            g.manual_seed(self._pair_seed(i, j, t))
            both = torch.randint(0, self.R, (2, *shape), generator=g, device=self.device, dtype=torch.int64)
            u[i, j], u[j, i] = both[0], both[1]
        return u

    def upload(self, q: torch.Tensor, sent: torch.Tensor, t: int) -> torch.Tensor:
        """What each party sends: ``q`` ``[M, B, P]`` integer counts, ``sent`` ``[M, B]`` which parties
        take part per sample -> ``[M, B, P]`` masked integers in Z_R (0 where a party sends nothing)."""
        u = self.masks(t, tuple(q.shape[1:]))  # [M, M, B, P]
        both = (sent[:, None] & sent[None, :])[..., None]  # [M, M, B, 1]: the pair takes part
        u = u * both
        pert = u.sum(1) - u.sum(0)  # sum_m' u[m, m'] - u[m', m]
        self.uploads_seen += 1
        return torch.remainder(q.to(torch.int64) + pert, self.R) * sent[..., None]

    def aggregate(self, y: torch.Tensor) -> torch.Tensor:
        """The server's sum of the uploads, mod R: equals the sum of the plain counts."""
        return torch.remainder(y.sum(0), self.R)


# ----------------------------------------------------------------------------- real keys, across processes
class KeyedMasking:
    """Pairwise masking (Bonawitz et al.'s Protocol 0) with real keys: party ``me`` shares with every
    other party a 32-byte key from an X25519 agreement (:func:`agree_pair_keys`). The masks of release
    ``t`` for the pair (i, j), i < j, are the ChaCha20 keystream of that key with nonce ``t`` (64-bit
    little-endian, then 8 zero bytes), read as little-endian uint32 words reduced mod R (R a power of
    two): the first B*P words are u[i, j], the next B*P u[j, i]. Party m uploads
    ``(q_m + sum_{m'} u[m, m'] - u[m', m]) mod R`` over the parties that take part in each sample, so
    the masks cancel in the server's sum and each upload on its own is uniform on Z_R."""

    def __init__(self, me: int, k: int, bits: int, pair_keys: dict[int, bytes]):
        self.me, self.k, self.bits, self.R = me, k, bits, 1 << bits
        self.keys = pair_keys  # other party -> 32-byte key shared with it

    def _masks(self, other: int, t: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(u[lo, hi], u[hi, lo]) of the pair {me, other} for release ``t``."""
        import numpy as np
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        n = int(np.prod(shape))
        nonce = int(t).to_bytes(8, "little") + bytes(8)
        stream = Cipher(algorithms.ChaCha20(self.keys[other], nonce), mode=None).encryptor().update(bytes(8 * n))
        words = np.frombuffer(stream, dtype="<u4").astype(np.int64) & (self.R - 1)
        return torch.from_numpy(words[:n].reshape(shape).copy()), torch.from_numpy(words[n:].reshape(shape).copy())

    def upload(self, q: torch.Tensor, sent: torch.Tensor, t: int) -> torch.Tensor:
        """``q`` ``[B, P]`` this party's counts, ``sent`` ``[K, B]`` -> its masked upload ``[B, P]`` in Z_R."""
        pert = torch.zeros(q.shape, dtype=torch.int64)
        for other in range(self.k):
            if other == self.me:
                continue
            lo = min(self.me, other)
            u_lohi, u_hilo = self._masks(other, t, tuple(q.shape))
            both = (sent[self.me] & sent[other]).cpu()[:, None]
            mine, theirs = (u_lohi, u_hilo) if self.me == lo else (u_hilo, u_lohi)
            pert += (mine - theirs) * both
        return torch.remainder(q.cpu().to(torch.int64) + pert, self.R) * sent[self.me].cpu()[:, None]


def agree_pair_keys(wire) -> dict[int, bytes]:
    """X25519 between every pair of parties, the server relaying the public keys (it learns nothing
    from them). Party side: returns other party -> 32-byte key (HKDF-SHA256 of the shared secret,
    bound to the pair). The server returns {}."""
    import numpy as np

    k = wire.world - 1
    if wire.rank == 0:  # the server (vflbench.runtime: rank 0)
        pubs = torch.stack([wire.recv((32,), torch.uint8, r, None) for r in range(1, wire.world)])
        for r in range(1, wire.world):
            wire.post(pubs, r, None)
        wire.flush()
        return {}
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    me = wire.rank - 1
    private = X25519PrivateKey.generate()
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    wire.send(torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy()), 0, None)
    pubs = wire.recv((k, 32), torch.uint8, 0, None)
    keys = {}
    for other in range(k):
        if other == me:
            continue
        shared = private.exchange(X25519PublicKey.from_public_bytes(bytes(pubs[other].numpy().tobytes())))
        lo, hi = min(me, other), max(me, other)
        keys[other] = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=f"vflbench secagg pair {lo}-{hi}".encode()).derive(shared)
    return keys
