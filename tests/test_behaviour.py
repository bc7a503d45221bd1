"""Behaviour versions (vflbench.runs.behaviour): a run's key changes whenever its numbers can.

* a bumped component moves the key of every run that uses it, and of no other run, and the regression gate says
  which bump moved it;
* committed runs, re-run here, give their committed numbers while their key stays: a change that moves them
  without a bump fails this file (the gate's own re-run, `scripts/regression_gate.py`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from vflbench.runs import behaviour
from vflbench.runs.behaviour import COMPONENTS, Component
from vflbench.runs.config import RunConfig, config_from_manifest, resolve

ROOT = Path(__file__).resolve().parents[1]


def _gate():
    spec = importlib.util.spec_from_file_location("regression_gate", ROOT / "scripts" / "regression_gate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(**kw):
    base = dict(dataset="synthetic", method="laser", settings={"parties": 2, "seed": 0}, hp={"epochs": 1})
    base.update(kw)
    return resolve(RunConfig(**base))


def test_a_bump_moves_the_keys_of_the_runs_that_use_the_component_and_no_others(monkeypatch):
    laser, svfl = _run(), _run(method="svfl")
    assert laser.behaviour["method.laser"] == 1 and "method.laser" not in svfl.behaviour
    assert behaviour.keyed(laser.behaviour) == {}  # version 1 everywhere: nothing enters the key
    monkeypatch.setitem(COMPONENTS, "method.laser", Component(2, ("2 (today): the loss changed",), "LASER-VFL runs"))
    bumped_laser, bumped_svfl = _run(), _run(method="svfl")
    assert bumped_laser.key != laser.key and bumped_svfl.key == svfl.key
    assert behaviour.explain(laser.behaviour, bumped_laser.behaviour) == ["method.laser 1 -> 2: the loss changed"]
    assert behaviour.explain(None, bumped_laser.behaviour) == ["method.laser 1 -> 2: the loss changed"]
    assert behaviour.explain(bumped_laser.behaviour, bumped_laser.behaviour) == []


def test_the_partitioner_and_table_components_are_used_only_where_they_apply(tmp_path):
    imp = _run(partitioner="importance")
    assert imp.behaviour["partitioner.importance"] == 2 and behaviour.keyed(imp.behaviour) == {
        "partitioner.importance": 2
    }
    assert "data.encoding.embedding" not in _run().behaviour and "data.reading.large" not in _run().behaviour
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n), "y": rng.integers(0, 2, n)})
    df["c"] = ["L" + str(v) for v in rng.integers(0, 80, n)]  # 80 levels > embed_above = 50: embedded
    df.to_csv(tmp_path / "t.csv", index=False)
    emb = _run(dataset=f"csv:{tmp_path / 't.csv'}", data_options={"target": "y"})
    onehot = _run(dataset=f"csv:{tmp_path / 't.csv'}", data_options={"target": "y", "embed_above": 100})
    assert emb.behaviour["data.encoding.embedding"] == 2 and "data.encoding.embedding" not in onehot.behaviour


def test_every_versioned_component_says_what_moved_at_each_version():
    for name, c in COMPONENTS.items():
        assert c.version >= 2 and c.used_when, name
        assert [h.split(" ", 1)[0] for h in c.history] == [str(v) for v in range(2, c.version + 1)], name


def _committed(pattern: str) -> tuple[Path, dict, Path | None]:
    """The cheapest committed run matching ``FOLDER/runs/RUN_ID_GLOB`` (run folders or a gathered folder's
    manifests.jsonl, as the gate reads them): its path, its manifest and its committed rows as a file (None: the run
    folder's own results.csv)."""
    from fnmatch import fnmatch

    gate = _gate()
    folder, run_glob = pattern.split("/runs/")
    hits = [(d, m, t) for d, m, t in gate.folder_runs(ROOT / folder) if fnmatch(d.name, run_glob)]
    assert hits, pattern
    d, m, text = min(hits, key=lambda h: h[1]["timings"]["train_s"])
    return d, m, gate.gathered_baseline(text)


def _as_run_folder(run_dir: Path, m: dict, rows: Path | None, into: Path) -> Path:
    """A committed run written out as a run folder of its own under ``into/runs/`` (manifest.json, results.csv)."""
    import shutil

    dest = into / "runs" / run_dir.name
    dest.mkdir(parents=True)
    (dest / "manifest.json").write_text(json.dumps(m))
    shutil.copyfile(rows or run_dir / "results.csv", dest / "results.csv")
    return dest


# the cheapest committed CPU run of each method, and a user's table: a second or two each
NEURAL = [
    *(
        f"results/scalability/isolet/runs/isolet_{m}_K2_*"
        for m in ("local", "svfl", "ensemble", "plug", "laser", "sum", "pbm")
    ),
    "results/scalability/isolet_combinatorial/runs/isolet_combinatorial_K2_*",
    "results/loans_example/runs/csv-loans_laser_*",
]
# the trees: XGBoost, vflbench's booster on Credit's continuous columns (whose cuts a binning change moves) under both
# binnings, and the encrypted paths, Paillier and OU (results/trees/guard/README.md)
TREES = [
    "results/trees/phishing/runs/phishing_gbdt_K5_*",
    "results/tuned/credit_trees/tuned/runs/credit_secureboost_K4_*",
    "results/trees/guard/runs/credit_gbdt_K4_*",
    "results/trees/guard/runs/credit_secureboost_K4_mcar-0.3_s0_a03b83f7210c",  # encryption=paillier
    "results/trees/guard/runs/credit_secureboost_K4_mcar-0.3_s0_0cdc9e8ea080",  # encryption=ou
    "results/trees/guard/runs/credit_secureboost_K4_mcar-0.3_s0_e0a2257df946",  # binning=quantile
]
GOLDEN = [*NEURAL, *TREES]


def tolerance_for(pattern: str, manifest: dict) -> float:
    """Bit for bit where that holds: on the kind of CPU that recorded the run, and for the trees on any CPU (integer
    sums, XGBoost's deterministic hist: measured to move by nothing under another instruction set). A neural run
    re-run on another kind of CPU drifts: its metrics may move by FOREIGN_CPU_TOLERANCE points, no more."""
    from vflbench.results.outputs import versions

    here, rec = versions(), manifest.get("versions", {})
    if pattern in TREES or (rec.get("cpu"), rec.get("cpu_capability")) == (here["cpu"], here["cpu_capability"]):
        return 0.0
    return _gate().FOREIGN_CPU_TOLERANCE


@pytest.mark.parametrize(
    "pattern", GOLDEN, ids=lambda p: p.split("/runs/")[0].split("/")[-1] + ":" + p.split("/")[-1][:40]
)
def test_committed_numbers_do_not_move_while_their_key_stays(pattern, monkeypatch):
    """Never skipped: a run whose key a bump moved is re-run under its recorded behaviour's key (the gate explains
    the bump) and must still resolve; every other one must give its committed numbers, within the tolerance of
    :func:`tolerance_for`."""
    monkeypatch.chdir(ROOT)
    run_dir, m, rows = _committed(pattern)
    run = resolve(config_from_manifest(m))
    if run.key != m["run_key"]:  # a bump moved it: the gate explains it, and its numbers may differ
        why = behaviour.explain(m["config"].get("behaviour"), run.behaviour)
        assert why, f"{run_dir.name}: its key moved with no behaviour bump to explain it"
        raise AssertionError(
            f"{run_dir.name}: key moved by {'; '.join(why)}: re-run this golden run under its new key and commit it "
            "(a golden run is never skipped)"
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(int(m.get("threads", 1)))
    try:
        diffs = _gate().rerun(m, run_dir, rows, tolerance=tolerance_for(pattern, m))
    finally:
        torch.set_num_threads(threads)
    assert not diffs, (
        f"{run_dir}: its committed numbers moved while its run key stayed ({'; '.join(diffs[:3])}). Bump the version "
        "of the component that changed in vflbench/runs/behaviour.py (docs/DEVELOPMENT.md, 'Behaviour versions'), "
        "or undo the change."
    )


def test_the_tolerance_on_another_cpu_is_a_band_and_the_trees_have_none(monkeypatch):
    """A value within FOREIGN_CPU_TOLERANCE points passes on a foreign CPU and fails on the recording one; a tree
    run is compared bit for bit wherever it runs."""
    gate = _gate()
    m = {"versions": {"cpu": "Some Other CPU", "cpu_capability": "AVX2"}}
    assert tolerance_for(NEURAL[0], m) == gate.FOREIGN_CPU_TOLERANCE == 1.0
    assert tolerance_for(TREES[0], m) == 0.0
    from vflbench.results.outputs import versions

    here = versions()
    assert tolerance_for(NEURAL[0], {"versions": {"cpu": here["cpu"], "cpu_capability": here["cpu_capability"]}}) == 0
    assert gate._close(80.0, 80.9, 1.0) and not gate._close(80.0, 81.1, 1.0) and not gate._close("a", 1.0, 1.0)


def test_the_gate_lists_a_bumped_key_with_its_reason_and_passes(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)
    run_dir, m, rows = _committed(NEURAL[4])  # laser
    folder = tmp_path / "results" / "x"
    _as_run_folder(run_dir, m, rows, folder)
    gate = _gate()
    monkeypatch.setattr("sys.argv", ["gate", str(tmp_path / "results"), "--keys-only"])
    assert gate.main() == 0
    assert "keys moved 0" in capsys.readouterr().out
    monkeypatch.setitem(COMPONENTS, "method.laser", Component(2, ("2 (today): the loss changed",), "LASER-VFL runs"))
    assert gate.main() == 0
    out = capsys.readouterr().out
    assert "moved by a behaviour bump 1 (method.laser 1 -> 2: the loss changed)" in out
    # a key that moves with no bump behind it fails the gate
    m = json.loads((folder / "runs" / run_dir.name / "manifest.json").read_text())
    m["config"]["behaviour"] = {"method.laser": 2}
    m["run_key"] = "0" * 12
    (folder / "runs" / run_dir.name / "manifest.json").write_text(json.dumps(m))
    assert gate.main() == 1


def test_the_gate_reads_a_gathered_folder_as_its_run_folders(monkeypatch, tmp_path, capsys):
    """A gathered sweep (vflbench gather: manifests.jsonl, no run folders) is a folder of the gate: its keys are
    checked, its cheapest run re-runs against the rows kept in manifests.jsonl, and --run takes a gathered run's
    path; a tampered committed value is caught there as in a run folder."""
    from vflbench.results.outputs import gather

    monkeypatch.chdir(ROOT)
    run_dir, m, rows = _committed(NEURAL[4])
    folder = tmp_path / "results" / "x"
    _as_run_folder(run_dir, m, rows, folder)
    gather(folder)
    assert not (folder / "runs").exists()
    gate = _gate()
    monkeypatch.setattr("sys.argv", ["gate", str(tmp_path / "results")])
    assert gate.main() == 0
    out = capsys.readouterr().out
    assert f"{folder}: 1 runs, keys moved 0, re-ran {run_dir.name}" in out and "identical" in out
    monkeypatch.setattr("sys.argv", ["gate", "--run", str(folder / "runs" / run_dir.name)])
    assert gate.main() == 0
    lines = (folder / "manifests.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    header, first, *rest = rec["results_csv"].splitlines()
    cols = header.split(",")
    cells = first.split(",")
    cells[cols.index("value")] = "12.5"
    rec["results_csv"] = "\n".join([header, ",".join(cells), *rest]) + "\n"
    (folder / "manifests.jsonl").write_text(json.dumps(rec) + "\n")
    capsys.readouterr()
    assert gate.main() == 1 and "value[" in capsys.readouterr().out
