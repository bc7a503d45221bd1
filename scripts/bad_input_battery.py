"""A battery of careless and wrong inputs across vflbench's commands (Hardening II and III).

Every case runs through the CLI in this process and is classified:

  clean      refused with one short message and a non-zero exit, nothing traced back
  ok         accepted, and the case expects acceptance (the documented behaviour happened)
  traceback  a Python traceback or an unexpected exception
  silent     accepted although the case expects a refusal (or a warning that never came)

    python scripts/bad_input_battery.py [--keep DIR] [-v]

Needs the offline data mirror only for the cases marked so (VFLBENCH_DATA_MIRROR); prints a table of
counts per class and exits non-zero when any case is a traceback or silent.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from vflbench.cli import app  # noqa: E402

RUN = [
    "run",
    "--dataset",
    "synthetic",
    "--method",
    "svfl",
    "--data-opt",
    "n=300",
    "--quiet",
    "--epochs",
    "1",
    "--test-missing",
    "none",
]
EXP = {
    "name": "t",
    "methods": ["local"],
    "train_missing": ["none"],
    "test_missing": ["none"],
    "hp": {"epochs": 1},
    "datasets": {"synthetic": {"data_options": {"n": 200}}},
}


def files(root: Path) -> dict[str, str]:
    """The inputs the cases point at."""
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame(
        {
            "id": np.arange(n),
            "a": rng.normal(size=n),
            "b": rng.normal(size=n).round(2).astype(object),
            "c": rng.normal(size=n),
            "const": 1,
            "empty": np.nan,
            "y": rng.integers(0, 2, n).astype(float),
        }
    )
    df.loc[5, "b"] = "?"
    df.to_csv(root / "messy.csv", index=False)
    df.to_csv(root / "semi.csv", sep=";", index=False)
    df2 = df.copy()
    df2.loc[:2, "y"] = np.nan
    df2.to_csv(root / "nolabel.csv", index=False)
    df.drop(columns="y").to_csv(root / "test_no_target.csv", index=False)
    pd.DataFrame({"a": [1, 2, 3, 4, 5, 6.0], "b": [0.1, 0.5, 0.2, 0.9, 0.3, 0.7], "y": [0, 1, 0, 1, 0, 1]}).to_csv(
        root / "six.csv", index=False
    )
    pd.DataFrame({"x": [1], "z": [2]}).to_csv(root / "foreign.csv", index=False)
    out = {}
    for name, change in {
        "dup_seeds": {"seeds": [0, 0]},
        "dup_methods": {"methods": ["local", "local"]},
        "escape": {"name": "../escape"},
        "slash": {"name": "a/b"},
        "layout": {"layout": "bogus"},
        "quick_seeds": {"quick": {"seeds": "abc"}},
        "same_run": {"train_missing": ["mcar:0.1", "mcar:0.10"]},
        "parts": {"partitioner": ["contiguous", "correlation"]},
        "reference": {"reference": "nope.csv"},
        "grid_dup": {"methods": ["plug"], "method_grid": {"plug": [{"p_drop": [0.2, 0.2]}]}},
        "ok": {},
    }.items():
        p = root / f"{name}.yaml"
        p.write_text(yaml.safe_dump({**EXP, **change}))
        out[name] = str(p)
    (root / "dupkey.yaml").write_text("name: a\nmethods: [local]\nmethods: [svfl]\ndatasets: {synthetic: {}}\n")
    out["dupkey"] = str(root / "dupkey.yaml")
    (root / "exp").mkdir()
    (root / "exp" / "rel.yaml").write_text(
        yaml.safe_dump(
            {**EXP, "datasets": {"csv:../messy.csv": {"data_options": {"target": "y", "coerce": True}}}, "parties": [2]}
        )
    )
    out["rel"] = str(root / "exp" / "rel.yaml")
    # party files (Hardening III): IDs 1000.. in a and c, zero-padded 001000.. in b; d shares no ID with a
    ids = [1000 + i for i in range(n)]
    pd.DataFrame({"ID": ids, "x": rng.normal(size=n), "y": rng.integers(0, 2, n)}).to_csv(root / "pa.csv", index=False)
    pd.DataFrame({"ID": [f"{i:06d}" for i in ids], "z": rng.normal(size=n)}).to_csv(root / "pb.csv", index=False)
    pd.DataFrame({"ID": ids, "w": rng.normal(size=n)}).to_csv(root / "pc.csv", index=False)
    pd.DataFrame({"ID": [f"v{i}" for i in ids], "u": rng.normal(size=n)}).to_csv(root / "pd.csv", index=False)
    out["party3"] = f"party0={root / 'pa.csv'},party1={root / 'pc.csv'},party2={root / 'pb.csv'}"
    out["party_none"] = f"party0={root / 'pa.csv'},party1={root / 'pd.csv'},party2={root / 'pc.csv'}"
    return out


def cases(root: Path, f: dict[str, str]) -> list[tuple[str, list[str], str]]:
    """(name, argv, expect) with expect "refuse" or "ok"."""
    o = str(root / "o")
    T = ["--test-missing", "none", "--epochs", "1", "--quiet", "--out", o]

    def tab(file, *opts):
        return [
            "run",
            "--dataset",
            f"csv:{root / file}",
            "--method",
            "local",
            "--parties",
            "2",
            *T,
            *opts,
        ]

    sweep_out = str(root / "sweep_ok")
    return [
        # --hp and the flags
        ("hp epochs=1 trains", [*RUN[:-4], "--hp", "epochs=1", "--test-missing", "none", "--out", o], "ok"),
        ("hp vs flag conflict", [*RUN, "--hp", "epochs=3", "--out", o], "refuse"),
        ("hp lr=nan", [*RUN, "--hp", "lr=nan", "--out", o], "refuse"),
        ("hp batch_size=abc", [*RUN, "--hp", "batch_size=abc", "--out", o], "refuse"),
        ("hp unknown key", [*RUN, "--hp", "bogus=1", "--out", o], "refuse"),
        ("epochs huge", [*RUN, "--epochs", "99999999999999999999999", "--out", o], "refuse"),
        ("hidden 10,,10", [*RUN, "--hidden", "10,,10", "--out", o], "refuse"),
        ("adam + momentum", [*RUN, "--optimizer", "adam", "--momentum", "0.9", "--out", o], "refuse"),
        (
            "method-opt twice",
            [
                "run",
                "--dataset",
                "synthetic",
                "--method",
                "laser",
                "--data-opt",
                "n=300",
                *T,
                "--method-opt",
                "fusion=sum",
                "--method-opt",
                "fusion=mean",
            ],
            "refuse",
        ),
        ("test-missing mcar:1", [*RUN[:-2], "--test-missing", "none,mcar:1", "--out", o], "refuse"),
        ("out empty", [*RUN, "--out", ""], "refuse"),
        ("device bogus", [*RUN, "--device", "bogus", "--out", o], "refuse"),
        ("part-opt alpha=abc", [*RUN, "--partitioner", "importance", "--part-opt", "alpha=abc", "--out", o], "refuse"),
        ("part-opt alpha=1,2", [*RUN, "--partitioner", "importance", "--part-opt", "alpha=1,2", "--out", o], "refuse"),
        ("part-opt beta=abc", [*RUN, "--partitioner", "correlation", "--part-opt", "beta=abc", "--out", o], "refuse"),
        ("eval-epochs with ::", [*RUN, "--eval-epochs", "1:100:5:3", "--out", o], "refuse"),
        # a user's table
        ("stray text in a numeric column", tab("messy.csv", "--data-opt", "target=y"), "refuse"),
        ("stray text coerced", tab("messy.csv", "--data-opt", "target=y", "--data-opt", "coerce=true"), "ok"),
        ("semicolon file", tab("semi.csv", "--data-opt", "target=y", "--data-opt", "coerce=true"), "ok"),
        (
            "sep given",
            tab("semi.csv", "--data-opt", "target=y", "--data-opt", "coerce=true", "--data-opt", "sep=;"),
            "ok",
        ),
        ("rows without target", tab("nolabel.csv", "--data-opt", "target=y", "--data-opt", "coerce=true"), "ok"),
        (
            "test file without target",
            tab(
                "messy.csv",
                "--data-opt",
                "target=y",
                "--data-opt",
                "coerce=true",
                "--data-opt",
                f"test={root / 'test_no_target.csv'}",
            ),
            "refuse",
        ),
        (
            "six-row binary table",
            [
                "run",
                "--dataset",
                f"csv:{root / 'six.csv'}",
                "--method",
                "local",
                "--parties",
                "2",
                *T,
                "--data-opt",
                "target=y",
                "--data-opt",
                "test_size=0.5",
            ],
            "ok",
        ),
        ("unknown data-opt", tab("messy.csv", "--data-opt", "bogus=1"), "refuse"),
        ("openml:abc", ["inspect", "openml:abc"], "refuse"),
        # sweeps
        ("seeds [0, 0]", ["sweep", f["dup_seeds"], "--out", str(root / "s1")], "refuse"),
        ("methods [local, local]", ["sweep", f["dup_methods"], "--out", str(root / "s2")], "refuse"),
        ("one run twice", ["sweep", f["same_run"], "--out", str(root / "s3")], "refuse"),
        ("grid entries twice", ["sweep", f["grid_dup"], "--out", str(root / "s3b")], "refuse"),
        ("name ../escape", ["sweep", f["escape"], "--out", str(root / "s4")], "refuse"),
        ("name a/b", ["sweep", f["slash"], "--out", str(root / "s5")], "refuse"),
        ("layout bogus", ["sweep", f["layout"], "--out", str(root / "s6")], "refuse"),
        ("reference missing", ["sweep", f["reference"], "--out", str(root / "s6b")], "refuse"),
        ("quick seeds abc", ["sweep", f["quick_seeds"], "--quick", "--out", str(root / "s7")], "refuse"),
        ("duplicate YAML key", ["sweep", f["dupkey"], "--out", str(root / "s8")], "refuse"),
        ("sweep --out ''", ["sweep", f["ok"], "--out", ""], "refuse"),
        ("sweep --seeds ''", ["sweep", f["ok"], "--seeds", "", "--out", str(root / "s9")], "refuse"),
        ("sweep --address w/o ray", ["sweep", f["ok"], "--address", "x:1", "--out", str(root / "s10")], "refuse"),
        ("sweep --device bogus", ["sweep", f["ok"], "--device", "bogus", "--out", str(root / "s11")], "refuse"),
        ("partitioner list", ["sweep", f["parts"], "--out", str(root / "s12")], "ok"),
        ("relative csv from elsewhere", ["sweep", f["rel"], "--out", str(root / "s13")], "ok"),
        ("a sweep that works", ["sweep", f["ok"], "--out", sweep_out], "ok"),
        ("resume with another --pack", ["sweep", f["ok"], "--out", sweep_out, "--pack", "1"], "refuse"),
        # tables and plots
        ("table --epoch 0%", ["table", sweep_out, "--layout", "generic", "--epoch", "0%"], "refuse"),
        (
            "table --reference foreign",
            ["table", sweep_out, "--layout", "generic", "--reference", str(root / "foreign.csv")],
            "refuse",
        ),
        ("table --out /proc/x.md", ["table", sweep_out, "--layout", "generic", "--out", "/proc/x.md"], "refuse"),
        (
            "plot curves --metric bogus",
            ["plot", "curves", sweep_out, "--metric", "bogus", "--out", str(root / "f")],
            "refuse",
        ),
        ("plot bars --out DIR/", ["plot", "bars", sweep_out, "--out", str(root) + "/"], "refuse"),
        (
            "plot scalability --metric bogus",
            ["plot", "scalability", sweep_out, "--metric", "bogus", "--out", str(root / "f")],
            "refuse",
        ),
        # Hardening III: bounds (vflbench.core.limits), entity alignment, strict specs, tables
        ("pbm b=1e9", [*RUN, "--mechanism", "pbm:b=1000000000,beta=0.1", "--out", o], "refuse"),
        ("cut 1e9", [*RUN, "--cut", "1000000000", "--out", o], "refuse"),
        ("hidden 65536,65536 (memory)", [*RUN, "--hidden", "65536,65536", "--out", o], "refuse"),
        ("batch-size 1e12", [*RUN, "--batch-size", "1000000000000", "--out", o], "refuse"),
        ("eval-epochs 1:1e9", [*RUN, "--eval-epochs", "1:1000000000", "--out", o], "refuse"),
        ("net-latency 1e8", [*RUN, "--runtime", "processes", "--net-latency", "100000000", "--out", o], "refuse"),
        (
            "synthetic n=1e12",
            ["run", "--dataset", "synthetic", "--method", "svfl", "--data-opt", "n=1000000000000", *T],
            "refuse",
        ),
        ("parties 1e9", [*RUN, "--parties", "1000000000", "--out", o], "refuse"),
        ("sweep --workers 1e6", ["sweep", f["ok"], "--workers", "1000000", "--out", str(root / "s14")], "refuse"),
        ("mechanism double comma", [*RUN, "--mechanism", "pbm:b=32,,beta=0.1", "--out", o], "refuse"),
        ("mechanism trailing comma", [*RUN, "--mechanism", "pbm:b=32,beta=0.1,", "--out", o], "refuse"),
        ("mechanism key twice", [*RUN, "--mechanism", "pbm:b=32,b=16", "--out", o], "refuse"),
        (
            "method-opt same value twice",
            [
                "run",
                "--dataset",
                "synthetic",
                "--method",
                "laser",
                "--data-opt",
                "n=300",
                *T,
                "--method-opt",
                "fusion=sum",
                "--method-opt",
                "fusion=sum",
            ],
            "refuse",
        ),
        ("party-data empty item", ["run", "--party-data", "a=x.csv,,b=y.csv", "--method", "laser", *T], "refuse"),
        (
            "three party files, no --parties",
            [
                "run",
                "--party-data",
                f["party3"],
                "--id-column",
                "ID",
                "--data-opt",
                "target=y",
                "--method",
                "laser",
                "--align",
                "plain",
                *T,
            ],
            "ok",
        ),
        (
            "party files, --parties conflicts",
            [
                "run",
                "--party-data",
                f["party3"],
                "--id-column",
                "ID",
                "--data-opt",
                "target=y",
                "--method",
                "laser",
                "--parties",
                "4",
                *T,
            ],
            "refuse",
        ),
        (
            "a party holding nothing runs (warned)",
            [
                "run",
                "--party-data",
                f["party_none"],
                "--id-column",
                "ID",
                "--data-opt",
                "target=y",
                "--method",
                "laser",
                "--align",
                "plain",
                *T,
            ],
            "ok",
        ),
        (
            "inspect --party-data",
            ["inspect", "--party-data", f["party3"], "--id-column", "ID", "--data-opt", "target=y"],
            "ok",
        ),
        (
            "inspect --party-data without target",
            ["inspect", "--party-data", f["party3"], "--id-column", "ID"],
            "refuse",
        ),
        ("table of a sweep folder, bare", ["table", sweep_out], "ok"),
    ]


def classify(result, expect: str) -> str:
    text = result.output
    if "Traceback" in text or (result.exception is not None and not isinstance(result.exception, SystemExit)):
        return "traceback"
    if result.exit_code == 0:
        return "ok" if expect == "ok" else "silent"
    if expect == "ok":
        return "traceback" if result.exit_code == 1 else "refused-but-expected-ok"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "clean" if len(lines) <= 6 else "long-message"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=Path, help="keep the scratch folder here")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    root = Path(a.keep or tempfile.mkdtemp(prefix="vflbench-battery-"))
    root.mkdir(parents=True, exist_ok=True)
    f = files(root)
    runner = CliRunner()
    counts: dict[str, int] = {}
    bad = []
    cwd = os.getcwd()
    os.chdir(root / "exp")  # relative paths must not depend on where a command starts
    try:
        for name, argv, expect in cases(root, f):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = runner.invoke(app, argv)
            cls = classify(r, expect)
            counts[cls] = counts.get(cls, 0) + 1
            first = next((ln for ln in r.output.splitlines() if ln.strip()), "")
            if cls not in ("clean", "ok"):
                bad.append((name, cls, first))
            if a.verbose or cls not in ("clean", "ok"):
                print(f"{cls:>10}  {name}: {first[:160]}")
    finally:
        os.chdir(cwd)
    total = sum(counts.values())
    print(f"\n{total} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
