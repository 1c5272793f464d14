import math

import pytest

import airplan_qo as aq
from airplan_qo.catalog.analyze import analyze_workload, workload_fingerprint
from airplan_qo.catalog.privacy import calibrate_sketch_sigma
from airplan_qo.catalog.store import Catalog
from airplan_qo.errors import AirPlanError, ValidationError


def _counts(cat):
    return {t: cat.query(f"SELECT count(*) AS n FROM airplan.{t}")[0]["n"]
            for t in ("workloads", "client_sketches", "workload_stats", "privacy_ledger")}


def test_analyze_stores_sketches_and_stats(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=20, alpha=0.5, seed=3)
        s = analyze_workload(cat, w)
        assert (s.depth, s.width) == (5, 55)
        assert s.n_clients == 20 and s.n_classes == 10
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        assert sk.counts.shape == (20, 5, 55)
        # exact sketches: every row of a client's sketch sums to its record count
        assert (sk.counts.sum(axis=2) == sk.n_records[:, None]).all()
        assert sk.n_records.sum() == s.n_records
        assert 0.2 < s.alpha_dirichlet < 1.2  # true 0.5, 20 clients of ~70 records
        assert s.stats_overhead == pytest.approx(s.sketch_bytes / s.model_bytes)
        assert s.sketch_bytes == 5 * 55 * 4


def test_analyze_is_idempotent_for_the_same_fingerprint(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=10, alpha=1.0)
        first = analyze_workload(cat, w)
        before = _counts(cat)
        again = analyze_workload(cat, w)
        assert again.reused and again.stats_version == first.stats_version
        assert _counts(cat) == before
        finer = analyze_workload(cat, aq.Workload(dataset="digits", clients=10, alpha=1.0,
                                                  sketch_eps=0.01))
        assert finer.workload_id == first.workload_id
        assert finer.stats_version == first.stats_version + 1
        assert finer.width == math.ceil(math.e / 0.01)


def test_dp_release_is_noised_and_ledgered(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        w = aq.Workload(dataset="digits", clients=10, dp_epsilon=1.0, dp_delta=1e-5)
        s = analyze_workload(cat, w)
        sigma = calibrate_sketch_sigma(1.0, 1e-5, 5)
        sk = cat.read_sketches(s.workload_id, s.stats_version)
        assert sk.noise_sigma == pytest.approx(sigma)
        assert not (sk.counts.sum(axis=2) == sk.n_records[:, None]).all()
        ledger = cat.query("SELECT * FROM airplan.privacy_ledger")
        assert len(ledger) == 1
        row = ledger[0]
        assert row["sensitivity"] == pytest.approx(math.sqrt(5))
        assert row["epsilon"] == 1.0 and row["cumulative_epsilon"] == pytest.approx(1.0, rel=1e-6)
        # a second release of the same data (finer sketch) composes: sigma/sqrt(2) equivalent
        analyze_workload(cat, aq.Workload(dataset="digits", clients=10, dp_epsilon=1.0,
                                          dp_delta=1e-5, sketch_eps=0.02))
        cum = cat.query("SELECT cumulative_epsilon FROM airplan.privacy_ledger "
                        "ORDER BY release_id")[-1]["cumulative_epsilon"]
        assert 1.0 < cum < 2.0  # exact composition beats basic composition (2.0)


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
