"""The benchmark suite's harness (benchmarks/conftest.py): a workload's peak RSS is its own, measured against an
allocation of known size, and not the memory of the process that started it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("bench_conftest", ROOT / "benchmarks" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_peak_rss_is_the_workloads_own_and_its_figures_come_back():
    h = _harness()
    ballast = bytearray(300 * 2**20)  # this process is big; the workload's figure must not inherit it
    ballast[::4096] = b"x" * len(ballast[::4096])
    small = h.run_process(ROOT, ["-c", "print('{\"answer\": 42}')"])
    big = h.run_process(ROOT, ["-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"])
    assert small["peak_rss_mb"] < 100, small
    assert 200 <= big["peak_rss_mb"] < 300, big
    assert small["figures"] == {"answer": 42} and big["figures"] == {}
    del ballast


def test_a_failing_workload_raises_with_its_error():
    import pytest

    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _harness().run_process(ROOT, ["-c", "1 / 0"])
