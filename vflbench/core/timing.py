"""Where a run's wall time goes: named parts that add up to the wall time, measured from the start of
the process (``vflbench run``, ``server``) or of the run (a run inside a sweep worker).

The manifest's ``timings`` holds the parts (``startup_s``: process start, imports, resolving and
checking the run, launching parties, up to the first data read; then ``load_and_partition_s``,
``masks_and_tensors_s``, ``build_s``, ``train_s``, ``eval_s``, ``record_s``, ``write_s``), the wall time
``wall_s`` with what it is measured from (``wall_from``), and ``coverage``, the share of the wall time
the parts account for (the rest, ``unaccounted_s``, is interpreter exit work and the clock's grain).
"""

from __future__ import annotations

import os
import time
from typing import Any

_IMPORTED = time.time()  # when vflbench was first imported: the fallback for the process start
PARTS = (
    "startup_s",
    "load_and_partition_s",
    "masks_and_tensors_s",
    "build_s",
    "setup_comm_s",
    "train_s",
    "eval_s",
    "record_s",
    "write_s",
)


def process_start() -> float:
    """Epoch seconds at which this process started: its age from ``/proc`` (10 ms grain) subtracted
    from now; where ``/proc`` is missing, when vflbench was first imported."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(after_name[19])  # field 22 of proc(5), starttime, in clock ticks since boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def close(timings: dict[str, Any], origin: float | None, origin_name: str, write_s: float) -> dict[str, Any]:
    """Complete a run's ``timings`` as its outputs are written: startup (origin to the run's start,
    ``started_at``, stamped by the pipeline), the write, the wall time and the parts' coverage."""
    now = time.time()
    started = float(timings.pop("started_at", now))
    origin = started if origin is None else min(origin, started)
    timings["startup_s"] = started - origin
    timings["write_s"] = write_s
    wall = now - origin
    parts = sum(float(timings.get(p, 0.0)) for p in PARTS)
    timings.update(
        {
            "wall_s": wall,
            "wall_from": origin_name,
            "unaccounted_s": max(wall - parts, 0.0),
            "coverage": parts / wall if wall > 0 else 1.0,
        }
    )
    return timings


_PEAK_FROM_RUN = False  # reset_peak_memory succeeded: VmHWM is this run's peak


def reset_peak_memory() -> bool:
    """Start this run's peak at the resident set it has now, so that a run inside a sweep worker records its own
    peak, not the worker's. Linux resets a process's high-water mark (``VmHWM``) when ``5`` is written to
    ``/proc/self/clear_refs`` (Linux 4.0+); elsewhere nothing changes and :func:`peak_memory` reports the process's
    peak. True where the reset happened."""
    global _PEAK_FROM_RUN
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _PEAK_FROM_RUN = _hwm() is not None
    except OSError:
        _PEAK_FROM_RUN = False
    return _PEAK_FROM_RUN


def _hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_memory() -> dict[str, Any]:
    """The manifest's ``memory``: the peak resident set of this run (``VmHWM`` since :func:`reset_peak_memory`, which
    the pipeline calls as a run starts: what was resident then, imports included, counts), or, where the reset is
    not available, of this process so far (``getrusage``'s ``ru_maxrss``). A run across processes records the
    server's (benchmarks/big_tables.py@f5ab53e samples a process tree's from /proc)."""
    own = _hwm() if _PEAK_FROM_RUN else None
    if own is not None:
        return {"peak_rss_bytes": int(own), "peak_rss_gb": round(own / 1e9, 3), "of": "this run"}
    try:
        import resource
    except ImportError:  # not POSIX
        return {}
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_rss_bytes": int(own), "peak_rss_gb": round(own / 1e9, 3), "of": "this process"}
