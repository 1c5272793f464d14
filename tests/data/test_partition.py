"""Partitioners: disjointness, coverage, reproducibility, and the Dirichlet label-skew model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airplan_qo.data import PARTITIONERS, Partition, dirichlet, iid, partition, shards
from airplan_qo.errors import DataError, UnknownNameError, ValidationError


def balanced_labels(n: int, n_classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.arange(n) % n_classes)


def assert_disjoint_in_range(part: Partition, n: int) -> None:
    everything = np.concatenate(part.indices)
    assert everything.dtype == np.int64
    assert everything.size == np.unique(everything).size
    assert everything.size == 0 or (everything.min() >= 0 and everything.max() < n)
    assert part.sizes.sum() == everything.size


def mean_label_entropy(counts: np.ndarray) -> float:
    q = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(q), 0.0)
    return float(-terms.sum(axis=1).mean())


def test_registry():
    assert PARTITIONERS.names() == ["dirichlet", "iid", "natural", "shards"]
    with pytest.raises(UnknownNameError, match="did you mean 'dirichlet'"):
        partition("dirichlet_", balanced_labels(100), 4, seed=0, alpha=1.0)


def test_partition_rejects_unknown_and_missing_params():
    y = balanced_labels(100)
    with pytest.raises(ValidationError, match="no parameter 'alpha'"):
        partition("iid", y, 4, seed=0, alpha=0.5)
    with pytest.raises(ValidationError, match="needs the parameter 'alpha'"):
        partition("dirichlet", y, 4, seed=0)


@pytest.mark.parametrize("scheme, params", [("iid", {}), ("shards", {"shards_per_client": 3})])
def test_iid_and_shards_cover_everything(scheme, params):
    y = balanced_labels(1003)
    part = partition(scheme, y, 10, seed=7, **params)
    assert part.n_clients == 10 and part.scheme == scheme and part.seed == 7
    assert_disjoint_in_range(part, y.size)
    assert part.sizes.sum() == y.size and part.unused().size == 0
    assert part.sizes.max() - part.sizes.min() <= (1 if scheme == "iid" else 3)
    assert np.all(part.assignment() >= 0)


def test_shards_are_label_pure():
    y = balanced_labels(1000)
    part = shards(y, 10, shards_per_client=2, seed=0)
    counts = part.label_counts(y, 10)
    # 20 shards of 50 over 10 labels of 100: each shard holds one label, so <= 2 per client
    assert np.all((counts > 0).sum(axis=1) <= 2)
    assert part.params == {"shards_per_client": 2}


def test_iid_labels_near_uniform():
    y = balanced_labels(5000)
    counts = iid(y, 5, seed=0).label_counts(y, 10)
    assert np.all(np.abs(counts - 100) < 40)


@pytest.mark.parametrize("scheme, params", [("iid", {}), ("shards", {}),
                                            ("dirichlet", {"alpha": 0.3})])
def test_seeds_reproduce_and_differ(scheme, params):
    y = balanced_labels(600)
    a = partition(scheme, y, 6, seed=11, **params)
    b = partition(scheme, y, 6, seed=11, **params)
    c = partition(scheme, y, 6, seed=12, **params)
    assert a == b
    for left, right in zip(a.indices, b.indices):
        np.testing.assert_array_equal(left, right)
    assert a != c
    gen = partition(scheme, y, 6, seed=np.random.default_rng(11), **params)
    assert gen.seed is None and gen.n_clients == 6


def test_dirichlet_sizes_and_documented_coverage():
    y = balanced_labels(1007)
    part = dirichlet(y, 10, 0.5, seed=0)
    assert_disjoint_in_range(part, y.size)
    assert np.all(part.sizes == 100)  # n // N each
    assert part.unused().size == 7  # n mod N samples stay unused
    assert part.alpha == 0.5 and part.params["samples_per_client"] == 100
    small = dirichlet(y, 10, 0.5, seed=0, samples_per_client=30)
    assert np.all(small.sizes == 30) and small.unused().size == 1007 - 300


def test_dirichlet_exact_when_pools_are_large():
    # plenty of samples per class: no pool runs out, so the draw is the exact model
    y = balanced_labels(20000)
    part = dirichlet(y, 5, 1.0, seed=3, samples_per_client=50)
    assert part.redrawn == 0


def test_dirichlet_redraws_when_pools_run_out():
    y = balanced_labels(200, n_classes=2)
    part = dirichlet(y, 10, 0.05, seed=0)
    assert part.redrawn > 0
    assert np.all(part.sizes == 20) and part.unused().size == 0


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = balanced_labels(6000)
    entropies = []
    for alpha in (0.05, 0.3, 1.0, 10.0, 1000.0):
        counts = np.mean([
            mean_label_entropy(dirichlet(y, 30, alpha, seed=s).label_counts(y, 10))
            for s in range(3)
        ])
        entropies.append(counts)
    assert all(a < b for a, b in zip(entropies, entropies[1:])), entropies
    assert entropies[0] < 0.6 * np.log(10)
    assert entropies[-1] > 0.95 * np.log(10)


def test_dirichlet_small_alpha_concentrates_labels():
    y = balanced_labels(5000)
    counts = dirichlet(y, 20, 0.01, seed=0).label_counts(y, 10)
    top_share = counts.max(axis=1) / counts.sum(axis=1)
    assert np.median(top_share) > 0.9


def test_dirichlet_min_per_client():
    y = balanced_labels(100)
    part = dirichlet(y, 10, 0.1, seed=0, min_per_client=10)
    assert part.sizes.min() >= 10
    with pytest.raises(DataError, match="min_per_client=10.*needs 110"):
        dirichlet(y, 11, 0.1, seed=0)
    with pytest.raises(ValidationError, match="below min_per_client"):
        dirichlet(y, 5, 0.1, seed=0, samples_per_client=5)
    assert dirichlet(y, 50, 0.1, seed=0, min_per_client=2).sizes.min() == 2


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan"), float("inf"), "big"])
def test_dirichlet_alpha_validated(alpha):
    with pytest.raises(ValidationError, match="alpha"):
        dirichlet(balanced_labels(100), 4, alpha, seed=0)


def test_dirichlet_n_classes_includes_absent_classes():
    y = balanced_labels(400, n_classes=4)
    part = dirichlet(y, 4, 1.0, seed=0, n_classes=6)
    assert part.label_counts(y, 6).shape == (4, 6)
    with pytest.raises(DataError, match="outside n_classes"):
        dirichlet(y, 4, 1.0, seed=0, n_classes=3)


@pytest.mark.parametrize("n_clients, error", [(1, ValidationError), (0, ValidationError),
                                              (2.5, ValidationError), (101, DataError)])
def test_n_clients_validated(n_clients, error):
    for scheme, params in (("iid", {}), ("shards", {}), ("dirichlet", {"alpha": 1.0})):
        with pytest.raises(error, match="n_clients"):
            partition(scheme, balanced_labels(100), n_clients, seed=0, **params)


@pytest.mark.parametrize("y", [np.array([]), np.zeros((3, 3), int), np.array([0.5, 1.0]),
                               np.array([-1, 0, 1])])
def test_bad_labels(y):
    with pytest.raises(DataError, match="labels"):
        iid(y, 2, seed=0)


def test_bad_seed():
    with pytest.raises(ValidationError, match="seed"):
        iid(balanced_labels(10), 2, seed=-3)


def test_shards_too_many():
    with pytest.raises(DataError, match="shards"):
        shards(balanced_labels(10), 6, shards_per_client=2, seed=0)


def test_partition_value_checks_overlap_and_range():
    with pytest.raises(DataError, match="already used"):
        Partition(indices=[np.array([0, 1]), np.array([1, 2])], n_samples=3, scheme="custom")
    with pytest.raises(DataError, match="outside"):
        Partition(indices=[np.array([0, 5])], n_samples=3, scheme="custom")
    part = Partition(indices=[np.array([2, 0]), np.array([3])], n_samples=5, scheme="custom")
    np.testing.assert_array_equal(part.indices[0], [0, 2])
    np.testing.assert_array_equal(part.assignment(), [0, -1, 0, 1, -1])
    np.testing.assert_array_equal(part.unused(), [1, 4])
    np.testing.assert_array_equal(part.label_counts(np.array([0, 1, 1, 2, 0]), 3),
                                  [[1, 1, 0], [0, 0, 1]])
    with pytest.raises(DataError, match="3 labels"):
        part.label_counts(np.array([0, 1, 1]))
    assert not part.indices[0].flags.writeable


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=st.integers(20, 600), n_clients=st.integers(2, 30),
       alpha=st.floats(0.001, 1000.0), seed=st.integers(0, 2**31 - 1),
       n_classes=st.integers(1, 12), min_per_client=st.integers(0, 15))
def test_dirichlet_properties(n, n_clients, alpha, seed, n_classes, min_per_client):
    y = np.random.default_rng(seed).integers(0, n_classes, size=n)
    if n_clients > n or n_clients * min_per_client > n:
        with pytest.raises(DataError):
            dirichlet(y, n_clients, alpha, seed=seed, min_per_client=min_per_client)
        return
    part = dirichlet(y, n_clients, alpha, seed=seed, min_per_client=min_per_client)
    assert_disjoint_in_range(part, n)
    assert np.all(part.sizes == n // n_clients)
    assert part.sizes.min() >= min_per_client
    assert part.unused().size == n % n_clients
    counts = part.label_counts(y)
    assert counts.sum() == n - n % n_clients
    np.testing.assert_array_equal(counts.sum(axis=0) + np.bincount(y[part.unused()],
                                                                   minlength=counts.shape[1]),
                                  np.bincount(y, minlength=counts.shape[1]))
    assert part == dirichlet(y, n_clients, alpha, seed=seed, min_per_client=min_per_client)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(2, 400), n_clients=st.integers(2, 40), k=st.integers(1, 4),
       seed=st.integers(0, 2**31 - 1))
def test_iid_and_shards_properties(n, n_clients, k, seed):
    y = np.random.default_rng(seed).integers(0, 5, size=n)
    if n_clients > n:
        with pytest.raises(DataError):
            iid(y, n_clients, seed=seed)
        return
    for part in (iid(y, n_clients, seed=seed),
                 shards(y, n_clients, k, seed=seed) if n_clients * k <= n else None):
        if part is None:
            continue
        assert_disjoint_in_range(part, n)
        assert part.unused().size == 0 and part.sizes.min() >= 1
