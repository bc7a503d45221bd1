"""vflbench: reproducible benchmarks for vertical federated learning with missing feature blocks."""

__version__ = "0.1.0"
