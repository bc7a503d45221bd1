"""Datasets: one module per family, all registered in :data:`DATASETS`."""

from . import credit, embedded, isolet, mimic4, modelnet, phishing, uci_har, vision  # noqa: F401  (registration)
from .base import Dataset, DatasetInfo
from .registry import DATASETS, DatasetSpec, load_dataset, resolve_options

__all__ = ["DATASETS", "Dataset", "DatasetInfo", "DatasetSpec", "load_dataset", "resolve_options"]
