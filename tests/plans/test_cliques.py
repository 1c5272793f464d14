"""D-Cliques: clique formation from label counts, the d_cliques family and its planning."""

from __future__ import annotations

import attrs
import networkx as nx
import numpy as np
import pytest

import airplan_qo as aq
from airplan_qo.data import load, partition
from airplan_qo.errors import PlanningError, ValidationError
from airplan_qo.plans.cliques import (
    clique_sizes,
    clique_skew,
    decode_cliques,
    encode_cliques,
    form_cliques,
    random_cliques,
)
from airplan_qo.plans.families import build_graph
from airplan_qo.planner.clique_planning import NO_CLIQUE_STATISTICS
from airplan_qo.planner.optimizer import Optimizer
from airplan_qo.plans.request import PlanRequest
from airplan_qo.plans.topology import TopologySpec
from airplan_qo.plans.workload import Workload


def _digit_counts(n: int, alpha: float, seed: int) -> np.ndarray:
    d = load("digits", seed=seed)
    part = partition("dirichlet", d.y_train, n, seed=seed, alpha=alpha)
    return np.stack([np.bincount(d.y_train[idx], minlength=10) for idx in part.indices])


@pytest.mark.parametrize("seed", [0, 1])
def test_cliques_cut_label_skew_to_a_fifth_of_random(seed):
    counts = _digit_counts(100, 0.1, seed)
    cliques = form_cliques(counts, 10, seed)
    assert sorted(v for c in cliques for v in c) == list(range(100))
    assert [len(c) for c in cliques] == [10] * 10
    ours = clique_skew(counts, cliques)
    rand = clique_skew(counts, random_cliques(100, 10, seed))
    assert ours <= rand / 5, (ours, rand)


def test_form_cliques_is_seeded_and_sizes_balanced():
    counts = _digit_counts(23, 0.5, 0)
    assert form_cliques(counts, 5, 3) == form_cliques(counts, 5, 3)
    assert clique_sizes(23, 5) == [5, 5, 5, 4, 4]
    assert sorted(len(c) for c in form_cliques(counts, 5, 3)) == [4, 4, 5, 5, 5]
    with pytest.raises(ValidationError, match="clique size"):
        form_cliques(counts, 0, 0)
    with pytest.raises(ValidationError, match="label counts"):
        form_cliques(np.ones(5), 2, 0)


def test_clique_text_round_trip_and_errors():
    cliques = [[0, 3], [1, 2, 4]]
    assert decode_cliques(encode_cliques(cliques), 5) == cliques
    with pytest.raises(ValidationError, match="exactly once"):
        decode_cliques("0 1;1 2", 3)
    with pytest.raises(ValidationError, match="client ids"):
        decode_cliques("0 a", 2)


def _inter_edges(g: nx.Graph, cliques: list[list[int]]):
    of = {v: i for i, c in enumerate(cliques) for v in c}
    return [(of[u], of[v]) for u, v in g.edges() if of[u] != of[v]]


@pytest.mark.parametrize("inter", ["ring", "small_world"])
def test_graph_is_connected_cliques_complete_and_inter_edges_follow_the_pattern(inter):
    counts = _digit_counts(100, 0.1, 0)
    cliques = form_cliques(counts, 10, 0)
    g = build_graph("d_cliques", 100, seed=0, size=10, inter=inter,
                    cliques=encode_cliques(cliques))
    assert nx.is_connected(g)
    for c in cliques:
        assert g.subgraph(c).number_of_edges() == len(c) * (len(c) - 1) // 2
    inter_edges = _inter_edges(g, cliques)
    meta = nx.Graph()
    meta.add_edges_from(inter_edges)
    assert len(inter_edges) == meta.number_of_edges()   # one edge per joined pair of cliques
    if inter == "ring":
        assert nx.utils.graphs_equal(nx.Graph(meta), nx.relabel_nodes(
            nx.cycle_graph(10), dict(enumerate(range(10)))))
    else:
        assert nx.is_connected(meta) and meta.number_of_edges() == 10 * 4 // 2  # k = log2(10)
        assert not nx.utils.graphs_equal(meta, nx.cycle_graph(10))
    # the inter-clique endpoints rotate over a clique's members
    assert max(d for _, d in g.degree()) <= 9 + (2 if inter == "ring" else 4)


def test_family_without_statistics_is_a_one_line_error():
    with pytest.raises(PlanningError, match="needs per-client label statistics: run ANALYZE "
                       "WORKLOAD") as err:
        build_graph("d_cliques", 10, seed=0, size=5)
    assert "\n" not in str(err.value)
    with pytest.raises(ValidationError, match="inter.*must be one of ring, small_world"):
        TopologySpec.create("d_cliques", 10, inter="star")
    with pytest.raises(ValidationError, match="above size = 2"):
        build_graph("d_cliques", 4, size=2, cliques="0 1 2;3")


def test_cli_topology_without_statistics(capsys):
    from airplan_qo.cli import main

    assert main(["topology", "d_cliques", "--clients", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ANALYZE WORKLOAD" in err


def test_planning_without_statistics_prunes_with_the_reason(tmp_path):
    w = Workload.from_params("digits", 20, {"alpha": 0.1})
    with aq.connect(tmp_path / "c.duckdb") as s:
        r = Optimizer(s.catalog).plan(PlanRequest(workload=w, topologies=(("d_cliques", ()),),
                                                  sparsity=(1.0,)))
        dc = [c for c in r.candidates if c.plan.topology.family == "d_cliques"]
        assert dc and all(c.pruned_reason == NO_CLIQUE_STATISTICS for c in dc)
        assert all(c.topology_id is None for c in dc)
        # costed on the same graph up to relabelling: two cliques of 10 joined by one edge
        assert dc[0].stats.spectra.n_edges == 2 * 45 + 1
        # restricted to d_cliques, nothing can be planned: the error names the reason
        with pytest.raises(PlanningError, match="no plan in USING TOPOLOGY d_cliques meets the "
                                                "SLA.*statistics: d_cliques needs ANALYZE"):
            s.sql("EXPLAIN TRAIN digits ON 20 CLIENTS WITH (alpha = 0.1) "
                  "USING TOPOLOGY d_cliques")
        [res] = s.sql("EXPLAIN TRAIN digits ON 20 CLIENTS WITH (alpha = 0.1) "
                      "USING TOPOLOGY d_cliques FALLBACK COMPLETE")
        assert "statistics: d_cliques needs ANALYZE WORKLOAD" in res.text


def test_planning_after_analyze_forms_cliques_end_to_end(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as s:
        s.sql("ANALYZE WORKLOAD digits ON 100 CLIENTS WITH (alpha = 0.1)")
        [res] = s.sql("EXPLAIN (FORMAT JSON) TRAIN digits ON 100 CLIENTS WITH (alpha = 0.1) "
                      "USING TOPOLOGY d_cliques(size = 10, inter = 'ring'), ring")
        run = res.document[0]["planning_run_id"]
        [rows] = s.sql("SELECT family, topology_params::VARCHAR, pruned_reason, topology_id "
                       f"FROM airplan.plans WHERE planning_run_id = {run} "
                       "AND family = 'd_cliques'")
        assert rows.rows
        for family, params, reason, tid in rows.rows:
            assert '"stats": "w1v1"' in params and tid is not None
            assert reason is None or not reason.startswith("statistics")
        w = Workload.from_params("digits", 100, {"alpha": 0.1})
        result = s.plan(w, topologies=[("d_cliques", {"size": 10})])
        dc = next(c for c in result.candidates if c.plan.topology.family == "d_cliques")
        d = dc.topology_details
        assert d["cliques"] == 10 and d["clique_size"] == 10
        assert d["clique_tv_mean"] <= d["random_tv_mean"] / 5
        text = attrs.evolve(result, chosen=dc).explain(verbose=True)
        assert "cliques=10 clique_size=10 clique_tv_mean=" in text and "random_tv_mean=" in text
        assert "clique_tv_mean" not in attrs.evolve(result, chosen=dc).explain()
        # the cached graph is the one of these statistics; new statistics give a new identity
        spec = dc.plan.topology
        assert spec.param_dict["stats"] == "w1v1" and "cliques=" not in spec.label()
        s.sql("ANALYZE WORKLOAD digits ON 100 CLIENTS WITH (alpha = 0.1, dp_epsilon = 5)")
        again = s.plan(w, topologies=[("d_cliques", {"size": 10})])
        spec2 = next(c for c in again.candidates
                     if c.plan.topology.family == "d_cliques").plan.topology
        assert spec2.param_dict["stats"] == "w1v2" and spec2 != spec


def test_default_candidates_include_d_cliques_once_statistics_exist(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        w = aq.Workload(dataset="digits", clients=30, alpha=0.1)
        fams = {c.plan.topology.family for c in db.plan(w).candidates}
        assert "d_cliques" not in fams                        # no statistics yet
        db.analyze(w)
        cands = [c for c in db.plan(w).candidates if c.plan.topology.family == "d_cliques"]
        assert cands and all(c.plan.topology.param_dict["cliques"] for c in cands)
        small = aq.Workload(dataset="digits", clients=10, alpha=0.1)   # one clique: complete
        db.analyze(small)
        assert "d_cliques" not in {c.plan.topology.family for c in db.plan(small).candidates}


def test_cliques_earn_the_label_credit_only_where_clients_differ_by_labels():
    """Cliques balanced on the released label counts remove the heterogeneity those counts show
    (``residual``, which the cost models read) only where the clients differ in their label mix
    alone; on a ``natural`` partition (each user labels its data its own way, as in
    leaf_synthetic) the counts miss how the clients differ, and no credit is given."""
    from types import SimpleNamespace

    from airplan_qo.planner.clique_planning import LABEL_PARTITIONS, d_cliques_params

    labels = SimpleNamespace(counts=_digit_counts(20, 0.1, 0), key="w1v1")
    skewed = d_cliques_params({}, Workload.from_params("digits", 20, {"alpha": 0.1}), labels)
    assert 0.0 <= skewed["residual"] < 0.5 and skewed["cliques"]
    natural = d_cliques_params({}, Workload.from_params(
        "leaf_synthetic", 20, {"partition": "natural"}), labels)
    assert natural["cliques"] == skewed["cliques"] and "residual" not in natural
    assert "dirichlet" in LABEL_PARTITIONS and "natural" not in LABEL_PARTITIONS
