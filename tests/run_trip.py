"""The trip a run object takes from ``training/pipeline.py:execute``: every call of a vflbench function that receives
the run as an argument (not the run's own methods and properties: reading ``run.seed`` passes nothing on), in order,
with the layer of its module (docs/ARCHITECTURE.md). A *climb* is a step into a higher layer than the step before; a
*return* is a step back into a module the trip had left. Issue 73 asked for these figures before and after its
changes (``python tests/run_trip.py``; tests/test_layers.py keeps them down).

    python tests/run_trip.py              # Credit, Standard VFL, one epoch: steps, climbs, returns, and the climbs
    python tests/run_trip.py --own        # the run's own methods and properties counted as steps too
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_layers import LAYERS, layer_of  # noqa: E402


def trip(run, limit: int = 400, own: bool = False) -> list[tuple[str, str, int]]:
    """(module, function, layer) of each call that receives ``run`` (by identity), the first ``limit`` of them; with
    ``own``, the run's own methods and properties too."""
    from vflbench.training.pipeline import execute

    steps: list[tuple[str, str, int]] = []

    def profile(frame, event, arg):
        if event != "call" or len(steps) >= limit:
            return
        mod = frame.f_globals.get("__name__", "")
        if not mod.startswith("vflbench"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if not own and names and names[0] == "self" and frame.f_locals.get("self") is run:
            return  # the run reading its own attributes (run.seed, run.key): not a call that passes it on
        if any(frame.f_locals.get(n) is run for n in names):
            steps.append((mod, code.co_name, layer_of(mod, LAYERS)))

    sys.setprofile(profile)
    try:
        execute(run, "cpu")
    finally:
        sys.setprofile(None)
    return steps


def figures(steps: list[tuple[str, str, int]]) -> dict:
    climbs, returns, seen = [], [], set()
    for prev, cur in zip(steps, steps[1:], strict=False):
        seen.add(prev[0])
        if cur[2] > prev[2]:
            climbs.append(f"{prev[0]}.{prev[1]} -> {cur[0]}.{cur[1]}")
        if cur[0] != prev[0] and cur[0] in seen:
            returns.append(f"{prev[0]} -> {cur[0]}")
    return {"steps": len(steps), "climbs": climbs, "returns": returns}


def credit_run():
    from vflbench.runs.config import RunConfig, resolve

    return resolve(
        RunConfig(
            dataset="credit",
            method="svfl",
            settings={"parties": 4, "seed": 0, "train_missing": "mcar:0.5"},
            hp={"epochs": 1},
        )
    )


if __name__ == "__main__":
    own = "--own" in sys.argv  # count the run's own methods and properties as steps too
    f = figures(trip(credit_run(), own=own))
    print(
        f"steps {f['steps']}, climbs {len(f['climbs'])}, returns {len(f['returns'])}" + (" (with --own)" if own else "")
    )
    from collections import Counter

    for k, v in Counter(f["climbs"]).most_common():
        print(f"  climb x{v}: {k}")
    for k, v in Counter(f["returns"]).most_common(12):
        print(f"  return x{v}: {k}")
