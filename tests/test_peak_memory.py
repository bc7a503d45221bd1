"""A run's manifest records its own peak resident set, also when it is not the process's first run (a sweep worker)."""

import json
import subprocess
import sys

import pytest

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")

# in a fresh interpreter: a test worker's other threads and caches may free memory between two readings
SCRIPT = """
import json
import numpy as np
from vflbench.core import timing
assert timing.reset_peak_memory()
big = np.ones(400_000_000 // 8)  # 400 MB, touched
before = timing.peak_memory()
del big
assert timing.reset_peak_memory()
after = timing.peak_memory()
small = np.ones(100_000_000 // 8)
grown = timing.peak_memory()
print(json.dumps([before, after, grown]))
"""


@linux
def test_the_peak_restarts_at_a_runs_start():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    before, after, grown = json.loads(out)
    assert before["of"] == after["of"] == "this run"
    assert before["peak_rss_bytes"] - after["peak_rss_bytes"] > 350_000_000, (before, after)
    assert 90_000_000 < grown["peak_rss_bytes"] - after["peak_rss_bytes"] < 150_000_000, (after, grown)
