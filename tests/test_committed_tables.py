"""Every committed ``results/**/table.md`` regenerates byte for byte with the bare ``vflbench table DIR``
(the folder records how its table was made: its experiment's layout, reference and title). The two
tables that are not a sweep folder's own are listed with the command that builds them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vflbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
# tables not written by a sweep: a study's report writes them (tests/test_studies.py rebuilds them byte for byte)
BUILT_ELSEWHERE = {
    "results/false/controlled/table.md": "vflbench report results/false/controlled (the readings of several folders)",
    "results/runtime/wan/table.md": "vflbench report results/runtime/wan (runs across processes)",
}
TABLES = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("results/**/table.md"))


@pytest.mark.parametrize("table", [t for t in TABLES if t not in BUILT_ELSEWHERE])
def test_a_committed_table_regenerates_with_the_bare_command(table, monkeypatch):
    monkeypatch.chdir(ROOT)
    folder = Path(table).parent
    assert (folder / "sweep.json").exists(), f"{table}: not a sweep folder; list it in BUILT_ELSEWHERE with its command"
    # a folder whose per-run manifests could not be committed (fmnist_gpu: see its README) is tabled from its
    # results.csv
    # a gathered folder (vflbench gather: manifests.jsonl) is read as its runs were
    target = folder if (folder / "runs").is_dir() or (folder / "manifests.jsonl").exists() else folder / "results.csv"
    r = runner.invoke(app, ["table", str(target)])
    assert r.exit_code == 0, r.output
    assert r.stdout == (ROOT / table).read_text(), f"`vflbench table {target}` differs from {table}"


def test_every_table_is_either_a_sweep_folders_own_or_listed_with_its_command():
    for t in TABLES:
        assert (ROOT / t).parent.joinpath("sweep.json").exists() or t in BUILT_ELSEWHERE, t
    assert set(BUILT_ELSEWHERE) <= set(TABLES)


def test_another_layout_drops_the_folders_own_reference(monkeypatch):
    """The folder's reference (FALSE-VFL's published tables) belongs to its layout; with --layout generic
    the table is the results alone, not an error about the reference's columns."""
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["table", "results/tuned/isolet_false/tuned", "--layout", "generic"])
    assert r.exit_code == 0, r.output
    assert "| p_miss train | p_miss test | Local |" in r.stdout and "paper" not in r.stdout.lower()
    own = runner.invoke(app, ["table", "results/tuned/isolet_false/tuned"])
    assert own.exit_code == 0 and own.stdout != r.stdout
