"""The plan cache (planner/plan_cache.py): a request planned again with nothing it read changed
reuses the candidates, is recorded in full with the same rows, and is planned anew as soon as a
statistic, a calibration, a registration or the request changes."""

import re

import numpy as np
import pytest

import airplan_qo as aq
from airplan_qo.catalog.store import Catalog
from airplan_qo.planner import optimizer as optimizer_module
from airplan_qo.planner.plan_cache import PLANNING_INPUTS, PlanCache

W = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10)
#: A small plan space: the tests plan it many times.
SPACE = dict(topologies=["ring", "small_world(k=4)", "complete"], sparsity=[0.1, 1.0],
             fallback="complete")


@pytest.fixture()
def db(tmp_path):
    with aq.connect(tmp_path / "cat.duckdb") as session:
        yield session


@pytest.fixture()
def planned(monkeypatch):
    """Counts the calls that plan (those not served from the cache)."""
    calls = []
    original = optimizer_module.Optimizer._plan

    def counting(self, request):
        calls.append(request)
        return original(self, request)

    monkeypatch.setattr(optimizer_module.Optimizer, "_plan", counting)
    return calls


def warm(db, **kw):
    """Plan until a call is served from the cache (the first ones cache topologies and
    register the workload, which the cache counts as changes); returns that result."""
    for _ in range(4):
        before = len(PlanCache.of(db.catalog))
        r = db.plan(W, **{**SPACE, **kw})
        if before and len(PlanCache.of(db.catalog)) == before and r.planning_time_ms < 5:
            return r
    return r


def plan_rows(db, run_id):
    return db.catalog.query(
        "SELECT * EXCLUDE (plan_id, planning_run_id) FROM airplan.plans "
        "WHERE planning_run_id = ? ORDER BY rank", [run_id])


def run_row(db, run_id):
    return db.catalog.query(
        "SELECT * EXCLUDE (planning_run_id, chosen_plan_id, planning_time_ms, created_at) "
        "FROM airplan.planning_runs WHERE planning_run_id = ?", [run_id])[0]


def test_cached_call_records_the_same_rows_as_an_uncached_one(db, planned):
    warm(db)
    planned.clear()
    cached = db.plan(W, statement="the cached call", **SPACE)
    assert planned == []    # served from the cache
    PlanCache.of(db.catalog).clear()
    fresh = db.plan(W, statement="the uncached call", **SPACE)
    assert len(planned) == 1
    assert cached.planning_run_id != fresh.planning_run_id
    rows_cached = plan_rows(db, cached.planning_run_id)
    rows_fresh = plan_rows(db, fresh.planning_run_id)
    assert len(rows_cached) == len(cached.candidates) > 10
    assert rows_cached == rows_fresh
    run_cached, run_fresh = run_row(db, cached.planning_run_id), run_row(db, fresh.planning_run_id)
    assert run_cached.pop("statement") == "the cached call"
    assert run_fresh.pop("statement") == "the uncached call"
    assert run_cached == run_fresh
    # the result names its own run, plans and statement; the candidates are the same plans
    assert cached.request.statement == "the cached call"
    ids = {r["plan_id"] for r in db.catalog.query(
        "SELECT plan_id FROM airplan.plans WHERE planning_run_id = ?", [cached.planning_run_id])}
    assert {c.plan_id for c in cached.candidates} == ids
    chosen_id = db.catalog.query("SELECT chosen_plan_id FROM airplan.planning_runs "
                                 "WHERE planning_run_id = ?", [cached.planning_run_id])[0]
    assert cached.chosen.plan_id == chosen_id["chosen_plan_id"]
    assert [(c.plan, c.rank, c.pruned_reason, c.cost.total()) for c in cached.candidates] == \
        [(c.plan, c.rank, c.pruned_reason, c.cost.total()) for c in fresh.candidates]
    assert cached.explain().splitlines()[:12] == fresh.explain().splitlines()[:12]


def test_every_cached_call_records_every_candidate(db, planned):
    first = warm(db)
    planned.clear()
    runs = [db.plan(W, **SPACE) for _ in range(3)]
    assert planned == []
    want = plan_rows(db, first.planning_run_id)
    for r in runs:
        assert plan_rows(db, r.planning_run_id) == want
        assert len({c.plan_id for c in r.candidates}) == len(want)
    assert len({r.planning_run_id for r in [first, *runs]}) == 4


def test_another_request_is_planned(db, planned):
    warm(db)
    planned.clear()
    db.plan(W, **{**SPACE, "sparsity": [1.0]})
    db.plan(W, sla="accuracy >= 0.5", **SPACE)
    db.plan(W, estimator="dsgd", **SPACE)
    assert len(planned) == 3


def test_calibration_written_by_another_connection_is_seen(db, planned, tmp_path):
    warm(db)
    planned.clear()
    before = db.plan(W, **SPACE)
    assert planned == []
    with aq.connect(tmp_path / "cat.duckdb") as other:   # same file, same process
        other.catalog.supersede_calibration("ttt", "global", "", {"fc.log_n": 0.9},
                                            n_obs=5, source="test")
    after = db.plan(W, **SPACE)
    assert len(planned) == 1
    assert after.chosen.cost.estimate.calibration_ids != before.chosen.cost.estimate.calibration_ids
    PlanCache.of(db.catalog).clear()
    fresh = db.plan(W, **SPACE)
    assert plan_rows(db, after.planning_run_id) == plan_rows(db, fresh.planning_run_id)


def test_a_write_committed_after_the_call_read_is_seen(db, planned, tmp_path):
    """Another connection writes a calibration in a transaction, a call plans (it cannot see
    the write), the transaction commits: the next call plans again and sees it."""
    warm(db)
    other = Catalog(tmp_path / "cat.duckdb")
    try:
        with other.transaction():
            other.supersede_calibration("ttt", "global", "", {"fc.log_n": 0.9}, n_obs=5,
                                        source="test")
            planned.clear()
            unseen = db.plan(W, **SPACE)
            assert len(planned) == 1
            assert unseen.chosen.cost.estimate.calibration_ids == ()
        seen = db.plan(W, **SPACE)
        assert len(planned) == 2
        assert seen.chosen.cost.estimate.calibration_ids != ()
    finally:
        other.close()


def test_statistics_and_registrations_replan(db, planned):
    warm(db)
    planned.clear()
    db.analyze(W)
    r = db.plan(W, **SPACE)
    assert len(planned) == 1 and r.context.alpha_source.startswith("estimated from sketches")
    warm(db)
    planned.clear()
    from airplan_qo.data import load

    from airplan_qo.data import DATASETS

    aq.register_dataset("plan_cache_test_data", load("digits"), replace=True)
    try:
        db.plan(W, **SPACE)
    finally:
        DATASETS._items.pop("plan_cache_test_data", None)   # leave the registry as found
    assert len(planned) == 1


def test_a_rolled_back_transaction_empties_the_cache(db):
    warm(db)
    assert len(PlanCache.of(db.catalog)) >= 1
    with pytest.raises(RuntimeError):
        with db.catalog.transaction():
            raise RuntimeError("undo")
    assert len(PlanCache.of(db.catalog)) == 0


def test_giving_the_file_back_empties_the_cache(db, planned):
    """Another process may write while the file is released: the next call plans anew."""
    warm(db)
    db.catalog.release()
    planned.clear()
    db.plan(W, **SPACE)
    assert len(planned) == 1


def test_planning_reads_only_the_tables_the_cache_watches(db, monkeypatch):
    """Every catalog table an uncached planning call reads is one of PLANNING_INPUTS (a read
    of another table would go unwatched)."""
    db.analyze(W)
    db.plan(W, **SPACE)
    PlanCache.of(db.catalog).clear()
    read = []
    for name in ("query", "query_arrow", "_scalar"):
        original = getattr(Catalog, name)

        def traced(self, sql, *args, _f=original, **kw):
            read.append(sql)
            return _f(self, sql, *args, **kw)

        monkeypatch.setattr(Catalog, name, traced)
    # d_cliques reads the released label counts too
    db.plan(W, topologies=["ring", "d_cliques"], sparsity=[1.0], fallback="complete")
    tables = set()
    for sql in read:
        if sql.lstrip().upper().startswith("SELECT"):
            tables |= set(re.findall(r"airplan\.(?:main\.)?(\w+)", sql))
    views = {"v_current_calibration": "calibration"}
    assert tables, read
    assert {views.get(t, t) for t in tables} <= set(PLANNING_INPUTS) | {"plans",
                                                                          "planning_runs"}
    assert {views.get(t, t) for t in tables} - {"plans", "planning_runs"} >= {
        "workloads", "workload_stats", "calibration"}


def test_read_only_catalog_serves_from_the_cache(tmp_path, planned):
    path = tmp_path / "cat.duckdb"
    with aq.connect(path) as db:
        warm(db)
    with aq.connect(path, read_only=True) as ro:
        planned.clear()
        a = ro.plan(W, **SPACE)
        b = ro.plan(W, **SPACE)
        assert len(planned) == 1 and a.planning_run_id is None and b.planning_run_id is None
        assert [c.plan for c in a.candidates] == [c.plan for c in b.candidates]


def test_recording_matches_ids_to_ranks(db):
    r = warm(db)
    ranks = np.array([c.rank for c in r.candidates])
    rows = db.catalog.query("SELECT plan_id, rank FROM airplan.plans WHERE planning_run_id = ?",
                            [r.planning_run_id])
    by_rank = {x["rank"]: x["plan_id"] for x in rows}
    assert [by_rank[k] for k in ranks] == [c.plan_id for c in r.candidates]
