"""Work that grows with the data: a pack of seeds against the same runs one by one, PSI over many IDs, a large table's
peak memory, and serving latency under a deadline. Inputs are generated once into benchmarks/.data (gitignored)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import DATA, ROOT, python, vflbench

SEEDS = "0,1,2,3,4"


@pytest.fixture(scope="module")
def pack_experiment():
    DATA.mkdir(exist_ok=True)
    f = DATA / "pack.yaml"
    f.write_text(
        "name: bench-pack\nlayout: generic\nprotocol: compat\npreset: laser_table1\nseeds: [0, 1, 2, 3, 4]\n"
        "methods: [laser]\ntrain_missing: [mcar:0.5]\ntest_missing: [none, mcar:0.5]\ndatasets:\n  credit: {}\n"
        "hp: {epochs: 5}\n"
    )
    return f


@pytest.mark.parametrize("pack", [5, 1], ids=["pack_of_5", "one_by_one"])
def test_five_seeds_of_laser_on_credit(measure, pack_experiment, pack):
    """Five seeds of LASER-VFL on Credit (5 epochs), trained as one vectorised pack or one run after another (one
    worker, one thread)."""
    measure(vflbench("sweep", str(pack_experiment), "--workers", "1", "--threads", "1", "--pack", str(pack),
                     "--out", "sweep"))  # fmt: skip


@pytest.fixture(scope="module")
def party_files():
    out = DATA / "psi20k"
    if not (out / "party3.csv").exists():
        cmd = [sys.executable, str(ROOT / "scripts" / "make_party_files.py"), "--ids", "20000", "--parties", "4",
               "--share", "0.9", "--out", str(out)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
    return out


PSI = """
import json, time, pandas as pd
from vflbench.data.alignment import intersect_all
files = [pd.read_csv("{d}/party%d.csv" % k, usecols=["id"])["id"].astype(str).tolist() for k in range(4)]
t0 = time.perf_counter()
held = intersect_all(files[0], files[1:], "psi")
s = time.perf_counter() - t0
print(json.dumps({{"psi_s": round(s, 2), "ids": len(files[0]), "held": int(held.sum())}}))
"""


def test_psi_over_20k_ids_and_three_parties(measure, party_files):
    """PSI (openmined-psi, as the processes runtime aligns rows): 20,000 labelled IDs against three parties."""
    measure(python(PSI.format(d=party_files)), threads=2)


@pytest.fixture(scope="module")
def large_table():
    f = DATA / "numeric_1m.csv"
    if not f.exists():
        import numpy as np
        import pandas as pd

        rng = np.random.default_rng(0)
        x = rng.standard_normal((1_000_000, 24)).astype(np.float32)
        y = (x[:, :6].sum(1) + rng.standard_normal(len(x)) > 0).astype(int)
        df = pd.DataFrame(np.round(x, 5), columns=[f"x{i}" for i in range(24)])
        df.assign(label=y).to_csv(f, index=False)
    return f


def test_memory_on_a_1m_row_table(measure, large_table):
    """Standard VFL, one epoch, on a 1,000,000 x 24 CSV: what loading, splitting and training hold at their peak."""
    measure(vflbench("run", "--dataset", f"csv:{large_table}", "--data-opt", "target=label", "--method", "svfl",
                     "--parties", "4", "--epochs", "1", "--train-missing", "none", "--test-missing", "none",
                     "--quiet", "--out", "out"))  # fmt: skip


SERVE = """
import asyncio, json, numpy as np
from vflbench.serving.app import Server
from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays
served = Served(next(__import__("pathlib").Path("{d}").glob("*/model/model.json")).parent.parent)
delays = parse_delays(["lognormal:median=5,sigma=0.3", "party3=lognormal:median=100,sigma=0.5"], served.k)
rng = np.random.default_rng(0)
requests = [rng.choice(served.n_test, 64, replace=False) for _ in range(50)]
async def go():
    parties = InProcessParties(served, delays, Link(), seed=0)
    server = Server(served, parties, 50.0, batch_window_ms=0.0)
    await server.start()
    await server.submit(requests[0], requests[0].tolist(), "row")
    lat = [(await server.submit(r, r.tolist(), "row"))["latency_ms"] for r in requests]
    await server.stop()
    return np.asarray(lat)
lat = asyncio.run(go())
p50, p99 = (round(float(np.percentile(lat, q)), 1) for q in (50, 99))
print(json.dumps({{"p50_ms": p50, "p99_ms": p99}}))
"""


@pytest.fixture(scope="module")
def saved_model():
    out = DATA / "served_laser"
    if not list(out.glob("*/model/model.json")):
        cmd = [sys.executable, "-m", "vflbench", "run", "--dataset", "credit", "--method", "laser", "--parties", "4",
               "--train-missing", "mcar:0.5", "--epochs", "2", "--seed", "0", "--save-model", "--quiet",
               "--out", str(out)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return out


def test_serving_latency_with_a_straggler(measure, saved_model):
    """50 requests of 64 Credit rows to a LASER-VFL model served in process, party 3 a straggler (median 100 ms) under
    a 50 ms deadline: the figures are the latency percentiles; the seconds include start-up and loading."""
    measure(python(SERVE.format(d=saved_model)))
