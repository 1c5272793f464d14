"""The generated data-hungry benchmarks (mnist1d, leaf_synthetic) and the natural partition."""

import numpy as np
import pytest

from airplan_qo.data import DATASETS, Dataset, dataset_info, load, partition, partition_dataset
from airplan_qo.data.generated import MNIST1D_TEMPLATES, mnist1d_signals
from airplan_qo.errors import DataError, ValidationError


def test_registered_and_shapes_known_without_loading():
    assert {"mnist1d", "leaf_synthetic"} <= set(DATASETS.names())
    assert dataset_info("mnist1d") == ((1, 40), 10)
    assert dataset_info("leaf_synthetic") == ((60,), 10)


def test_mnist1d_is_deterministic_balanced_and_standardised():
    a = load("mnist1d", seed=3, num_samples=600)
    b = load("mnist1d", seed=3, num_samples=600)
    c = load("mnist1d", seed=4, num_samples=600)
    assert a.input_shape == (1, 40) and a.n_train == 500 and a.n_test == 100
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.x_train, c.x_train)
    assert np.all(np.bincount(a.y_train, minlength=10) == 50)
    assert abs(float(a.x_train.mean())) < 1e-3 and abs(float(a.x_train.std()) - 1) < 1e-3
    with pytest.raises(ValidationError, match="num_samples"):
        load("mnist1d", num_samples=5)


def test_mnist1d_templates_start_at_zero_with_the_recipes_scale():
    assert MNIST1D_TEMPLATES.shape == (10, 12)
    assert np.allclose(MNIST1D_TEMPLATES[:, 0], 0)
    assert np.allclose(MNIST1D_TEMPLATES.std(axis=1), 1 / 6)


def test_mnist1d_signal_without_noise_or_transforms_is_the_dilated_template():
    """With no padding spread, scaling, translation, noise or shear, a signal is the template
    followed by zeros, resampled: its first point is 0 and it is the same for every draw."""
    y = np.array([3, 3, 7])
    x = mnist1d_signals(y, np.random.default_rng(0), padding=(36, 36), scale_coeff=0.0,
                        max_translation=1, corr_noise_scale=0.0, iid_noise_scale=0.0,
                        shear_scale=0.0)
    assert x.shape == (3, 40)
    assert np.allclose(x[0], x[1]) and not np.allclose(x[0], x[2])
    # 12 template points + 36 zeros stretched over 72, then resampled to 40: the template
    # covers the first ~ (11 / 47) of the signal; beyond it the signal is 0
    assert np.allclose(x[:, 11:], 0, atol=1e-6)
    assert np.isclose(x[0, 0], 0, atol=1e-6) and np.abs(x[0, :9]).max() > 0.05


def test_leaf_synthetic_users_power_law_and_heterogeneity():
    ds = load("leaf_synthetic", seed=1, n_users=30, alpha=1.0, beta=1.0)
    assert ds.groups is not None and ds.groups.shape == ds.y_train.shape
    sizes = np.bincount(ds.groups)
    assert sizes.size == 30 and sizes.min() >= 40 and sizes.max() <= 1000
    assert sizes.max() > 4 * np.median(sizes)             # a heavy tail of large users
    again = load("leaf_synthetic", seed=1, n_users=30, alpha=1.0, beta=1.0)
    assert np.array_equal(ds.x_train, again.x_train) and np.array_equal(ds.groups, again.groups)
    # users differ: label distributions of the larger users are far from the pooled one
    pooled = np.bincount(ds.y_train, minlength=10) / ds.n_train
    big = np.flatnonzero(sizes >= 150)
    tv = [0.5 * np.abs(np.bincount(ds.y_train[ds.groups == u], minlength=10) / sizes[u]
                       - pooled).sum() for u in big]
    assert np.mean(tv) > 0.3
    with pytest.raises(ValidationError, match="alpha"):
        load("leaf_synthetic", alpha=-1.0)


def test_natural_partition_gives_whole_users():
    ds = load("leaf_synthetic", seed=0, n_users=12)
    same = partition_dataset(ds, "natural", 12, seed=5)
    for c in range(12):
        assert np.array_equal(same.indices[c], np.flatnonzero(ds.groups == c))
    fewer = partition_dataset(ds, "natural", 5, seed=5)
    assert fewer.unused().size == 0 and fewer.params == {"users": 12}
    owners = fewer.assignment()
    for user in range(12):   # every user lies within one client
        assert np.unique(owners[ds.groups == user]).size == 1
    assert sorted(np.unique(owners[np.isin(ds.groups, range(12))], return_counts=False)) == \
        list(range(5))
    assert partition_dataset(ds, "natural", 5, seed=5) == fewer
    with pytest.raises(DataError, match="only 12 users for 13 clients"):
        partition_dataset(ds, "natural", 13, seed=0)


def test_natural_partition_needs_users():
    digits = load("digits")
    with pytest.raises(DataError, match="no natural per-user split"):
        partition_dataset(digits, "natural", 4, seed=0)
    with pytest.raises(DataError, match="needs the user of every sample"):
        partition("natural", digits.y_train, 4, seed=0, groups=None)
    x = np.zeros((6, 2))
    mine = Dataset.from_arrays("mine", x, [0, 1, 0, 1, 0, 1], x, [0, 1, 0, 1, 0, 1],
                               groups=[0, 0, 1, 1, 2, 2])
    part = partition_dataset(mine, "natural", 3, seed=0)
    assert [list(i) for i in part.indices] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(DataError, match="one user id per train sample"):
        Dataset.from_arrays("bad", x, [0] * 6, x, [0] * 6, groups=[0, 1])


def test_dirichlet_partition_of_generated_data_still_works():
    ds = load("mnist1d", num_samples=400)
    part = partition_dataset(ds, "dirichlet", 4, seed=0, alpha=0.3)
    assert part.scheme == "dirichlet" and part.sizes.sum() <= ds.n_train
