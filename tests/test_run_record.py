"""What a user reads of a run: attack variants kept apart in tables, libraries' warnings in the run's record and not
between its progress bars, and timings whose parts add up to the wall time (issue "polish")."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.warnlog import LibraryWarnings
from vflbench.results.report import make_table, with_attack_variants

from .conftest import needs_mirror

runner = CliRunner()


def _attack_rows(spec: str, metric: str, values: list[float]) -> list[dict]:
    return [
        {"dataset": "credit", "method": "svfl", "train_missing": "none", "test_missing": "none", "seed": s,
         "metric": f"attack:{spec.partition(':')[0]}:{metric}", "value": v, "adversary": "server (party 0)",
         "attack": spec}
        for s, v in enumerate(values)
    ]  # fmt: skip


def test_two_variants_of_one_attack_get_labels_from_the_options_that_differ():
    df = pd.DataFrame(
        _attack_rows("inversion:known=0.1", "r2", [0.9, 0.8])
        + _attack_rows("inversion:known=0.1,decoder=linear", "r2", [0.5, 0.3])
        + _attack_rows("norm:known=0.05", "auc", [0.7, 0.6])
    )
    got = with_attack_variants(df)
    assert set(got["metric"]) == {"attack:inversion[decoder=mlp]:r2", "attack:inversion[decoder=linear]:r2",
                                  "attack:norm:auc"}  # fmt: skip
    assert with_attack_variants(got)["metric"].tolist() == got["metric"].tolist()  # labelling twice changes nothing
    one = with_attack_variants(df[df["attack"] == "inversion:known=0.1,decoder=linear"])
    assert set(one["metric"]) == {"attack:inversion:r2"}  # a lone variant keeps its name
    text, agg = make_table(df, "generic")
    linear = agg[agg["metric"] == "attack:inversion[decoder=linear]:r2"]
    mlp = agg[agg["metric"] == "attack:inversion[decoder=mlp]:r2"]
    assert linear["mean"].item() == pytest.approx(0.4) and mlp["mean"].item() == pytest.approx(0.85)
    assert "attack:inversion[decoder=linear]:r2" in text and "attack:inversion[decoder=mlp]:r2" in text


def test_library_warnings_are_counted_and_vflbenchs_own_pass_on():
    from vflbench.core.errors import VFLBenchWarning

    shown = []
    old = warnings.showwarning
    warnings.showwarning = lambda m, c, *a, **k: shown.append((c, str(m)))
    try:
        with LibraryWarnings() as caught:
            for _ in range(60):  # the same place 60 times: every one counted (Python would show it once)
                warnings.warn("Ill-conditioned matrix (rcond=1e-17)", RuntimeWarning, stacklevel=1)
            warnings.warn("a vflbench warning", VFLBenchWarning, stacklevel=1)
            with warnings.catch_warnings():  # code that silences a warning keeps it silenced
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.warn("silenced", DeprecationWarning, stacklevel=1)
    finally:
        warnings.showwarning = old
    assert shown == [(VFLBenchWarning, "a vflbench warning")]
    rec = caught.manifest()
    assert rec["count"] == 60 and rec["by_category"] == {"RuntimeWarning": 60}
    assert rec["first"].startswith("RuntimeWarning: Ill-conditioned matrix") and len(rec["messages"]) == 1
    assert rec["messages"][0]["count"] == 60


@needs_mirror
def test_a_runs_library_warnings_go_to_its_record_and_one_console_line(tmp_path, monkeypatch):
    import vflbench.training.pipeline as pipeline

    real = pipeline.evaluate

    def noisy(*a, **k):
        for _ in range(60):
            warnings.warn("Ill-conditioned matrix (rcond=1e-17): result may not be accurate.", UserWarning,
                          stacklevel=1)  # fmt: skip
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "evaluate", noisy)
    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--dataset", "credit", "--method", "svfl", "--epochs", "1", "--seed", "0",
                            "--out", str(out), "--quiet"], terminal_width=200)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "Ill-conditioned" in r.output and r.output.count("Ill-conditioned") == 1  # one line: the count and where
    assert "60 warning(s) from libraries" in r.output
    (run_dir,) = list(out.iterdir())
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["warnings"]["count"] == 60 and man["warnings"]["log"] == "warnings.log"
    assert "[60x] UserWarning" in (run_dir / "warnings.log").read_text()


def _timings(cmd: list[str], tmp_path) -> dict:
    out = tmp_path / "t"
    p = subprocess.run([sys.executable, "-m", "vflbench", "run", *cmd, "--out", str(out), "--quiet"],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr.lower()
    (run_dir,) = list(out.iterdir())
    return json.loads((run_dir / "manifest.json").read_text())["timings"]


CREDIT_LASER = ["--dataset", "credit", "--method", "laser", "--epochs", "2", "--train-missing", "mcar:0.5",
                "--seed", "0"]  # fmt: skip


@needs_mirror
@pytest.mark.slow
def test_a_runs_timings_cover_its_wall_time_in_one_process(tmp_path):
    t = _timings(CREDIT_LASER, tmp_path)
    assert t["wall_from"] == "process start"
    assert 0.9 <= t["coverage"] <= 1.05, t


@needs_mirror
@pytest.mark.integration
def test_a_runs_timings_cover_its_wall_time_across_processes(tmp_path):
    t = _timings([*CREDIT_LASER, "--runtime", "processes"], tmp_path)
    assert 0.9 <= t["coverage"] <= 1.05, t
