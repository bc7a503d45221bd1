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
* Pairwise seeds come from the run's seeded random streams (one per unordered pair, hashed with the
  iteration), not from a key agreement: this simulates the arithmetic and what the server sees, not
  the cryptography. Dropout recovery (secret-shared seeds) is out of scope, as in the PBM-VFL paper.
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
