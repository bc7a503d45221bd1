"""FedHSSL (the FALSE-VFL paper's fourth baseline), the trainer's alternating stage groups, the
optimiser's trainable span, and the LASER-VFL options of the controlled runs."""

from __future__ import annotations

import math
import zlib

import pytest
import torch
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.core.rng import Streams
from vflbench.methods import METHODS, MethodContext
from vflbench.methods.base import Epoch
from vflbench.methods.fedhssl import CROSS, LOCAL
from vflbench.nn.models import ModelSpec
from vflbench.training.trainer import (
    BlockData,
    StageHP,
    TrainPolicy,
    TrainSet,
    fit,
    make_optimizer,
    stage_groups,
)

from .helpers import batch

runner = CliRunner()
POLICY = TrainPolicy(False, True, False, False)


def make(name, k=3, c=3, seed=0, widths=None, hidden=(8, 5), **opts):
    ctx = MethodContext(
        k=k,
        n_classes=c,
        widths=widths or [4] * k,
        in_ch=1,
        model=ModelSpec("mlp", 6, hidden, 7),
        device=torch.device("cpu"),
        streams=Streams(seed),
        options=opts,
    )
    return METHODS.get(name)(ctx)


def trainset(k=3, n=24, seed=0, labeled_every=2):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, k, generator=g) > 0.3
    obs[: n // 3] = True  # some fully observed samples, labeled and not
    obs[~obs.any(1), 0] = True
    labeled = torch.zeros(n, dtype=torch.bool)
    labeled[::labeled_every] = True
    return TrainSet(
        BlockData.stacked(torch.randn(k, n, 4, generator=g)), torch.randint(0, 3, (n,), generator=g), obs, labeled
    )


def hp(epochs, lr=1e-2, opt="adam"):
    return StageHP(opt, lr, 0.0, 0.9 if opt == "sgd" else 0.0, 8, epochs)


def test_fedhssl_stages_alternate_epoch_by_epoch_over_their_own_samples():
    m = make("fedhssl")
    assert [s.name for s in m.stages] == ["cross", "local", "train"]
    assert stage_groups(m.stages) == [[0, 1], [2]]
    data = trainset()
    seen = {}
    orig = m.loss

    def spy(b, stage):
        seen.setdefault(stage.name, set()).update(b.idx.tolist())
        assert (b.y is None) == (not stage.labels)
        return orig(b, stage)

    m.loss = spy
    hist = fit(
        m,
        data,
        {"cross": hp(2, 0.02, "sgd"), "local": hp(2, 0.02, "sgd"), "train": hp(3)},
        POLICY,
        lambda s: zlib.crc32(s.encode()) % 1000,
    )
    assert hist.stage == ["cross", "local", "cross", "local", "train", "train", "train"]
    full, lab = data.obs.all(1), data.labeled
    assert seen["cross"] == set(full.nonzero().view(-1).tolist())  # fully observed, labeled or not
    assert seen["local"] == set(range(len(full)))  # every sample (each party on its observed ones)
    assert seen["train"] == set((full & lab).nonzero().view(-1).tolist())  # fully aligned labeled only


def test_stages_of_a_group_need_equal_epochs():
    m = make("fedhssl")
    with pytest.raises(VFLBenchError, match="equal epochs"):
        fit(m, trainset(), {"cross": hp(2), "local": hp(3), "train": hp(1)}, POLICY, lambda s: 0)


def test_each_fedhssl_stage_trains_only_its_networks():
    m = make("fedhssl")
    data = trainset()
    b = batch(data.blocks.batch(torch.arange(24)), data.obs)
    groups = {
        "cross": m.cross.member_ids + m.ssl_cross.member_ids,
        "local": m.bottom_ids + m.top_ids + m.ssl_local.member_ids,
    }
    for stage in (CROSS, LOCAL):
        m.store.begin()
        m.store.flat.grad = None
        loss, active = m.loss(b, stage)
        loss.backward()
        g = torch.zeros(m.n_members).index_add_(0, m.store.member_of, m.store.flat.grad.abs())
        assert set(active.nonzero().view(-1).tolist()) == set(groups[stage.name])
        others = [i for i in range(m.n_members) if i not in groups[stage.name]]
        assert (g[others] == 0).all() and (g[groups[stage.name]] > 0).all()
        assert set(m.trainable(stage).nonzero().view(-1).tolist()) == set(groups[stage.name])


def test_partial_model_aggregation_averages_the_chosen_part_only():
    for pma, shared, private in (
        ("top", ["local_top.w0", "ssl_local.proj0.w"], ["local_bottom.w0"]),
        ("bottom", ["local_bottom.w0"], ["local_top.w0", "ssl_local.proj0.w"]),
    ):
        m = make("fedhssl", pma=pma)
        m.store.begin()
        before = {n: m.store[n].detach().clone() for n in shared + private}
        m.end_epoch(Epoch(CROSS, 0, None, None, 1, False))  # not after a cross-party epoch
        m.store.begin()
        assert all(torch.equal(m.store[n], before[n]) for n in before)
        m.end_epoch(Epoch(LOCAL, 0, None, None, 1, False))
        m.store.begin()
        for n in shared:
            w = m.store[n]
            assert torch.allclose(w, before[n].mean(0, keepdim=True).expand_as(w))
        for n in private:
            assert torch.equal(m.store[n], before[n])
    with pytest.raises(VFLBenchError, match="pma=bottom"):
        make("fedhssl", widths=[4, 3, 4], pma="bottom")
    make("fedhssl", widths=[4, 3, 4], pma="top")  # the official code's set works for any widths


def test_fedhssl_prediction_zero_imputes_missing_parties():
    m = make("fedhssl", pretrain="none")
    m.train(False)
    m.store.begin()
    x = torch.randn(3, 5, 4)
    obs = torch.tensor([[1, 0, 1]] * 5, dtype=torch.bool)
    p1 = m.logits(x, obs.T)
    x2 = x.clone()
    x2[1] = torch.randn(5, 4) * 100  # the missing party's features cannot matter
    assert torch.allclose(p1, m.logits(x2, obs.T))
    r = m.representations(x, obs.T)
    assert (r[1] == 0).all() and torch.allclose(r[0], 0.5 * (m.cross(x)[0] + m.local(x)[0]))
    pred = m.predict(batch(x, obs))
    assert pred.valid.all() and pred.counted.all()


def test_fedhssl_finetune_labeled_trains_on_every_labeled_sample_with_its_observed_blocks():
    m = make("fedhssl", pretrain="none", finetune="labeled")
    (stage,) = m.stages
    assert stage.samples == "labeled"
    data = trainset()
    seen = set()
    orig = m.loss

    def spy(b, st):
        seen.update(b.idx.tolist())
        return orig(b, st)

    m.loss = spy
    fit(m, data, {"train": hp(2)}, POLICY, lambda s: 0)
    assert seen == set(data.labeled.nonzero().view(-1).tolist())  # partly observed labeled samples too
    m.loss = orig
    # the loss is the mean CE over the batch, each sample fused from the parties that observe it
    x = torch.randn(3, 6, 4)
    obs = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 0]], dtype=torch.bool)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    m.store.begin()
    loss, active = m.loss(batch(x, obs, y), stage)
    want = torch.nn.functional.cross_entropy(m.logits(x, obs.T), y)
    assert torch.allclose(loss, want) and bool(active.any())
    aligned = make("fedhssl", pretrain="none")
    aligned.store.begin()
    loss_a, _ = aligned.loss(batch(x, obs, y), aligned.stages[0])
    full = obs.all(1)
    assert torch.allclose(loss_a, torch.nn.functional.cross_entropy(aligned.logits(x[:, full], obs[full].T), y[full]))


def test_fedhssl_absent_fills_a_missing_party_from_the_mean_or_the_present_parties():
    x = torch.randn(3, 5, 4)
    obs = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1], [0, 0, 1]], dtype=torch.bool)
    zero = make("fedhssl", pretrain="none")
    pm = make("fedhssl", pretrain="none", absent="present_mean")
    for m in (zero, pm):
        m.train(False)
        m.store.begin()
    rz, rp = zero.representations(x, obs.T), pm.representations(x, obs.T)
    assert torch.equal(rz[obs.T], rp[obs.T])  # present parties unchanged
    for i in range(5):
        present = obs[i].nonzero().view(-1)
        for j in (~obs[i]).nonzero().view(-1).tolist():
            assert (rz[j, i] == 0).all()
            assert torch.allclose(rp[j, i], rz[present, i].mean(0))
    # absent=mean: the previous fine-tuning epoch's mean representation of each party, over its observed samples
    m = make("fedhssl", pretrain="none", absent="mean")
    m.train(False)  # no dropout/normalisation drift between the two passes
    m.store.begin()
    (stage,) = m.stages
    y = torch.tensor([0, 1, 2, 0, 1])
    full = torch.ones(5, 3, dtype=torch.bool)
    with torch.no_grad():
        m.loss(batch(x, full, y), stage)  # aligned fine-tuning: only fully observed rows count
    before = m.mean_rep.clone()
    assert (before == 0).all()  # until an epoch ends
    m.end_epoch(Epoch(stage, 0, None, None, 1, False))
    h = zero.representations(x, torch.ones(3, 5, dtype=torch.bool))  # same seed, same networks
    assert torch.allclose(m.mean_rep, h.mean(1), atol=1e-6)
    r = m.representations(x, obs.T)
    for i in range(5):
        for j in (~obs[i]).nonzero().view(-1).tolist():
            assert torch.allclose(r[j, i], m.mean_rep[j])
    m.end_epoch(Epoch(stage, 1, None, None, 1, False))  # an epoch with no samples keeps the last mean
    assert torch.allclose(m.mean_rep, h.mean(1), atol=1e-6)


def test_fedhssl_block_dropout_drops_observed_blocks_at_its_rate_but_never_all_and_only_in_training():
    m = make("fedhssl", k=4, widths=[4] * 4, pretrain="none", finetune="labeled", block_dropout=0.4)
    (stage,) = m.stages
    m.store.begin()
    n = 4000
    x = torch.randn(4, n, 4)
    obs = torch.rand(n, 4, generator=torch.Generator().manual_seed(1)) > 0.2
    obs[~obs.any(1), 0] = True
    used = []
    orig = m.representations
    m.representations = lambda blocks, use: used.append(use.clone()) or orig(blocks, use)
    b = batch(x, obs, torch.randint(0, 3, (n,)))
    m.draw(b, stage)  # the batch's randomness is drawn before the loss
    with torch.no_grad():
        m.loss(b, stage)
    (use,) = used
    assert not (use & ~obs.T).any()  # only observed blocks are used
    assert use.any(0).all()  # every sample keeps at least one block
    multi = obs.sum(1) >= 3  # with several blocks the never-all rule rarely binds: the rate is close to p
    rate = 1 - use[:, multi].sum() / obs.T[:, multi].sum()
    assert 0.36 < float(rate) < 0.42
    m.train(False)
    used.clear()
    m.predict(batch(x[:, :50], obs[:50]))
    assert torch.equal(used[0], obs[:50].T)  # prediction sees every observed block
    with pytest.raises(VFLBenchError, match="block_dropout"):
        METHODS.get("fedhssl").option("block_dropout").parse(1.0, "fedhssl")


def test_fedhssl_options_and_party_count_are_checked():
    with pytest.raises(VFLBenchError, match="at least 2 parties"):
        make("fedhssl", k=1)
    cls = METHODS.get("fedhssl")
    assert cls.validate_options({"pretrain": "simsiam", "local_ratio": 0.0, "constraint_ratio": 0.0})
    assert [s.name for s in cls.stages_for({"pretrain": "none"})] == ["train"]


def test_the_optimiser_steps_only_the_trainable_span_with_the_same_numbers():
    results = []
    for spans in (True, False):
        m = make("fedhssl")
        data = trainset()
        stage = m.stages[2]
        opt = make_optimizer(m, stage, hp(1), POLICY)
        if not spans:
            opt.spans = [None] * len(opt.spans)
        else:
            assert opt.spans[0] is not None and opt.spans[0].stop - opt.spans[0].start < m.store.n_params()
        for _ in range(3):
            m.store.begin()
            b = batch(data.blocks.batch(torch.arange(24)), torch.ones(24, 3, dtype=torch.bool), data.y)
            loss, active = m.loss(b, stage)
            opt.zero_grad()
            loss.backward()
            opt.step(active)
        results.append(m.store.flat.detach().clone())
    assert torch.equal(results[0], results[1])


def lmake(**opts):
    ctx = MethodContext(
        k=3,
        n_classes=3,
        widths=[4] * 3,
        in_ch=1,
        model=ModelSpec("mlp", 6, (8,)),
        device=torch.device("cpu"),
        streams=Streams(0),
        options={"heads": "one", **opts},
    )
    return METHODS.get("laser")(ctx)


def test_laser_zero_imputation_fuses_by_the_mean_over_all_parties():
    m = lmake(missing="zero")
    m.store.begin()
    x = torch.randn(3, 4, 4)
    obs = torch.tensor([[1, 0, 1], [1, 1, 1], [0, 1, 0], [1, 0, 0]], dtype=torch.bool)
    emb = m.ext(x)
    want = m.head((emb * obs.T[:, :, None].float()).sum(0)[None] / 3)
    assert torch.allclose(m.exact_logits(x, obs), want, atol=1e-6)
    ref = lmake()  # subset fusion divides by the number of observed blocks instead
    ref.store.begin()
    assert torch.allclose(
        ref.exact_logits(x, obs),
        ref.head(((ref.ext(x) * obs.T[:, :, None].float()).sum(0) / obs.sum(1, keepdim=True))[None]),
        atol=1e-6,
    )


def test_laser_active_head_trains_only_on_subsets_with_the_active_block():
    m = lmake(heads="active")
    assert m.n_heads == 1
    x = torch.randn(3, 4, 4)
    y = torch.tensor([0, 1, 2, 0])
    no_active = torch.tensor([[0, 1, 1], [0, 1, 0], [0, 0, 1], [0, 1, 1]], dtype=torch.bool)
    m.store.begin()
    loss, active = m.loss(batch(x, no_active, y), m.stages[0])
    assert not active[m.k :].any() and float(loss.detach()) == 0.0  # no subset holds block 0: nothing to learn from
    agg, w, *_ = m._tasks(batch(x, torch.ones(4, 3, dtype=torch.bool), y))
    drawn = agg[..., 0] > 0  # every drawn subset (weight > 0) contains block 0
    assert bool(drawn[w > 0].all())


def test_laser_freeze_keeps_pretrained_extractors_and_samples_aligned_trains_on_aligned():
    m = lmake(pretrain="simsiam", freeze=True)
    t = m.trainable(m.stages[1])
    heads = [i for i in range(m.n_members) if i not in m.ext.member_ids + m.ssl.member_ids]
    assert not t[m.ext.member_ids].any() and not t[m.ssl.member_ids].any() and t[heads].all()
    assert m.trainable(m.stages[0])[m.ext.member_ids].all()  # pretraining trains the extractors
    assert METHODS.get("laser").validate_options({"freeze": True, "pretrain": "none"})
    assert lmake(samples="aligned").stages[0].samples == "aligned"


def test_sweep_methods_subset(tmp_path):
    r = runner.invoke(
        app,
        [
            "sweep",
            "experiments/false_tables.yaml",
            "--datasets",
            "isolet",
            "--methods",
            "fedhssl",
            "--train-missing",
            "mcar:0.2",
            "--dry-run",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "10 runs" in r.output and "laser" not in r.output
    r = runner.invoke(
        app,
        ["sweep", "experiments/false_tables.yaml", "--methods", "fedhsl", "--dry-run", "--out", str(tmp_path / "o")],
    )
    assert r.exit_code != 0 and "--methods fedhsl not in this experiment" in r.output


def test_input_zero_imputation_is_an_evaluation_variant_of_the_zero_imputing_baselines():
    from vflbench.methods.base import zero_missing_inputs

    x = torch.randn(3, 5, 4)
    use = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 0, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    z = zero_missing_inputs(x, use)
    assert (z[1, ::2] == 0).all() and torch.equal(z[0], x[0]) and torch.equal(z[1, 1], x[1, 1])
    for m in (
        make("fedhssl", pretrain="none"),
        METHODS.get("svfl")(
            MethodContext(
                k=3,
                n_classes=3,
                widths=[4] * 3,
                in_ch=1,
                model=ModelSpec("mlp", 6, (8,)),
                device=torch.device("cpu"),
                streams=Streams(0),
                options={"incomplete": "zero", "fusion": "concat"},
            )
        ),
    ):
        assert m.eval_variants == ("impute_input",)
        m.train(False)
        m.store.begin()
        u = use if m.name == "fedhssl" else use.T  # FedHSSL's logits take [K, B], Vanilla VFL's [B, K]
        m.use_variant("impute_input")
        a = m.logits(x, u)
        assert torch.allclose(a, m.logits(z, torch.ones_like(u)))  # the missing block is encoded from zeros
        m.use_variant(None)
        assert not torch.allclose(a, m.logits(x, u))  # by default its representation is zero instead
    plain = METHODS.get("svfl")(
        MethodContext(
            k=3,
            n_classes=3,
            widths=[4] * 3,
            in_ch=1,
            model=ModelSpec("mlp", 6, (8,)),
            device=torch.device("cpu"),
            streams=Streams(0),
        )
    )
    assert plain.eval_variants == ()  # random guesses for incomplete samples: nothing to impute


@pytest.mark.parametrize("name", ["svfl", "laser", "plug"])
def test_simsiam_heads_are_outside_the_supervised_optimiser_with_the_same_numbers(name):
    """The supervised stage's optimiser skips the SimSiam heads (and the SimSiam stage everything but
    the extractors and heads); the parameters after training are bit-identical to stepping all."""
    out = []
    for spans in (True, False):
        ctx = MethodContext(
            k=3,
            n_classes=3,
            widths=[4] * 3,
            in_ch=1,
            model=ModelSpec("mlp", 6, (8,)),
            device=torch.device("cpu"),
            streams=Streams(0),
            options={"pretrain": "simsiam"},
        )
        m = METHODS.get(name)(ctx)
        t = m.trainable(m.stages[1])
        assert not t[m.ssl.member_ids].any() and t[m.ext.member_ids].all()
        assert set(m.trainable(m.stages[0]).nonzero().view(-1).tolist()) == set(m.ext.member_ids + m.ssl.member_ids)
        data = trainset()
        if not spans:
            m.trainable = lambda stage, m=m: torch.ones(m.n_members, dtype=torch.bool)
        fit(m, data, {"pretrain": hp(2, 0.02, "sgd"), "train": hp(2)}, POLICY, lambda s: zlib.crc32(s.encode()) % 1000)
        out.append(m.store.flat.detach().clone())
    assert torch.equal(out[0], out[1])


def test_ssl_width_sets_the_simsiam_heads_per_party():
    """ssl_width (default 512, the FedHSSL code's) is the per-party projector's width: the heads hold, per party and
    per SimSiam, cut*w + 2 w^2 + w*(w/4) + (w/4)*w weights plus biases, so they grow as K x w^2 (docs/SCALING.md)."""

    def heads(m):
        return sum(math.prod(m.store._specs[n][1]) for n in m.store.names() if ".proj" in n or ".pred" in n)

    name = "fedhssl"
    per = {w: heads(make(name, k=4, **({} if w == 512 else {"ssl_width": w}))) for w in (512, 64)}
    n_ssl = 2  # FedHSSL: a cross-party and a local SimSiam

    def expected(w, cut=6):  # make(): ModelSpec("mlp", cut=6, ...)
        h = w // 4
        return n_ssl * 4 * (cut * w + w + 2 * (w * w + w) + w * h + h + h * w + w)

    assert per == {512: expected(512), 64: expected(64)}
    spec = next(o for o in METHODS.get(name).option_specs if o.name == "ssl_width")
    assert spec.check(2) == "must be >= 4" and spec.check(64) is None
