import math

import numpy as np
import pytest
import torch
from _testenv import TEST_DEVICE

from vflbench.core.rng import Streams
from vflbench.methods import METHODS, Batch, MethodContext
from vflbench.methods.base import Epoch, cross_entropy, gap_signs
from vflbench.methods.combinatorial import pattern_ids
from vflbench.methods.ensemble import majority_vote
from vflbench.methods.laser import laser_weights
from vflbench.nn.models import ModelSpec, ParamStore
from vflbench.nn.optim import MaskedOptimizer, cosine_lr

from .helpers import STAGE, batch, train_step
from .laser_tables import sample_subsets, subset_table


def ctx(k=3, c=3, options=None, width=4):
    return MethodContext(
        k=k,
        n_classes=c,
        widths=[width] * k,
        in_ch=1,
        model=ModelSpec("mlp", 6, (8,)),
        device=torch.device("cpu"),
        streams=Streams(0),
        options=options or {},
        positive_class=1 if c == 2 else None,
    )


def subsets(mask_bits, k):
    return [s for s in range(1, 2**k) if s & mask_bits == s]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_laser_table_sampling_is_exactly_unbiased(k):
    """E[sum_i sum_s w(|O|, s) CE_i(S_is)] = sum_{S <= O, S != {}} (1/|S|) sum_{i in S} CE_i(S), exactly."""
    table, count = subset_table(k)
    w = laser_weights(k)
    rng = np.random.default_rng(k)
    ce = {(i, s): rng.random() for s in range(1, 2**k) for i in range(k)}
    for o in range(1, 2**k):
        n_o = bin(o).count("1")
        expected = 0.0
        for i in range(k):
            if not o >> i & 1:
                continue
            for s in range(1, n_o + 1):
                n = int(count[o, i, s - 1])
                assert n == math.comb(n_o - 1, s - 1)
                drawn = [int(table[o, i, s - 1, r]) for r in range(n)]  # each r equally likely
                assert len(set(drawn)) == n and all(d & o == d and d >> i & 1 and bin(d).count("1") == s for d in drawn)
                expected += float(w[n_o, s]) * np.mean([ce[(i, d)] for d in drawn])
        full = sum(ce[(i, S)] / bin(S).count("1") for S in subsets(o, k) for i in range(k) if S >> i & 1)
        assert expected == pytest.approx(full, rel=1e-6)  # float32 weight table


def test_laser_sampler_draws_uniformly_and_respects_batch_sharing():
    k = 4
    tables = subset_table(k)
    obs = torch.tensor([[True, True, True, False]] * 20000)
    g = torch.Generator().manual_seed(0)
    chosen = sample_subsets(obs, g, shared=False, tables=tables)
    # head 0, size 2 from O={0,1,2}: {0,1} or {0,2}, each with probability 1/2
    picks = chosen[:, 0, 1]
    assert set(picks.unique().tolist()) == {0b011, 0b101}
    assert abs((picks == 0b011).float().mean() - 0.5) < 0.02
    assert (chosen[:, 3] == 0).all()  # head 3 unobserved: nothing drawn
    assert (chosen[:, 0, 3] == 0).all()  # size 4 > |O|
    shared = sample_subsets(obs[:64], g, shared=True, tables=tables)
    assert shared.shape == (1, 4, 4)  # one draw per (head, size) for the whole batch


def _brute_force_laser_loss(m, x, obs, y):
    """Sum over all non-empty S <= O of (1/|S|) sum_{i in S} CE(head_i(mean emb of S)), averaged over samples."""
    emb = m.ext(x)  # [K, B, D]
    total = 0.0
    for b in range(x.shape[1]):
        o = int(pattern_ids(obs[b : b + 1])[0])
        for S in subsets(o, m.k):
            members = [j for j in range(m.k) if S >> j & 1]
            z = emb[members, b].mean(0)
            for i in members:
                logits = z @ m.head.weight[i] + m.head.bias[i]
                total += torch.nn.functional.cross_entropy(logits[None], y[b : b + 1]).item() / len(members)
    return total / x.shape[1]


def test_laser_loss_matches_full_subset_loss_in_expectation():
    m = METHODS.get("laser")(ctx(k=3))
    torch.manual_seed(0)
    x = torch.randn(3, 6, 4)
    y = torch.randint(0, 3, (6,))
    obs = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 1, 0], [1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    target = _brute_force_laser_loss(m, x, obs, y)
    with torch.no_grad():
        est = np.mean([m.loss(batch(x, obs, y), STAGE)[0].item() for _ in range(4000)])
    assert est == pytest.approx(target, rel=0.01)


@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize(
    "c,options",
    [
        (2, {}),
        (2, {"laser_subsets": "batch"}),
        (3, {"heads": "one"}),
        (2, {"heads": "active"}),
        (2, {"pretrain": "simsiam"}),
    ],
)
def test_laser_epoch_draws_hold_what_each_batch_would_compute(c, options, per_batch):
    """begin_epoch computes, for every batch of the epoch, its active members, the loss's denominator and the
    labels' gap signs; each must equal what the step computes from the batch itself (a lone batch), on an epoch
    with a partial last batch and a batch with no observed block."""
    m = METHODS.get("laser")(ctx(k=3, c=c, options=options))
    stage = m.stages[-1]
    g = torch.Generator().manual_seed(1)
    n, bs = 50, 16
    obs = torch.rand(n, 3, generator=g) < 0.5
    order = torch.randperm(n, generator=g)
    obs[order[16:32]] = False  # batch 1: nothing observed
    y = torch.randint(0, c, (n,), generator=g)
    m.begin_epoch(Epoch(stage, 0, obs, order, bs, per_batch, y))
    for j in range(4):
        idx = order[j * bs : (j + 1) * bs]
        ob = obs[idx][:1].expand(len(idx), -1) if per_batch else obs[idx]
        _, _, active, count, signs = m._tasks(Batch(torch.randn(3, len(idx), 4), ob, y[idx], idx, j))
        want_active, want_count = m._step_stats(ob)
        assert torch.equal(active, want_active) and torch.equal(count, want_count)
        assert (signs is None) == (c != 2)
        if signs is not None:
            assert torch.equal(signs, gap_signs(y[idx], torch.float32))
    assert int(m._tasks(Batch(torch.randn(3, bs, 4), obs[order[16:32]], y[:bs], order[16:32], 1))[3]) == 1


def test_two_class_cross_entropy_from_gap_signs_is_the_cross_entropy_bit_for_bit():
    """The two-class cross-entropy (softplus of the signed logit gap) matches torch's cross-entropy, and given the
    precomputed gap signs it gives the same values and gradients as from the labels, bit for bit."""
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 3, 2, generator=g) * 4).requires_grad_()
    y = torch.randint(0, 2, (64,), generator=g)
    ce = cross_entropy(logits, y[:, None])
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 2), y.repeat_interleave(3), reduction="none")
    assert torch.allclose(ce.reshape(-1), want, atol=1e-6)
    gap = logits[..., 1] - logits[..., 0]  # the signed gap written out: -gap for class 1
    by_gap = torch.nn.functional.softplus(torch.where(y[:, None] == 1, -gap, gap))
    signed = cross_entropy(logits, y[:, None], gap_signs(y, logits.dtype)[:, None])
    assert torch.equal(ce, by_gap) and torch.equal(signed, ce)
    w = torch.rand(64, 3, generator=g)
    grads = [torch.autograd.grad((v * w).sum(), logits)[0] for v in (ce, by_gap, signed)]
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[2], grads[0])


def test_laser_weights_values():
    w = laser_weights(4)
    assert w[4, 1] == 1 and w[4, 2] == pytest.approx(1.5) and w[4, 3] == 1 and w[4, 4] == pytest.approx(0.25)
    assert w[1, 1] == 1 and w[2, 2] == pytest.approx(0.5)


def test_masked_optimizer_equals_separate_torch_optimizers():
    """Two members in one store; member 1 sits out some steps. Each must follow its own torch.optim.Adam
    that only steps when the member is active (step counts and moments per member)."""
    for name, kw in (("adam", dict(weight_decay=1e-3)), ("sgd", dict(momentum=0.8, weight_decay=1e-4))):
        s = ParamStore()
        s.add("w", (2, 3), torch.tensor([0, 1]), 0.5)
        s.finalize(torch.Generator().manual_seed(0))
        refs = [torch.nn.Parameter(s["w"][i].detach().clone()) for i in range(2)]
        cls = torch.optim.Adam if name == "adam" else torch.optim.SGD
        ropts = [cls([r], lr=0.01, **kw) for r in refs]
        opt = MaskedOptimizer(s, [], 2, name=name, lr=0.01, **kw)
        g = torch.Generator().manual_seed(1)
        for step in range(12):
            grad = torch.randn(6, generator=g)
            active = torch.tensor([True, step % 3 != 0])
            s.flat.grad = grad.clone()
            opt.step(active)
            for i in range(2):
                if active[i]:
                    refs[i].grad = grad.view(2, 3)[i].clone()
                    ropts[i].step()
        for i in range(2):
            assert torch.allclose(s["w"][i], refs[i], atol=1e-6), name


def test_member_owned_tensors_step_like_separate_torch_optimizers():
    """Whole tensors owned by one member (a party's nn.Module) are stepped together per member with
    multi-tensor ops; each member must still follow its own torch.optim optimiser, stepped only when active."""
    shapes, owners = [(4, 3), (3,), (2, 2, 3), (5,)], [0, 0, 1, 2]
    for name, kw in (("adam", dict(weight_decay=1e-3)), ("sgd", dict(momentum=0.8, weight_decay=1e-4))):
        g = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(sh, generator=g)) for sh in shapes]
        refs = [torch.nn.Parameter(p.detach().clone()) for p in params]
        cls = torch.optim.Adam if name == "adam" else torch.optim.SGD
        ropts = [cls([r for r, o in zip(refs, owners, strict=True) if o == k], lr=0.01, **kw) for k in range(3)]
        opt = MaskedOptimizer(None, list(zip(params, owners, strict=True)), 3, name=name, lr=0.01, **kw)
        for step in range(12):
            active = torch.tensor([True, step % 3 != 0, step % 2 == 0])
            grads = [torch.randn(sh, generator=g) for sh in shapes]
            for p, r, gr, o in zip(params, refs, grads, owners, strict=True):
                p.grad = gr.clone() if active[o] else None
                r.grad = gr.clone()
            opt.step(active)
            for k in range(3):
                if active[k]:
                    ropts[k].step()
        for p, r in zip(params, refs, strict=True):
            assert torch.allclose(p, r, atol=1e-6), name


def test_cosine_schedule_matches_torch():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.1 * 0.02)
    for e in range(10):
        assert cosine_lr(0.1, e, 10, 0.02) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9)
        opt.step()
        sch.step()


def test_ensemble_majority_vote_and_random_ties():
    preds = torch.tensor([[1, 0, 2], [1, 1, 0], [0, 1, 1]])  # 3 predictors x 3 samples
    valid = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    winners = torch.stack([majority_vote(preds, valid, 3, g)[0] for _ in range(2000)])
    assert (winners[:, 0] == 1).all()  # 2 votes vs 1
    assert (winners[:, 2] == 2).all()  # a single valid vote
    tie = winners[:, 1]  # votes 0 and 1 once each: both win about half the time
    assert set(tie.unique().tolist()) == {0, 1} and abs((tie == 0).float().mean() - 0.5) < 0.05


def test_ensemble_labels_by_the_vote_and_ranks_by_the_observed_parties_mean_probability():
    """The label is the majority vote; the AUPRC score is the mean softmax probability of the positive class over
    the observed parties, by hand (the vote share it replaced has at most K + 1 values)."""
    m = METHODS.get("ensemble")(ctx(k=3, c=2))
    obs = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 1, 1], [1, 1, 0]] * 50, dtype=torch.bool)
    b = batch(torch.randn(3, 200, 4), obs)
    pred = m.predict(b)
    with torch.no_grad():
        p1 = torch.softmax(m.logits(b.blocks, obs), -1)[..., 1]  # [K, B]
    by_hand = torch.stack([p1[obs[i], i].mean() for i in range(200)])
    assert torch.allclose(pred.scores[0], by_hand, atol=1e-6)
    votes = (p1 > 0.5) & obs.T
    clear = votes.sum(0) * 2 != obs.sum(1)  # no tie: the vote decides the label
    assert (pred.preds[0][clear] == (votes.sum(0) * 2 > obs.sum(1)).long()[clear]).all()
    assert len(torch.unique(pred.scores[0])) > 10


def test_combinatorial_uses_exact_subset_predictor():
    m = METHODS.get("combinatorial")(ctx(k=3))
    assert m.head.h == 7 and m.ext.bank.m == 12  # 2^3-1 predictors, 3*2^2 extractors
    obs = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 1]], dtype=torch.bool)
    pred = m.predict(batch(torch.randn(3, 3, 4), obs))
    answering = pred.valid.float().argmax(0)
    assert pred.valid.sum(0).tolist() == [1, 1, 1]
    assert (m.bits[answering] == pattern_ids(obs)).all()
    cov = m.covers(obs)  # training: predictor S learns from samples that observe all of S
    assert cov[:, 2].all() and cov[:, 1].sum() == 1


def test_plug_denominators_per_protocol():
    obs = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=torch.bool)
    x = torch.randn(3, 4, 4)
    ex = METHODS.get("plug")(ctx(k=3, options={"plug_denominator": "exclude"})).predict(batch(x, obs))
    assert ex.counted.tolist() == [True, False, True, False]  # active party (last) missing -> excluded
    rnd = METHODS.get("plug")(ctx(k=3, options={"plug_denominator": "random"})).predict(batch(x, obs))
    assert rnd.counted.tolist() == [True, True, True, False]  # scored; only all-missing excluded


def test_svfl_guesses_randomly_when_incomplete():
    m = METHODS.get("svfl")(ctx(k=2, c=10))
    obs = torch.tensor([[True, False]] * 5000)
    p = m.predict(batch(torch.randn(2, 5000, 4), obs)).preds[0]
    counts = torch.bincount(p, minlength=10).float() / 5000
    assert (counts - 0.1).abs().max() < 0.03


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_same_seed_same_numbers_other_seed_differs():
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    def go(seed):
        cfg = RunConfig(
            dataset="synthetic",
            method="laser",
            train_missing="mcar:0.2",
            test_missing=["mcar:0.5"],
            seed=seed,
            data_options={"n": 1500},
            hp={"epochs": 3},
        )
        return [r["value"] for r in execute(resolve(cfg), device=TEST_DEVICE)[0]]

    a, b = go(0), go(0)
    assert a == b
    assert go(1) != a


def test_sum_fusion_option():
    mean = METHODS.get("laser")(ctx(k=3))
    summ = METHODS.get("laser")(ctx(k=3, options={"fusion": "sum"}))
    member = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])  # sizes 1, 2, 3
    assert summ._fusion(member).tolist() == member.float().tolist()
    assert mean._fusion(member)[1].tolist() == [0.5, 0.5, 0.0] and mean._fusion(member)[2, 0] == torch.tensor(1 / 3)
    x, obs = torch.randn(3, 5, 4), torch.ones(5, 3, dtype=torch.bool)
    emb = mean.ext(x)
    assert torch.allclose(mean.exact_logits(x, obs), mean.head(emb.mean(0)[None].expand(3, -1, -1)), atol=1e-6)
    from vflbench.core.errors import VFLBenchError
    from vflbench.runs.config import RunConfig, resolve

    with pytest.raises(VFLBenchError, match="fusion"):  # options are checked when a run is resolved
        resolve(RunConfig(dataset="synthetic", method="svfl", method_options={"fusion": "median"}))


def test_cifar_resnet_extractors_match_the_authors_shapes():
    from vflbench.nn.models import IMAGE_EXTRACTORS

    half = IMAGE_EXTRACTORS["resnet18-half"](3, 1024)
    full = IMAGE_EXTRACTORS["resnet18"](3, 1024)
    n_half = sum(p.numel() for p in half.parameters())
    n_full = sum(p.numel() for p in full.parameters())
    assert abs(n_half - 3.06e6) / 3.06e6 < 0.02 and abs(n_full - 11.69e6) / 11.69e6 < 0.02
    assert (
        half.conv1.padding == (0, 0) and half.conv1.out_channels == 32 and isinstance(half.maxpool, torch.nn.Identity)
    )
    assert full.conv1.kernel_size == (3, 3) and full.conv1.stride == (1, 1)
    q = torch.randn(2, 3, 16, 16)  # a CIFAR quadrant
    assert half(q).shape == (2, 1024) and full(q).shape == (2, 1024)
    grey = IMAGE_EXTRACTORS["resnet18"](1, 64)
    assert grey(torch.randn(2, 1, 14, 14)).shape == (2, 64)


def image_ctx(method_options=None):
    return MethodContext(
        k=4,
        n_classes=10,
        widths=[16] * 4,
        in_ch=1,
        model=ModelSpec("cnn-small", 8),
        device=torch.device("cpu"),
        streams=Streams(0),
        options=method_options or {},
    )


@pytest.mark.parametrize("name", ["local", "laser", "combinatorial", "plug", "svfl"])
def test_image_extractors_never_read_missing_tiles(name):
    """Missing blocks' pixels must not reach an extractor (e.g. its BatchNorm statistics)."""
    m = METHODS.get(name)(image_ctx())
    tiles = [torch.randn(16, 1, 4, 4) for _ in range(4)]
    obs = torch.ones(16, 4, dtype=torch.bool)
    obs[:8, 0] = False
    tiles[0][:8] = 1e6  # poison the missing half of block 0
    m.train(True)
    train_step(m, batch(tiles, obs, torch.randint(0, 10, (16,))))
    for mod in m.ext.modules.mods:
        for bn in (x for x in mod.modules() if isinstance(x, torch.nn.BatchNorm2d)):
            assert bn.running_mean.abs().max() < 100 and bn.running_var.max() < 1e4
    m.train(False)
    pred = m.predict(batch(tiles, obs))
    assert pred.preds.shape[1] == 16


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
@pytest.mark.parametrize("name", ["local", "svfl", "ensemble", "combinatorial", "plug", "laser"])
def test_image_methods_run_end_to_end(name):
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    cfg = RunConfig(
        dataset="digits",
        method=name,
        train_missing="mcar:0.2",
        test_missing=["none", "mcar:0.5"],
        hp={"epochs": 2, "lr": 3e-3},
    )
    rows, man = execute(resolve(cfg), device=TEST_DEVICE)
    acc = {r["test_missing"]: r["value"] for r in rows if r["metric"] == "accuracy"}
    assert man["partition"]["blocks"] == [[0, 4, 0, 4], [0, 4, 4, 8], [4, 8, 0, 4], [4, 8, 4, 8]]
    assert acc["none"] > 30, acc  # 10 classes: chance is 10%
