"""PBM-VFL: the mechanism's statistics, secure aggregation, the straight-through gradient, the
privacy accountant's golden values (spec 2.6) and the communication formula against the paper's
Tables 2 and 3."""

from __future__ import annotations

import math
from importlib import resources
from io import StringIO

import numpy as np
import pandas as pd
import pytest
import torch
from _testenv import TEST_DEVICE
from scipy.stats import chisquare
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.privacy.accountant import (
    AccountantSpec,
    NoisySumAccountant,
    epsilon,
    exact_feature_rdp,
    exact_sample_rdp,
    ldp_sigma,
    mironov,
    mironov_linear,
    s_m,
    s_m_recursive,
)
from vflbench.privacy.mechanisms import PBMChannel, paper_comm_bits
from vflbench.privacy.secagg import PairwiseMasking, modulus_bits
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute

from .conftest import needs_mirror


def _gens(seed=0):
    out = {}
    for i, phase in enumerate(("train", "eval", "monitor")):
        out[phase] = torch.Generator()
        out[phase].manual_seed(seed + i)
    return out


# ---------------------------------------------------------------- the mechanism
def test_pbm_sum_is_unbiased_with_the_exact_variance():
    b, beta, C, n = 4, 0.1, 1.0, 200_000
    x = torch.tensor([0.9, -0.3, 0.5, -1.0])
    ch = PBMChannel(4, b, beta, C, _gens())
    reps = x.view(4, 1, 1).expand(4, n, 1).contiguous()
    est = ch.aggregate(reps, torch.ones(4, n, dtype=torch.bool))[:, 0]
    p = 0.5 + beta / C * x
    var = float(C**2 / (beta**2 * b) * (p * (1 - p)).sum())
    assert abs(var - 24.4625) < 1e-4  # the spec's worked example
    assert abs(float(est.mean()) - float(x.sum())) < 4 * math.sqrt(var / n)
    assert abs(float(est.var()) / var - 1) < 0.03
    assert var <= C**2 * 4 / (4 * beta**2 * b)


def test_missing_parties_send_nothing_and_the_estimate_stays_unbiased():
    b, beta, n = 8, 0.2, 100_000
    x = torch.tensor([0.5, -0.8, 0.3])
    sent = torch.tensor([True, False, True])[:, None].expand(3, n)
    ch = PBMChannel(3, b, beta, 1.0, _gens())
    est = ch.aggregate(x.view(3, 1, 1).expand(3, n, 1).contiguous(), sent)[:, 0]
    p = 0.5 + beta * x[[0, 2]]
    var = float(1 / (beta**2 * b) * (p * (1 - p)).sum())
    assert abs(float(est.mean()) - 0.8) < 4 * math.sqrt(var / n)  # 0.5 + 0.3: the missing party adds no b/2


def test_gradient_passes_straight_through_to_the_exact_embeddings():
    reps = torch.randn(3, 5, 4).tanh().requires_grad_(True)
    ch = PBMChannel(3, 16, 0.2, 1.0, _gens())
    out = ch.aggregate(reps, torch.ones(3, 5, dtype=torch.bool))
    g = torch.randn_like(out)
    (out * g).sum().backward()
    assert torch.equal(reps.grad, g.expand(3, -1, -1))  # d(estimate)/d(h_m) = I for every party


def test_the_server_sees_exactly_the_decoded_counts():
    """The forward value is the estimate from the released counts, bit for bit (no rounding leak of
    the exact sum), while the gradient still reaches every party's exact embedding."""
    b, beta, C = 16, 0.2, 1.0
    reps = torch.randn(4, 300, 8).tanh().requires_grad_(True)
    sent = torch.rand(4, 300) < 0.8
    out = PBMChannel(4, b, beta, C, _gens(3)).aggregate(reps, sent)
    g = _gens(3)["train"]
    p = 0.5 + beta / C * reps.detach().clamp(-C, C)
    q = torch.binomial(torch.full_like(p, float(b)), p, generator=g) * sent[..., None].to(p.dtype)
    n = sent.sum(0).to(p.dtype)[:, None]
    assert torch.equal(out.detach(), C / (beta * b) * (q.sum(0) - b * n / 2))
    out.sum().backward()
    assert torch.equal(reps.grad, sent[..., None].expand_as(reps).to(reps.dtype))


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_large_b_approaches_npq_gradients():
    def grads(opts):
        run = resolve(
            RunConfig(
                dataset="synthetic",
                method="pbm",
                parties=3,
                data_options={"n": 400},
                method_options=opts,
                hp={"epochs": 1},
            )
        )
        from vflbench.training import pipeline

        inputs = pipeline.prepare(run, TEST_DEVICE)
        m = pipeline.build(run, inputs)
        from vflbench.methods import Batch

        idx = torch.arange(64)
        tr = inputs.train
        m.store.begin()
        loss, _ = m.loss(Batch(tr.blocks.batch(idx), tr.obs[idx], tr.y[idx], idx, 0), m.stages[0])
        loss.backward()
        return m.store.flat.grad.clone()

    exact = grads({"mechanism": "npq"})
    close = grads(
        {"b": 1024, "beta": 0.25}
    )  # b's limit (vflbench.core.limits): the accountant's cost, 8x the paper's largest b
    mid = grads({"b": 64, "beta": 0.25})
    far = grads({"b": 8, "beta": 0.1})
    assert torch.allclose(close, exact, atol=0.05)
    assert (far - exact).abs().max() > 10 * (close - exact).abs().max()
    assert (mid - exact).abs().max() > 2 * (close - exact).abs().max()  # the error falls like 1/sqrt(b)


# ---------------------------------------------------------------- secure aggregation
@pytest.mark.parametrize("parties, b", [(2, 1), (4, 4), (5, 32), (10, 64)])
def test_masked_sum_equals_the_plain_sum_bit_for_bit(parties, b):
    g = torch.Generator().manual_seed(parties)
    sec = PairwiseMasking(parties, b, master_seed=7)
    assert sec.R == 2 ** math.ceil(math.log2(parties * b + 1)) and sec.bits == modulus_bits(parties, b)
    for t in range(5):
        q = torch.randint(0, b + 1, (parties, 50, 6), generator=g)
        sent = torch.rand(parties, 50, generator=g) < 0.7  # missing blocks: only holders take part
        y = sec.upload(q * sent[..., None], sent, t)
        assert int(y.min()) >= 0 and int(y.max()) < sec.R
        assert torch.equal(sec.aggregate(y), (q * sent[..., None]).sum(0))


def test_each_masked_upload_is_uniform_and_masks_are_fresh():
    parties, b = 4, 4
    sec = PairwiseMasking(parties, b, master_seed=3)
    q = torch.full((parties, 4000, 2), 3)  # a constant secret: only the masks vary
    sent = torch.ones(parties, 4000, dtype=torch.bool)
    y0, y1 = sec.upload(q, sent, 0), sec.upload(q, sent, 1)
    for m in range(parties):
        counts = np.bincount(y0[m].reshape(-1).numpy(), minlength=sec.R)
        assert chisquare(counts).pvalue > 1e-3
    assert not torch.equal(y0, y1)  # a new iteration, new masks
    assert (y0 == y1).float().mean() < 2.0 / sec.R


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_secagg_masked_gives_bit_identical_runs():
    def rows(secagg):
        run = resolve(
            RunConfig(
                dataset="synthetic",
                method="pbm",
                parties=3,
                data_options={"n": 300},
                hp={"epochs": 2},
                method_options={"secagg": secagg, "b": 8, "beta": 0.2},
                test_missing=["none", "mcar:0.3"],
            )
        )
        return execute(run, device=TEST_DEVICE)[0]

    plain, masked = rows("plain"), rows("masked")
    assert [r["value"] for r in plain] == [r["value"] for r in masked]
    assert plain[0]["epsilon_feature_record_no_local_training"] == masked[0]["epsilon_feature_record_no_local_training"]


# ---------------------------------------------------------------- the accountant (spec 2.6 golden values)
@pytest.mark.parametrize(
    "b, beta, m, alpha, expected",
    [
        (2, 0.05, 4, 2, 0.02036),
        (2, 0.05, 4, 8, 0.08189),
        (4, 0.1, 4, 2, 0.17159),
        (4, 0.1, 4, 8, 0.68342),
        (4, 0.1, 4, 32, 1.35828),
        (16, 0.1, 4, 2, 0.68481),
        (16, 0.1, 4, 8, 2.73218),
        (16, 0.15, 4, 2, 1.68619),
        (8, 0.25, 5, 2, 2.60064),
        (8, 0.25, 5, 8, 7.14738),
        (64, 0.1, 5, 8, 9.00374),
        (128, 0.1, 10, 8, 9.06691),
        (8, 0.01, 4, 8, 0.01281),
    ],
)
def test_exact_feature_rdp_matches_the_spec_vectors(b, beta, m, alpha, expected):
    assert exact_feature_rdp(b, beta, m, [alpha])[0] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    "b, beta, m, alpha, expected",
    [
        (16, 0.1, 4, 2, 9.8656),
        (16, 0.1, 4, 8, 21.300),
        (4, 0.05, 4, 2, 0.6337),
        (64, 0.1, 5, 2, 49.328),
        (32, 0.1, 10, 8, 106.50),
        (2, 0.05, 6, 8, 1.4657),
    ],
)
def test_exact_sample_rdp_matches_the_spec_vectors(b, beta, m, alpha, expected):
    assert exact_sample_rdp(b, beta, m, [alpha])[0] == pytest.approx(expected, rel=2e-4)


def test_s_m_closed_form_equals_the_recursion_and_the_paper_example():
    for a in (1.5, 2.0, 3.0, 8.0, 32.0):
        assert float(s_m(2, a)) == pytest.approx(4 * a + 1 / (a - 1))
        for m in range(2, 8):
            assert float(s_m(m, a)) == pytest.approx(s_m_recursive(m, a), rel=1e-12)
    assert float(s_m(5, 2.0)) == pytest.approx(60.875) and float(s_m(10, 8.0)) == pytest.approx(10766.3, abs=0.05)


def test_linear_conversion_equals_a_fine_grid_minimum():
    c, delta = 0.64, 1e-5
    orders = np.linspace(1.001, 200, 400_000)
    assert mironov_linear(c, delta) == pytest.approx(mironov(c * orders, orders, delta), abs=1e-4)
    assert mironov_linear(c, delta) == pytest.approx(6.0689, abs=1e-4)


@pytest.mark.parametrize(
    "m, p, b, beta, e, feat1, feat8, samp1, samp8",
    [
        (4, 16, 16, 0.1, 1, 6.069, 20.48, 33.11, 148.5),
        (4, 16, 16, 0.1, 600, 517, 3448, 8686, 6.917e4),
        (4, 16, 4, 0.05, 600, 57.25, 286, 586.1, 4366),
        (5, 16, 64, 0.1, 100, 301.9, 1913, 6600, 5.247e4),
        (10, 16, 64, 0.1, 100, 171.1, 1013, 2.073e4, 1.651e5),
        (5, 16, 32, 0.1, 100, 171.1, 1013, 3323, 2.626e4),
        (6, 4096, 2, 0.05, 250, 1052, 7387, 3.832e4, 3.058e5),
        (4, 128, 2, 0.01, 700, 18.84, 76.47, 132.8, 852.5),
    ],
)
def test_paper_mode_matches_the_spec_table(m, p, b, beta, e, feat1, feat8, samp1, samp8):
    def eps(c0, kind):
        acc = NoisySumAccountant(AccountantSpec("pbm", m, p, b, beta, c0=c0, mode="paper"), n_samples=2)
        acc.releases[:, m] = e  # every sample released E times by all M parties
        return acc.get_epsilon(1e-5, kind)

    for got, want in (
        (eps(1, "feature"), feat1),
        (eps(8, "feature"), feat8),
        (eps(1, "sample"), samp1),
        (eps(8, "sample"), samp8),
    ):
        assert got == pytest.approx(want, rel=2e-3)


def test_accountant_counts_releases_by_party_count_and_round_trips():
    acc = NoisySumAccountant(AccountantSpec("pbm", 4, 16, 32, 0.1), n_samples=10)
    acc.step(torch.tensor([0, 1, 2]), torch.tensor([4, 4, 1]))
    acc.step(torch.tensor([0, 3]), torch.tensor([4, 0]))
    assert acc.releases[0, 4] == 2 and acc.releases[2, 1] == 1 and acc.releases[3, 0] == 1
    assert acc.epochs() == 2
    lone = NoisySumAccountant(AccountantSpec("pbm", 4, 16, 32, 0.1), n_samples=1)
    lone.step(torch.tensor([0]), torch.tensor([1]))
    full = NoisySumAccountant(AccountantSpec("pbm", 4, 16, 32, 0.1), n_samples=1)
    full.step(torch.tensor([0]), torch.tensor([4]))
    assert lone.get_epsilon(1e-5) > full.get_epsilon(1e-5)  # fewer parties, less noise hiding each one
    again = NoisySumAccountant(AccountantSpec("pbm", 4, 16, 32, 0.1), n_samples=10)
    again.load_state_dict(acc.state_dict())
    assert again.get_epsilon(1e-5, "sample") == acc.get_epsilon(1e-5, "sample")


def test_modes_are_ordered_sensibly_and_pld_runs():
    def eps(mode, kind):
        acc = NoisySumAccountant(AccountantSpec("pbm", 5, 16, 32, 0.1, c0=8, mode=mode), n_samples=1)
        acc.releases[0, 5] = 10
        return acc.get_epsilon(1e-5, kind)

    for kind in ("feature", "sample"):
        assert eps("pld", kind) <= eps("exact", kind) * 1.01  # PLD composes without the RDP conversion slack
    assert eps("exact", "sample") < eps("paper", "sample")


def test_ldp_noise_follows_the_paper_and_the_general_formula():
    assert ldp_sigma(5, 32, 0.1) ** 2 == pytest.approx(2 * 5 / (32 * 0.01))
    assert ldp_sigma(5, 32, 0.1, C=2.0, c0=8, match="c0") ** 2 == pytest.approx(2 * 4 * 5 / (8 * 32 * 0.01))


# ---------------------------------------------------------------- communication (paper Tables 2-3)
def _reference():
    text = resources.files("vflbench.results.reference").joinpath("pbm_tables1_3.csv").read_text()
    return pd.read_csv(StringIO(text), dtype={"b": str})


@pytest.mark.parametrize("table, n_train", [(2, 7352), (3, 8844)])
def test_paper_formula_reproduces_tables_2_and_3(table, n_train):
    ref = _reference()
    ref = ref[(ref["table"] == table) & np.isfinite(ref["epochs_to_target"].astype(float))]
    assert len(ref) >= 13
    for r in ref.itertuples():
        mech = "npq" if r.b == "NPQ" else "pbm"
        b = None if mech == "npq" else int(r.b)
        bits = paper_comm_bits(float(r.epochs_to_target), n_train, 100, int(r.parties), 16, b, mech)
        assert abs(bits / 1e9 - float(r.comm_cost)) <= 0.01 + 1e-9, (r, bits / 1e9)


# ---------------------------------------------------------------- bad input and the CLI
runner = CliRunner()
PBM = ["run", "--dataset", "synthetic", "--method", "pbm", "--epochs", "1", "--quiet", "--data-opt", "n=300"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--method-opt", "beta=0.3"], "beta must be in (0, 1/4]"),
        (["--method-opt", "beta=0"], "beta must be in (0, 1/4]"),
        (["--method-opt", "b=0"], "must be >= 1"),
        (["--method-opt", "C=0"], "must be a finite number > 0"),
        (["--method-opt", "mechanism=ldp", "--method-opt", "secagg=masked"], "use secagg=plain with ldp"),
        (["--method-opt", "delta=1"], "delta must be in (0, 1)"),
        (["--method-opt", "delta=0"], "delta must be in (0, 1)"),
        (["--target", "train_auprc=0.9", "--data-opt", "n_classes=3"], "binary tasks only"),
        (["--target", "test_auprc=0.9"], "--target must look like METRIC=VALUE"),
        (["--target", "train_accuracy=1.5"], "--target value must be in (0, 1]"),
    ],
)
def test_bad_pbm_input_is_one_line_and_exit_2(tmp_path, args, needle):
    r = runner.invoke(app, [*PBM, "--out", str(tmp_path / "o"), *args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and needle in r.output, r.output
    assert not any(tmp_path.rglob("results.csv"))


@needs_mirror
@pytest.mark.slow
def test_phishing_run_writes_privacy_cost_and_target_columns(tmp_path):
    r = runner.invoke(
        app,
        [
            "run",
            "--dataset",
            "phishing",
            "--method",
            "pbm",
            "--parties",
            "5",
            "--method-opt",
            "b=32",
            "--method-opt",
            "beta=0.2",
            "--target",
            "train_auprc=0.9",
            "--seed",
            "0",
            "--epochs",
            "2",
            "--quiet",
            "--test-missing",
            "none",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    df = pd.read_csv(next(tmp_path.rglob("results.csv")))
    for col in (
        "epsilon_feature_record_no_local_training",
        "epsilon_sample_record_no_local_training",
        "epsilon_column_block",
        "epsilon_feature_paper_formula",
        "epsilon_feature_record_no_local_training_at_target",
        "accountant",
        "privacy_upper_bound",
        "comm_bits_paper",
        "comm_bytes_up",
        "comm_bytes_down",
        "epochs_to_target",
    ):
        assert col in df.columns, col
    assert {"auprc", "auprc@exact"} <= set(df["metric"])
    row = df.iloc[0]
    # 2 epochs x 89 batches x 100 (last 44) samples x 5 parties x 16 values: up ceil(log2(161)) = 8 bits, down 32 bits
    values = 2 * 8844 * 5 * 16
    assert row["comm_bytes_up"] == values * 8 / 8 and row["comm_bytes_down"] == values * 4
    assert row["comm_bits_paper"] == pytest.approx(paper_comm_bits(2, 8844, 100, 5, 16, 32, "pbm"))
    # certified by default; each of the 2 epochs released every sample's sum twice: the step and the
    # monitoring pass (the server sees that noisy sum too)
    assert row["accountant"] == "pld" and bool(row["privacy_upper_bound"]) and row["privacy_releases"] == 4
    pld = AccountantSpec("pbm", 5, 16, 32, 0.2)
    assert row["epsilon_feature_record_no_local_training"] == pytest.approx(
        epsilon(pld, [0, 0, 0, 0, 4], 1e-5, "feature_record")
    )
    assert row["epsilon_column_block"] >= row["epsilon_feature_record_no_local_training"]
    assert row["epsilon_feature_paper_formula"] == pytest.approx(mironov_linear(4 * 8 * 16 * 32 * 0.04 / 5, 1e-5))
    assert "epsilon_feature_record_no_local_training" in r.output and "accountant=pld" in r.output


# ---------------------------------------------------------------- equal-privacy baselines and the frontier
def test_ldp_matched_to_pbm_spends_the_same_certified_epsilon(tmp_path):
    base = [
        "run",
        "--dataset",
        "synthetic",
        "--data-opt",
        "n=300",
        "--method",
        "pbm",
        "--parties",
        "3",
        "--epochs",
        "2",
        "--quiet",
        "--test-missing",
        "none",
        "--method-opt",
        "b=16",
        "--method-opt",
        "beta=0.15",
    ]
    rows = {}
    for mech in ("pbm", "ldp"):
        out = tmp_path / mech
        extra = ["--method-opt", "mechanism=ldp", "--method-opt", "ldp_match=epsilon"] if mech == "ldp" else []
        r = runner.invoke(app, [*base, *extra, "--out", str(out)])
        assert r.exit_code == 0, r.output
        rows[mech] = pd.read_csv(next(out.rglob("results.csv"))).iloc[0]
    pbm, ldp = rows["pbm"], rows["ldp"]
    assert ldp["ldp_match"] == "epsilon" and ldp["accountant"] == "pld"
    assert ldp["epsilon_feature_record_no_local_training"] == pytest.approx(
        pbm["epsilon_feature_record_no_local_training"], rel=1e-6
    )
    assert ldp["ldp_sigma"] < ldp_sigma(3, 16, 0.15)  # the paper's sigma is far more private than PBM


def test_frontier_plot_puts_each_series_at_its_certified_epsilon(tmp_path):
    from vflbench.results.plot import plot_frontier

    rows = []
    for seed in (0, 1):
        for mech, match, eps, auprc in (
            ("pbm", None, 100.0, 90.0),
            ("ldp", "paper", 20.0, 60.0),
            ("ldp", "epsilon", 100.0, 70.0),
            ("npq", None, float("inf"), 99.0),
        ):
            for epoch, v in ((1, auprc - 10), (2, auprc + seed)):
                rows.append(
                    {
                        "run_id": f"{mech}{match}{seed}",
                        "dataset": "phishing",
                        "method": "pbm",
                        "train_missing": "none",
                        "test_missing": "none",
                        "seed": seed,
                        "metric": "auprc",
                        "value": v,
                        "epoch": epoch,
                        "parties": 10,
                        "mechanism": mech,
                        "b": 32,
                        "beta": 0.1,
                        "ldp_match": match,
                        "accountant": "pld" if mech != "npq" else "none",
                        "epsilon_feature_record_no_local_training": eps,
                    }
                )
    (tmp_path / "res").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "res" / "results.csv", index=False)
    paths = plot_frontier(tmp_path / "res", tmp_path / "frontier")
    assert {p.suffix for p in paths} == {".png", ".pdf", ".csv"}
    pts = pd.read_csv(tmp_path / "frontier.csv").set_index("series")
    assert (
        pts.loc["PBM", "metric_mean"] == pytest.approx(90.5) and pts.loc["PBM", "epsilon"] == 100.0
    )  # the final epoch only
    assert pts.loc["LDP (epsilon sigma)", "epsilon"] == 100.0 and pts.loc["LDP (paper sigma)", "epsilon"] == 20.0
