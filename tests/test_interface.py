"""Method interface v2: stages and sample roles, option provenance, the stale-update optimiser mode,
communication counts, the `methods` command and plugins."""

from __future__ import annotations

import json

import pytest
import torch
from _testenv import TEST_DEVICE
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.methods import METHODS, BatchPrediction, Method, Stage
from vflbench.methods.base import masked_mean_ce
from vflbench.nn.models import ParamStore
from vflbench.nn.optim import MaskedOptimizer
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute

runner = CliRunner()


class _Recorder(Method):
    """Three stages over the three sample sets; records what each stage saw."""

    name, display, paper, hp_key, f1_rule = "_recorder", "Recorder", "test", "all", "single"
    stages = (
        Stage("pre", samples="all", labels=False),
        Stage("fine", samples="labeled"),
        Stage("vanilla", samples="aligned"),
    )
    seen: dict = {}

    def build(self):
        self.ext, _ = self.extractors("ext", list(range(self.k)))
        self.head, _ = self.heads("head", 1, self.ctx.model.cut)

    def loss(self, batch, stage):
        rec = type(self).seen.setdefault(stage.name, {"idx": set(), "y_none": [], "obs_full": []})
        rec["idx"].update(batch.idx.tolist())
        rec["y_none"].append(batch.y is None)
        rec["obs_full"].append(bool(batch.obs.all()))
        emb = self.send(self.ext(batch.blocks), batch.obs.T)
        lg = self.head(emb.mean(0, keepdim=True))[0]
        dev = batch.obs.device
        y = batch.y if batch.y is not None else torch.zeros(batch.size, dtype=torch.long, device=dev)
        return masked_mean_ce(lg[None], y, torch.ones(1, batch.size, dtype=torch.bool, device=dev))[0], torch.ones(
            self.n_members, dtype=torch.bool, device=dev
        )

    def predict(self, batch):
        lg = self.head(self.ext(batch.blocks).mean(0, keepdim=True))[0]
        c = batch.obs.any(1)
        return BatchPrediction(lg.argmax(-1)[None], c[None].clone(), None, c)


@pytest.fixture
def recorder():
    METHODS.register("_recorder")(_Recorder)
    _Recorder.seen = {}
    yield _Recorder
    METHODS._items.pop("_recorder")


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_stages_see_the_samples_they_declare(recorder):
    cfg = RunConfig(
        dataset="synthetic",
        method="_recorder",
        train_missing="mcar:0.5",
        test_missing=["none"],
        data_options={"n": 1000},
        hp={"epochs": 1, "batch_size": 64},
        settings={"labeled": 120, "aligned": 30},
    )
    run = resolve(cfg)
    from vflbench.training import pipeline

    inputs = pipeline.prepare(run, TEST_DEVICE)
    labeled = set(inputs.train_masks.labeled.tolist())
    n = inputs.train.blocks.n
    obs = inputs.train.obs
    _, manifest = execute(run, device=TEST_DEVICE)
    seen = recorder.seen
    assert seen["pre"]["idx"] == set(range(n)) and all(seen["pre"]["y_none"])  # every sample, labels hidden
    assert seen["fine"]["idx"] == labeled and not any(seen["fine"]["y_none"])  # only the labeled ones, with labels
    full = {i for i in labeled if bool(obs[i].all())}
    assert seen["vanilla"]["idx"] == full and all(seen["vanilla"]["obs_full"])  # only fully aligned labeled samples
    assert len(full) >= 30  # the aligned reserve is fully observed
    assert manifest["masks"]["train"]["labeled"] == 120 and manifest["masks"]["train"]["aligned_reserve"] == 30
    assert manifest["history"]["stage"] == ["pre", "fine", "vanilla"]


def test_stage_hyper_parameters_can_be_set_per_stage(recorder):
    run = resolve(
        RunConfig(
            dataset="synthetic", method="_recorder", hp={"epochs": 2}, stage_hp={"fine": {"epochs": 5, "lr": 0.5}}
        )
    )
    assert run.stage_hp["pre"].epochs == 2 and run.stage_hp["fine"].epochs == 5 and run.stage_hp["fine"].lr == 0.5
    with pytest.raises(VFLBenchError, match="no stage"):
        resolve(RunConfig(dataset="synthetic", method="_recorder", stage_hp={"nosuch": {"epochs": 1}}))


def test_bad_semi_supervised_requests_are_rejected():
    with pytest.raises(VFLBenchError, match="aligned"):
        resolve(RunConfig(dataset="synthetic", method="laser", settings={"labeled": 10, "aligned": 20}))
    with pytest.raises(VFLBenchError, match="--labeled"):
        resolve(RunConfig(dataset="synthetic", method="laser", settings={"aligned": 5}))
    run = resolve(RunConfig(dataset="synthetic", method="laser", settings={"labeled": 10**7}))
    from vflbench.training import pipeline

    with pytest.raises(VFLBenchError, match="larger than the training set"):
        pipeline.prepare(run, TEST_DEVICE)


def test_an_explicit_user_option_beats_the_protocol(tmp_path):
    r = runner.invoke(
        app,
        [
            "run",
            "--dataset",
            "synthetic",
            "--method",
            "plug",
            "--protocol",
            "clean",
            "--method-opt",
            "plug_denominator=exclude",
            "--epochs",
            "1",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    m = json.loads(next(tmp_path.glob("*/manifest.json")).read_text())
    assert m["config"]["method_options"]["plug_denominator"] == "exclude"
    assert m["method"]["option_sources"] == {
        "p_drop": "protocol:clean",
        "plug_denominator": "user",
        "granularity": "protocol:clean",
        "active_missing": "protocol:clean",
        "pretrain": "default",
    }
    run = resolve(RunConfig(dataset="synthetic", method="laser", protocol="compat"))
    assert run.method_options["laser_subsets"] == "batch" and run.option_sources["laser_subsets"] == "protocol:compat"
    run = resolve(
        RunConfig(dataset="synthetic", method="laser", protocol="compat", method_options={"laser_subsets": "sample"})
    )
    assert run.method_options["laser_subsets"] == "sample" and run.option_sources["laser_subsets"] == "user"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--method-opt", "nosuch=1"], "has no option nosuch"),
        (["--method-opt", "p_drop=2"], "must be in [0, 1)"),
        (["--method-opt", "p_drop=abc"], "expects float"),
        (["--method-opt", "plug_denominator=maybe"], "choices are exclude, random"),
        (["--method-opt", "p_drop"], "key=value"),
    ],
)
def test_bad_method_options_fail_before_training(tmp_path, args, needle):
    r = runner.invoke(
        app, ["run", "--dataset", "synthetic", "--method", "plug", "--quiet", "--out", str(tmp_path), *args]
    )
    assert r.exit_code == 2 and needle in r.output, r.output
    assert not any(tmp_path.iterdir())


def test_methods_command_lists_the_registry():
    r = runner.invoke(app, ["methods", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    names = [x["name"] for x in rows]
    assert names[:6] == ["local", "svfl", "ensemble", "combinatorial", "plug", "laser"]
    plug = next(x for x in rows if x["name"] == "plug")
    assert plug["display"] == "PlugVFL" and plug["paper"]
    assert {o["name"] for o in plug["options"]} == {
        "p_drop",
        "active_missing",
        "plug_denominator",
        "granularity",
        "pretrain",
    }
    r = runner.invoke(app, ["methods"])
    assert r.exit_code == 0 and "LASER-VFL" in r.output


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_plugin_file_registers_and_runs(tmp_path):
    src = tmp_path / "mine.py"
    src.write_text(
        (__import__("pathlib").Path(__file__).parents[1] / "docs/examples/observed_mean.py")
        .read_text()
        .replace('"obsmean"', '"mine"')
    )
    r = runner.invoke(
        app,
        [
            "--plugin",
            str(src),
            "run",
            "--dataset",
            "synthetic",
            "--method",
            "mine",
            "--epochs",
            "2",
            "--quiet",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["--plugin", str(tmp_path / "absent.py"), "methods"])
    assert r.exit_code == 2 and "does not exist" in r.output


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_standard_vfl_traffic_by_hand():
    """Up: every complete training sample's embedding (cut floats x 4 bytes) per party per epoch;
    down: one gradient of the same size for each."""
    run = resolve(
        RunConfig(
            dataset="synthetic",
            method="svfl",
            train_missing="none",
            test_missing=["none"],
            data_options={"n": 1000},
            hp={"epochs": 3},
            model={"cut": 6},
        )
    )
    rows, man = execute(run, device=TEST_DEVICE)
    n_train = man["data"]["n_train"]
    per_party = n_train * 6 * 4 * 3
    c = man["communication"]
    assert c["bytes_train_up_per_party"] == [per_party] * 4 and c["bytes_train_down_per_party"] == [per_party] * 4
    assert rows[0]["comm_bytes_up"] == 4 * per_party == rows[0]["comm_bytes_down"]
    assert c["bytes_eval_up"] == man["data"]["n_test"] * 6 * 4 * 4 and c["bytes_eval_down"] == 0


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_local_sends_nothing():
    rows, man = execute(resolve(RunConfig(dataset="synthetic", method="local", hp={"epochs": 1})), device=TEST_DEVICE)
    assert rows[0]["comm_bytes_up"] == 0 and man["communication"]["bytes_eval_up"] == 0


def _store(n_members):
    s = ParamStore()
    s.add("w", (n_members, 3), torch.arange(n_members), 0.5)
    s.finalize(torch.Generator().manual_seed(0))
    return s


@pytest.mark.parametrize(
    "name, kw", [("adam", dict(weight_decay=1e-2)), ("sgd", dict(momentum=0.8, weight_decay=1e-2))]
)
def test_stale_updates_equal_torch_zero_grad_without_set_to_none(name, kw):
    """One optimiser over two members (as LASER-VFL's one Adam): with stale updates, a member a batch
    did not use still steps on a zero gradient once it has had one, exactly like
    ``zero_grad(set_to_none=False)``; without, it sits out like ``set_to_none=True``."""
    for stale in (True, False):
        s = _store(2)
        ref = torch.nn.Parameter(s["w"].detach().clone())  # [2, 3]
        ref_rows = [torch.nn.Parameter(ref[i].detach().clone()) for i in range(2)]
        cls = torch.optim.Adam if name == "adam" else torch.optim.SGD
        ropt = cls(ref_rows, lr=0.01, **kw)
        opt = MaskedOptimizer(s, [], 2, name=name, lr=0.01, groups=[0, 0], stale_updates=stale, **kw)
        g = torch.Generator().manual_seed(1)
        for step in range(15):
            grad = torch.randn(2, 3, generator=g)
            use = [True, step % 3 == 1]
            ropt.zero_grad(set_to_none=not stale)
            for i in range(2):
                if use[i]:
                    ref_rows[i].grad = grad[i].clone()
            ropt.step()
            s.flat.grad = (grad * torch.tensor(use, dtype=torch.float)[:, None]).view(-1).clone()
            opt.step(torch.tensor(use))
        for i in range(2):
            assert torch.allclose(s["w"][i], ref_rows[i], atol=1e-6), (name, stale, i)


def test_stale_updates_stay_inside_their_optimiser_group():
    """Separate optimisers (Local's per-party models) never step a model whose batch was skipped."""
    s = _store(2)
    before = s["w"].detach().clone()
    opt = MaskedOptimizer(s, [], 2, name="adam", lr=0.1, weight_decay=0.1, groups=[0, 1], stale_updates=True)
    s.flat.grad = torch.ones(6)
    opt.step(torch.tensor([True, True]))
    mid = s["w"].detach().clone()
    s.flat.grad = torch.cat([torch.ones(3), torch.zeros(3)])
    opt.step(torch.tensor([True, False]))
    assert not torch.equal(s["w"][0], mid[0]) and torch.equal(s["w"][1], mid[1]) and not torch.equal(mid[1], before[1])


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_stale_updates_protocol_option_reaches_the_optimiser():
    base = RunConfig(
        dataset="synthetic",
        method="laser",
        train_missing="mcar:0.5",
        test_missing=["none"],
        data_options={"n": 800},
        hp={"epochs": 2},
        protocol="compat",
        protocol_options={"stale_updates": "false"},
    )
    assert resolve(
        RunConfig(dataset="synthetic", method="laser", protocol="compat")
    ).protocol.stale_updates  # compat's default
    assert not resolve(RunConfig(dataset="synthetic", method="laser", protocol="clean")).protocol.stale_updates
    a = execute(resolve(base), device=TEST_DEVICE)[0]
    b = execute(
        resolve(RunConfig(**{**base.__dict__, "protocol_options": {"stale_updates": "true"}})), device=TEST_DEVICE
    )[0]
    assert [r["value"] for r in a] != [r["value"] for r in b]
    c = execute(
        resolve(RunConfig(**{**base.__dict__, "method": "local", "protocol_options": {"stale_updates": "true"}})),
        device=TEST_DEVICE,
    )[0]
    d = execute(resolve(RunConfig(**{**base.__dict__, "method": "local"})), device=TEST_DEVICE)[0]
    assert [r["value"] for r in c] == [r["value"] for r in d]  # per-model optimisers: no stale steps


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_any_module_can_be_a_member_and_a_stage_can_freeze_members(recorder):
    """A method's own nn.Module is optimised like an extractor; `trainable` freezes members per stage."""

    class TwoStage(_Recorder):
        name = "_twostage"
        stages = (Stage("a"), Stage("b"))

        def build(self):
            super().build()
            self.extra, self.extra_id = self.module(lambda: torch.nn.Linear(3, 3))

        def loss(self, batch, stage):
            loss, active = super().loss(batch, stage)
            return loss + self.extra(torch.ones(1, 3, device=self.device)).sum() * 1e-3, active

        def trainable(self, stage):
            t = torch.ones(self.n_members, dtype=torch.bool)
            if stage.name == "b":
                t[: self.extra_id] = False  # stage b trains only the extra module
            return t

    METHODS.register("_twostage")(TwoStage)
    try:
        from vflbench.training import pipeline

        run = resolve(
            RunConfig(
                dataset="synthetic",
                method="_twostage",
                test_missing=["none"],
                data_options={"n": 300},
                hp={"epochs": 1},
            )
        )
        inputs = pipeline.prepare(run, TEST_DEVICE)
        m = pipeline.build(run, inputs)
        w0 = m.extra.weight.detach().clone()
        from vflbench.training.trainer import fit

        hp = pipeline.stage_hp(run)
        m.stages = (Stage("a"),)
        fit(m, inputs.train, hp, pipeline.policy(run), inputs.prep.streams.seed_for)
        assert not torch.equal(w0, m.extra.weight)  # stage a trained the module
        flat, w1 = m.store.flat.detach().clone(), m.extra.weight.detach().clone()
        m.stages = (Stage("b"),)
        fit(m, inputs.train, {"b": hp["a"]}, pipeline.policy(run), inputs.prep.streams.seed_for)
        assert torch.equal(flat, m.store.flat) and not torch.equal(w1, m.extra.weight)  # stage b: only the module moved
    finally:
        METHODS._items.pop("_twostage")


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_experiment_files_take_plugins_method_options_and_labeled_runs(tmp_path):
    import shutil

    from vflbench.grids.experiment import load_experiment

    shutil.copy(__import__("pathlib").Path(__file__).parents[1] / "docs/examples/observed_mean.py", tmp_path / "om.py")
    (tmp_path / "om.py").write_text((tmp_path / "om.py").read_text().replace('"obsmean"', '"om_exp"'))
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "name: t\nplugins: [om.py]\nmethods: [om_exp, plug]\ntrain_missing: [none]\ntest_missing: [none]\nlabeled: "
        "50\naligned: 10\n"
        "method_options: {plug: {p_drop: 0.3}}\n"
        "datasets:\n  synthetic: {method_options: {om_exp: {min_observed: 2}}}\n"
    )
    e = load_experiment(exp)
    runs = {r.method: resolve(r) for r in e.runs}
    assert runs["om_exp"].method_options == {"min_observed": 2} and runs["plug"].method_options["p_drop"] == 0.3
    assert runs["plug"].labeled == 50 and runs["plug"].aligned == 10
    bad = tmp_path / "bad.yaml"
    bad.write_text(exp.read_text().replace("p_drop: 0.3", "p_drop: 3"))
    r = runner.invoke(app, ["sweep", str(bad), "--dry-run", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "must be in [0, 1)" in r.output


def test_methods_command_says_which_methods_take_a_mechanism():
    rows = json.loads(runner.invoke(app, ["methods", "--format", "json"]).output)
    by = {r["name"]: r for r in rows}
    assert by["laser"]["mechanisms"] and by["sum"]["sums_at_server"] and not by["laser"]["sums_at_server"]
    assert not by["local"]["mechanisms"] and "nothing crosses" in by["local"]["boundary_refusal"]
    r = runner.invoke(app, ["methods"], terminal_width=250)
    assert "mechanisms at the party-to-server boundary" in r.output and "Poisson Binomial" in r.output
    r = runner.invoke(app, ["methods", "laser"], terminal_width=250)
    assert r.exit_code == 0 and "--mechanism" in r.output and "yes" in r.output


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("command", [["methods"], ["attacks"], ["methods", "false1"], ["attacks", "inversion"]])
def test_listings_fit_the_terminal(command, width):
    """One line per method or attack, every line within the terminal's width (`COLUMNS=80 vflbench methods`: at
    most 80 lines), and one item's details on request."""
    r = runner.invoke(app, command, terminal_width=width, env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(x) for x in lines) <= width
    assert len(lines) <= 80
    if command == ["methods"]:
        from vflbench.methods import METHODS

        names = [x.split()[0] for x in lines if x.split()]
        assert all(n in names for n in METHODS.names())  # every registered method, one line each
    if command == ["methods", "false1"]:  # one method's options, stages and traits
        out = " ".join(r.output.split())
        for want in ("n_pred_samples=50", "stages", "--runtime processes", "no:", "a lost party"):
            assert want in out


def test_listing_an_unknown_name_names_the_choices():
    r = runner.invoke(app, ["methods", "lasr"])
    assert r.exit_code == 2 and "Unknown method 'lasr'" in r.output and "laser" in r.output
    r = runner.invoke(app, ["attacks", "inversoin"])
    assert r.exit_code == 2 and "inversion" in r.output
