import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("VFLBENCH_DATA_MIRROR", ROOT.parent / "shared" / "data"))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(MIRROR))
os.environ.setdefault("VFLBENCH_WORKERS", "1")  # sweeps in tests run in-process unless a test asks for workers
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # the xdist workers already fill every core: one intra-op thread each. Two workers of two OpenMP threads on a
    # 2-core machine spin against each other (tests/test_methods.py + test_method_contract.py: 255 s against 69 s)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VFLBENCH_WORKER_THREADS"):
        os.environ.setdefault(var, "1")
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def no_network(monkeypatch):
    """Make every download fail as it would offline."""
    import urllib.error
    import urllib.request

    def boom(*a, **k):
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", boom)


@pytest.fixture
def tmp_data(tmp_path, monkeypatch, no_network):
    """An empty data root and no mirror: loaders must read only what the test writes."""
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("VFLBENCH_DATA_MIRROR", raising=False)
    return tmp_path / "data"


needs_mirror = pytest.mark.skipif(not (MIRROR / "credit_default").exists(), reason="offline data mirror not present")
