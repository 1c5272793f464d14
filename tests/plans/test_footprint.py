"""Large N: candidates are sized before they are built, skipped or refused when they cannot fit,
the clustered family draws its bridges in O(edges), and crowded datasets are warned about."""

import numpy as np
import pytest

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import ExecutionError, PlanningError
from airplan_qo.plans import families, footprint
from airplan_qo.plans.families import build_graph
from airplan_qo.plans.topology import TopologySpec


def _memory(monkeypatch, nbytes):
    monkeypatch.setattr(footprint, "available_memory", lambda: nbytes)


def test_a_candidate_that_cannot_fit_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    _memory(monkeypatch, 2 ** 20)
    statement = "TRAIN digits ON 60 CLIENTS USING TOPOLOGY erdos_renyi(p = 0.5)"
    with aq.connect(":memory:") as db, pytest.raises(PlanningError) as err:
        db.sql("EXPLAIN " + statement)
    assert str(err.value).startswith("no candidate topology fits in memory at 60 clients "
                                     "(erdos_renyi(p=0.5) needs ~2 MiB; 1 MiB available)")
    assert main(["explain", "--catalog", str(tmp_path / "c.duckdb"), statement]) == 2
    err_text = capsys.readouterr().err
    assert err_text.startswith("airplan: error: no candidate topology fits in memory")
    assert err_text.count("\n") == 1


def test_candidates_that_cannot_fit_are_skipped_with_a_warning(monkeypatch):
    ring = footprint.planning_bytes(TopologySpec.create("ring", 300))
    dense = footprint.planning_bytes(TopologySpec.create("erdos_renyi", 300, p=0.1))
    assert ring < dense
    _memory(monkeypatch, int((ring + dense) / 2 / footprint.MEMORY_SHARE))
    with aq.connect(":memory:") as db:
        result = db.plan(aq.Workload(dataset="digits", clients=300, partition="iid"),
                         topologies=["ring", ("erdos_renyi", {"p": 0.1}), "complete"],
                         fallback="complete")
        families_planned = {c.plan.topology.family for c in result.candidates}
        assert families_planned == {"ring", "complete"}
        [note] = [w for w in result.warnings if w.startswith("skipped (memory): ")]
        assert note.startswith("skipped (memory): erdos_renyi(p=0.1) needs ~") and \
            note.count("erdos_renyi") == 1
        stored = db.catalog.query("SELECT warnings FROM airplan.planning_runs")[0]["warnings"]
        assert note in stored


def test_expected_edges_match_built_graphs():
    for family, n, params in [("ring", 500, {}), ("erdos_renyi", 400, {"p": 0.1}),
                              ("small_world", 500, {"k": 6}), ("k_regular", 500, {"d": 4}),
                              ("clustered", 500, {"c": 10}), ("torus", 400, {"rows": 20}),
                              ("d_cliques", 500, {"size": 10, "inter": "small_world",
                                                  "cliques": ";".join(
                                                      " ".join(map(str, range(i, i + 10)))
                                                      for i in range(0, 500, 10))})]:
        resolved = families.FAMILIES.get(family).resolve(n, params)
        built = build_graph(family, n, **params).number_of_edges()
        assert footprint.expected_edges(family, n, resolved) == pytest.approx(built, rel=0.1)


def test_clustered_bridges_are_drawn_without_listing_every_pair(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("listed every pair")

    g = None
    with monkeypatch.context() as m:
        m.setattr(np, "triu_indices", refuse)
        g = build_graph("clustered", families.EXACT_CROSS_MAX_N + 1000, c=100, p_in=0.2,
                        p_out=1e-3)
    n = g.number_of_nodes()
    sizes = [n // 100 + (1 if i < n % 100 else 0) for i in range(100)]
    label = np.repeat(np.arange(100), sizes)
    cross = sum(1 for u, v in g.edges() if label[u] != label[v])
    pairs_across = (n * (n - 1) - sum(s * (s - 1) for s in sizes)) / 2
    expected = 1e-3 * pairs_across + 100   # random bridges plus one per consecutive pair
    assert abs(cross - expected) < 5 * np.sqrt(expected)


def test_cross_pairs_are_uniform_over_pairs_in_different_communities():
    rng = np.random.default_rng(0)
    starts = np.array([0, 3, 5, 9])
    label = np.repeat(np.arange(3), [3, 2, 4])
    counts = {}
    for _ in range(3000):
        u, v = families._cross_pairs(rng, starts, 0.3)
        assert (u < v).all() and (label[u] != label[v]).all()
        assert len(set(zip(u.tolist(), v.tolist()))) == len(u)
        for pair in zip(u.tolist(), v.tolist()):
            counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 3 * 2 + 3 * 4 + 2 * 4
    freq = np.array(list(counts.values())) / 3000
    assert np.all(np.abs(freq - 0.3) < 0.04)


def test_small_clustered_graphs_are_drawn_as_before():
    # the pair-by-pair draw of earlier versions, for seeded graphs up to EXACT_CROSS_MAX_N
    n, c, p_out = 120, 5, 0.05
    g = build_graph("clustered", n, seed=7, c=c, p_out=p_out)
    rng = np.random.default_rng(7)
    sizes = [n // c] * c
    for _ in range(c):   # replay the community draws to reach the same generator state
        families._resample(lambda s: families._gnp(n // c, 0.8, s), rng, "")
    members = [np.arange(i * (n // c), (i + 1) * (n // c)) for i in range(c)]
    for i in range(c):
        rng.choice(members[i])
        rng.choice(members[(i + 1) % c])
    label = np.repeat(np.arange(c), sizes)
    iu, ju = np.triu_indices(n, 1)
    cross = label[iu] != label[ju]
    pick = rng.random(int(cross.sum())) < p_out
    old = set(zip(iu[cross][pick].tolist(), ju[cross][pick].tolist()))
    assert old and old <= {tuple(sorted(e)) for e in g.edges()}


def test_more_clients_than_records_is_refused_before_planning():
    with aq.connect(":memory:") as db:
        with pytest.raises(PlanningError, match=r"^digits has 1438 training records, too few "
                                                r"for 1500 clients: each client needs one "
                                                r"training record; use at most 1438 clients"):
            db.plan(aq.Workload(dataset="digits", clients=1500, partition="iid"))
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.topologies")[0]["n"] == 0


def test_training_that_cannot_fit_is_refused_before_it_is_recorded(monkeypatch):
    with aq.connect(":memory:") as db:
        plan = db.plan(aq.Workload(dataset="digits", clients=20), topologies=["ring"],
                       sparsity=[1.0], fallback="complete")
        _memory(monkeypatch, 2 ** 20)
        with pytest.raises(ExecutionError, match=r"^training 20 clients of a 4810-parameter "
                                                 r"model with dsgd needs ~1 MiB"):
            db.execute(plan)
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.executions")[0]["n"] == 0


def test_training_bytes_of_one_process_of_a_run_split_over_several():
    from airplan_qo.plans.footprint import training_bytes

    whole = training_bytes(1000, 4810, "dsgd")
    assert whole == 4 * 4 * 1000 * 4810              # models, scratch, momentum, gradients
    # a rank holding its block of 500 and 2 neighbours, training the 500
    share = training_bytes(1000, 4810, "dsgd", held=502, trained=500)
    assert share == (2 * 502 + 2 * 500) * 4 * 4810
    # CHOCO's replicas and aggregates are per held row
    assert training_bytes(1000, 10, "choco", held=502, trained=500) == (4 * 502 + 2 * 500) * 40
    assert training_bytes(1000, 10, "choco") == 6 * 1000 * 40
