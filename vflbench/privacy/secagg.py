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
  :class:`KeyedMasking`) the pair keys come from an X25519 agreement and the masks from ChaCha20,
  one nonce per release and direction (:func:`mask_nonce`). docs/RUNTIME.md states the threat model.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
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
MASK_DIRECTIONS = 2  # u[lo, hi] and u[hi, lo]: one keystream each


def chacha20_nonce(counter: int, nonce: bytes) -> bytes:
    """The 16 bytes ``cryptography``'s ChaCha20 takes: the RFC 7539 block counter (4 bytes,
    little-endian) followed by the RFC's 12-byte nonce."""
    if len(nonce) != 12 or not 0 <= counter < 2**32:
        raise ValueError("ChaCha20 takes a 32-bit block counter and a 12-byte nonce")
    return counter.to_bytes(4, "little") + nonce


def mask_nonce(release: int, direction: int) -> bytes:
    """The RFC 7539 nonce of one release's masks in one direction of a pair: the release index (8 bytes,
    little-endian) then the direction (4 bytes). Every (release, direction) has its own nonce and its
    keystream starts at block 0, so no two releases or directions of a pair share keystream (each pair
    has its own key)."""
    if not 0 <= release < 2**64 or direction not in range(MASK_DIRECTIONS):
        raise ValueError(f"release {release} / direction {direction} out of range")
    return int(release).to_bytes(8, "little") + int(direction).to_bytes(4, "little")


def keystream(key: bytes, release: int, direction: int, nbytes: int) -> bytes:
    """``nbytes`` of the ChaCha20 keystream of ``key`` for one release and direction (counter from 0)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    if nbytes > 64 * 2**32:
        raise ValueError("one release's masks exceed a ChaCha20 stream (256 GiB)")
    enc = Cipher(algorithms.ChaCha20(key, chacha20_nonce(0, mask_nonce(release, direction))), mode=None).encryptor()
    return enc.update(bytes(nbytes))


def mask_words(key: bytes, release: int, direction: int, n: int, bits: int) -> np.ndarray:
    """``n`` masks uniform on Z_R, R = 2^bits: little-endian words of the keystream (4 bytes when
    bits <= 32, else 8), keeping the low ``bits`` bits (uniform, as R is a power of two)."""
    if not 1 <= bits <= 62:
        raise ValueError(f"a SecAgg modulus of 2^{bits} is not supported (1..62 bits)")
    width = 4 if bits <= 32 else 8
    words = np.frombuffer(keystream(key, release, direction, width * n), dtype="<u4" if width == 4 else "<u8")
    return (words & np.uint64((1 << bits) - 1)).astype(np.int64)


class KeyedMasking:
    """Pairwise masking (Bonawitz et al.'s Protocol 0) with real keys: party ``me`` shares with every
    other party a 32-byte key from an X25519 agreement (:func:`agree_pair_keys`). The masks of release
    ``t`` for the pair (i, j), i < j, are ``u[i, j]`` = :func:`mask_words` of the pair key in direction 0
    and ``u[j, i]`` in direction 1 (ChaCha20, nonce = release and direction, counter from 0: the
    keystreams of two releases or directions never overlap). Party m uploads
    ``(q_m + sum_{m'} u[m, m'] - u[m', m]) mod R`` over the parties that take part in each sample, so
    the masks cancel in the server's sum and each upload on its own is uniform on Z_R."""

    def __init__(self, me: int, k: int, bits: int, pair_keys: dict[int, bytes]):
        self.me, self.k, self.bits, self.R = me, k, bits, 1 << bits
        self.keys = pair_keys  # other party -> 32-byte key shared with it

    def _masks(self, other: int, t: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(u[lo, hi], u[hi, lo]) of the pair {me, other} for release ``t``."""
        n = int(np.prod(shape))
        key = self.keys[other]
        return tuple(
            torch.from_numpy(mask_words(key, t, d, n, self.bits).reshape(shape)) for d in range(MASK_DIRECTIONS)
        )

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


def pair_key_info(context: str, lo: int, hi: int, pub_lo: bytes, pub_hi: bytes) -> bytes:
    """HKDF's ``info`` for the key of the pair (lo, hi): bound to the run (``context``: its run key), the
    pair and both public keys, so a key is never reused across runs, pairs or key pairs."""
    return b"vflbench secagg v2|" + context.encode() + f"|{lo}-{hi}|".encode() + pub_lo + pub_hi


def key_fingerprint(pubs: list[bytes]) -> str:
    """SHA-256 of the public keys every party received (in party order), 16 hex digits in groups of 4:
    parties that compare it out of band detect a server that substituted a key (each victim of a
    substitution sees another list)."""
    digest = hashlib.sha256(b"".join(pubs)).hexdigest()[:16]
    return " ".join(digest[i : i + 4] for i in range(0, 16, 4))


def agree_pair_keys(wire, context: str = "") -> tuple[dict[int, bytes], str | None]:
    """X25519 between every pair of parties, the server relaying the public keys (an honest-but-curious
    server learns nothing from them; an active one could substitute them: compare the fingerprints).
    Party side: returns (other party -> 32-byte key, HKDF-SHA256 of the shared secret bound by
    :func:`pair_key_info`; the fingerprint of the keys received). The server returns ({}, the fingerprint
    of the keys it relayed: what every party should print). The
    private key is generated from the OS's randomness inside the party and never leaves its memory."""
    from ..core.errors import VFLBenchError

    k = wire.world - 1
    if wire.rank == 0:  # the server (vflbench.federation.runtime: rank 0)
        pubs = torch.stack([wire.recv((32,), torch.uint8, r, None) for r in range(1, wire.world)])
        for r in range(1, wire.world):
            wire.post(pubs, r, None)
        wire.flush()
        return {}, key_fingerprint([bytes(pubs[j].numpy().tobytes()) for j in range(k)])
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    me = wire.rank - 1
    private = X25519PrivateKey.generate()
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    wire.send(torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy()), 0, None)
    got = wire.recv((k, 32), torch.uint8, 0, None)
    pubs = [bytes(got[j].numpy().tobytes()) for j in range(k)]
    if pubs[me] != raw:
        raise VFLBenchError(
            f"party {me}: the server relayed another public key for this party than the one it sent; "
            "stopping (an active server, or a broken link)."
        )
    keys = {}
    for other in range(k):
        if other == me:
            continue
        try:
            shared = private.exchange(X25519PublicKey.from_public_bytes(pubs[other]))
        except ValueError:  # a low-order point: the shared secret would be known to whoever chose it
            raise VFLBenchError(
                f"party {me}: the public key relayed for party {other} is invalid (a low-order X25519 point); stopping."
            ) from None
        lo, hi = min(me, other), max(me, other)
        info = pair_key_info(context, lo, hi, pubs[lo], pubs[hi])
        keys[other] = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    return keys, key_fingerprint(pubs)
