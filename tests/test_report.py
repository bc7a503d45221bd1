import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.results import artefacts
from vflbench.results.artefacts.laser import verdicts as laser_verdicts
from vflbench.results.report import (
    aggregate,
    attach_reference,
    load_reference,
    make_table,
    ref_key,
)

LAYOUTS = {n: artefacts.get(n).layout for n in artefacts.names()}

runner = CliRunner()


def hand_made():
    rows = []
    vals = {  # method -> per-seed F1 at (train none, test none)
        "laser": [46.0, 47.0, 48.0],
        "svfl": [45.0, 45.0, 48.0],
        "local": [37.0, 38.0, 39.0],
    }
    for m, vs in vals.items():
        for seed, v in enumerate(vs):
            rows.append(
                {
                    "run_id": f"{m}{seed}",
                    "dataset": "credit",
                    "method": m,
                    "train_missing": "none",
                    "test_missing": "none",
                    "seed": seed,
                    "metric": "f1",
                    "value": v,
                    "protocol": "compat",
                }
            )
            rows.append(
                {
                    "run_id": f"{m}{seed}",
                    "dataset": "credit",
                    "method": m,
                    "train_missing": "none",
                    "test_missing": "none",
                    "seed": seed,
                    "metric": "accuracy",
                    "value": 70.0,
                    "protocol": "compat",
                }
            )
    return pd.DataFrame(rows)


def test_aggregate_population_std_and_metric_choice():
    agg = aggregate(hand_made(), LAYOUTS["laser-table1"])
    las = agg[agg["method"] == "laser"].iloc[0]
    assert las["metric"] == "f1"  # Credit reports F1
    assert las["mean"] == pytest.approx(47.0) and las["std"] == pytest.approx(np.std([46, 47, 48]))  # ddof = 0
    assert las["n_seeds"] == 3


def test_reference_diffs_tolerance_and_verdicts():
    agg = attach_reference(aggregate(hand_made(), LAYOUTS["laser-table1"]), load_reference("laser-table1"))
    las = agg[agg["method"] == "laser"].iloc[0]
    # paper: LASER-VFL credit (0.0, 0.0) = 46.5 +- 2.8; Local = 37.7 +- 3.1; Standard VFL = 45.7 +- 2.6
    assert las["paper_mean"] == 46.5 and las["diff"] == pytest.approx(0.5) and las["within_tolerance"]
    assert agg["within_tolerance"].all()
    v = laser_verdicts(agg)
    assert len(v) == 1 and v[0]["best"] == "laser" and v[0]["ok"]


def test_laser_within_one_std_of_best():
    df = hand_made()
    df.loc[(df["method"] == "svfl") & (df["metric"] == "f1"), "value"] = [48.0, 47.0, 47.6]  # mean 47.53, std 0.41
    agg = aggregate(df, LAYOUTS["laser-table1"])
    v = laser_verdicts(agg)[0]
    assert v["best"] == "svfl" and not v["ok"]  # LASER 47.0 is 0.53 behind, more than 0.41
    df.loc[(df["method"] == "svfl") & (df["metric"] == "f1"), "value"] = [49.0, 46.0, 47.6]  # std 1.23
    assert laser_verdicts(aggregate(df, LAYOUTS["laser-table1"]))[0]["ok"]


def test_markdown_layout_bold_and_summary():
    text, _ = make_table(hand_made(), "laser-table1", "laser-table1", "md")
    assert "| p_miss train | p_miss test | Local | Standard VFL | LASER-VFL |" in text
    assert "**47.0 ± 0.8**" in text  # best in bold
    assert "paper 46.5 ± 2.8 (+0.5)" in text
    assert "Within tolerance of the paper" in text and "**3/3** cells" in text
    assert "3 seeds" in text
    latex, _ = make_table(hand_made(), "laser-table1", None, "latex")
    assert "\\textbf{47.0 $\\pm$ 0.8}" in latex and "\\begin{tabular}" in latex


def test_ref_keys():
    assert ref_key("none") == "0.0" and ref_key("mcar:0.1") == "0.1" and ref_key("mcar-beta:2,2") == "beta(2,2)"


def test_table_cli_and_errors(tmp_path):
    p = tmp_path / "r.csv"
    hand_made().to_csv(p, index=False)
    r = runner.invoke(app, ["table", str(p), "--reference", "laser-table1"])
    assert r.exit_code == 0 and "LASER-VFL" in r.output
    r = runner.invoke(app, ["table", str(p), "--format", "csv"])
    assert r.exit_code == 0 and r.output.startswith("dataset,metric,method")
    for args, needle in (
        (["--layout", "x"], "Unknown layout"),
        (["--reference", "nope"], "Unknown reference"),
        (["--format", "pdf"], "Unknown format"),
    ):
        r = runner.invoke(app, ["table", str(p), *args])
        assert r.exit_code == 2 and needle in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    r = runner.invoke(app, ["table", str(bad)])
    assert r.exit_code == 2 and "lacks columns" in r.output


HEAD = "run_id,method,p_miss_train,accountant,seed,value,flag\n"
FILES = {  # cells that type inference reads differently file by file
    "numbers": "r1,svfl,0.1,,0,61.5,True\nr1,svfl,0.1,,0,62.0,False\n",
    "text": "r2,laser,mar1,pld,1,70.25,True\n",
    "ints": "r3,local,0.0,rdp,2,55,\n",
    "empty": "r4,plug,,,3,,\n",
    "quoted": 'r5,"ens,emble",mnar:0.7,pld,4,1e2,false\n',
}


@pytest.mark.parametrize(
    "order",
    [
        ["text", "numbers"],
        ["numbers", "text", "ints"],
        ["text", "quoted"],
        ["text", "empty", "quoted"],
        ["ints", "numbers", "empty"],
        ["text", "quoted", "numbers", "text"],
    ],
)
def test_results_read_together_equal_results_read_one_by_one(order):
    from io import BytesIO

    from vflbench.results.outputs import read_results_csv, read_results_texts

    texts = [(HEAD + FILES[k]).encode() for k in order]
    texts.insert(1, b"run_id,method,seed,value\nr9,local,0,50.0\n")  # another header splits the batch
    want = pd.concat([read_results_csv(BytesIO(t)) for t in texts], ignore_index=True)
    got = read_results_texts(texts)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert [type(v) for v in got["p_miss_train"]] == [type(v) for v in want["p_miss_train"]]  # 0.1 stays a number
