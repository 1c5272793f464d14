import json

import attrs

import pytest

import airplan_qo as aq
from airplan_qo.errors import UnknownNameError, ValidationError
from airplan_qo.plans.operators import AUTO_TRANSPORTS


@pytest.fixture()
def db(tmp_path):
    with aq.connect(tmp_path / "cat.duckdb") as session:
        yield session


W = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10)


def test_plan_records_every_candidate(db):
    r = db.plan(W)
    assert r.planning_run_id is not None
    rows = db.catalog.query("SELECT * FROM airplan.plans WHERE planning_run_id = ?",
                            [r.planning_run_id])
    assert len(rows) == len(r.candidates)
    chosen = [x for x in rows if x["chosen"]]
    assert len(chosen) == 1 and chosen[0]["plan_id"] == r.chosen.plan_id
    assert chosen[0]["pruned_reason"] is None
    run = db.catalog.query("SELECT * FROM airplan.planning_runs WHERE planning_run_id = ?",
                           [r.planning_run_id])[0]
    assert run["chosen_plan_id"] == r.chosen.plan_id and run["n_candidates"] == len(rows)
    # the chosen plan is the cheapest feasible one
    feasible = [x for x in rows if x["pruned_reason"] is None]
    assert chosen[0]["total_cost"] == min(x["total_cost"] for x in feasible)


def test_candidate_space_and_narrowing(db):
    r = db.plan(W)
    families = {c.plan.topology.family for c in r.candidates}
    assert families == {"ring", "erdos_renyi", "small_world", "clustered", "complete",
                        "exponential"}
    assert {c.plan.k_ratio for c in r.candidates} == {0.01, 0.05, 0.1, 0.2, 1.0}
    # AUTO transports: every topology and k once per (transport, bits) of AUTO_TRANSPORTS
    assert {(c.plan.transport, c.plan.bits) for c in r.candidates} == set(AUTO_TRANSPORTS)
    r2 = db.plan(W, topologies=["ring", ("small_world", {"k": 4})], sparsity=[0.1, 1.0],
                 weights=["metropolis_hastings"], transports=["ota"], algorithms=["auto"],
                 mix_rounds="off")
    asked = [c for c in r2.candidates if c.plan.topology.family != "complete"]
    assert len(asked) == 4
    assert {c.plan.topology.label() for c in asked} == {"ring", "small_world(beta=0.3, k=4)"}
    # none meets the SLA with the default confidence: the fully connected fallback is added
    assert r2.fallback == (len(r2.candidates) == 5)
    # the Python API also takes the SQL-like text form
    r3 = db.plan(W, topologies=["ring", "small_world(k=4)"], sparsity=[0.1, 1.0],
                 weights=["metropolis_hastings"], transports="ota", algorithms="auto",
                 mix_rounds="off")
    assert [c.plan.label() for c in r3.candidates] == [c.plan.label() for c in r2.candidates]
    with pytest.raises(ValidationError, match="expected NAME or NAME"):
        db.plan(W, topologies=["small_world(k=4"])


def test_topology_cache_is_used(db):
    db.plan(W)
    n = db.catalog.query("SELECT count(*) AS n FROM airplan.topologies")[0]["n"]
    r = db.plan(W)
    assert db.catalog.query("SELECT count(*) AS n FROM airplan.topologies")[0]["n"] == n
    assert all(c.stats.spectra.method in ("cached",) for c in r.candidates
               if c.plan.topology.family != "complete" or True)


def _topology_ids(db) -> set[int]:
    return {r["topology_id"] for r in
            db.catalog.query("SELECT topology_id FROM airplan.topologies")}


def test_cached_topologies_are_kept_in_memory_once_read(db, monkeypatch):
    first = db.plan(W)
    second = db.plan(W)       # reads the rows the first plan cached, and keeps them
    assert db.catalog.memo["topologies"]
    queries = []
    real = db.catalog.query
    monkeypatch.setattr(db.catalog, "query", lambda sql, *a: queries.append(sql) or
                        real(sql, *a))
    third = db.plan(W)
    assert not any("airplan.topologies" in q for q in queries)
    for a, b in ((first, third), (second, third)):
        assert [(c.plan, c.topology_id, c.cost.total()) for c in a.candidates] == \
            [(c.plan, c.topology_id, c.cost.total()) for c in b.candidates]
    assert {c.topology_id for c in third.candidates} <= _topology_ids(db)


def test_memory_of_topologies_goes_with_a_rollback_and_a_release(db):
    other = aq.Workload(dataset="digits", clients=12, alpha=0.5, snr_db=10)
    with pytest.raises(RuntimeError, match="undo"):
        with db.catalog.transaction():
            db.plan(other)
            db.plan(other)   # its own uncommitted topology rows, read back into the memory
            assert db.catalog.memo["topologies"]
            raise RuntimeError("undo")
    assert not db.catalog.memo.get("topologies")
    r = db.plan(other)       # computed again, not the undone rows' ids
    assert {c.topology_id for c in r.candidates} <= _topology_ids(db)
    db.plan(other)
    assert db.catalog.memo["topologies"]
    db.catalog.release()
    assert not db.catalog.memo


def test_periodic_topologies_are_built_once_per_process(db, monkeypatch):
    from airplan_qo.planner import optimizer

    monkeypatch.setattr(optimizer, "_PERIODIC", {})
    w = aq.Workload(dataset="digits", clients=24, alpha=0.5, snr_db=10)
    families = ["one_peer_exponential", "base_k(k=1)", "ring"]
    first = db.plan(w, topologies=families, fallback="complete")
    built = []
    real = optimizer.describe_many
    monkeypatch.setattr(optimizer, "describe_many",
                        lambda specs, **kw: built.extend(specs) or real(specs, **kw))
    again = db.plan(w, topologies=families, fallback="complete")
    assert not built
    assert [(c.plan, c.cost.total(), c.stats.phases) for c in first.candidates] == \
        [(c.plan, c.cost.total(), c.stats.phases) for c in again.candidates]
    monkeypatch.setattr(optimizer, "PERIODIC_KEPT", 1)
    db.plan(aq.Workload(dataset="digits", clients=25, alpha=0.5, snr_db=10), topologies=families,
            fallback="complete")
    assert len(optimizer._PERIODIC) == 1 and sum(s.periodic for s in built) == 2


def test_infeasible_sla_falls_back_to_fc_and_warns(db):
    r = db.plan(W, sla="accuracy >= 0.999")
    assert r.fallback
    assert r.chosen.plan.topology.family == "complete" and r.chosen.plan.k_ratio == 1.0
    assert any("falling back" in w and "Nearest candidates" in w for w in r.warnings)
    text = r.explain()
    assert "WARNING: no candidate satisfies" in text
    run = db.catalog.query("SELECT fallback FROM airplan.planning_runs WHERE "
                           "planning_run_id = ?", [r.planning_run_id])[0]
    assert run["fallback"] is True


def test_an_average_model_sla_is_planned_conservatively_and_says_so(db):
    r = db.plan(W, sla="avg_model_accuracy >= 0.9 * fc")
    assert any("avg_model_accuracy SLA is planned as if" in w for w in r.warnings)
    text = r.explain()
    assert "WARNING: the ttt model is fitted on the clients' own models" in text
    assert f"=> avg_model_accuracy >= {r.target_accuracy:.4f}" in text
    assert not any("avg_model_accuracy" in w for w in db.plan(W).warnings)
    assert not any("avg_model_accuracy" in w
                   for w in db.plan(W, sla="avg_model_accuracy >= 0.9 * fc",
                                    estimator="dsgd").warnings)


def test_a_fit_of_the_average_model_planning_the_clients_accuracy_says_it_is_optimistic(
        db, monkeypatch):
    import attrs as _attrs
    from airplan_qo.costmodels import ESTIMATORS

    ttt = ESTIMATORS.get("ttt")
    monkeypatch.setattr(ESTIMATORS, "get", lambda name, _get=ESTIMATORS.get: (
        _attrs.evolve(ttt, fitted_metric="avg_model_accuracy") if name == "ttt" else _get(name)))
    warned = [w for w in db.plan(W).warnings if "fitted on the network-average model" in w]
    assert len(warned) == 1 and "this accuracy SLA is planned as if" in warned[0]
    assert "optimistic" in warned[0]
    assert not any("fitted on" in w for w in
                   db.plan(W, sla="avg_model_accuracy >= 0.9 * fc").warnings)


def test_round_budget_prunes(db):
    r = db.plan(W, budgets={"rounds": 5})
    assert any(c.pruned_reason and c.pruned_reason.startswith(("budget", "sla", "unlikely"))
               for c in r.candidates)
    assert all(c.cost.rounds <= 5 for c in r.candidates if c.feasible)


def test_paper_estimator_prefers_dense(db):
    r = db.plan(W, estimator="paper")
    assert r.objective == "c_ours"
    assert r.chosen.plan.topology.family == "complete"


def test_objective_energy(db):
    r = db.plan(W, objective="energy_j")
    feasible = [c for c in r.candidates if c.feasible]
    assert r.chosen.cost.total("energy_j") == min(c.cost.total("energy_j") for c in feasible)


@pytest.mark.parametrize("kwargs,needle", [
    ({"estimator": "dsgdd"}, "did you mean 'dsgd'"),
    ({"topologies": ["smallworld"]}, "did you mean 'small_world'"),
    ({"weights": ["metropolis"]}, "did you mean 'metropolis_hastings'"),
    ({"objective": "joules"}, "objective"),
    ({"sparsity": [1.5]}, "sparsity"),
])
def test_bad_names_suggest(db, kwargs, needle):
    with pytest.raises(ValidationError, match=needle):
        db.plan(W, **kwargs)


def test_unknown_name_is_unknown_name_error(db):
    with pytest.raises(UnknownNameError):
        db.plan(W, estimator="nope")


def test_analyzed_statistics_feed_the_planner(db):
    stats = db.analyze(W)
    r = db.plan(W)
    assert r.context.alpha_source.startswith("estimated from sketches")
    assert r.context.alpha == pytest.approx(stats.alpha_dirichlet)


def test_planning_reads_the_latest_statistics_and_the_privacy_spent(db):
    private = attrs.evolve(W, dp_epsilon=2.0)
    assert db.plan(private).context.privacy_epsilon is None
    db.analyze(private)
    second = db.catalog.query("SELECT max(stats_version) AS v, max(alpha_dirichlet) AS a "
                              "FROM airplan.workload_stats")[0]
    r = db.plan(private)
    assert r.context.alpha_source.endswith(f"stats v{second['v']}")
    spent = db.catalog.query("SELECT max(cumulative_epsilon) AS e FROM airplan.privacy_ledger")
    assert r.context.privacy_epsilon == pytest.approx(spent[0]["e"]) and spent[0]["e"] > 0
    # the run names the workload registered by the first plan, not a new one
    runs = db.catalog.query("SELECT DISTINCT workload_id FROM airplan.planning_runs")
    assert len(runs) == 1


def test_json_is_queryable_in_duckdb(db):
    r = db.plan(W)
    doc = r.explain(format="json")
    data = json.loads(doc)
    assert data[0]["format_version"] == 1
    total = db.catalog.query("SELECT (?::JSON)->>'$[0].plan.total_cost' AS t", [doc])[0]["t"]
    assert float(total) == pytest.approx(r.chosen.cost.total())


def test_read_only_catalog_plans_without_recording(tmp_path):
    path = tmp_path / "c.duckdb"
    with aq.connect(path) as s:
        s.plan(W)
    with aq.connect(path, read_only=True) as s:
        r = s.plan(W)
        assert r.planning_run_id is None


def test_dataset_family_calibration_applies_to_its_family(db):
    rows = db.catalog.supersede_calibration("dsgd", "dataset_family", "digits:ring",
                                            {"f0": 0.5}, n_obs=3, source="test")
    r = db.plan(W, topologies=["ring", "complete"], sparsity=[1.0],
                weights=["metropolis_hastings"], estimator="dsgd")
    ring = next(c for c in r.candidates if c.plan.topology.family == "ring")
    full = next(c for c in r.candidates if c.plan.topology.family == "complete")
    assert ring.cost.estimate.calibration_ids == (rows["f0"],)
    assert ring.cost.estimate.terms["error_floor"] >= 0.5
    assert full.cost.estimate.calibration_ids == ()


def test_unknown_dataset_fails_when_the_workload_is_built():
    from airplan_qo.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="did you mean 'digits'"):
        aq.Workload(dataset="digitz")
