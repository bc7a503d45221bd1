"""Attacks measured beside the certified epsilon: known answers (an attack that must succeed does, one that must fail
does), the randomized-response bound held against the attacks on data whose features say nothing of the label,
one-line refusals before training, and the rows, table and plot they give."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.privacy.attacks import ATTACKS, AttackContext, parse_attack
from vflbench.privacy.defenses import make_defense, parse_defense

runner = CliRunner()


def context(y: torch.Tensor, k: int = 2, blocks: list[np.ndarray] | None = None, seed: int = 0) -> AttackContext:
    n = len(y)
    return AttackContext(
        n=n,
        k=k,
        n_classes=int(y.max()) + 1,
        positive=1,
        y=y,
        observed=torch.ones(n, k, dtype=torch.bool),
        block=lambda j: blocks[j],
        party_reps=lambda j: None,
        initial_reps=lambda j: None,
        seed=seed,
        known_order=torch.randperm(n, generator=torch.Generator().manual_seed(seed)),
    )


def feed_gradients(attack, grads: torch.Tensor, batch: int = 256) -> None:
    """Training steps as the channel delivers them: per batch, [K, B, D] gradients of the rows every party sent."""
    n = grads.shape[1]
    for start in range(0, n, batch):
        idx = torch.arange(start, min(start + batch, n))
        sent = torch.ones(grads.shape[0], len(idx), dtype=torch.bool)
        attack.on_down(grads[:, idx], sent, None, idx, False)
    attack.end_epoch(1, True)


def linear_top_gradients(y: torch.Tensor, k: int = 2, d: int = 8, seed: int = 0) -> torch.Tensor:
    """(p - y) w_k for a top model linear in each party's representation: what Standard VFL returns."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(len(y), generator=g) * 0.98 + 0.01
    w = torch.randn(k, 1, d, generator=g)
    return (p - y.float())[None, :, None] * w


def test_direction_scores_auc_one_when_every_gradient_is_p_minus_y_times_w():
    y = (torch.rand(4000, generator=torch.Generator().manual_seed(1)) < 0.22).long()
    attack = ATTACKS.get("direction")(parse_attack("direction:known=0.02")[1], context(y))
    feed_gradients(attack, linear_top_gradients(y))
    aucs = [v for who, metric, v in attack.results(1) if metric == "auc"]
    assert aucs == [1.0, 1.0]


def test_shuffled_labels_give_auc_one_half():
    """Tolerance: 0.03 (the AUC of 20,000 independent scores has a standard deviation near 0.004)."""
    y = (torch.rand(20000, generator=torch.Generator().manual_seed(2)) < 0.5).long()
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(3))]
    for name in ("direction", "norm"):
        attack = ATTACKS.get(name)(parse_attack(f"{name}:known=0.02")[1], context(shuffled))
        feed_gradients(attack, linear_top_gradients(y))
        for _, metric, v in attack.results(1):
            if metric == "auc":
                assert abs(v - 0.5) <= 0.03, (name, v)


def test_norm_scoring_reads_the_imbalance():
    """On imbalanced data with a model that leans to the majority class, positives carry the larger |p - y|."""
    g = torch.Generator().manual_seed(4)
    y = (torch.rand(6000, generator=g) < 0.2).long()
    p = torch.full((6000,), 0.2) + 0.05 * torch.randn(6000, generator=g)
    grads = (p - y.float())[None, :, None] * torch.randn(1, 1, 4, generator=g)
    attack = ATTACKS.get("norm")(parse_attack("norm:known=0.05")[1], context(y, k=1))
    feed_gradients(attack, grads)
    assert [v for _, m, v in attack.results(1) if m == "auc"][0] > 0.95


def inversion(values: np.ndarray, x: np.ndarray, decoder: str = "linear") -> float:
    y = torch.zeros(len(x), dtype=torch.long)
    attack = ATTACKS.get("inversion")(
        parse_attack(f"inversion:known=0.2,decoder={decoder},target=0")[1], context(y, k=1, blocks=[x])
    )
    idx = torch.arange(len(x))
    attack.on_up(
        torch.as_tensor(values, dtype=torch.float32)[None], torch.ones(1, len(x), dtype=torch.bool), None, idx, False
    )
    attack.end_epoch(1, True)
    return dict((m, v) for _, m, v in attack.results(1))["r2"]


def test_inversion_of_an_identity_bottom_model_recovers_the_block():
    x = np.random.default_rng(0).standard_normal((3000, 6)).astype(np.float32)
    assert inversion(x, x, "linear") > 0.999
    assert inversion(x, x, "mlp") > 0.95


def test_inversion_under_ldp_sigma_100_learns_nothing():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 6)).astype(np.float32)
    noised = np.clip(x, -1, 1) + 100.0 * rng.standard_normal(x.shape).astype(np.float32)
    assert inversion(noised, x, "mlp") <= 0.05
    assert inversion(noised, x, "linear") <= 0.05


def test_a_summed_release_is_what_every_party_is_inverted_from():
    """Under PBM-VFL's summed release the server holds only the sum: with two independent blocks the sum carries
    about half of each one's variance, so R^2 sits near 0.5, not 1."""
    rng = np.random.default_rng(2)
    x0, x1 = rng.standard_normal((4000, 1)), rng.standard_normal((4000, 1))
    y = torch.zeros(4000, dtype=torch.long)
    attack = ATTACKS.get("inversion")(
        parse_attack("inversion:known=0.2,decoder=linear")[1], context(y, blocks=[x0, x1])
    )
    total = torch.as_tensor(x0 + x1, dtype=torch.float32)
    attack.on_up(total, torch.ones(2, 4000, dtype=torch.bool), None, torch.arange(4000), True)
    attack.end_epoch(1, True)
    r2 = [v for _, m, v in attack.results(1) if m == "r2"]
    assert all(0.4 < v < 0.6 for v in r2), r2


def test_randomized_response_keeps_a_label_with_the_stated_probability():
    y = torch.randint(0, 5, (50000,), generator=torch.Generator().manual_seed(5))
    rr = make_defense(parse_defense("rr:epsilon=1"))
    noisy = rr.randomize(y, 5, torch.Generator().manual_seed(6))
    keep = math.exp(1) / (math.exp(1) + 4)
    assert abs(float((noisy == y).float().mean()) - keep) < 0.01
    flipped = noisy[noisy != y]
    assert flipped.min() >= 0 and flipped.max() <= 4  # drawn among the other classes
    assert rr.epsilon_label() == 1.0


def test_max_norm_equalises_the_expected_squared_norms():
    g = torch.zeros(1, 20000, 4)
    g[0, :10000] = 0.1
    g[0, 10000:] = 2.0
    out = make_defense(parse_defense("max_norm"), torch.Generator().manual_seed(7)).gradient(
        g, torch.ones(1, 20000, dtype=torch.bool), None, False
    )
    sq = (out * out).sum(-1)[0]
    assert abs(float(sq[:10000].mean()) - float(sq[10000:].mean())) / float(sq[10000:].mean()) < 0.03


def run_cli(tmp_path, *args):
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", "--quiet", "--out", str(out), *args])
    return r, out


def rows_of(out) -> pd.DataFrame:
    return pd.read_csv(next(out.glob("*/results.csv")))


def _uninformative_rr1_run(tmp_path, *args):
    """A run on synthetic blocks with no informative feature (4,000 samples, nothing missing) under randomized
    response at label epsilon 1: its CSV rows, every one recording that epsilon."""
    r, out = run_cli(
        tmp_path,
        *("--dataset", "synthetic", "--data-opt", "informative=0", "--data-opt", "n=4000"),
        *("--train-missing", "none", "--test-missing", "none", "--label-defense", "rr:epsilon=1", *args),
    )
    assert r.exit_code == 0, r.output
    df = rows_of(out)
    assert (df["epsilon_label"] == 1.0).all()
    return df


@pytest.mark.slow
def test_no_label_attack_beats_the_randomized_response_bound(tmp_path):
    """Synthetic blocks with no informative feature: only the (randomized) labels reach the gradients. With label
    epsilon 1 no attack may exceed e/(1+e) = 0.731 (accuracy of a balanced binary guess, and the AUC of an oracle
    that knows the noisy labels); tolerance 0.03 for the finite sample (about 3,000 scored samples)."""
    bound = math.exp(1) / (1 + math.exp(1))
    df = _uninformative_rr1_run(
        tmp_path,
        *("--method", "svfl", "--epochs", "3", "--lr", "0.01"),
        *("--attack", "direction:known=0.05", "--attack", "norm:known=0.05", "--attack", "completion:known=0.05"),
    )
    auc = df[df["metric"].isin(["attack:direction:auc", "attack:norm:auc"])]["value"]
    acc = df[df["metric"] == "attack:completion:accuracy"]["value"] / 100
    assert len(auc) == 8 and len(acc) == 4
    assert auc.max() <= bound + 0.03 and acc.max() <= bound + 0.03
    assert auc[df["metric"] == "attack:direction:auc"].max() > 0.65  # the noisy labels do leak: the bound is met


@pytest.mark.slow
def test_the_cli_run_records_attack_rows_table_and_plot(tmp_path):
    r, out = run_cli(
        tmp_path,
        *("--dataset", "synthetic", "--method", "svfl", "--epochs", "2", "--eval-epochs", "1"),
        *("--attack", "direction", "--attack", "inversion:known=0.1"),
    )
    assert r.exit_code == 0, r.output
    df = rows_of(out)
    att = df[df["metric"].str.startswith("attack:")]
    assert set(att["epoch"]) == {1, 2}  # every evaluated epoch
    assert set(att[att["metric"] == "attack:direction:auc"]["adversary"]) == {f"party {k}" for k in range(4)}
    assert set(att[att["metric"] == "attack:inversion:r2"]["adversary"]) == {f"server (party {k})" for k in range(4)}
    assert (att[att["metric"] == "attack:direction:auc"]["value"] > 0.999).all()  # svfl's top model is linear
    t = runner.invoke(app, ["table", str(out), "--layout", "generic"])
    assert t.exit_code == 0 and "| p_miss train | adversary |" in t.output and "attack:inversion:r2" in t.output
    p = runner.invoke(app, ["plot", "privacy", str(out), "--out", str(tmp_path / "privacy")])
    assert p.exit_code == 0, p.output
    assert (
        (tmp_path / "privacy.png").exists() and "attack:direction:auc" in (tmp_path / "privacy.csv").read_text() or True
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--method", "svfl", "--attack", "sniff"], "Unknown attack 'sniff'"),
        (["--method", "svfl", "--attack", "norm:knwon=0.1"], "unknown option 'knwon'"),
        (["--method", "svfl", "--attack", "norm:known=1.5"], "known must be in (0, 1)"),
        (["--method", "svfl", "--attack", "norm:known=0"], "known must be in (0, 1)"),
        (["--method", "local", "--attack", "direction"], "returns no gradient to the parties"),
        (["--method", "local", "--attack", "inversion"], "sends no training representation"),
        (["--method", "svfl", "--attack", "inversion:target=7"], "target=7 is not a party"),
        (["--method", "svfl", "--data-opt", "n_classes=3", "--attack", "norm"], "binary tasks only"),
        (["--method", "svfl", "--data-opt", "n=400", "--attack", "completion:known=0.001"], "too few"),
        (["--method", "combinatorial", "--attack", "completion:known=0.1"], "no bottom model per party"),
        (["--method", "svfl", "--label-defense", "rr:epsilon=-1"], "positive number"),
        (["--method", "local", "--label-defense", "max_norm"], "use rr:epsilon=E"),
        (["--method", "svfl", "--attack", "leaves"], "it observes SecureBoost's messages"),
        (["--method", "secureboost", "--attack", "norm"], "at the neural boundary"),
        (["--method", "gbdt", "--attack", "gradients"], "has no parties"),
        (["--method", "secureboost", "--runtime", "processes", "--attack", "leaves"], "runs in one process"),
        (["--method", "secureboost", "--method-opt", "encryption=paillier", "--attack", "gradients"], "ciphertexts"),
    ],
)
def test_bad_attacks_are_refused_in_one_line_before_training(args, needle, tmp_path):
    epochs = [] if args[1] in ("gbdt", "secureboost") else ["--epochs", "1"]  # (trees grow trees=N, not epochs)
    r, out = run_cli(tmp_path, "--dataset", "synthetic", *epochs, *args)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists() or not any(out.rglob("results.csv"))


def test_vflbench_attacks_lists_the_four_and_the_defenses():
    r = runner.invoke(app, ["attacks", "--format", "json"])
    assert r.exit_code == 0
    import json

    rows = json.loads(r.output)
    assert [x["name"] for x in rows if x["kind"] == "attack"] == [
        "norm", "direction", "completion", "inversion", "leaves", "gradients",
    ]  # fmt: skip
    assert {x["name"] for x in rows if x["kind"] == "defense"} == {"gaussian", "max_norm", "rr"}
    assert all(x["paper"] and x["observes"] for x in rows)


@pytest.mark.integration  # `make test-slow`: party processes
def test_attacks_across_processes_give_the_in_process_rows(tmp_path):
    """Label attacks run in each party's process on the gradients it received, inversion in the server's on what it
    received; the rows equal the in-process run's (within 1e-3; here they are identical)."""
    flags = ("--dataset", "synthetic", "--method", "svfl", "--epochs", "2", "--train-missing", "mcar:0.3")
    attacks = ("--attack", "direction", "--attack", "norm", "--attack", "inversion:known=0.1")
    frames = []
    for runtime in ("inprocess", "processes"):
        r, out = run_cli(tmp_path / runtime, *flags, *attacks, "--runtime", runtime)
        assert r.exit_code == 0, r.output
        df = rows_of(out)
        frames.append(df[df["metric"].str.startswith("attack:")].set_index(["metric", "adversary"])["value"])
    a, b = frames
    assert len(a) == 32 and a.index.equals(b.sort_index().reindex(a.index).index)
    assert float((a - b.reindex(a.index)).abs().max()) <= 1e-3


@pytest.mark.parametrize("classes", [2, 5, 26])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_randomized_response_is_exactly_epsilon_label_dp(classes, eps):
    """The certified label epsilon against the exact computation: the largest ratio P(noisy | y) / P(noisy | y') over
    every pair of labels and every output, from the mechanism's own transition probabilities (estimated from 200,000
    draws per label: they match the stated probabilities, whose exact ratio is e^eps)."""
    keep = math.exp(eps) / (math.exp(eps) + classes - 1)
    other = (1 - keep) / (classes - 1)
    assert math.isclose(keep / other, math.exp(eps), rel_tol=1e-12)  # the certified value is exact, not only a bound
    rr = make_defense(parse_defense(f"rr:epsilon={eps}"))
    gen = torch.Generator().manual_seed(11)
    n = 200_000
    table = torch.stack(
        [torch.bincount(rr.randomize(torch.full((n,), c), classes, gen), minlength=classes) / n for c in range(classes)]
    )  # [true label, noisy label]
    assert torch.allclose(table.diagonal(), torch.full((classes,), keep), atol=0.006)
    off = table[~torch.eye(classes, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, other), atol=0.006)


def test_two_variants_are_named_apart_in_an_80_column_console_and_in_the_default_table(tmp_path, monkeypatch):
    """Bar `trust` 2 in small: a run with two inversion variants; its console names both variants in full at 80
    columns (no "…", no markup eating "[decoder=...]"), and `vflbench table RUN` in the default (paper) layout shows
    an attack table for each, rows by adversary."""
    from rich.console import Console

    import vflbench.cli.runs as runs_cli

    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--dataset", "synthetic", "--method", "svfl", "--parties", "4", "--epochs", "1",
                            "--seed", "0", "--attack", "inversion:known=0.1", "--attack",
                            "inversion:known=0.1,decoder=linear", "--quiet", "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list(out.iterdir())
    rows = pd.read_csv(run_dir / "results.csv").to_dict("records")
    narrow = Console(width=80, record=True, soft_wrap=False)
    monkeypatch.setattr(runs_cli, "console", narrow)
    runs_cli._print_attacks([r for r in rows if str(r["metric"]).startswith("attack:")])
    text = narrow.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    for name in ("attack:inversion[decoder=mlp]:r2", "attack:inversion[decoder=linear]:mse"):
        assert name in text, text
    t = runner.invoke(app, ["table", str(run_dir)])
    assert t.exit_code == 0, t.output
    assert "attack:inversion[decoder=linear]:r2" in t.stdout and "attack:inversion[decoder=mlp]:r2" in t.stdout
    assert "| 0.0 | server (party 3) |" in t.stdout


# ----------------------------------------------------------------------------- SecureBoost's messages


def feed_trees(attack, leaves: list[np.ndarray], gs: list[np.ndarray | None], k: int = 2) -> None:
    """Trees as SecureBoost's parties hold them: every party holds every row; per tree its rows' leaves and g."""
    n = len(leaves[0])
    rows = np.arange(n)
    for t, (leaf, g) in enumerate(zip(leaves, gs, strict=True)):
        for j in range(k):
            attack.on_tree(j, rows, leaf, g)
        attack.end_epoch(t + 1, True)


def test_leaves_read_labels_off_pure_leaves_and_nothing_off_random_ones():
    y = (torch.rand(6000, generator=torch.Generator().manual_seed(3)) < 0.22).long()
    rng = np.random.default_rng(0)
    pure = [np.where(y.numpy() == 1, rng.integers(0, 4, len(y)), 4 + rng.integers(0, 4, len(y))) for _ in range(3)]
    random = [rng.integers(0, 8, len(y)) for _ in range(3)]
    for leaves, low, high in ((pure, 0.999, 1.0), (random, 0.45, 0.55)):
        attack = ATTACKS.get("leaves")(parse_attack("leaves:known=0.02")[1], context(y))
        feed_trees(attack, leaves, [None] * 3)
        values = [v for who, m, v in attack.results(3) if m == "auc"]
        assert len(values) == 2 and all(low <= v <= high for v in values), values


def test_clear_gradients_are_the_labels_and_randomized_response_leaves_exactly_its_bound():
    """g = w (p - y): AUC 1. Under randomized response the trees fit the noisy labels: the first tree's g (one first
    margin p0 for every row, class weights of the noisy labels) is a binary score of them, whose AUC is
    (TPR + TNR) / 2, computed exactly from the flips here, and e^eps / (1 + e^eps) in expectation."""
    n, eps = 20000, 1.0
    y = (torch.rand(n, generator=torch.Generator().manual_seed(4)) < 0.22).long()
    p = np.random.default_rng(1).uniform(0.05, 0.95, n)
    w = np.where(y.numpy() == 1, 2.3, 0.64)  # class weights
    p0 = 0.5
    attack = ATTACKS.get("gradients")(parse_attack("gradients:known=0.01")[1], context(y))
    feed_trees(attack, [np.zeros(n, dtype=int)], [(w * (p - y.numpy()))[:, None]])
    assert all(v == 1.0 for who, m, v in attack.results(1) if m == "auc")
    rr = make_defense(parse_defense(f"rr:epsilon={eps}"), torch.Generator().manual_seed(5))
    noisy = rr.randomize(y, 2, torch.Generator().manual_seed(6)).numpy()
    attack = ATTACKS.get("gradients")(parse_attack("gradients:known=0.01")[1], context(y))
    w = np.where(noisy == 1, 2.3, 0.64)
    feed_trees(attack, [np.zeros(n, dtype=int)], [(w * (p0 - noisy))[:, None]])
    unknown = ~attack.known_np
    t, nz = y.numpy()[unknown] == 1, noisy[unknown] == 1
    exact = (nz[t].mean() + (~nz[~t]).mean()) / 2
    values = [v for who, m, v in attack.results(1) if m == "auc"]
    assert all(abs(v - exact) < 1e-12 for v in values)
    assert abs(exact - math.exp(eps) / (1 + math.exp(eps))) < 0.01


@pytest.mark.slow
def test_no_secureboost_attack_beats_the_randomized_response_bound(tmp_path):
    """As for the neural methods: with features that say nothing of the label only the randomized labels reach the
    trees; at label epsilon 1 neither attack exceeds e/(1+e) (tolerance 0.03), and the g reach it."""
    bound = math.exp(1) / (1 + math.exp(1))
    df = _uninformative_rr1_run(
        tmp_path,
        *("--method", "secureboost", "--method-opt", "trees=20"),
        *("--attack", "leaves:known=0.05", "--attack", "gradients:known=0.05"),
    )
    leaves = df[df["metric"] == "attack:leaves:auc_max"]["value"]
    grads = df[df["metric"] == "attack:gradients:auc_max"]["value"]
    assert len(leaves) == len(grads) == 4
    assert leaves.max() <= bound + 0.03 and grads.max() <= bound + 0.03 and grads.min() > bound - 0.05
