"""Bad input never trains, never prints a traceback and never writes a result: one line naming the
fix and exit status 2 (3 when training diverges). Every case runs through the CLI."""

from __future__ import annotations

import os

import pytest
import yaml
from typer.testing import CliRunner

from vflbench.cli import app

from .conftest import needs_mirror

runner = CliRunner()
RUN = ["run", "--dataset", "synthetic", "--method", "laser", "--epochs", "1", "--quiet", "--data-opt", "n=300"]


def _fails(args, needle, code=2, out_dir=None):
    r = runner.invoke(app, args)
    text = r.output
    assert r.exit_code == code, (args, r.exit_code, text)
    assert "Traceback" not in text, text
    assert needle in text, (args, text)
    assert len([ln for ln in text.strip().splitlines() if ln.strip()]) <= 4, text  # one message (wrapped at most)
    if out_dir is not None:
        assert not any(out_dir.rglob("results.csv")), "a results file was written"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--cut", "0"], "--cut"),
        (["--hidden", "0"], "--hidden sizes must all be >= 1"),
        (["--hidden", "8,-2"], "--hidden sizes must all be >= 1"),
        (["--optimizer", "sgd", "--momentum", "-0.1"], "momentum must be in [0, 1)"),
        (["--optimizer", "sgd", "--momentum", "1"], "momentum must be in [0, 1)"),
        (["--weight-decay", "-1"], "weight_decay must be a finite number >= 0"),
        (["--lr", "nan"], "lr must be a finite number > 0"),
        (["--lr", "inf"], "lr must be a finite number > 0"),
        (["--weight-decay", "inf"], "weight_decay"),
        (["--part-opt", "bogus=1"], "Partitioner 'contiguous' has no option bogus"),
        (["--train-missing", "mcar:1"], "observes no block of any sample"),
        (["--test-missing", "none,none"], "given more than once"),
        (["--test-missing", "mcar:0.1,mcar:0.10"], "given more than once"),
        (
            ["--arch", "bogus"],
            "Unknown extractor architecture 'bogus'. Choices: mlp, resnet18-half, resnet18, cnn-small",
        ),
        (["--arch", "cnn-small"], "needs image data"),
        (["--method-opt", "fusion=concat"], "choices are mean, sum"),
        # hardening II: flags that meant something else, or nothing
        (["--hp", "epochs=1", "--epochs", "2"], "--epochs 2 and --hp epochs=1 disagree"),
        (["--hp", "lr=nan"], "lr must be a finite number > 0"),
        (["--hp", "batch_size=abc"], "batch_size must be an integer, got 'abc'"),
        (["--hp", "lr=fast"], "lr must be a number, got 'fast'"),
        (["--test-missing", "none,mcar:1"], "The test setting 'mcar:1' observes no block"),
        (["--epochs", "99999999999999999999999"], "epochs must be at most 100,000"),
        (["--hidden", "10,,10"], "--hidden must be comma-separated integers"),
        (["--hidden", ""], "--hidden must be comma-separated integers"),
        (["--optimizer", "adam", "--momentum", "0.9"], "--momentum applies to SGD only"),
        (["--method-opt", "fusion=sum", "--method-opt", "fusion=mean"], "--method-opt fusion is given twice"),
        (["--data-opt", "n=300", "--data-opt", "n=400"], "--data-opt n is given twice"),
        (["--partitioner", "importance", "--part-opt", "alpha=abc"], "option alpha must be a number, got 'abc'"),
        (["--partitioner", "importance", "--part-opt", "alpha=1,2"], "option alpha must be a number, got '1,2'"),
        (["--partitioner", "correlation", "--part-opt", "beta=abc"], "option beta must be a number, got 'abc'"),
        (["--partitioner", "contiguous", "--part-opt", "alpha=1"], "Partitioner 'contiguous' has no option alpha"),
        # hardening III: list specs parse strictly (empty items, trailing commas, keys twice)
        (["--mechanism", "pbm:b=32,,beta=0.1"], "has an empty item (two commas in a row)"),
        (["--mechanism", "pbm:b=32,beta=0.1,"], "has a trailing comma"),
        (["--mechanism", "pbm:b=32,b=16"], "gives 'b' twice"),
        (["--mechanism", "pbm:"], "has a ':' but no parameters"),
        (
            ["--method-opt", "fusion=sum", "--method-opt", "fusion=sum"],
            "--method-opt fusion is given twice (the same value twice)",
        ),
        (["--test-missing", "none,,mcar:0.5"], "--test-missing 'none,,mcar:0.5' has an empty item"),
        (["--eval-epochs", "1,2,"], "--eval-epochs '1,2,' has a trailing comma"),
        (["--mechanism", "pbm:b=1000000000,beta=0.1"], "above its limit of 1,024"),
    ],
)
def test_run_rejects_before_training(tmp_path, args, needle):
    _fails([*RUN, "--out", str(tmp_path / "o"), *args], needle, out_dir=tmp_path)


def test_hp_values_are_not_erased_by_unset_flags(tmp_path):
    """`--hp epochs=1` trains 1 epoch (unset flags used to overwrite it with the preset's value)."""
    import json

    r = runner.invoke(
        app,
        [
            "run",
            "--dataset",
            "synthetic",
            "--method",
            "svfl",
            "--data-opt",
            "n=300",
            "--quiet",
            "--out",
            str(tmp_path),
            "--hp",
            "epochs=1",
            "--hp",
            "lr=0.002",
            "--test-missing",
            "none",
        ],
    )
    assert r.exit_code == 0, r.output
    m = json.loads(next(tmp_path.rglob("manifest.json")).read_text())
    assert m["config"]["hp"]["epochs"] == 1 and m["config"]["hp"]["lr"] == 0.002
    assert len(m["history"]["loss"]) == 1
    src = m["config"]["hp_sources"]["train"]  # where every value came from
    assert src["epochs"] == "--hp" and src["lr"] == "--hp" and src["optimizer"] == "preset"


def test_divergence_stops_the_run_with_status_3(tmp_path):
    _fails(
        [*RUN, "--out", str(tmp_path / "o"), "--optimizer", "sgd", "--lr", "1e12"],
        "training diverged at epoch 1 (loss = ",
        code=3,
        out_dir=tmp_path,
    )
    r = runner.invoke(app, [*RUN, "--out", str(tmp_path / "o"), "--optimizer", "sgd", "--lr", "1e12"])
    assert "lower --lr" in r.output


def test_outputs_are_checked_before_work(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    _fails([*RUN, "--out", str(f)], "is a file; give a directory")
    _fails([*RUN, "--out", str(f / "sub")], "is a file, so the directory cannot be created")
    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "methods": ["local"],
                "train_missing": ["none"],
                "test_missing": ["none"],
                "hp": {"epochs": 1},
                "datasets": {"synthetic": {"data_options": {"n": 200}}},
            }
        )
    )
    _fails(["sweep", str(exp), "--out", str(f)], "is a file; give a directory")
    _fails(["table", str(tmp_path), "--out", str(tmp_path)], "is a directory; give a file path")
    _fails(["table", str(tmp_path), "--out", str(tmp_path / "missing" / "t.md")], "does not exist")
    _fails(["plot", "curves", str(tmp_path), "--out", str(tmp_path / "missing" / "dir" / "x")], "does not exist")
    _fails(["plot", "pie", str(tmp_path)], "Unknown plot 'pie'")
    _fails(["sweep", str(exp), "--executor", "bogus"], "Unknown executor 'bogus'")
    _fails(["sweep", str(exp), "--executor", "bogus", "--dry-run"], "Unknown executor 'bogus'")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    _fails([*RUN, "--out", str(ro / "x")], "is not writable")


def test_plot_filters_that_match_nothing_are_errors(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "methods": ["local"],
                "train_missing": ["none"],
                "test_missing": ["none", "mcar:0.5"],
                "hp": {"epochs": 1},
                "datasets": {"synthetic": {"data_options": {"n": 200}}},
            }
        )
    )
    out = tmp_path / "s"
    assert runner.invoke(app, ["sweep", str(exp), "--out", str(out)]).exit_code == 0
    _fails(
        ["plot", "scalability", str(out), "--out", str(tmp_path / "f"), "--metric", "bogus"],
        "--metric 'bogus' is not in these results",
    )
    _fails(
        ["plot", "scalability", str(out), "--out", str(tmp_path / "f"), "--test-missing", "mar1"], "matches no result"
    )
    _fails(
        ["plot", "scalability", str(out), "--out", str(tmp_path / "f")],
        "needs results for at least two numbers of parties",
    )
    assert not list(tmp_path.glob("f.*"))


def test_unreadable_config_is_one_line(tmp_path):
    exp = tmp_path / "bin.yaml"
    exp.write_bytes(b"\xff\xfe\x00garbage")
    _fails(["sweep", str(exp)], "not text")


def test_offline_fetch_says_what_is_missing_and_how_to_supply_it(monkeypatch, tmp_path):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    monkeypatch.delenv("VFLBENCH_DATA_MIRROR", raising=False)
    import urllib.request

    def offline(*a, **k):
        raise OSError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    r = runner.invoke(app, ["data", "fetch", "uci-har"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    for needle in ("train/X_train.txt", str(tmp_path), "VFLBENCH_DATA_MIRROR", "by hand"):
        assert needle in r.output, (needle, r.output)


def test_results_are_shareable_files(tmp_path):
    old = os.umask(0o022)
    try:
        assert runner.invoke(app, [*RUN, "--out", str(tmp_path)]).exit_code == 0
    finally:
        os.umask(old)
    for f in tmp_path.rglob("*.*"):
        assert f.stat().st_mode & 0o777 == 0o644, (f, oct(f.stat().st_mode))


@needs_mirror
def test_copied_data_files_are_shareable(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    from vflbench.data.datasets import DATASETS

    old = os.umask(0o022)
    try:
        DATASETS.get("phishing").fetch()
    finally:
        os.umask(old)
    files = [f for f in (tmp_path / "phishing").iterdir() if not f.name.startswith(".")]
    assert files and all(f.stat().st_mode & 0o777 == 0o644 for f in files), [
        (f.name, oct(f.stat().st_mode)) for f in files
    ]


def test_granularity_hint_names_options_that_exist(tmp_path):
    _fails(
        [*RUN, "--out", str(tmp_path), "--train-missing", "mar1", "--protocol", "compat"],
        "--protocol-opt train_granularity=sample",
    )


def test_flags_render_as_flags():
    import re

    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    line = next(ln for ln in r.output.splitlines() if "--quiet" in ln)
    assert not re.search(r"<bool>|BOOLEAN", line), line


def _tiny_experiment(tmp_path, name="t"):
    exp = tmp_path / f"{name}.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "methods": ["local"],
                "train_missing": ["none"],
                "test_missing": ["none"],
                "hp": {"epochs": 1},
                "datasets": {"synthetic": {"data_options": {"n": 200}}},
            }
        )
    )
    return exp


def test_a_second_sweep_on_a_locked_folder_stops_at_once(tmp_path):
    import time

    from vflbench.grids.sweep import FolderLock

    out = tmp_path / "s"
    with FolderLock(out):
        t = time.perf_counter()
        _fails(["sweep", str(_tiny_experiment(tmp_path)), "--out", str(out)], "is in use by sweep PID")
        assert time.perf_counter() - t < 10
        assert not (out / "runs").exists()
    r = runner.invoke(app, ["sweep", str(_tiny_experiment(tmp_path)), "--out", str(out)])  # released: runs
    assert r.exit_code == 0, r.output


def test_a_folder_of_another_experiment_needs_force(tmp_path):
    out = tmp_path / "s"
    assert runner.invoke(app, ["sweep", str(_tiny_experiment(tmp_path, "a")), "--out", str(out)]).exit_code == 0
    _fails(["sweep", str(_tiny_experiment(tmp_path, "b")), "--out", str(out)], "holds the sweep of experiment 'a'")
    r = runner.invoke(app, ["sweep", str(_tiny_experiment(tmp_path, "b")), "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
@needs_mirror
@pytest.mark.parametrize("damage", ["bitflip", "truncate"])
def test_a_damaged_data_file_is_moved_aside_and_restored(tmp_path, monkeypatch, damage):
    from vflbench.data.datasets import load_dataset
    from vflbench.data.datasets.credit import CSV_GZ

    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    first = load_dataset("credit")
    assert first.checksum_checks == {CSV_GZ: "published"}
    f = tmp_path / "credit" / CSV_GZ
    raw = bytearray(f.read_bytes())
    if damage == "bitflip":
        raw[len(raw) // 2] ^= 0xFF
    else:
        raw = raw[: len(raw) // 3]
    f.write_bytes(bytes(raw))
    out = tmp_path / "o"
    _fails(
        ["run", "--dataset", "credit", "--method", "local", "--epochs", "1", "--quiet", "--out", str(out)],
        "is damaged",
        out_dir=tmp_path,
    )
    r = runner.invoke(app, ["masks", "--dataset", "credit"])
    assert r.exit_code == 0, r.output  # the next use restored the file from the mirror
    assert not (tmp_path / "credit" / (CSV_GZ + ".corrupt")).exists() or f.exists()
    again = load_dataset("credit")
    assert again.checksums == first.checksums


def test_files_without_a_published_checksum_are_checked_against_their_first_use(tmp_path):
    from vflbench.core.errors import VFLBenchError
    from vflbench.data.datasets.fetch import RawFile

    f = tmp_path / "a.txt"
    f.write_text("1 2 3\n")
    rf = RawFile("a.txt")
    sha, kind = rf.verify(f, tmp_path)
    assert kind == "first-use"
    assert rf.verify(f, tmp_path) == (sha, "recorded (unchanged since verified)")  # the digest memo: not read again
    f.write_text("1 2 4\n")
    with pytest.raises(VFLBenchError, match="recorded when it was first used"):
        rf.verify(f, tmp_path)
    assert not f.exists() and (tmp_path / "a.txt.corrupt").exists()
    f.write_text("1 2 3\n")  # a fresh copy is accepted again
    assert rf.verify(f, tmp_path)[1] == "first-use"


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
@needs_mirror
def test_a_parallel_first_sweep_on_an_empty_data_folder_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "data"))
    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "first",
                "methods": ["local"],
                "train_missing": ["none"],
                "test_missing": ["none"],
                "seeds": [0, 1, 2, 3],
                "hp": {"epochs": 1},
                "datasets": {"credit": {}},
            }
        )
    )
    r = runner.invoke(app, ["sweep", str(exp), "--workers", "2", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "s" / "runs").glob("*/manifest.json"))) == 4
    assert not list((tmp_path / "data").rglob("*.part")) and not list((tmp_path / "data").rglob(".tmp-*"))


def test_concurrent_fetches_of_one_dataset_do_not_collide(tmp_path, monkeypatch):
    """Two processes fetching the same dataset from the mirror at once both succeed."""
    import subprocess
    import sys

    from .conftest import MIRROR

    if not (MIRROR / "fashion-mnist").exists():
        pytest.skip("offline data mirror not present")
    env = {**os.environ, "VFLBENCH_DATA": str(tmp_path / "data"), "VFLBENCH_DATA_MIRROR": str(MIRROR)}
    code = "from vflbench.data.datasets import DATASETS; print(sorted(DATASETS.get('fashion-mnist').fetch()))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_damaged_run_files_are_re_run_never_read(tmp_path):
    import pandas as pd

    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "d",
                "methods": ["local", "svfl"],
                "train_missing": ["none"],
                "test_missing": ["none", "mcar:0.5"],
                "seeds": [0, 1],
                "hp": {"epochs": 1},
                "datasets": {"synthetic": {"data_options": {"n": 300}}},
            }
        )
    )
    ref, out = tmp_path / "ref", tmp_path / "s"
    assert runner.invoke(app, ["sweep", str(exp), "--out", str(ref)]).exit_code == 0
    assert runner.invoke(app, ["sweep", str(exp), "--out", str(out)]).exit_code == 0
    runs = sorted((out / "runs").iterdir())
    text = (runs[0] / "results.csv").read_text()
    (runs[0] / "results.csv").write_text(text[: len(text) // 2])  # truncated mid-line by hand
    (runs[1] / "results.csv").write_text("")  # empty
    r = runner.invoke(app, ["sweep", str(exp), "--out", str(out)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert r.output.count("re-running") == 2 and "2 to run" in r.output
    a, b = pd.read_csv(ref / "results.csv"), pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(a, b)  # same rows, same values, integer columns still integer
    assert b["n_counted"].dtype.kind == "i" and b["seed"].dtype.kind == "i"


def test_table_refuses_a_results_csv_cut_mid_line(tmp_path):
    exp = _tiny_experiment(tmp_path)
    out = tmp_path / "s"
    assert runner.invoke(app, ["sweep", str(exp), "--out", str(out)]).exit_code == 0
    text = (out / "results.csv").read_text()
    bad = tmp_path / "cut.csv"
    bad.write_text(text[: text.rindex(",") - 3])
    _fails(["table", str(bad), "--layout", "generic"], "line 4 has")
    bad.write_text("")
    _fails(["table", str(bad)], "is empty")


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_a_sweep_records_a_diverged_run_and_goes_on(tmp_path):
    import pandas as pd

    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "div",
                "methods": ["local"],
                "parties": [2, 4],
                "train_missing": ["none"],
                "test_missing": ["none"],
                "hp": {"epochs": 1, "optimizer": "sgd", "lr": 0.01},
                "lr_by_parties": {"local": {4: 1.0e12}},
                "datasets": {"synthetic": {"data_options": {"n": 300}}},
            }
        )
    )
    out = tmp_path / "s"
    r = runner.invoke(app, ["sweep", str(exp), "--out", str(out)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "1 run(s) diverged" in r.output
    df = pd.read_csv(out / "results.csv")
    assert set(df["status"]) == {"ok", "diverged"} and df[df["status"] == "diverged"]["value"].isna().all()
    t = runner.invoke(app, ["table", str(out), "--layout", "generic"])
    assert t.exit_code == 0 and "Excluded: 1 run(s)" in t.output and "training diverged" in t.output, t.output
    again = runner.invoke(app, ["sweep", str(exp), "--out", str(out)])
    assert "0 to run" in again.output  # recorded, not retried


def test_the_catalog_reads_the_registry_names_without_importing_the_methods():
    from vflbench.core.catalog import builtin_method_names
    from vflbench.methods import METHODS

    builtin = [n for n in METHODS.names() if METHODS.get(n).__module__.startswith("vflbench.methods.")]
    assert list(builtin_method_names()) == builtin


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--dataset", "credit", "--method", "lazer"], "Did you mean 'laser'?"),
        (["run", "--dataset", "credt", "--method", "laser"], "Did you mean 'credit'?"),
        (["run", "--dataset", "credit", "--method", "laser", "--protocol", "nope"], "Unknown protocol"),
    ],
)
def test_name_errors_are_answered_before_torch_is_imported(args, needle, tmp_path):
    """A mistyped name costs well under a second: torch (seconds to import) is never loaded."""
    import subprocess
    import sys

    code = (
        "import sys; from vflbench.cli import app\n"
        "try:\n    app(sys.argv[1:], standalone_mode=False)\n"
        "except Exception as e:\n    print('ERR', e)\n"
        "print('TORCH', 'torch' in sys.modules, 'pandas' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "VFLBENCH_PLUGINS"}
    r = subprocess.run(
        [sys.executable, "-c", code, *args, "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert needle in out, out
    assert "TORCH False False" in out, out


def test_a_derived_cache_that_cannot_be_written_never_fails_the_load(tmp_path, monkeypatch):
    """Two first runs parse Credit at once; the one whose cache rename fails must still load, and the
    good raw file must not be set aside as corrupt (CI saw exactly that race once)."""
    from vflbench.data.datasets import fetch

    target = tmp_path / ".parsed.npy"
    real_replace = os.replace

    def vanished(src, dst):
        if str(dst) == str(target):
            raise FileNotFoundError(src)
        return real_replace(src, dst)

    monkeypatch.setattr(fetch.os, "replace", vanished)
    fetch.write_cache(target, lambda f: f.write(b"x"))  # no exception
    assert not target.exists() and not list(tmp_path.iterdir()), "the temporary file was left behind"
    monkeypatch.setattr(fetch.os, "replace", real_replace)

    def first_writer(f):  # a second process writes and renames while the first is still writing
        f.write(b"a")
        fetch.write_cache(target, lambda g: g.write(b"b"))
        assert target.read_bytes() == b"b"

    fetch.write_cache(target, first_writer)
    assert target.read_bytes() == b"a" and [p.name for p in tmp_path.iterdir()] == [target.name]


@needs_mirror
def test_credit_loads_when_its_parse_cache_cannot_be_written(tmp_path, monkeypatch):
    from vflbench.data.datasets import fetch
    from vflbench.data.datasets.registry import load_dataset

    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "data"))
    real_replace = os.replace
    monkeypatch.setattr(
        fetch.os,
        "replace",
        lambda s, d: (_ for _ in ()).throw(FileNotFoundError(s)) if ".parsed-" in str(d) else real_replace(s, d),
    )
    ds = load_dataset("credit")
    assert len(ds.y_train) + len(ds.y_test) == 30000
    assert not list((tmp_path / "data").rglob("*.corrupt")) and not list((tmp_path / "data").rglob(".parsed-*"))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("models: {default_tabular: {arch: mlp}}\n", "has no 'hyperparameters' mapping"),
        (
            "models: {default_tabular: {arch: mlp}}\nhyperparameters: {isolet: {laser: {default: {lr: 0.1}}}}\n",
            "no hyper-parameters for synthetic and 'laser'",
        ),
        (
            "hyperparameters: {default: {all: {default: {epochs: 1, lr: 0.1, batch_size: 8, optimizer: "
            "sgd}}}}\nmodels: {isolet: {arch: mlp}}\n",
            "has no model for synthetic",
        ),
    ],
)
def test_a_user_preset_without_a_needed_block_names_it(tmp_path, text, needle):
    preset = tmp_path / "mine.yaml"
    preset.write_text(text)
    _fails([*RUN, "--preset", str(preset), "--out", str(tmp_path / "o")], needle, out_dir=tmp_path)


# ---------------------------------------------------------------- hardening II: sweeps (one table; the next case is one
# line)
BASE_EXP = {
    "name": "t",
    "methods": ["local"],
    "train_missing": ["none"],
    "test_missing": ["none"],
    "hp": {"epochs": 1},
    "datasets": {"synthetic": {"data_options": {"n": 200}}},
}


@pytest.mark.parametrize(
    "change, args, needle",
    [
        ({"seeds": [0, 0]}, [], "'seeds' lists 0 more than once"),
        ({"methods": ["local", "local"]}, [], "'methods' lists 'local' more than once"),
        ({"parties": [2, 2]}, [], "'parties' lists 2 more than once"),
        ({"train_missing": ["mcar:0.1", "mcar:0.10"]}, [], "two entries of the grid are the same run"),
        ({"methods": ["plug"], "method_grid": {"plug": [{"p_drop": [0.2, 0.2]}]}}, [], "method_grid.plug lists"),
        ({"name": "../escape"}, [], "'name' must be a plain name"),
        ({"name": "a/b"}, [], "'name' must be a plain name"),
        ({}, ["--out", ""], "--out is empty"),
        ({}, ["--seeds", ""], "--seeds must be comma-separated integers"),
        ({}, ["--seeds", "1,1"], "--seeds lists a seed more than once"),
        ({}, ["--address", "ray://x:1"], "--address is the Ray cluster's address; it needs --executor ray"),
    ],
)
def test_sweep_refuses_before_any_run_and_leaves_no_folder(tmp_path, change, args, needle):
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({**BASE_EXP, **change}))
    out = tmp_path / "fresh" / "out"
    _fails(["sweep", str(exp), "--out", str(out), *args] if "--out" not in args else ["sweep", str(exp), *args], needle)
    assert not (tmp_path / "fresh").exists(), list((tmp_path / "fresh").rglob("*"))
    assert not (tmp_path.parent / "escape").exists()


def test_a_refused_sweep_in_the_lock_leaves_its_fresh_folder_empty(tmp_path, monkeypatch):
    """A validation error raised inside the folder lock (at planning) removes the lock and the folders it made."""
    from vflbench.grids import sweep as sweep_mod

    def refuse(*a, **k):
        from vflbench.core.errors import VFLBenchError

        raise VFLBenchError("refused at planning")

    monkeypatch.setattr(sweep_mod, "plan", refuse)
    exp = _tiny_experiment(tmp_path)
    _fails(["sweep", str(exp), "--out", str(tmp_path / "a" / "b")], "refused at planning")
    assert not (tmp_path / "a").exists()


def test_plot_out_that_is_a_folder_is_refused(tmp_path):
    _fails(["plot", "bars", str(tmp_path), "--out", str(tmp_path) + "/"], "is a directory; give a file path")


@pytest.mark.parametrize(
    "change, args, needle",
    [
        ({"quick": {"seeds": "abc"}}, ["--quick"], "quick: 'seeds' entries must be int"),
        ({"quick": {"epochs": 0}}, ["--quick"], "quick: 'epochs' must be an integer >= 1"),
        ({"layout": "bogus"}, [], "unknown layout 'bogus'"),
        ({"reference": "nope.csv"}, [], "reference 'nope.csv' is neither a built-in reference"),
        ({}, ["--device", "bogus"], "Unknown device 'bogus'"),
    ],
)
def test_sweep_checks_that_used_to_come_late(tmp_path, change, args, needle):
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({**BASE_EXP, **change}))
    _fails(["sweep", str(exp), "--out", str(tmp_path / "o"), *args], needle)
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    exp = tmp / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {**BASE_EXP, "methods": ["local", "svfl"], "seeds": [0, 1], "eval_epochs": "1:2", "hp": {"epochs": 2}}
        )
    )
    r = runner.invoke(app, ["sweep", str(exp), "--out", str(tmp / "s"), "--pack", "1"])
    assert r.exit_code == 0, r.output
    return exp, tmp / "s"


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    "args, needle",
    [
        (["table", "{s}", "--layout", "generic", "--epoch", "0%"], "a share of each run must be in (0%, 100%]"),
        (["table", "{s}", "--layout", "generic", "--reference", "{foreign}"], "The reference CSV lacks column(s)"),
        (["table", "{s}", "--layout", "generic", "--out", "/proc/x.md"], "/proc/x.md: "),
        (["table", "{textval}", "--layout", "generic"], "the 'value' column holds text"),
        (["plot", "budget", "{textval}", "--out", "{tmp}/f"], "the 'value' column holds text"),
        (["plot", "curves", "{s}", "--metric", "bogus", "--out", "{tmp}/f"], "The curves plot does not take --metric"),
        (["plot", "bars", "{s}", "--out", "{tmp}/"], "is a directory; give a file path"),
    ],
)
def test_table_and_plot_refuse_with_one_line(tiny_sweep, tmp_path, args, needle):
    import pandas as pd

    _, s = tiny_sweep
    pd.DataFrame({"x": [1], "y": [2]}).to_csv(tmp_path / "foreign.csv", index=False)
    df = pd.read_csv(s / "results.csv")
    df["value"] = df["value"].astype(object)
    df.loc[0, "value"] = "oops"
    df.to_csv(tmp_path / "textval.csv", index=False)
    subs = {
        "s": str(s),
        "foreign": str(tmp_path / "foreign.csv"),
        "textval": str(tmp_path / "textval.csv"),
        "tmp": str(tmp_path),
    }
    _fails([a.format(**subs) for a in args], needle)


def test_table_reads_verified_runs_and_names_what_it_drops(tiny_sweep, tmp_path):
    import pandas as pd

    _, s = tiny_sweep
    s2 = _copy(s, tmp_path / "s2")
    df = pd.read_csv(s2 / "results.csv")
    df["value"] = 0.0  # an edited top-level CSV is not what the folder's table reads
    df.to_csv(s2 / "results.csv", index=False)
    damaged = sorted((s2 / "runs").iterdir())[0]
    (damaged / "results.csv").write_text((damaged / "results.csv").read_text().replace(",ok", ",ok ", 1))
    with pytest.warns(UserWarning, match=f"1 run\\(s\\) under .* are left out: {damaged.name}"):
        r = runner.invoke(app, ["table", str(s2), "--layout", "generic"])
    assert r.exit_code == 0, r.output
    assert "(n=1 of 2)" in r.output  # its method's mean has one seed fewer than the others: marked
    assert "0.0 ± 0.0" not in r.output
    with pytest.warns(UserWarning, match="without checking it against the runs' checksums"):
        runner.invoke(app, ["table", str(s2 / "results.csv"), "--layout", "generic"])


def test_table_at_a_share_says_which_epoch(tiny_sweep):
    _, s = tiny_sweep
    r = runner.invoke(app, ["table", str(s), "--layout", "generic", "--epoch", "50%"])
    assert r.exit_code == 0 and "[at 50% of each run: epoch 1]" in r.output, r.output


def test_a_resume_with_another_pack_is_refused(tiny_sweep, tmp_path):
    exp, s = tiny_sweep
    s3 = _copy(s, tmp_path / "s3")
    _fails(["sweep", str(exp), "--out", str(s3), "--pack", "4"], "were trained with --pack 1")
    assert runner.invoke(app, ["sweep", str(exp), "--out", str(s3), "--pack", "1"]).exit_code == 0


def test_relative_paths_in_an_experiment_file_are_read_from_its_folder(tmp_path, monkeypatch):
    import numpy as np
    import pandas as pd

    (tmp_path / "data").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "elsewhere").mkdir()
    rng = np.random.default_rng(0)
    pd.DataFrame(
        {"a": rng.normal(size=80), "b": rng.normal(size=80), "c": rng.normal(size=80), "y": rng.integers(0, 2, 80)}
    ).to_csv(tmp_path / "data" / "t.csv", index=False)
    (tmp_path / "data" / "parties.yaml").write_text("p1: [a]\np2: [b, c]\n")
    spec = {
        "name": "rel",
        "methods": ["local"],
        "train_missing": ["none"],
        "test_missing": ["none"],
        "hp": {"epochs": 1},
        "parties": [2],
        "datasets": {
            "csv:../data/t.csv": {
                "data_options": {"target": "y"},
                "partitioner": "columns",
                "partition_options": {"file": "../data/parties.yaml"},
            }
        },
    }
    (tmp_path / "exp" / "e.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = runner.invoke(app, ["sweep", str(tmp_path / "exp" / "e.yaml"), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(df["dataset"]) == {"csv:../data/t.csv"} and len(df) > 0
    spec["datasets"] = {"csv:../data/missing.csv": {"data_options": {"target": "y"}}}
    (tmp_path / "exp" / "e.yaml").write_text(yaml.safe_dump(spec))
    _fails(
        ["sweep", str(tmp_path / "exp" / "e.yaml"), "--out", str(tmp_path / "out2")],
        "the table '../data/missing.csv' does not exist",
    )


def test_a_sweep_that_skips_every_dataset_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "empty"))
    monkeypatch.delenv("VFLBENCH_DATA_MIRROR", raising=False)
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({**BASE_EXP, "datasets": {"uci-har": {}}}))
    _fails(["sweep", str(exp), "--out", str(tmp_path / "o")], "every dataset was skipped")


def test_a_key_given_twice_in_yaml_is_refused(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("name: a\nmethods: [local]\nmethods: [svfl]\ndatasets: {synthetic: {}}\n")
    _fails(
        ["sweep", str(exp), "--out", str(tmp_path / "o")],
        "the key 'methods' appears twice in one mapping (lines 2 and 3)",
    )


def test_a_path_written_relative_to_the_working_directory_still_reads_with_a_warning(tmp_path, monkeypatch):
    """Experiment files written before the rule (e.g. `preset: experiments/x.yaml`) keep their run keys."""
    from vflbench.grids.experiment import load_experiment

    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "p.yaml").write_text(
        "default:\n  default: {optimizer: adam, lr: 0.001, batch_size: 32, epochs: 1}\n"
    )
    (tmp_path / "experiments" / "e.yaml").write_text(yaml.safe_dump({**BASE_EXP, "preset": "experiments/p.yaml"}))
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="is read relative to the working directory"):
        exp = load_experiment("experiments/e.yaml")
    assert exp.runs[0].settings["preset"] == "experiments/p.yaml"


def test_party_data_and_sweep_lists_parse_strictly(tmp_path):
    _fails(
        ["run", "--party-data", "a=x.csv,,b=y.csv", "--method", "laser", "--out", str(tmp_path / "o")],
        "--party-data 'a=x.csv,,b=y.csv' has an empty item",
    )
    _fails(
        ["sweep", "experiments/demo.yaml", "--datasets", "credit,", "--out", str(tmp_path / "s")],
        "--datasets 'credit,' has a trailing comma",
    )
    _fails(
        ["sweep", "experiments/demo.yaml", "--methods", ",laser", "--out", str(tmp_path / "s")],
        "--methods ',laser' has a leading comma",
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["server", "--rendezvous", "tcp://nohost.invalid:99999"], "port 99999 is out of range"),
        (["server", "--rendezvous", "tcp://:29500"], "tcp://HOST:PORT"),
        (["party", "--rank", "0", "--rendezvous", "nohost:1"], "tcp://HOST:PORT"),
        (["run", "--seed", "1180591620717411303425"], "between 0 and 9223372036854775807"),
        (["run", "--seed", "1180591602270667229696"], "between 0 and 9223372036854775807"),
    ],
)
def test_rendezvous_and_seeds_out_of_range_are_one_line(args, needle, tmp_path):
    from typer.testing import CliRunner

    from vflbench.cli import app

    out = [] if args[0] == "party" else ["--out", str(tmp_path / "o")]
    r = CliRunner().invoke(app, [*args, "--dataset", "synthetic", "--method", "svfl", *out])
    assert r.exit_code == 2 and needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_a_seed_above_2_to_the_53_is_exact():
    """Seeds are read as integers, never through a float (which rounds 2^53 + 1 to 2^53)."""
    from vflbench.runs.config import RunConfig, resolve

    assert resolve(RunConfig(dataset="synthetic", method="svfl", seed=2**53 + 1)).seed == 2**53 + 1
    assert resolve(RunConfig(dataset="synthetic", method="svfl", seed=str(2**63 - 1))).seed == 2**63 - 1
