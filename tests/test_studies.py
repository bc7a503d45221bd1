"""`vflbench report`: every study that declares a report rebuilds its committed summary files byte for byte from its
runs (gathered in manifests.jsonl), and a folder without a report gets one line naming the studies that have one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.studies import REPORTS, study_of
from vflbench.studies.registry import register

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_study_report_rebuilds_its_committed_files(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    folder = Path("results") / name
    files = REPORTS[name].build(folder)
    assert files, name
    for file, text in files.items():
        committed = (ROOT / folder / file).read_text()
        assert text == committed, f"`vflbench report {folder}` gives a {file} that differs from the committed one"


def test_the_report_command_writes_every_file_and_lists_the_studies(tmp_path, monkeypatch):
    """The command writes what build returns (here a copy of the faults study, gathered runs only), and --list names
    each study with what it writes."""
    import shutil

    monkeypatch.chdir(ROOT)
    dest = tmp_path / "results" / "faults"
    dest.mkdir(parents=True)
    for f in ("manifests.jsonl", "sweep.json"):
        shutil.copyfile(ROOT / "results" / "faults" / f, dest / f)
    r = runner.invoke(app, ["report", str(dest)])
    assert r.exit_code == 0, r.output
    for f in ("failures.md", "summary.csv"):
        assert (dest / f).read_text() == (ROOT / "results" / "faults" / f).read_text()
    assert (dest / "curves.png").stat().st_size > 0
    r = runner.invoke(app, ["report", "--list"])
    assert r.exit_code == 0 and all(f"results/{n}:" in r.output for n in REPORTS)


def test_a_folder_without_a_report_gets_one_line_and_exit_2(tmp_path):
    (tmp_path / "results" / "nothing").mkdir(parents=True)
    r = runner.invoke(app, ["report", str(tmp_path / "results" / "nothing")])
    assert r.exit_code == 2 and "no study report is registered for 'nothing'" in r.output
    assert "faults" in r.output and not list((tmp_path / "results" / "nothing").iterdir())
    r = runner.invoke(app, ["report", str(tmp_path / "results" / "faults")])  # a study, but no folder
    assert r.exit_code == 2 and "is not a folder" in r.output
    r = runner.invoke(app, ["report", str(tmp_path / "results" / "faults"), "--run"])  # its runs are sweeps
    assert r.exit_code == 2 and "has no runs of its own" in r.output


def test_a_study_is_found_by_its_path_under_results_and_registered_once():
    assert study_of(Path("results/trees")).name == "trees"
    assert study_of(ROOT / "results" / "faults").name == "faults"
    with pytest.raises(ValueError, match="registered twice"):
        register("faults", "again")(lambda folder: {})
