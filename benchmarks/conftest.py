"""The benchmark suite (pytest-benchmark): what users wait for, each workload a fresh process, timed and with its peak
resident memory, and beside a git revision with ``--base``.

    make bench                                  # every benchmark, 3 rounds, this tree
    make bench-compare BASE=f5ab53e             # each round runs BASE's tree, then this one (B A B A), same threads
    .venv/bin/python -m pytest benchmarks -k psi --rounds 5

A benchmark calls ``measure(argv)`` (or ``measure_python(code)``): the command runs as a fresh process from the tree
under test (this checkout, or ``--base REV`` checked out in a temporary worktree, first on the import path), one
thread unless the benchmark says otherwise. Its wall time is what pytest-benchmark records; its peak RSS is the
largest ``ru_maxrss`` of the process and its waited-for children (``os.wait4`` in a small launcher process: the
biggest process of the tree, not their sum), and a workload may print one JSON line of its own figures (latency
percentiles, rows per second), kept in ``extra_info``. The summary at the end has one line per benchmark: median
seconds, peak RSS, figures and, with ``--base``, BASE's median and the ratio. ``--benchmark-json FILE`` writes every
round with its extra_info.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / ".data"  # generated inputs (gitignored), made once
_ROWS: list[dict] = []


def pytest_addoption(parser):
    parser.addoption("--base", default=None, help="a git revision to measure beside this tree, round by round")
    parser.addoption("--rounds", type=int, default=3, help="rounds per benchmark (median reported)")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda it: (Path(str(it.fspath)).name, it.name))  # a stable order, file by file


@pytest.fixture(scope="session")
def trees(request):
    """{"head": this checkout} and, with --base, {"base": that revision in a temporary worktree}."""
    with ExitStack() as stack:
        out = {"head": ROOT}
        rev = request.config.getoption("--base")
        if rev:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp), rev],
                           check=True, capture_output=True)  # fmt: skip
            stack.callback(subprocess.run, ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp)])
            out["base"] = tmp
        yield out


# a small parent for the workload: a process forked from pytest starts with pytest's pages counted in its high-water
# mark, so the workload is forked from this one (about 10 MB) and its own peak read from os.wait4
LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
open(sys.argv[1], "w").write(json.dumps({"maxrss_kb": usage.ru_maxrss, "code": code}))
sys.exit(code)
"""


def run_process(tree: Path, argv: list[str], threads: int = 1, env: dict | None = None) -> dict:
    """Run ``argv`` (after the Python interpreter) from ``tree``: seconds, peak RSS (MB) and its JSON figures."""
    import time

    e = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    e.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))
    e.update(env or {})
    with tempfile.TemporaryDirectory() as work:
        usage = Path(work) / "usage.json"
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", LAUNCHER, str(usage), *argv], cwd=work, env=e, capture_output=True)
        seconds = time.perf_counter() - t0
        if p.returncode:
            raise RuntimeError(f"{' '.join(argv)} (from {tree}) exited {p.returncode}:\n{p.stderr.decode()[-3000:]}")
        peak_mb = json.loads(usage.read_text())["maxrss_kb"] / 1024
    figures = {}
    for line in p.stdout.decode().splitlines()[::-1]:
        if line.startswith("{"):
            figures = json.loads(line)
            break
    return {"seconds": seconds, "peak_rss_mb": peak_mb, "figures": figures}


@pytest.fixture
def measure(benchmark, trees, request):
    """``measure(argv, threads=1)``: time ``python ARGV`` as a fresh process, --rounds times; with --base, BASE's tree
    runs before each round of this one (pytest-benchmark's untimed setup), so the two alternate."""
    rounds = request.config.getoption("--rounds")

    def go(argv: list[str], threads: int = 1, env: dict | None = None) -> dict:
        got = {"head": [], "base": []}

        def setup():
            if "base" in trees:
                got["base"].append(run_process(trees["base"], argv, threads, env))

        def target():
            got["head"].append(run_process(trees["head"], argv, threads, env))

        benchmark.pedantic(target, setup=setup, rounds=rounds, iterations=1)
        row = {"name": request.node.name, "threads": threads}
        for side, runs in got.items():
            if runs:
                row[f"{side}_s"] = statistics.median(r["seconds"] for r in runs)
                row[f"{side}_peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
                row[f"{side}_figures"] = runs[-1]["figures"]
        benchmark.extra_info.update({k: v for k, v in row.items() if k != "name"})
        _ROWS.append(row)
        return got["head"][-1]

    return go


def vflbench(*args: str) -> list[str]:
    """The argv of a ``vflbench`` command as a user starts it (``python -m vflbench ...``)."""
    return ["-m", "vflbench", *args]


def python(code: str) -> list[str]:
    return ["-c", code]


def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    tr = terminalreporter
    tr.section("vflbench benchmarks: median seconds and peak RSS per workload (fresh processes)")
    base = any("base_s" in r for r in _ROWS)
    head = f"{'benchmark':52} {'seconds':>9} {'peak RSS MB':>12}"
    tr.write_line(head + (f" {'base s':>9} {'base MB':>9} {'ratio':>6}" if base else "") + "  figures")
    for r in _ROWS:
        line = f"{r['name'][:52]:52} {r['head_s']:9.2f} {r['head_peak_rss_mb']:12.0f}"
        if base:
            line += f" {r.get('base_s', float('nan')):9.2f} {r.get('base_peak_rss_mb', float('nan')):9.0f}"
            line += f" {r['head_s'] / r['base_s']:6.2f}" if r.get("base_s") else f" {'-':>6}"
        figs = r.get("head_figures") or {}
        tr.write_line(line + "  " + ", ".join(f"{k} {v}" for k, v in figs.items()))
