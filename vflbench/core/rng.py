"""Named, independent random streams.

Every consumer of randomness asks for a stream by name (``"split"``, ``"partition"``,
``"train_masks"``, ``"test_masks/mcar:0.5"``, ``"init"``, ``"batching"``, ``"method"`` ...).
Each stream is seeded from ``sha256(f"{seed}/{name}")``, so what one stream draws never changes
what another one sees: for a given seed every method gets the same split, partition and masks,
whatever its own internal sampling does.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

STREAMS = (
    "split",  # train/test split of datasets without an official split
    "partition",  # random / importance partitioners
    "train_masks",  # training missingness
    "test_masks/<setting>",  # one per test-time setting
    "labeled",  # labeled/unlabeled selection and aligned reserve
    "init",  # model initialisation
    "batching",  # shuffling and class-balanced sampling
    "method",  # method-internal sampling (LASER subsets, dropout, tie-breaks, random guesses)
)


def derive_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"vflbench/{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class Streams:
    """Factory of reproducible generators for one run seed."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.used: dict[str, int] = {}

    def seed_for(self, name: str) -> int:
        s = derive_seed(self.seed, name)
        self.used[name] = s
        return s

    def numpy(self, name: str) -> np.random.Generator:
        return np.random.default_rng(self.seed_for(name))

    def torch(self, name: str) -> torch.Generator:
        g = torch.Generator()
        g.manual_seed(self.seed_for(name))
        return g
