"""Count-Min sketch: dimensions, merge-as-sum, serialisation, the (eps, delta) guarantee, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airplan_qo.catalog.sketch import (
    MERSENNE_PRIME,
    CountMinSketch,
    dimensions,
    estimate_counts,
    estimate_distribution,
    sketch_labels,
)
from airplan_qo.errors import ValidationError


def brute_counts(items, keys):
    """Exact frequency of each of ``keys`` in ``items``."""
    uniq, cnt = np.unique(np.asarray(items), return_counts=True)
    lookup = dict(zip(uniq.tolist(), cnt.tolist()))
    return np.array([lookup.get(int(k), 0) for k in keys], dtype=np.int64)


def zipf_stream(rng, n, n_keys, s=1.1):
    """A skewed stream over ``n_keys`` keys (a few heavy hitters, a long tail)."""
    weights = 1.0 / np.arange(1, n_keys + 1) ** s
    keys = rng.permutation(10_000)[:n_keys]
    return keys[rng.choice(n_keys, size=n, p=weights / weights.sum())]


# ---- dimensions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("eps, delta", [(0.05, 0.01), (0.01, 1e-5), (0.2, 0.3), (0.5, 0.5)])
def test_dimensions_follow_the_formula(eps, delta):
    s = CountMinSketch.from_error(eps, delta, seed=0)
    assert s.shape == (math.ceil(math.log(1 / delta)), math.ceil(math.e / eps))
    assert dimensions(eps, delta) == s.shape
    assert s.nbytes == s.depth * s.width * 8
    assert s.total == 0


def test_paper_setting_is_5_by_55_not_4_by_55():
    assert CountMinSketch.from_error(0.05, 0.01, seed=3).shape == (5, 55)


@pytest.mark.parametrize("name, eps, delta", [
    ("eps", 0.0, 0.01), ("eps", 1.0, 0.01), ("eps", -0.1, 0.01), ("eps", float("nan"), 0.01),
    ("eps", "x", 0.01), ("delta", 0.05, 0.0), ("delta", 0.05, 1.0), ("delta", 0.05, 2.0),
])
def test_from_error_rejects_out_of_range(name, eps, delta):
    with pytest.raises(ValidationError, match=name):
        CountMinSketch.from_error(eps, delta, seed=0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(depth=0, width=5, seed=0), "depth"), (dict(depth=2, width=0, seed=0), "width"),
    (dict(depth=2.5, width=5, seed=0), "depth"), (dict(depth=2, width=5, seed=-1), "seed"),
    (dict(depth=2, width=5, seed=1.5), "seed"),
])
def test_constructor_validates(kwargs, name):
    with pytest.raises(ValidationError, match=name):
        CountMinSketch(**kwargs)


def test_constructor_counts_shape_checked():
    with pytest.raises(ValidationError, match="shape"):
        CountMinSketch(2, 3, 0, counts=np.zeros((3, 2)))
    with pytest.raises(ValidationError, match="integers"):
        CountMinSketch(2, 3, 0, counts=np.full((2, 3), 0.5))


def test_hash_is_a_function_of_depth_and_seed():
    a = CountMinSketch(5, 55, 7)
    b = CountMinSketch(5, 55, 7)
    keys = np.arange(1000)
    np.testing.assert_array_equal(a.columns(keys), b.columns(keys))
    assert not np.array_equal(a.columns(keys), CountMinSketch(5, 55, 8).columns(keys))
    cols = a.columns(keys)
    assert cols.shape == (5, 1000) and cols.min() >= 0 and cols.max() < 55


def test_hash_spreads_keys_evenly():
    cols = CountMinSketch(4, 55, 1).columns(np.arange(55 * 400))
    for row in cols:
        occupancy = np.bincount(row, minlength=55)
        assert occupancy.min() > 300 and occupancy.max() < 500


# ---- update / query -----------------------------------------------------------------------------

def test_rows_sum_to_total_and_queries_bound_truth():
    rng = np.random.default_rng(0)
    items = zipf_stream(rng, 5000, 300)
    s = CountMinSketch.from_error(0.05, 0.01, seed=1).update(items)
    assert np.all(s.counts.sum(axis=1) == 5000)
    assert s.total == 5000
    keys = np.unique(items)
    assert np.all(s.query(keys) >= brute_counts(items, keys))


def test_weighted_update_equals_repeated_update():
    keys = np.array([3, 9, 3, 100])
    w = np.array([2, 5, 1, 4])
    a = CountMinSketch(3, 17, 2).update(keys, w)
    b = CountMinSketch(3, 17, 2).update(np.repeat(keys, w))
    assert a == b
    c = CountMinSketch(3, 17, 2).update([5, 6], 3)
    assert c == CountMinSketch(3, 17, 2).update([5, 5, 5, 6, 6, 6])


def test_query_keeps_shape_and_accepts_integral_floats():
    s = CountMinSketch(3, 11, 0).update(np.array([1.0, 2.0, 2.0]))
    assert s.query(np.array([[1, 2], [2, 5]])).shape == (2, 2)
    assert int(s.query(2)) >= 2


@pytest.mark.parametrize("bad, message", [
    ([1, -2], "non-negative"), ([1.5], "integers"), ([np.nan], "finite"), ([np.inf], "finite"),
    ([True, False], "integers"), (["a"], "integers"), ([MERSENNE_PRIME], "<"),
])
def test_bad_keys_rejected(bad, message):
    s = CountMinSketch(2, 5, 0)
    with pytest.raises(ValidationError, match=message):
        s.update(np.array(bad))
    with pytest.raises(ValidationError, match=message):
        s.query(np.array(bad))
    assert s.total == 0  # nothing was added


def test_bad_update_weights_rejected():
    s = CountMinSketch(2, 5, 0)
    with pytest.raises(ValidationError, match="non-negative"):
        s.update([1, 2], [1, -1])
    with pytest.raises(ValidationError, match="match"):
        s.update([1, 2], [1, 1, 1])


def test_counts_view_is_read_only():
    s = CountMinSketch(2, 5, 0).update([1])
    with pytest.raises(ValueError):
        s.counts[0, 0] = 7


# ---- merge --------------------------------------------------------------------------------------

def test_merge_is_elementwise_sum_and_sketches_the_concatenation():
    rng = np.random.default_rng(4)
    a_items, b_items = zipf_stream(rng, 800, 200), zipf_stream(rng, 1300, 50)
    a = CountMinSketch.from_error(0.05, 0.01, seed=9).update(a_items)
    b = CountMinSketch.from_error(0.05, 0.01, seed=9).update(b_items)
    m = a.merge(b)
    np.testing.assert_array_equal(m.counts, a.counts + b.counts)
    assert m == CountMinSketch.from_error(0.05, 0.01, seed=9).update(
        np.concatenate([a_items, b_items]))
    assert m.total == 2100
    # the operands are unchanged
    assert a.total == 800 and b.total == 1300


def test_elementwise_max_would_undercount():
    a = CountMinSketch(3, 20, 0).update([1] * 5)
    b = CountMinSketch(3, 20, 0).update([1] * 7)
    assert int(a.merge(b).query(1)) == 12
    assert int(CountMinSketch(3, 20, 0, np.maximum(a.counts, b.counts)).query(1)) == 7


@pytest.mark.parametrize("other, name", [
    (CountMinSketch(4, 55, 1), "depth"), (CountMinSketch(5, 54, 1), "width"),
    (CountMinSketch(5, 55, 2), "seed"),
])
def test_mismatched_merge_names_what_differs(other, name):
    with pytest.raises(ValidationError, match=name):
        CountMinSketch(5, 55, 1).merge(other)


def test_merge_rejects_non_sketch():
    with pytest.raises(ValidationError):
        CountMinSketch(5, 55, 1).merge(np.zeros((5, 55)))


# ---- serialisation ------------------------------------------------------------------------------

def test_flat_round_trip():
    s = CountMinSketch.from_error(0.05, 0.01, seed=11).update(np.arange(500) % 37)
    flat, depth, width, seed = s.to_flat()
    assert flat.dtype == np.int64 and flat.shape == (depth * width,)
    assert (depth, width, seed) == (5, 55, 11)
    back = CountMinSketch.from_flat(flat, depth, width, seed)
    assert back == s
    np.testing.assert_array_equal(back.query(np.arange(40)), s.query(np.arange(40)))
    flat[0] += 1  # to_flat returns a copy
    assert back == s


def test_flat_round_trip_keeps_negative_cells():
    counts = np.array([[3, -2], [0, 1]])
    s = CountMinSketch.from_flat(counts.ravel(), 2, 2, 0)
    assert s.to_flat()[0].tolist() == [3, -2, 0, 1]


def test_from_flat_checks_length():
    with pytest.raises(ValidationError, match="length"):
        CountMinSketch.from_flat(np.zeros(10, dtype=np.int64), 5, 55, 0)


# ---- the (eps, delta) guarantee -----------------------------------------------------------------

@pytest.mark.parametrize("eps, delta, n_seeds", [(0.05, 0.01, 150), (0.2, 0.3, 150)])
def test_error_guarantee_holds_empirically(eps, delta, n_seeds):
    """P(estimate - truth > eps * total) <= delta, per key, measured over keys and hash seeds."""
    rng = np.random.default_rng(2024)
    items = zipf_stream(rng, 3000, 400, s=0.8)
    keys = np.unique(items)
    truth = brute_counts(items, keys)
    failures = trials = 0
    for seed in range(n_seeds):
        s = CountMinSketch.from_error(eps, delta, seed=seed).update(items)
        over = s.query(keys) - truth
        assert np.all(over >= 0)
        failures += int(np.sum(over > eps * len(items)))
        trials += keys.size
    assert failures / trials <= delta * 1.2
    # The check has power: one row of a quarter of the width misses the bound far more often.
    depth, width = dimensions(eps, delta)
    undersized = sum(
        int(np.sum(CountMinSketch(1, max(1, width // 4), seed).update(items).query(keys) - truth
                   > eps * len(items)))
        for seed in range(20))
    assert undersized / (20 * keys.size) > 2 * delta


# ---- property tests -----------------------------------------------------------------------------

streams = st.lists(st.integers(min_value=0, max_value=5000), max_size=200)


@settings(max_examples=60, deadline=None)
@given(items=streams, seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 6),
       width=st.integers(1, 60))
def test_property_never_underestimates(items, seed, depth, width):
    s = CountMinSketch(depth, width, seed).update(np.array(items, dtype=np.int64))
    keys = np.array(sorted(set(items)) + [5001], dtype=np.int64)
    est = s.query(keys)
    truth = brute_counts(items, keys) if items else np.zeros(keys.size, dtype=np.int64)
    assert np.all(est >= truth)
    assert np.all(est <= len(items))
    assert s.total == len(items)


@settings(max_examples=40, deadline=None)
@given(a=streams, b=streams, c=streams, seed=st.integers(0, 1000))
def test_property_merge_associative_commutative(a, b, c, seed):
    def sk(items):
        return CountMinSketch(3, 13, seed).update(np.array(items, dtype=np.int64))

    sa, sb, sc = sk(a), sk(b), sk(c)
    assert sa.merge(sb) == sb.merge(sa)
    assert sa.merge(sb).merge(sc) == sa.merge(sb.merge(sc))
    assert sa.merge(sb).merge(sc) == sk(a + b + c)


# ---- label sketches -----------------------------------------------------------------------------

def test_sketch_labels_and_distribution():
    labels = np.array([0, 1, 1, 2, 2, 2, 9])
    s = sketch_labels(labels, 10, eps=0.05, delta=0.01, seed=5)
    assert s.shape == (5, 55) and s.total == 7
    counts = estimate_counts(s, 10)
    assert np.all(counts >= np.bincount(labels, minlength=10))
    p = estimate_distribution(s, 10)
    assert p.shape == (10,) and p.sum() == pytest.approx(1.0) and np.all(p >= 0)


@pytest.mark.parametrize("labels, message", [
    ([0, -1], "-1"), ([0, 1.5], "1.5"), ([0, 10], "10"), ([0, 12], r"\[0, 10\)"),
    ([], "empty client"), (["a"], "integers"), ([np.nan], "integers"),
])
def test_sketch_labels_rejects_bad_labels(labels, message):
    with pytest.raises(ValidationError, match=message):
        sketch_labels(np.array(labels), 10, eps=0.05, delta=0.01, seed=0)


def test_sketch_labels_rejects_bad_parameters():
    with pytest.raises(ValidationError, match="n_classes"):
        sketch_labels([0], 0, eps=0.05, delta=0.01, seed=0)
    with pytest.raises(ValidationError, match="eps"):
        sketch_labels([0], 2, eps=2, delta=0.01, seed=0)


def test_estimate_distribution_handles_noisy_negative_cells():
    s = CountMinSketch(3, 7, 0).update([0, 0, 0, 1])
    noisy = CountMinSketch(3, 7, 0, s.counts - 2)  # every cell shifted, many negative
    p = estimate_distribution(noisy, 3)
    assert np.all(p >= 0) and p.sum() == pytest.approx(1.0)
    all_negative = CountMinSketch(3, 7, 0, np.full((3, 7), -4))
    np.testing.assert_allclose(estimate_distribution(all_negative, 4), np.full(4, 0.25))


def test_median_estimator_is_robust_to_one_bad_row():
    s = CountMinSketch(5, 55, 0).update([2] * 10)
    counts = np.array(s.counts)
    counts[0] -= 50  # one row pulled far down, as large noise might
    noisy = CountMinSketch(5, 55, 0, counts)
    assert estimate_counts(noisy, 3, estimator="median")[2] == 10
    assert estimate_counts(noisy, 3, estimator="min")[2] == 0
    with pytest.raises(ValidationError, match="estimator"):
        estimate_counts(noisy, 3, estimator="mean")


# ---- differential test against Apache DataSketches ----------------------------------------------

def test_agrees_with_datasketches_count_min():
    ds = pytest.importorskip("datasketches")
    # Same sizing rule for the same (eps, delta).
    assert ds.count_min_sketch.suggest_num_buckets(0.05) == 55
    assert ds.count_min_sketch.suggest_num_hashes(1 - 0.01) == 5
    rng = np.random.default_rng(7)
    items = zipf_stream(rng, 4000, 600, s=0.7)
    keys = np.unique(items)
    truth = brute_counts(items, keys)
    ours_over, theirs_over = [], []
    for seed in range(20):
        ours = CountMinSketch(5, 55, seed).update(items)
        theirs = ds.count_min_sketch(5, 55, seed + 1)
        uniq, cnt = np.unique(items, return_counts=True)
        for k, c in zip(uniq.tolist(), cnt.tolist()):
            theirs.update(int(k), float(c))
        assert theirs.total_weight == pytest.approx(ours.total)
        t_est = np.array([theirs.get_estimate(int(k)) for k in keys])
        assert np.all(t_est >= truth) and np.all(ours.query(keys) >= truth)
        ours_over.append(np.mean(ours.query(keys) - truth))
        theirs_over.append(np.mean(t_est - truth))
    # Both hash families are near-uniform, so the mean collision overcount matches closely.
    assert np.mean(ours_over) == pytest.approx(np.mean(theirs_over), rel=0.15)
