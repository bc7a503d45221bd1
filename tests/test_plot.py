import pytest
import yaml
from typer.testing import CliRunner

from vflbench.cli import app

runner = CliRunner()


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_scalability_curves_and_bars(tmp_path):
    spec = {
        "name": "scal",
        "protocol": "clean",
        "seeds": [0],
        "parties": [2, 4],
        "methods": ["svfl", "laser"],
        "train_missing": ["mcar:0.1"],
        "test_missing": ["mcar:0.1"],
        "hp": {"epochs": 2},
        "lr_by_parties": {"laser": {4: 0.002}},
        "datasets": {"synthetic": {"data_options": {"n": 800}}},
    }
    exp = tmp_path / "scal.yaml"
    exp.write_text(yaml.safe_dump(spec))
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["sweep", str(exp), "--out", str(out)])
    assert r.exit_code == 0, r.output
    import json

    lrs = {
        (m["config"]["method"], m["config"]["parties"]): m["config"]["hp"]["lr"]
        for m in (json.loads(p.read_text()) for p in out.glob("runs/*/manifest.json"))
    }
    assert lrs[("laser", 4)] == 0.002 and lrs[("laser", 2)] == 1e-3  # lr_by_parties applies per method and K
    for kind in ("scalability", "curves", "bars"):
        r = runner.invoke(app, ["plot", kind, str(out), "--out", str(tmp_path / kind)])
        assert r.exit_code == 0, r.output
        for ext in (".png", ".pdf"):
            f = tmp_path / (kind + ext)
            assert f.exists() and f.stat().st_size > 1000
    import pandas as pd

    pts = pd.read_csv(tmp_path / "scalability.csv")  # the plotted points: metric, time and each run's own peak
    assert set(pts["parties"]) == {2, 4} and set(pts["method"]) == {"svfl", "laser"}
    assert (pts["seconds_per_epoch"] > 0).all() and (pts["peak_rss_gb"] > 0.05).all()
    r = runner.invoke(app, ["plot", "pie", str(out)])
    assert r.exit_code == 2 and "Unknown plot" in r.output
    # the same folder gathered (vflbench gather: no run folders left) plots the same points
    assert runner.invoke(app, ["gather", str(out)]).exit_code == 0 and not (out / "runs").exists()
    r = runner.invoke(app, ["plot", "scalability", str(out), "--out", str(tmp_path / "gathered")])
    assert r.exit_code == 0, r.output
    again = pd.read_csv(tmp_path / "gathered.csv")
    pd.testing.assert_frame_equal(again, pts)


@pytest.mark.parametrize(
    "kind,folder,extra",
    [
        ("bars", "results/pbm/table3", []),
        ("curves", "results/pbm/fig6", []),
        ("scalability", "results/pbm/fig6", ["--metric", "auprc"]),
        ("budget", "results/pbm/fig4", ["--panel", "beta"]),
        ("frontier", "results/pbm/fig6", []),
        ("communication", "results/communication", ["--test-missing", "mcar:0.5"]),
    ],
)
def test_legends_cover_no_data(kind, folder, extra, tmp_path, monkeypatch):
    """Every plot kind puts its legend where no panel is: the legend's box, as drawn, meets no axes' box."""
    from pathlib import Path

    from vflbench.results import plot as plot_mod

    root = Path(__file__).resolve().parents[1]
    seen = []
    real_save = plot_mod._save

    def checking_save(fig, out):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends, f"the {kind} plot draws no legend"
        for leg in legends:
            box = leg.get_window_extent(renderer)
            for ax in fig.axes:
                if ax.axison:
                    assert not box.overlaps(ax.get_window_extent(renderer)), f"{kind}: the legend covers a panel"
        seen.append(kind)
        return real_save(fig, out)

    monkeypatch.setattr(plot_mod, "_save", checking_save)
    r = runner.invoke(app, ["plot", kind, str(root / folder), "--out", str(tmp_path / kind), *extra])
    assert r.exit_code == 0, r.output
    assert seen == [kind]


def test_the_demo_chart_says_how_every_method_weighs_the_classes(tmp_path):
    """The bars' title reads the weighting from the manifests: XGBoost never weighs, the neural methods sample in
    balance and gbdt weighs rows when the protocol balances (Credit's old default); one kind for all says so."""
    import json

    from vflbench.results.report import class_weighting

    def runs(folder, balanced):
        for m in ("laser", "xgboost", "gbdt"):
            d = folder / "runs" / f"{m}_{balanced}"
            d.mkdir(parents=True)
            cfg = {"method": m, "protocol": {"balanced_sampler": balanced}}
            (d / "manifest.json").write_text(json.dumps({"run_id": d.name, "config": cfg}))
        return folder

    mixed = class_weighting(runs(tmp_path / "a", True))
    assert mixed == (
        "class weighting: balanced sampling: LASER-VFL; balanced weights: GBDT (central); none: XGBoost (codes)"
    )
    assert class_weighting(runs(tmp_path / "b", False)) == "class weighting: none (every method)"
    assert class_weighting(tmp_path / "nothing") == ""
