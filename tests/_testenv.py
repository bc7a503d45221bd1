"""Settings shared by test modules (importable because pyproject puts tests/ on pytest's pythonpath)."""

import os

# Device for tests that go through the whole pipeline (execute/prepare). CPU by default so that CI is
# reproducible; `VFLBENCH_TEST_DEVICE=cuda make test` runs them on a GPU. CLI tests use `--device auto`
# and so follow the machine. Unit tests that build tensors by hand stay on CPU.
TEST_DEVICE = os.environ.get("VFLBENCH_TEST_DEVICE", "cpu")
