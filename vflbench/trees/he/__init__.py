"""Additively homomorphic encryption for SecureBoost's gradients: the schemes (:data:`SCHEMES`, the only list), the
packing of gradients and sums, fixed-base tables, a feature party's encrypted histograms, and the worker processes
they run in. gmpy2 arithmetic, no compiled code of the project's own (docs/TREES.md, "Encryption", says why)."""

from __future__ import annotations

from .ou import OkamotoUchiyama
from .paillier import Paillier
from .scheme import EXP_BITS, Scheme

SCHEMES: dict[str, type[Scheme]] = {"paillier": Paillier, "ou": OkamotoUchiyama}

__all__ = ["EXP_BITS", "SCHEMES", "OkamotoUchiyama", "Paillier", "Scheme"]
