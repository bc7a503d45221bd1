"""The method contract: every registered method, including plugins and any method added later,
goes through the same checks (in the spirit of scikit-learn's ``check_estimator``). A new method
must pass with no edit to this file:

    VFLBENCH_PLUGINS=path/to/my_method.py pytest tests/test_method_contract.py

The docs' example plugin (docs/examples/observed_mean.py) is loaded here, so the suite also proves
that a method written outside the package can be registered and passes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from _testenv import TEST_DEVICE

from vflbench.core import plugins
from vflbench.core.metrics import F1_RULES, compute_metrics
from vflbench.core.rng import Streams
from vflbench.methods import METHODS, Method, MethodContext, Option
from vflbench.nn.models import ModelSpec
from vflbench.privacy.channel import Channel
from vflbench.runs.config import RunConfig, config_from_manifest, resolve
from vflbench.training.trainer import BlockData, StageHP, TrainPolicy, TrainSet, fit, fit_at_once, predict

from .helpers import batch

plugins.load_file(Path(__file__).resolve().parents[1] / "docs" / "examples" / "observed_mean.py")


def _variants(name: str) -> dict[str, dict]:
    """Each method as registered, plus the option sets that change its maths and that the registry
    and protocols already name: its options under every protocol that sets them apart from the
    defaults, and each choice of its ``pretrain`` option. Nothing here lists methods by hand."""
    from vflbench.runs.protocols import PROTOCOLS

    cls = METHODS.get(name)
    out = {name: {}}
    for proto in PROTOCOLS.values():
        opts = {
            o.name: getattr(proto, o.protocol)
            for o in cls.option_specs
            if o.protocol and getattr(proto, o.protocol) != o.default
        }
        opts = {
            k: v for k, v in opts.items() if k not in ("laser_subsets", "plug_denominator", "granularity")
        }  # evaluation-only choices
        if opts and opts not in out.values():
            out[f"{name}[{proto.name}]"] = opts
    for o in cls.option_specs:
        if o.name == "pretrain":
            for choice in o.choices:
                if choice != o.default:
                    out[f"{name}[pretrain={choice}]"] = {"pretrain": choice}
    return out


CASES = {case: (name, opts) for name in METHODS.names() for case, opts in _variants(name).items()}
ALL = list(CASES)


def cls_of(case: str) -> type[Method]:
    return METHODS.get(CASES[case][0])


def make(name: str, k: int = 3, c: int = 3, image: bool = False, seed: int = 0, options=None) -> Method:
    """Build a method (or a variant, ``name[...]``, of :data:`CASES`) on tiny synthetic shapes. A method that trains on
    the whole set at once (trees) is also fitted, on a few rounds of tabular data, so that it can predict."""
    m = _build(name, k, c, image, seed, options)
    if m.trains_whole and not image:
        fit_whole(m, k, c, seed)
    return m


def fit_whole(m: Method, k: int, c: int, seed: int = 0, n: int = 96):
    x = blocks(k, n, False, seed=7)
    y = (x[:, :, 0].sum(0) > 0).long() if c == 2 else (x[:, :, 0].sum(0) * 2).long().clamp(0, c - 1)
    return fit_at_once(m, TrainSet(BlockData.stacked(x), y, mixed_obs(k, n, seed=8)), balanced=False)


def _build(name, k, c, image, seed, options) -> Method:
    base, opts = CASES.get(name, (name, {}))
    if METHODS.get(base).trains_whole:
        opts = {"trees": 3, "max_depth": 3, **opts}
    model = ModelSpec("cnn-small", 8) if image else ModelSpec("mlp", 6, (8,))
    ctx = MethodContext(
        k=k,
        n_classes=c,
        widths=[4] * k,
        in_ch=1,
        model=model,
        device=torch.device("cpu"),
        streams=Streams(seed),
        options={**opts, **(options or {})},
        positive_class=1 if c == 2 else None,
    )
    return METHODS.get(base)(ctx)


def blocks(k: int, n: int, image: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if image:
        return [torch.randn(n, 1, 4, 4, generator=g) for _ in range(k)]
    return torch.randn(k, n, 4, generator=g)


def mixed_obs(k: int, n: int, seed: int = 0) -> torch.Tensor:
    """Random patterns plus one fully observed and one all-missing row."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, k, generator=g) < 0.6
    obs[0] = True
    obs[1] = False
    return obs


def member_grad(method: Method) -> torch.Tensor:
    """Sum of |gradient| per member, over the flat store and any module parameters."""
    out = torch.zeros(method.n_members, dtype=torch.float64)
    if method.store.flat is not None and method.store.flat.grad is not None:
        out.index_add_(0, method.store.member_of, method.store.flat.grad.abs().double())
    for p, mid in method.module_params():
        if p.grad is not None:
            out[mid] += p.grad.abs().sum().double()
    return out


@pytest.mark.parametrize("name", ALL)
def test_declares_what_the_runner_reads(name):
    cls = cls_of(name)
    assert (
        cls.name == CASES[name][0]
        and isinstance(cls.display, str)
        and cls.display
        and isinstance(cls.paper, str)
        and cls.paper
    )
    assert cls.f1_rule in F1_RULES
    assert cls.stages and len({s.name for s in cls.stages}) == len(cls.stages)
    stages = cls.stages_for({**{o.name: o.default for o in cls.option_specs}, **CASES[name][1]})
    assert stages and len({s.name for s in stages}) == len(stages)
    for o in cls.option_specs:
        assert isinstance(o, Option) and o.help
        assert o.parse(o.default, name) == o.default  # the default is a valid value of its own type


@pytest.mark.parametrize("kind", ["tabular", "image"])
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("name", ALL)
def test_builds_and_predicts_in_shape(name, k, kind):
    image = kind == "image"
    if image and cls_of(name).trains_whole:
        pytest.skip("gradient-boosted trees read tabular blocks (an image run is refused before training)")
    m = make(name, k=k, image=image)
    n = 12
    obs = mixed_obs(k, n)
    m.train(False)
    m.store.begin()
    p = m.predict(batch(blocks(k, n, image), obs))
    assert p.preds.ndim == 2 and p.preds.shape[1] == n and p.preds.dtype == torch.long
    assert ((p.preds >= 0) & (p.preds < m.c)).all()
    assert p.valid.shape == p.preds.shape and p.valid.dtype == torch.bool
    assert p.counted.shape == (n,) and p.counted.dtype == torch.bool
    assert not bool(p.counted[1])  # the all-missing sample is never scored
    assert p.scores is None  # three classes: no positive-class score


@pytest.mark.parametrize("name", ALL)
def test_loss_is_finite_and_gradients_reach_only_active_members(name):
    if cls_of(name).trains_whole:  # no minibatch loss: its rounds' losses are finite, and a party never observed is
        m = _build(name, 3, 3, False, 0, None)  # never split on
        n = 96
        x = blocks(3, n, False, seed=7)
        obs = mixed_obs(3, n, seed=8)
        obs[:, 2] = False
        hist = fit_at_once(m, TrainSet(BlockData.stacked(x), (x[:, :, 0].sum(0) > 0).long(), obs), balanced=False)
        assert hist.loss and all(math.isfinite(v) for v in hist.loss)
        with torch.no_grad():
            a = m.predict(batch(x[:, :24], obs[:24]))
            x2 = x[:, :24].clone()
            x2[2] = torch.randn_like(x2[2])  # party 2's columns changed: no tree reads them
            b = m.predict(batch(x2, torch.ones(24, 3, dtype=torch.bool)))
            c = m.predict(batch(x[:, :24], torch.ones(24, 3, dtype=torch.bool)))
        assert a.preds.shape == (1, 24) and torch.equal(b.preds, c.preds)
        return
    n = 16
    y = torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(2))
    never_2 = mixed_obs(3, n, seed=1)
    never_2[:, 2] = False  # party 2 never observed: whatever depends on it must not train
    never_2[0] = torch.tensor([True, True, False])
    for stage in make(name, k=3).stages:  # every stage of the run (a pretraining stage included)
        trained = 0
        for obs in (mixed_obs(3, n, seed=1), never_2):
            m = make(name, k=3)
            m.train(True)
            m.store.begin()
            loss, active = m.loss(batch(blocks(3, n, False), obs, y if stage.labels else None), stage)
            assert active.shape == (m.n_members,) and active.dtype == torch.bool
            if (
                loss is None or not active.any()
            ):  # nothing trains on this batch (e.g. Standard VFL without complete samples)
                continue
            assert torch.isfinite(loss) and loss.ndim == 0
            loss.backward()
            g = member_grad(m)
            assert (g[~active] == 0).all(), (
                f"stage {stage.name}: inactive members received gradient: {(~active).nonzero().view(-1).tolist()}"
            )
            assert g[active].sum() > 0
            trained += 1
        assert trained >= 1, (
            f"stage {stage.name}: the method trained on neither a mixed batch nor one with a missing party"
        )


@pytest.mark.parametrize("name", ALL)
def test_all_missing_samples_are_handled(name):
    m = make(name, k=3)
    n = 6
    obs = torch.zeros(n, 3, dtype=torch.bool)
    b = batch(blocks(3, n, False), obs, torch.zeros(n, dtype=torch.long))
    m.store.begin()
    if not m.trains_whole:
        loss, active = m.loss(b, m.stages[0])
        assert loss is None or not bool(active.any()) or torch.isfinite(loss)
    with torch.no_grad():
        p = m.predict(batch(blocks(3, n, False), obs))
    assert not bool(p.counted.any())
    met = compute_metrics(
        p.preds.numpy(),
        p.valid.numpy(),
        None,
        p.counted.numpy(),
        np.zeros(n, dtype=int),
        rule=m.f1_rule,
        n_classes=3,
        positive_class=None,
    )
    assert met["n_counted"] == 0


@pytest.mark.parametrize("name", ALL)
def test_binary_scores_follow_the_metric_rules(name):
    m = make(name, k=3, c=2)
    n = 20
    obs = mixed_obs(3, n, seed=3)
    m.store.begin()
    with torch.no_grad():
        p = m.predict(batch(blocks(3, n, False), obs))
    assert p.scores is not None and p.scores.shape == p.preds.shape
    assert ((p.scores >= 0) & (p.scores <= 1)).all()
    y = np.arange(n) % 2
    met = compute_metrics(
        p.preds.numpy(),
        p.valid.numpy(),
        p.scores.numpy(),
        p.counted.numpy(),
        y,
        rule=m.f1_rule,
        n_classes=2,
        positive_class=1,
    )
    assert 0 <= met["n_counted"] <= int(p.counted.sum()) and met["n_test"] == n
    assert 0 <= met["accuracy"] <= 100 and 0 <= met["f1"] <= 100


def _train(name: str, seed: int, epochs: int = 2):
    k, n = 3, 96
    if cls_of(name).trains_whole:
        m = _build(name, k, 3, False, seed, None)
        hist = fit_whole(m, k, 3, seed)
        x = blocks(k, n, False, seed=7)
        return m, hist, predict(m, BlockData.stacked(x), mixed_obs(k, n, seed=8), 64)
    m = make(name, k=k, seed=seed)
    x = blocks(k, n, False, seed=7)
    y = (x[:, :, 0].sum(0) > 0).long()
    data = TrainSet(BlockData.stacked(x), y, mixed_obs(k, n, seed=8))
    hp = {s.name: StageHP("adam", 1e-2, 0.0, 0.0, 32, epochs) for s in m.stages}
    hist = fit(m, data, hp, TrainPolicy(False, True, False, False), Streams(seed).seed_for)
    preds = predict(m, data.blocks, data.obs, 64)
    return m, hist, preds


@pytest.mark.parametrize("name", ALL)
def test_same_seed_gives_identical_numbers(name):  # one epoch: every stage steps, with each of its members
    a, ha, pa = _train(name, 0, epochs=1)
    b, hb, pb = _train(name, 0, epochs=1)
    assert ha.loss == hb.loss
    assert torch.equal(a.store.flat, b.store.flat)
    for x, y in zip(pa, pb, strict=True):
        assert x is None and y is None or np.array_equal(x, y)
    if cls_of(name).trains_whole:  # deterministic given the data: a seed moves only the split, masks and draws
        return
    c, _, _ = _train(name, 1, epochs=1)
    assert not torch.equal(a.store.flat, c.store.flat)


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
@pytest.mark.parametrize("name", ALL)
def test_learns_an_easy_task_above_chance(name):
    from vflbench.training.pipeline import execute

    base, opts = CASES[name]
    cls = cls_of(name)
    # a self-supervised stage only has to hand over its extractors: 1 epoch of it, 8 of the supervised stage (with 1
    # epoch every SimSiam variant and FedHSSL still scores 100%, as with 2, in half the stage's time; measured), in
    # batches of 512 as the presets' SimSiam stages (the same 100% as batches of 64, in 3 steps instead of 24)
    ssl = {
        st.name: {"epochs": 1, "batch_size": 512}
        for st in cls.stages_for({k: str(v) for k, v in opts.items()})
        if not st.labels and st.hp == "simsiam"
    }
    n = 1500  # every method learns it far above 80% (93.7-100%)
    semi = {"labeled": 2 * n // 5, "aligned": 100} if cls.needs_labeled else {}
    cfg = RunConfig(
        dataset="synthetic",
        method=base,
        method_options={k: str(v) for k, v in {**cls.smoke_options, **opts}.items()},
        train_missing="mcar:0.1",
        test_missing=["none", "mcar:0.3"],
        seed=0,
        data_options={"n": n, "separation": 1.5},
        hp={**({} if cls.trains_whole else {"epochs": 8}), "lr": 3e-3, **cls.smoke_hp},  # (trees grow trees=N)
        settings=semi,
        stage_hp=ssl,
    )
    rows, _ = execute(resolve(cfg), device=TEST_DEVICE)
    acc = {r["test_missing"]: r["value"] for r in rows if r["metric"] == "accuracy"}
    assert acc["none"] > 80, acc  # chance is 50%


def _non_default(o: Option):
    if o.choices is not None:
        return next(c for c in o.choices if c != o.default)
    candidates = {
        bool: lambda d: [not d],
        int: lambda d: [d + 1, 2],
        float: lambda d: [d + 0.25, d * 0.5, 0.5],
        str: lambda d: [d + "x"],
    }[o.type](o.default)
    for v in candidates:
        try:
            return o.parse(v, "?")
        except Exception:
            continue
    return o.default


@pytest.mark.parametrize("name", METHODS.names())  # each method once: every option takes a non-default value here
def test_options_round_trip_through_the_manifest(name):
    cls = METHODS.get(name)
    candidates = {o.name: _non_default(o) for o in cls.option_specs if o.type is not str or o.choices is not None}
    chosen: dict = {}  # every non-default value that the method's cross-option checks allow together
    for key, value in candidates.items():
        if cls.validate_options({**{o.name: o.default for o in cls.option_specs}, **chosen, key: value}) is None:
            chosen[key] = value
    semi = {"labeled": 50} if cls.needs_labeled else {}
    run = resolve(
        RunConfig(
            dataset="synthetic", method=name, method_options={k: str(v) for k, v in chosen.items()}, settings=semi
        )
    )
    assert {k: run.method_options[k] for k in chosen} == chosen
    assert all(run.option_sources[k] == "user" for k in chosen)
    assert set(run.method_options) == {o.name for o in cls.option_specs}
    manifest = json.loads(json.dumps({"config": run.to_dict()}))
    again = resolve(config_from_manifest(manifest))
    assert again.method_options == run.method_options and again.key == run.key


class _Zero(Channel):
    def transform(self, reps, sent, party_of):
        return torch.zeros_like(reps)


@pytest.mark.parametrize("name", ALL)
def test_party_to_server_hook_sees_every_representation_that_crosses(name):
    if cls_of(name).trains_whole:
        pytest.skip("trees send no representation: SecureBoost's messages are counted by its own protocol")
    k, n = 3, 24
    obs = torch.ones(n, k, dtype=torch.bool)  # complete samples: no random guessing anywhere
    x1, x2 = blocks(k, n, False, seed=1), blocks(k, n, False, seed=2)

    def preds(x, channel_cls):
        m = make(name, k=k, seed=0)
        m.channel = channel_cls(k)
        m.store.begin()
        with torch.no_grad():
            p = m.predict(batch(x, obs))
        m.channel.commit("eval", backward=False)
        return p, m.channel

    p1, ch = preds(x1, Channel)
    p2, _ = preds(x2, Channel)
    if cls_of(name).local_only:
        assert ch.calls == 0 and ch.summary()["bytes_eval_up"] == 0
        return
    assert ch.calls > 0 and ch.summary()["bytes_eval_up"] > 0
    z1, _ = preds(x1, _Zero)
    z2, _ = preds(x2, _Zero)
    # With every crossing representation replaced by zeros, the server's output cannot depend on the data.
    assert torch.equal(z1.preds, z2.preds), "some representation reached the server without passing through send()"


@pytest.mark.parametrize("name", ALL)
def test_training_traffic_is_counted_per_party(name):
    m, hist, _ = _train(name, 0, epochs=1)
    s = m.channel.summary()
    assert len(s["bytes_train_up_per_party"]) == 3
    if cls_of(name).local_only or cls_of(name).runtime_refusal and cls_of(name).trains_whole:  # (gbdt: no parties)
        assert s["bytes_train_up"] == 0
    ex = m.channel.extras()
    assert ex["comm_bytes_up"] == s["bytes_train_up"] and ex["comm_bytes_down"] == s["bytes_train_down"]
    if type(m.channel) is Channel:  # float32 both ways: gradients come down only for what went up
        assert ex["comm_bytes_down"] <= ex["comm_bytes_up"]
    assert ex["comm_bytes_down"] == 0 or ex["comm_bytes_up"] > 0  # gradients come down only for what went up


@pytest.mark.parametrize("name", [n for n in METHODS.names() if METHODS.get(n).needs_labeled])
def test_semi_supervised_methods_refuse_a_run_without_labeled(name):
    from vflbench.core.errors import VFLBenchError

    with pytest.raises(VFLBenchError, match="--labeled"):
        resolve(RunConfig(dataset="synthetic", method=name))


# ---------------------------------------------------------------- mechanisms at the party-to-server boundary
MECHANISMS = ("npq", "pbm:b=16,beta=0.2,bound=tanh", "ldp:sigma=0.5")
BOUNDARY_CASES = [(case, mech) for case in ALL if cls_of(case).boundary_refusal is None for mech in MECHANISMS]


def _train_with(name: str, mechanism: str | None, seed: int = 0, epochs: int = 2):
    from vflbench.privacy.mechanisms import attach, parse_mechanism

    k, n = 3, 96
    m = make(name, k=k, seed=seed)
    if mechanism is not None:
        attach(m, parse_mechanism(mechanism))
    x = blocks(k, n, False, seed=7)
    y = (x[:, :, 0].sum(0) > 0).long()
    data = TrainSet(BlockData.stacked(x), y, mixed_obs(k, n, seed=8))
    # a stage without labels (SimSiam, FedHSSL, FALSE-VFL's first) trains one epoch: what is checked holds for any
    # number of its epochs (at most 2 releases per sample, from the supervised stage's 2), and it is the slow part
    hp = {s.name: StageHP("adam", 1e-2, 0.0, 0.0, 32, epochs if s.labels else 1) for s in m.stages}
    hist = fit(m, data, hp, TrainPolicy(False, True, False, False), Streams(seed).seed_for)
    return m, hist, predict(m, data.blocks, data.obs, 64), data


@pytest.mark.parametrize("name,mechanism", BOUNDARY_CASES)
def test_a_mechanism_wraps_the_boundary_of_every_method_that_claims_support(name, mechanism):
    """Every method with no ``boundary_refusal`` trains under every mechanism: finite losses, the same
    numbers for the same seed, an accountant that charged each training sample at most once per epoch
    with the kind of release the method makes; ``npq`` changes nothing at all."""
    m, hist, preds, data = _train_with(name, mechanism)
    assert all(np.isfinite(hist.loss))
    again, hist2, preds2, _ = _train_with(name, mechanism)
    assert hist.loss == hist2.loss and torch.equal(m.store.flat, again.store.flat)
    if mechanism == "npq":
        plain, hist0, preds0, _ = _train_with(name, None)
        assert hist.loss == hist0.loss and torch.equal(m.store.flat, plain.store.flat)
        return
    acc = m.boundary.accountant
    assert acc is not None and acc.spec.release == ("sum" if cls_of(name).sums_at_server else "each")
    per_sample = acc.releases[:, 1:].sum(1)
    assert int(per_sample.max()) <= 2 and int(per_sample.sum()) > 0  # 2 epochs, each sample in one batch per epoch
    eps = acc.get_epsilon(1e-5, "feature_record")
    assert 0 < eps < math.inf
    ex = m.boundary.extras()
    assert ex["privacy_upper_bound"] and ex["epsilon_feature_record_no_local_training"] == eps


@pytest.mark.parametrize("name", [c for c in ALL if cls_of(c).boundary_refusal is not None])
def test_a_method_that_cannot_carry_a_mechanism_refuses_it_before_any_work(name):
    from vflbench.core.errors import VFLBenchError

    cls = cls_of(name)
    semi = {"labeled": 50} if cls.needs_labeled else {}
    with pytest.raises(VFLBenchError, match="does not take a mechanism"):
        resolve(RunConfig(dataset="synthetic", method=CASES[name][0], settings={"mechanism": "pbm:beta=0.1", **semi}))
