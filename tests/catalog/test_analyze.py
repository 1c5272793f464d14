import itertools
import json
import math

import duckdb
import numpy as np
import pytest

import airplan_qo as aq
import airplan_qo.catalog.analyze as analyze_mod
from airplan_qo.catalog.analyze import (
    analyze_workload,
    read_label_counts,
    released_label_counts,
    released_record_counts,
    workload_fingerprint,
)
from airplan_qo.catalog.privacy import calibrate_sketch_sigma, gaussian_epsilon
from airplan_qo.catalog.schema import TABLES
from airplan_qo.catalog.sketch import sketch_labels
from airplan_qo.catalog.store import Catalog
from airplan_qo.data import Dataset, load, partition
from airplan_qo.errors import AirPlanError, CatalogError, ValidationError

# dp-accounting 0.6.0 reference (tests/catalog/test_privacy.py): one Gaussian release at this
# sigma with L2 sensitivity 1 is (1, 1e-5)-DP.
SIGMA_EPS1_SENS1 = 3.730631634816428


def _counts(cat):
    return {t: cat.query(f"SELECT count(*) AS n FROM airplan.{t}")[0]["n"]
            for t in ("workloads", "client_sketches", "workload_stats", "privacy_ledger")}


def _client_labels(w):
    """Each client's labels, partitioned exactly as ANALYZE WORKLOAD does."""
    data = load(w.dataset, seed=w.seed)
    part = partition(w.partition, data.y_train, w.clients, seed=w.seed,
                     **({"alpha": w.alpha} if w.partition == "dirichlet" else {}))
    return [data.y_train[idx] for idx in part.indices], data.n_classes


def _exact_cells(w, kind, hash_seed):
    labels, n_classes = _client_labels(w)
    if kind == "histogram":
        return np.stack([np.bincount(y, minlength=n_classes) for y in labels])[:, None, :]
    return np.stack([sketch_labels(y, n_classes, eps=w.sketch_eps, delta=w.sketch_delta,
                                   seed=hash_seed).counts for y in labels])


def test_analyze_stores_an_exact_histogram_for_few_classes(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=20, alpha=0.5, seed=3)
        s = analyze_workload(cat, w)
        assert s.release_kind == "histogram"  # 10 cells, not a 5 x 55 sketch
        assert (s.depth, s.width) == (1, 10)
        assert s.n_clients == 20 and s.n_classes == 10
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        assert sk.kind == "histogram" and sk.counts.shape == (20, 1, 10)
        assert sk.noise_sigma == 0.0
        # exact: the cells are the class counts, and they sum to the record counts
        np.testing.assert_array_equal(sk.counts, _exact_cells(w, "histogram", 0))
        assert (sk.counts.sum(axis=2) == sk.n_records[:, None]).all()
        assert sk.n_records.sum() == s.n_records
        np.testing.assert_array_equal(read_label_counts(cat, s.workload_id, s.stats_version),
                                      sk.counts[:, 0, :])
        assert 0.2 < s.alpha_dirichlet < 1.2  # true 0.5, 20 clients of ~70 records
        assert s.stats_overhead == pytest.approx(s.sketch_bytes / s.model_bytes)
        assert s.sketch_bytes == 10 * 4
        row = cat.query("SELECT release_kind FROM airplan.workload_stats")[0]
        assert row["release_kind"] == "histogram"


def _many_classes(monkeypatch, n_classes=1000, per_class=4):
    """Make ANALYZE WORKLOAD load a dataset with ``n_classes`` labels."""
    rng = np.random.default_rng(5)
    y = np.repeat(np.arange(n_classes), per_class)
    x = rng.normal(size=(y.size, 6)).astype(np.float32)
    data = Dataset.from_arrays("synthetic", x, y, x[:n_classes], y[:n_classes],
                               n_classes=n_classes)
    monkeypatch.setattr(analyze_mod, "load", lambda name, seed=0: data)
    return data


def test_many_classes_get_a_count_min_sketch(tmp_path, monkeypatch):
    data = _many_classes(monkeypatch)
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="synthetic", clients=8, partition="iid", seed=2)
        s = analyze_workload(cat, w)
        assert s.release_kind == "count_min" and (s.depth, s.width) == (5, 55)
        assert s.sketch_bytes == 5 * 55 * 4
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        assert sk.kind == "count_min" and sk.counts.shape == (8, 5, 55) and sk.hash_seed == 2
        assert (sk.counts.sum(axis=2) == sk.n_records[:, None]).all()
        est = read_label_counts(cat, s.workload_id, s.stats_version)
        assert est.shape == (8, data.n_classes)
        assert (est.sum(axis=1) >= sk.n_records).all()  # Count-Min overestimates, never under
        dp = analyze_workload(cat, aq.Workload(dataset="synthetic", clients=8, partition="iid",
                                               seed=2, dp_epsilon=1.0, dp_delta=1e-5))
        assert dp.release_kind == "count_min"
        ledger = cat.query("SELECT sensitivity, sigma FROM airplan.privacy_ledger")
        assert len(ledger) == 1
        assert ledger[0]["sensitivity"] == pytest.approx(math.sqrt(5))
        assert ledger[0]["sigma"] == pytest.approx(calibrate_sketch_sigma(1.0, 1e-5, 5))
        assert ledger[0]["sigma"] == pytest.approx(math.sqrt(5) * SIGMA_EPS1_SENS1, rel=1e-9)


def test_analyze_is_idempotent_for_the_same_release(tmp_path, monkeypatch):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=10, alpha=1.0)
        first = analyze_workload(cat, w)
        before = _counts(cat)
        again = analyze_workload(cat, w)
        assert again.reused and again.stats_version == first.stats_version
        assert _counts(cat) == before
        # a histogram does not depend on the sketch's accuracy: the same release is reused
        finer = analyze_workload(cat, aq.Workload(dataset="digits", clients=10, alpha=1.0,
                                                  sketch_eps=0.01))
        assert finer.reused and finer.stats_version == first.stats_version
        assert _counts(cat) == before
    _many_classes(monkeypatch)
    with Catalog(tmp_path / "m.duckdb") as cat:
        w = aq.Workload(dataset="synthetic", clients=8, partition="iid")
        first = analyze_workload(cat, w)
        assert analyze_workload(cat, w).reused
        coarser = analyze_workload(cat, aq.Workload(dataset="synthetic", clients=8,
                                                    partition="iid", sketch_eps=0.1))
        assert coarser.workload_id == first.workload_id and not coarser.reused
        assert coarser.stats_version == first.stats_version + 1
        assert coarser.release_kind == "count_min" and coarser.width == math.ceil(math.e / 0.1)
        # 5 x 272 cells would be more than the 1000-cell histogram
        finer = analyze_workload(cat, aq.Workload(dataset="synthetic", clients=8,
                                                  partition="iid", sketch_eps=0.01))
        assert finer.release_kind == "histogram" and (finer.depth, finer.width) == (1, 1000)


def test_dp_release_is_noised_and_ledgered(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=10, dp_epsilon=1.0, dp_delta=1e-5)
        s = analyze_workload(cat, w)
        assert s.release_kind == "histogram"
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        # a histogram has L2 sensitivity 1 (one cell moves by 1 per added/removed record), so
        # sigma is the dp-accounting reference for (1, 1e-5) at sensitivity 1
        assert sk.noise_sigma == pytest.approx(SIGMA_EPS1_SENS1, rel=1e-9)
        assert not (sk.counts == _exact_cells(w, "histogram", 0)).all()
        ledger = cat.query("SELECT * FROM airplan.privacy_ledger")
        assert len(ledger) == 1
        row = ledger[0]
        assert row["sensitivity"] == 1.0 and row["sigma"] == pytest.approx(SIGMA_EPS1_SENS1)
        assert gaussian_epsilon(1e-5, row["sigma"], row["sensitivity"]) == pytest.approx(1.0)
        assert row["epsilon"] == 1.0 and row["cumulative_epsilon"] == pytest.approx(1.0, rel=1e-6)
        assert "histogram" in row["note"]
        # the same release again is not a second release
        assert analyze_workload(cat, aq.Workload(dataset="digits", clients=10, dp_epsilon=1.0,
                                                 dp_delta=1e-5, sketch_eps=0.02)).reused
        # a second release of the same data (another delta) composes exactly
        analyze_workload(cat, aq.Workload(dataset="digits", clients=10, dp_epsilon=1.0,
                                          dp_delta=1e-6))
        rows = cat.query("SELECT sigma, sensitivity, cumulative_epsilon, cumulative_delta "
                         "FROM airplan.privacy_ledger ORDER BY release_id")
        assert len(rows) == 2 and rows[1]["cumulative_delta"] == 1e-6
        mu = math.hypot(1 / SIGMA_EPS1_SENS1, 1 / rows[1]["sigma"])
        assert rows[1]["cumulative_epsilon"] == pytest.approx(gaussian_epsilon(1e-6, 1 / mu))
        assert 1.0 < rows[1]["cumulative_epsilon"] < 2.0  # basic composition would say 2.0


def test_dp_release_stores_no_exact_record_counts(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=20, alpha=0.5, dp_epsilon=1.0, dp_delta=1e-5)
        s = analyze_workload(cat, w)
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        labels, _ = _client_labels(w)
        exact = np.array([len(y) for y in labels])
        # the stored counts are the noised cells' row sums, not the exact counts
        np.testing.assert_array_equal(sk.n_records, released_record_counts(sk.counts))
        assert (sk.n_records != exact).sum() >= 10  # each is off w.p. ~0.9 (std 3.73 sqrt 10)
        # (their total is not compared with the exact one: with fresh noise on 20 clients the
        # two coincide in about one release in 40)
        assert s.n_records == sk.n_records.sum()
        stored = cat.query("SELECT n_records, options::VARCHAR AS options FROM "
                           "airplan.workload_stats JOIN airplan.workloads USING (workload_id)")[0]
        assert stored["n_records"] == s.n_records
        assert "redrawn" not in json.loads(stored["options"])  # a data-dependent exact count


def _catalog_integers(path):
    """Every integer an attacker finds in the catalog file: scalar integer columns and JSON."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE "
            "schema_name = 'main'").fetchall()
        found: dict[str, set[int]] = {}
        for table, column, dtype in cols:
            if table not in TABLES:
                continue
            if dtype in ("INTEGER", "BIGINT"):
                values = con.execute(f'SELECT DISTINCT "{column}" FROM "{table}" '
                                     f'WHERE "{column}" IS NOT NULL').fetchall()
                found.setdefault(column, set()).update(int(v[0]) for v in values)
            elif dtype == "JSON":
                for (text,) in con.execute(f'SELECT "{column}"::VARCHAR FROM "{table}"'
                                           ).fetchall():
                    found.setdefault(column, set()).update(
                        v for v in json.loads(text or "{}").values() if isinstance(v, int))
    finally:
        con.close()
    return found


def test_attacker_with_the_catalog_cannot_reproduce_the_noise(tmp_path):
    path = tmp_path / "c.duckdb"
    w = aq.Workload(dataset="digits", clients=10, seed=7, dp_epsilon=1.0, dp_delta=1e-5)
    with Catalog(path) as cat:
        s = analyze_workload(cat, w)
        sk = cat.read_sketches(s.workload_id, s.stats_version)
    kind = getattr(sk, "kind", "count_min")
    exact = _exact_cells(w, kind, sk.hash_seed).astype(np.float64)
    assert sk.noise_sigma > 0 and not np.array_equal(sk.counts, exact)

    found = _catalog_integers(path)
    assert w.seed in found["partition_seed"] and s.stats_version in found["stats_version"]
    every = sorted(v for values in found.values() for v in values if v >= 0)
    seedlike = sorted({v for col, values in found.items() for v in values if v >= 0 and (
        "seed" in col or "version" in col or col.endswith("_id"))})
    # the attacker has the code too: 0xD9 is the constant the pre-2 derivation mixed in
    constants = [0xD9]
    candidates = itertools.chain(
        ([v] for v in every),
        ([a, b] for a in every for b in every),
        ([a, b, c] for a in seedlike for b in seedlike for c in seedlike + constants))
    tried = 0
    for seed in candidates:
        noise = np.random.default_rng(seed).normal(0.0, sk.noise_sigma, size=exact.shape)
        assert not np.array_equal(np.rint(exact + noise), sk.counts), \
            f"noise regenerated from catalog values {seed}"
        tried += 1
    assert tried > 1000


def test_releases_of_the_same_data_draw_fresh_noise_with_the_calibrated_scale(tmp_path):
    w = aq.Workload(dataset="digits", clients=100, partition="iid", seed=1, dp_epsilon=1.0,
                    dp_delta=1e-5)
    released = []
    for name in ("a", "b"):
        with Catalog(tmp_path / f"{name}.duckdb") as cat:  # same data, same version, same ids
            s = analyze_workload(cat, w)
            released.append(cat.read_sketches(s.workload_id, s.stats_version))
    a, b = released
    assert a.noise_sigma == b.noise_sigma
    assert (a.counts != b.counts).mean() > 0.8  # P(equal cell) ~ 0.13 for sigma = 3.73
    exact = _exact_cells(w, "histogram", 0)
    resid = np.concatenate([(r.counts - exact).ravel() for r in released]).astype(float)
    # rounded N(0, sigma^2): std sqrt(sigma^2 + 1/12), mean 0 (bounds are ~5 standard errors)
    n = resid.size
    assert resid.std() == pytest.approx(math.hypot(a.noise_sigma, math.sqrt(1 / 12)),
                                        abs=5 * a.noise_sigma / math.sqrt(2 * n))
    assert abs(resid.mean()) < 5 * a.noise_sigma / math.sqrt(n)
    # independent between the releases
    r = np.corrcoef((a.counts - exact).ravel(), (b.counts - exact).ravel())[0, 1]
    assert abs(r) < 5 / math.sqrt(exact.size)


def test_released_label_counts_decodes_both_kinds():
    hist = np.array([[[3, -2, 5]], [[0, 4, 1]]])
    np.testing.assert_array_equal(
        released_label_counts(hist, "histogram", n_classes=3, hash_seed=0, noisy=True),
        [[3, 0, 5], [0, 4, 1]])
    sketches = np.stack([sketch_labels(np.array(y), 3, eps=0.05, delta=0.01, seed=4).counts
                         for y in ([0, 0, 2], [1, 1, 1, 2])])
    np.testing.assert_array_equal(
        released_label_counts(sketches, "count_min", n_classes=3, hash_seed=4, noisy=False),
        [[2, 0, 1], [0, 3, 1]])
    np.testing.assert_array_equal(released_record_counts(sketches), [3, 4])
    np.testing.assert_array_equal(released_record_counts(np.array([[[-4, 1]], [[2, 3]]])),
                                  [0, 5])
    with pytest.raises(ValidationError, match="shape"):
        released_label_counts(hist, "histogram", n_classes=4, hash_seed=0, noisy=True)
    with pytest.raises(ValidationError, match="release kind"):
        released_label_counts(hist, "bloom", n_classes=3, hash_seed=0, noisy=True)


def test_read_label_counts_needs_statistics(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        with pytest.raises(CatalogError, match="no statistics"):
            read_label_counts(cat, 1, 1)


@pytest.mark.parametrize("workload,needle", [
    (dict(dataset="digits", clients=5000), "client"),
    (dict(dataset="digitz", clients=10), "did you mean 'digits'"),
    (dict(dataset="digits", clients=10, sketch_eps=1.5), "sketch_eps"),
    (dict(dataset="digits", clients=10, sketch_delta=0.0), "sketch_delta"),
])
def test_bad_input_leaves_catalog_unchanged(tmp_path, workload, needle):
    with Catalog(tmp_path / "c.duckdb") as cat:
        analyze_workload(cat, aq.Workload(dataset="digits", clients=10))
        before = _counts(cat)
        with pytest.raises(AirPlanError, match=needle):
            analyze_workload(cat, aq.Workload(**workload))
        assert _counts(cat) == before


def test_failure_inside_the_transaction_rolls_back(tmp_path, monkeypatch):
    import airplan_qo.catalog.analyze as mod

    with Catalog(tmp_path / "c.duckdb") as cat:
        def boom(*a, **k):
            raise ValidationError("injected failure")

        monkeypatch.setattr(mod, "model_bytes", boom)
        with pytest.raises(ValidationError, match="injected"):
            analyze_workload(cat, aq.Workload(dataset="digits", clients=10))
        assert all(v == 0 for v in _counts(cat).values())


def test_fingerprint_depends_on_data_identity():
    a = workload_fingerprint("digits", 10, "dirichlet", 0.5, 0)
    assert a == workload_fingerprint("digits", 10, "dirichlet", 0.5, 0)
    assert a != workload_fingerprint("digits", 10, "dirichlet", 0.5, 1)
    assert workload_fingerprint("digits", 10, "iid", None, 0) != a
