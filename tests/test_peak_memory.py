"""A run's manifest records its own peak resident set, also when it is not the process's first run (a sweep worker)."""

import sys

import numpy as np
import pytest

from vflbench.core import timing

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")


@linux
def test_the_peak_restarts_at_a_runs_start():
    assert timing.reset_peak_memory()
    big = np.ones(400_000_000 // 8)  # 400 MB, touched
    before = timing.peak_memory()
    del big
    assert timing.reset_peak_memory()
    after = timing.peak_memory()
    assert before["of"] == after["of"] == "this run"
    assert before["peak_rss_bytes"] - after["peak_rss_bytes"] > 300_000_000, (before, after)
    small = np.ones(100_000_000 // 8)
    grown = timing.peak_memory()["peak_rss_bytes"] - after["peak_rss_bytes"]
    assert 50_000_000 < grown < 200_000_000, (after, grown)  # the new peak follows this run's own allocations
    del small
