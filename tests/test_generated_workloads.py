"""The generated benchmarks end to end: planned, trained and recorded from SQL."""

import airplan_qo as aq


def test_mnist1d_with_cnn1d_trains_from_sql(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("EXPLAIN ANALYZE TRAIN mnist1d ON 4 CLIENTS WITH (alpha = 0.3, "
                     "model = 'cnn1d', rounds = 3) USING TOPOLOGY ring USING SPARSITY 1 "
                     "SLA accuracy >= 0.1 FALLBACK COMPLETE")
        assert r.status == "succeeded" and 1 <= r.rounds <= 3    # stops at the target
        assert "model=cnn1d d=6378" in r.text and "mnist1d on 4 clients" in r.text
        [q] = db.sql("SELECT partition_scheme, alpha FROM airplan.workloads")
        [[scheme, alpha]] = q.fetchall()
        assert (scheme, alpha) == ("dirichlet", 0.3)


def test_leaf_synthetic_natural_partition_from_sql(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [stats] = db.sql("ANALYZE WORKLOAD leaf_synthetic ON 10 CLIENTS "
                         "WITH (partition = 'natural')")
        [r] = db.sql("EXPLAIN ANALYZE TRAIN leaf_synthetic ON 10 CLIENTS WITH "
                     "(partition = 'natural', rounds = 2) USING TOPOLOGY complete")
        assert r.status == "succeeded" and r.rounds == 2
        [q] = db.sql("SELECT partition_scheme, alpha FROM airplan.workloads")
        [[scheme, alpha]] = q.fetchall()
        assert (scheme, alpha) == ("natural", None)
        # the released label counts are the natural users' (unequal sizes, all data used)
        [q] = db.sql("SELECT n_records FROM airplan.client_sketches")
        sizes = q.fetchall()
        assert len(sizes) == 10 and len({s for (s,) in sizes}) > 1
        total = sum(s for (s,) in sizes)
        assert total == aq_data_train_size()


def aq_data_train_size() -> int:
    from airplan_qo.data import load

    return load("leaf_synthetic").n_train
