"""PSI throughput: vflbench's entity alignment against openmined-psi's own bare loop on the same IDs.

The floor is the library used the plain way, one party after the other in one process: the label side blinds its
IDs (``CreateRequest``), the party blinds its own (``CreateSetupMessage``, RAW) and answers (``ProcessRequest``),
the label side intersects (``GetIntersection``). vflbench's :func:`vflbench.data.alignment.intersect_all` does the
same work with one request for every party and the parties' answers and the intersections in threads (the library
releases the GIL), as the processes runtime does across processes. Both must find the same intersections.

    python benchmarks/psi_throughput.py                       # the 250,000-ID party files of benchmarks/big_tables.py
    python benchmarks/psi_throughput.py --ids 50000 --rounds 2

Reported: seconds of each, per phase for the floor, their ratio, and seconds per million labelled IDs (K parties).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_tables import ensure_data  # noqa: E402


def bare_loop(label_ids: list[str], parties: list[list[str]]) -> tuple[np.ndarray, dict[str, float]]:
    import private_set_intersection.python as psi

    t = {"request": 0.0, "setup": 0.0, "answer": 0.0, "intersect": 0.0}
    held = []
    for ids in parties:
        t0 = time.perf_counter()
        client = psi.client.CreateWithNewKey(True)
        request = client.CreateRequest(label_ids)
        t1 = time.perf_counter()
        server = psi.server.CreateWithNewKey(True)
        setup = server.CreateSetupMessage(0.0, len(label_ids), ids, psi.DataStructure.RAW)
        t2 = time.perf_counter()
        response = server.ProcessRequest(request)
        t3 = time.perf_counter()
        got = np.zeros(len(label_ids), dtype=bool)
        got[np.asarray(client.GetIntersection(setup, response), dtype=np.int64)] = True
        t4 = time.perf_counter()
        held.append(got)
        for k, a, b in (("request", t0, t1), ("setup", t1, t2), ("answer", t2, t3), ("intersect", t3, t4)):
            t[k] += b - a
    return np.stack(held, axis=1), t


def main() -> None:
    import pandas as pd

    from vflbench.data.alignment import intersect_all

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=0, help="use the first N labelled IDs (0: all 250,000)")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    folder = ensure_data()["psi"]
    frames = [pd.read_csv(folder / f"party{k}.csv", usecols=["id"], dtype=str)["id"].tolist() for k in range(4)]
    label = frames[0][: a.ids or None]
    parties = frames  # every party answers, the label holder's own file included (as in a run)
    times: dict[str, list[float]] = {"floor": [], "vflbench": []}
    phases: list[dict[str, float]] = []
    for r in range(a.rounds):
        for which in ("floor", "vflbench") if r % 2 == 0 else ("vflbench", "floor"):
            t0 = time.perf_counter()
            if which == "floor":
                held_f, ph = bare_loop(label, parties)
                phases.append(ph)
            else:
                held_v = intersect_all(label, parties, "psi")
            times[which].append(time.perf_counter() - t0)
            print(f"round {r} {which:8} {times[which][-1]:.1f} s", flush=True)
    assert np.array_equal(held_f, held_v), "the two found different intersections"
    f, v = statistics.median(times["floor"]), statistics.median(times["vflbench"])
    n, k = len(label), len(parties)
    ph = {p: statistics.median(x[p] for x in phases) for p in phases[0]}
    print(f"{n:,} labelled IDs, {k} parties holding {', '.join(f'{len(p):,}' for p in parties)} IDs")
    print("floor phases (s): " + ", ".join(f"{p} {s:.1f}" for p, s in ph.items()))
    print(f"openmined-psi bare loop {f:.1f} s ({f / n * 1e6:.0f} s per million labelled IDs)")
    print(f"vflbench intersect_all  {v:.1f} s ({v / n * 1e6:.0f} s per million labelled IDs); {v / f:.2f}x the floor")


if __name__ == "__main__":
    main()
