import numpy as np
import pytest

from vflbench.core.metrics import accuracy, auprc, compute_metrics, f1


def test_accuracy_averages_over_observed_clients():
    y = np.array([1, 0, 1])
    preds = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 1]])  # 3 clients x 3 samples
    valid = np.array([[1, 1, 1], [1, 0, 1], [0, 1, 1]], dtype=bool)
    # sample 0: clients 0,1 -> (1 + 0)/2; sample 1: clients 0,2 -> (1 + 0)/2; sample 2: all -> (0+0+1)/3
    assert accuracy(preds, valid, np.ones(3, bool), y) == pytest.approx(100 * (0.5 + 0.5 + 1 / 3) / 3)


def test_accuracy_skips_uncounted_and_all_missing():
    y = np.array([1, 1, 1])
    preds = np.array([[1, 0, 0]])
    valid = np.array([[1, 1, 0]], dtype=bool)  # sample 2: no predictor answers (all-missing)
    counted = np.array([True, False, True])  # sample 1 excluded (e.g. PlugVFL compat)
    assert accuracy(preds, valid, counted, y) == 100.0


def test_f1_rules():
    y = np.array([1, 1, 0, 0])
    preds = np.array([[1, 1, 0, 0], [0, 0, 0, 0]])  # client 0 perfect, client 1 never predicts positive
    valid = np.ones((2, 4), bool)
    c = np.ones(4, bool)
    assert f1(preds, valid, c, y, "per_predictor_mean", 2) == pytest.approx(0.5)  # LASER: mean over all K
    assert f1(preds, valid, c, y, "per_predictor_nonzero", 2) == pytest.approx(1.0)  # Local/Comb: zeros dropped
    assert f1(preds[:1], valid[:1], c, y, "single", 2) == pytest.approx(1.0)


def test_f1_per_predictor_only_on_its_samples():
    y = np.array([1, 0, 1, 0])
    preds = np.array([[1, 1, 0, 0], [1, 0, 1, 0]])
    valid = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)  # combinatorial-style: one answers each
    # predictor 0 on samples 0,1: TP=1, FP=1 -> F1 = 2/3 ; predictor 1 on samples 2,3: perfect
    assert f1(preds, valid, np.ones(4, bool), y, "per_predictor_nonzero", 2) == pytest.approx((2 / 3 + 1) / 2)


def test_compute_metrics_reports_counts_and_auprc():
    y = np.array([1, 0, 1, 0])
    preds = np.array([[1, 0, 1, 1]])
    scores = np.array([[0.9, 0.1, 0.8, 0.7]])
    m = compute_metrics(
        preds,
        np.ones((1, 4), bool),
        scores,
        np.array([1, 1, 1, 0], bool),
        y,
        rule="single",
        n_classes=2,
        positive_class=1,
    )
    assert m["accuracy"] == 100.0 and m["n_counted"] == 3 and m["n_test"] == 4
    assert m["f1"] == pytest.approx(100.0) and m["auprc"] == pytest.approx(100.0)
    assert auprc(scores, np.ones((1, 4), bool), np.ones(4, bool), y, "single") == pytest.approx(1.0)


def test_multiclass_f1_is_macro():
    y = np.array([0, 1, 2, 2])
    preds = np.array([[0, 1, 2, 1]])
    got = f1(preds, np.ones((1, 4), bool), np.ones(4, bool), y, "single", 3, None)
    assert got == pytest.approx(np.mean([1.0, 2 / 3, 2 / 3]))


def test_f1_and_average_precision_equal_scikit_learns_bit_for_bit():
    """vflbench computes F1 and AP itself (importing scikit-learn costs a run about a second): the same float64
    arithmetic, so the same numbers, bit for bit, on random cases with ties, absent classes and every class count."""
    import numpy as np
    from sklearn.metrics import average_precision_score as sk_ap
    from sklearn.metrics import f1_score as sk_f1

    from vflbench.core.metrics import average_precision_score, f1_score

    rng = np.random.default_rng(0)
    for case in range(300):
        n, c = int(rng.integers(1, 400)), int(rng.integers(2, 12))
        y = rng.integers(0, c, n)
        pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, c, n))
        if c == 2:
            pos = int(rng.integers(0, 2))
            assert f1_score(y, pred, [pos]) == sk_f1(y, pred, pos_label=pos, average="binary", zero_division=0)
        assert f1_score(y, pred, list(range(c))) == sk_f1(
            y, pred, labels=np.arange(c), average="macro", zero_division=0
        )
        truth = rng.random(n) < rng.random()
        if truth.all() or not truth.any():
            continue
        score = np.round(rng.random(n), int(rng.integers(1, 4))).astype(np.float32 if case % 2 else np.float64)
        assert average_precision_score(truth, score) == sk_ap(truth, score), case


def test_balanced_accuracy_is_scikit_learns_for_one_predictor_and_separates_a_majority_guess():
    """One answering predictor a sample: scikit-learn's balanced_accuracy_score (an independent implementation). On a
    92.5%-majority target, always guessing the majority scores 92.5 accuracy and 33.3 balanced accuracy; a model that
    finds half of each minority class scores 92.5 + 3.75 accuracy and 66.7 balanced accuracy."""
    from sklearn.metrics import balanced_accuracy_score

    from vflbench.core.metrics import balanced_accuracy, compute_metrics

    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 500)
    pred = np.where(rng.random(500) < 0.6, y, rng.integers(0, 4, 500))
    valid, counted = np.ones((1, 500), bool), np.ones(500, bool)
    assert balanced_accuracy(pred[None], valid, counted, y) == pytest.approx(100 * balanced_accuracy_score(y, pred))
    y = np.array([0] * 925 + [1] * 37 + [2] * 38)
    guess = np.zeros(1000, np.int64)
    m = compute_metrics(guess[None], np.ones((1, 1000), bool), None, np.ones(1000, bool), y, rule="single",
                        n_classes=3, positive_class=None)  # fmt: skip
    assert m["accuracy"] == pytest.approx(92.5) and m["balanced_accuracy"] == pytest.approx(100 / 3)
    half = guess.copy()
    half[925:943], half[962:981] = 1, 2
    m = compute_metrics(half[None], np.ones((1, 1000), bool), None, np.ones(1000, bool), y, rule="single",
                        n_classes=3, positive_class=None)  # fmt: skip
    assert m["balanced_accuracy"] == pytest.approx(100 * (1 + 18 / 37 + 19 / 38) / 3)
    two = compute_metrics(guess[None], np.ones((1, 1000), bool), None, np.ones(1000, bool), (y > 0).astype(int),
                          rule="single", n_classes=2, positive_class=1)  # fmt: skip
    assert "balanced_accuracy" not in two  # a binary target is ranked by AUPRC
