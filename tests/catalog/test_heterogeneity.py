"""Heterogeneity estimators against Dirichlet partitions with known alpha."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import gammaln, rel_entr

from airplan_qo.catalog.heterogeneity import (
    dirichlet_alpha,
    dirichlet_alpha_moments,
    kl_matrix,
    label_entropy,
    paper_alpha,
)
from airplan_qo.errors import ValidationError

C = 10


def dirichlet_counts(alpha, seed, n_clients=100, n_per_client=100, n_classes=C):
    """p_i ~ Dir(alpha * 1_C), counts_i ~ Multinomial(n_i, p_i); n_i fixed or an array."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_classes, alpha), size=n_clients)
    n = np.broadcast_to(n_per_client, (n_clients,))
    return np.array([rng.multinomial(k, pi) for k, pi in zip(n, p)])


def polya_loglik(a, counts):
    """Symmetric Dirichlet-multinomial log-likelihood (without the multinomial coefficient)."""
    n_i = counts.sum(axis=1)
    c = counts.shape[1]
    return float(np.sum(gammaln(c * a) - gammaln(n_i + c * a))
                 + np.sum(gammaln(counts + a) - gammaln(a)))


# ---- the Dirichlet estimators -------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.1, 0.5, 1.0, 5.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dirichlet_mle_within_factor_1_5(alpha, seed):
    est = dirichlet_alpha(dirichlet_counts(alpha, seed))
    assert alpha / 1.5 <= est <= alpha * 1.5


@pytest.mark.parametrize("alpha", [0.1, 0.5, 1.0, 5.0])
def test_dirichlet_moments_within_factor_1_5(alpha):
    est = np.median([dirichlet_alpha_moments(dirichlet_counts(alpha, s)) for s in range(3)])
    assert alpha / 1.5 <= est <= alpha * 1.5


@pytest.mark.parametrize("alpha, seed", [(0.05, 3), (0.7, 4), (3.0, 5), (20.0, 6)])
def test_dirichlet_mle_maximises_polya_likelihood(alpha, seed):
    counts = dirichlet_counts(alpha, seed, n_clients=60, n_per_client=40)
    est = dirichlet_alpha(counts)
    best = optimize.minimize_scalar(lambda t: -polya_loglik(math.exp(t), counts),
                                    bounds=(-12, 12), method="bounded",
                                    options={"xatol": 1e-10})
    assert est == pytest.approx(math.exp(best.x), rel=1e-4)
    assert polya_loglik(est, counts) >= -best.fun - 1e-8


def test_dirichlet_handles_small_and_unequal_clients():
    """n_i between 5 and 20: the Polya likelihood models the sampling noise, the proxy does not."""
    rng = np.random.default_rng(11)
    n = rng.integers(5, 21, size=300)
    for alpha in (0.1, 0.5, 2.0):
        counts = dirichlet_counts(alpha, 12, n_clients=300, n_per_client=n)
        assert alpha / 1.5 <= dirichlet_alpha(counts) <= alpha * 1.5
        assert alpha / 1.5 <= dirichlet_alpha_moments(counts) <= alpha * 1.5
    assert paper_alpha(dirichlet_counts(2.0, 12, n_clients=300, n_per_client=n)) < 0.6


@pytest.mark.parametrize("seed", range(4))
def test_iid_counts_give_large_alpha(seed):
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(100, np.full(C, 1.0 / C), size=100)
    assert dirichlet_alpha(counts) > 100
    assert dirichlet_alpha_moments(counts) > 100


def test_exactly_uniform_counts_are_infinite():
    counts = np.full((20, C), 7)
    assert dirichlet_alpha(counts) == math.inf
    assert dirichlet_alpha_moments(counts) == math.inf
    assert paper_alpha(counts) == math.inf


def test_single_class_clients_give_tiny_alpha():
    counts = np.zeros((30, C))
    counts[np.arange(30), np.arange(30) % C] = 50
    assert dirichlet_alpha_moments(counts) == 0.0
    assert dirichlet_alpha(counts) < 1e-3


def test_real_valued_counts_accepted():
    counts = dirichlet_counts(0.5, 0)
    base = dirichlet_alpha(counts)
    assert dirichlet_alpha(counts.astype(float)) == base
    jitter = np.random.default_rng(0).uniform(0, 0.05, size=counts.shape)
    assert dirichlet_alpha(counts + jitter) == pytest.approx(base, rel=0.05)


# ---- the paper's proxy --------------------------------------------------------------------------

def mean_paper_alpha(alpha, seeds=range(3)):
    return float(np.mean([paper_alpha(dirichlet_counts(alpha, s)) for s in seeds]))


def test_paper_alpha_matches_its_formula():
    counts = dirichlet_counts(0.3, 7, n_clients=6)
    q = counts / counts.sum(axis=1, keepdims=True) + 1e-3
    p = q / q.sum(axis=1, keepdims=True)
    total = sum(stats.entropy(p[i], p[j]) for i in range(6) for j in range(i + 1, 6))
    assert paper_alpha(counts) == pytest.approx(1.0 / (total / 15), rel=1e-12)
    # only pairs i < j enter, and KL is asymmetric: client order changes the value
    assert paper_alpha(counts[::-1]) != pytest.approx(paper_alpha(counts), rel=1e-6)


def test_paper_alpha_monotone_on_average_but_saturated():
    grid = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 100.0, 1e4]
    means = [mean_paper_alpha(a) for a in grid]
    assert np.all(np.diff(means) > 0)
    # Lower end: a 10x change of alpha moves the proxy by < 1.5x, and it overestimates 10-20x.
    assert means[2] / means[0] < 1.5
    assert means[0] > 10 * 0.01
    # Upper end: multinomial noise of 100 samples caps it near (n/(C-1)) ~ 11, whatever alpha is.
    assert means[-1] < 15 and means[-2] < 15
    # Meanwhile the Dirichlet MLE follows alpha across the same range.
    mle = [dirichlet_alpha(dirichlet_counts(a, 0)) for a in (0.01, 0.1, 1.0, 100.0)]
    for a, est in zip((0.01, 0.1, 1.0, 100.0), mle):
        assert a / 1.5 <= est <= a * 1.5 or (a == 100.0 and est > 50)


def test_kl_matrix():
    counts = dirichlet_counts(1.0, 3, n_clients=5)
    kl = kl_matrix(counts)
    assert np.allclose(np.diag(kl), 0.0) and np.all(kl >= -1e-12)
    q = counts / counts.sum(axis=1, keepdims=True) + 1e-3
    p = q / q.sum(axis=1, keepdims=True)
    assert kl[1, 3] == pytest.approx(stats.entropy(p[1], p[3]), rel=1e-10)
    assert kl[1, 3] != pytest.approx(kl[3, 1], rel=1e-6)


@pytest.mark.parametrize("alpha, n_clients, n_classes", [(0.05, 30, 10), (1.0, 40, 100),
                                                         (1e3, 20, 3)])
def test_kl_matrix_equals_rel_entr_over_every_pair(alpha, n_clients, n_classes):
    counts = dirichlet_counts(alpha, 4, n_clients=n_clients, n_classes=n_classes)
    q = counts / counts.sum(axis=1, keepdims=True) + 1e-3
    p = q / q.sum(axis=1, keepdims=True)
    reference = rel_entr(p[:, None, :], p[None, :, :]).sum(axis=2)
    np.testing.assert_allclose(kl_matrix(counts), reference, rtol=0, atol=1e-13)


def test_paper_alpha_same_for_counts_and_probabilities():
    counts = dirichlet_counts(0.5, 2, n_clients=10)
    probs = counts / counts.sum(axis=1, keepdims=True)
    assert paper_alpha(counts) == pytest.approx(paper_alpha(probs), rel=1e-12)


# ---- entropy ------------------------------------------------------------------------------------

def test_label_entropy():
    assert label_entropy(np.full((3, C), 5)) == pytest.approx(math.log(C))
    one_hot = np.eye(C)[:4] * 9
    assert label_entropy(one_hot) == 0.0
    mixed = np.array([[1, 1, 0, 0], [4, 0, 0, 0]])
    assert label_entropy(mixed) == pytest.approx(math.log(2) / 2)
    iid = label_entropy(dirichlet_counts(100.0, 0))
    skew = label_entropy(dirichlet_counts(0.1, 0))
    assert skew < iid < math.log(C)
    counts = dirichlet_counts(0.1, 5, n_clients=50)  # many zero cells
    per_client = [stats.entropy(row) for row in counts]  # scipy normalises each row
    assert label_entropy(counts) == pytest.approx(np.mean(per_client), rel=1e-13)


# ---- bad inputs ---------------------------------------------------------------------------------

BAD = [
    (np.array([[1, 2], [-1, 3]]), "non-negative"),
    (np.array([[1, 2], [0, 0]]), "empty client"),
    (np.array([1, 2, 3]), "2-D"),
    (np.ones((2, 3, 4)), "2-D"),
    (np.ones((3, 1)), "2 classes"),
    (np.array([[1.0, np.nan], [1.0, 2.0]]), "finite"),
    (np.array([[1.0, np.inf], [1.0, 2.0]]), "finite"),
    (np.array([[True, False], [True, True]]), "numeric"),
    (np.array([["a", "b"], ["c", "d"]]), "numeric"),
    (np.zeros((0, 3)), "at least"),
]


@pytest.mark.parametrize("fn", [dirichlet_alpha, dirichlet_alpha_moments, paper_alpha,
                                label_entropy, kl_matrix])
@pytest.mark.parametrize("counts, message", BAD)
def test_bad_counts_rejected(fn, counts, message):
    with pytest.raises(ValidationError, match=message):
        fn(counts)


@pytest.mark.parametrize("fn", [dirichlet_alpha, dirichlet_alpha_moments, paper_alpha])
def test_alpha_estimators_need_two_clients(fn):
    with pytest.raises(ValidationError, match="at least 2 clients"):
        fn(np.array([[3, 4, 5]]))


def test_bad_parameters_rejected():
    counts = dirichlet_counts(1.0, 0, n_clients=5)
    with pytest.raises(ValidationError, match="smoothing"):
        paper_alpha(counts, smoothing=0.0)
    with pytest.raises(ValidationError, match="alpha_min"):
        dirichlet_alpha(counts, alpha_min=10.0, alpha_max=1.0)
    with pytest.raises(ValidationError, match="at most 1 sample"):
        dirichlet_alpha(np.eye(C)[:5])
