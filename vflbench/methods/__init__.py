"""VFL methods, one module each, registered in :data:`METHODS` by their CLI names."""

from . import combinatorial, ensemble, laser, local, plug, svfl  # noqa: F401  (registration)
from .base import METHODS, BatchPrediction, Method, MethodContext

__all__ = ["METHODS", "BatchPrediction", "Method", "MethodContext"]
