import networkx as nx
import numpy as np
import pytest

from airplan_qo.errors import UnknownNameError, ValidationError
from airplan_qo.plans.families import FAMILIES, build_graph, read_edge_list

# from_edges and d_cliques need input (an edge list; a clique assignment from statistics)
GENERATED = [f for f in FAMILIES.names() if f not in ("from_edges", "d_cliques")]


@pytest.mark.parametrize("family", GENERATED)
@pytest.mark.parametrize("n", [2, 3, 10, 50, 200])
def test_every_family_connected(family, n):
    g = build_graph(family, n, seed=1)
    assert g.number_of_nodes() == n
    assert sorted(g.nodes()) == list(range(n))
    assert nx.is_connected(g)
    assert nx.number_of_selfloops(g) == 0


@pytest.mark.parametrize("family", GENERATED)
def test_seed_reproduces_graph(family):
    a = build_graph(family, 40, seed=7)
    b = build_graph(family, 40, seed=7)
    assert sorted(a.edges()) == sorted(b.edges())


@pytest.mark.parametrize("family", ["erdos_renyi", "small_world", "clustered", "k_regular"])
def test_different_seeds_differ(family):
    assert sorted(build_graph(family, 60, seed=1).edges()) != sorted(
        build_graph(family, 60, seed=2).edges())


@pytest.mark.parametrize("n, rows", [(12, 3), (12, 2), (12, 1), (20, 4), (7, 1), (4, 2), (9, 3)])
def test_torus_labels_and_wrap_around(n, rows):
    cols = n // rows
    expected = set()
    for i in range(rows):
        for j in range(cols):
            for a, b in (((i + 1) % rows, j), (i, (j + 1) % cols)):
                if (a, b) != (i, j):
                    expected.add(tuple(sorted((i * cols + j, a * cols + b))))
    g = build_graph("torus", n, rows=rows)
    assert list(g.nodes()) == list(range(n))
    assert {tuple(sorted(e)) for e in g.edges()} == expected


def test_known_structures():
    assert build_graph("ring", 10).number_of_edges() == 10
    assert build_graph("complete", 10).number_of_edges() == 45
    assert build_graph("star", 10).number_of_edges() == 9
    torus = build_graph("torus", 12, rows=3)
    assert all(d == 4 for _, d in torus.degree())
    reg = build_graph("k_regular", 20, d=6, seed=0)
    assert all(d == 6 for _, d in reg.degree())
    sw = build_graph("small_world", 64, seed=0)  # default k = 6 ~ log2 64
    assert sw.number_of_edges() == 64 * 6 // 2
    ex = build_graph("exponential", 16)
    assert all(d == 7 for _, d in ex.degree())  # +-1, +-2, +-4, 8 (8 = -8 mod 16)


def test_clustered_communities_are_dense_inside():
    g = build_graph("clustered", 50, seed=3, c=5, p_in=1.0, p_out=0.0, bridges=1)
    # 5 complete blocks of 10 = 5 * 45 edges, plus one bridge between consecutive blocks
    assert g.number_of_edges() <= 5 * 45 + 5
    assert g.number_of_edges() >= 5 * 45 + 1


@pytest.mark.parametrize("family,params,word", [
    ("erdos_renyi", {"p": 0}, "'p'"),
    ("erdos_renyi", {"p": 1.5}, "(0, 1]"),
    ("small_world", {"k": 3}, "even"),
    ("small_world", {"k": 60}, "< n"),
    ("small_world", {"beta": -0.1}, "'beta'"),
    ("clustered", {"c": 0}, "'c'"),
    ("torus", {"rows": 7}, "divide"),
    ("k_regular", {"d": 60}, "'d'"),
    ("ring", {"k": 2}, "unknown parameter 'k'"),
    ("erdos_renyi", {"p": "abc"}, "must be float"),
])
def test_bad_parameters_name_the_parameter(family, params, word):
    with pytest.raises(ValidationError) as err:
        build_graph(family, 50, **params)
    assert word in str(err.value)


@pytest.mark.parametrize("n", [1, 0, -3, 2.5, "x"])
def test_bad_n(n):
    with pytest.raises(ValidationError, match="clients"):
        build_graph("ring", n)


def test_unknown_family_suggests():
    with pytest.raises(UnknownNameError, match="did you mean 'small_world'"):
        build_graph("smallworld", 10)


def test_from_edges_file(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# a comment\n10 11\n11,12\n12 10  # tail comment\n12 13\n")
    g = build_graph("from_edges", 4, edges=path)
    assert sorted(g.edges()) == [(0, 1), (0, 2), (1, 2), (2, 3)]
    with pytest.raises(ValidationError, match="4 nodes but 5"):
        build_graph("from_edges", 5, edges=path)


def test_from_edges_errors(tmp_path):
    with pytest.raises(ValidationError, match="not found"):
        read_edge_list(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2\n3\n")
    with pytest.raises(ValidationError, match="bad.txt:2"):
        read_edge_list(bad)
    split = tmp_path / "split.txt"
    split.write_text("0 1\n2 3\n")
    with pytest.raises(ValidationError, match="not connected"):
        build_graph("from_edges", 4, edges=split)
    g = nx.path_graph(["a", "b", "c"])
    assert nx.is_connected(build_graph("from_edges", 3, edges=g))


def test_erdos_renyi_density_close_to_p():
    g = build_graph("erdos_renyi", 200, p=0.1, seed=0)
    density = g.number_of_edges() / (200 * 199 / 2)
    assert abs(density - 0.1) < 0.01
    assert np.isfinite(density)


def test_k_regular_parity():
    with pytest.raises(ValidationError, match="must be even"):
        build_graph("k_regular", 51, d=3)


def _reference_graph(n, u, v):
    g = nx.empty_graph(n)
    g.add_edges_from(zip(np.asarray(u).tolist(), np.asarray(v).tolist()))
    return g


def _same_graph(a, b):
    assert list(a.nodes) == list(b.nodes)
    # the same neighbours in the same order at every node, so the same edge order
    assert [(x, list(d)) for x, d in a.adjacency()] == [(x, list(d)) for x, d in b.adjacency()]
    assert list(a.edges) == list(b.edges)
    for x, y in b.edges:
        assert b[x][y] is b[y][x] and b[x][y] == {}
    assert len({id(d) for _, _, d in b.edges(data=True)}) == b.number_of_edges()


def test_graph_from_pairs_is_what_add_edges_from_builds():
    from airplan_qo.plans.families import _gnp_arrays, _graph_from_pairs

    rng = np.random.default_rng(0)
    for _ in range(150):   # any pairs: repeats, both directions, self-loops
        n, m = int(rng.integers(1, 30)), int(rng.integers(0, 80))
        u, v = rng.integers(0, n, m), rng.integers(0, n, m)
        _same_graph(_reference_graph(n, u, v), _graph_from_pairs(n, u, v))
    for seed in range(20):  # sorted distinct pairs u < v (the G(n, p) path)
        u, v = _gnp_arrays(60, 0.1, seed)
        _same_graph(_reference_graph(60, u, v), _graph_from_pairs(60, u, v))


def test_small_world_is_networkx_watts_strogatz():
    from airplan_qo.plans.families import _watts_strogatz
    from airplan_qo.plans.graphs import edge_arrays

    cases = [(n, k, p, s) for n in (5, 7, 10, 23, 60) for k in (2, 4) if k < n - 1
             for p in (0.0, 0.3, 1.0) for s in range(3)]
    cases += [(n, n - 2 - n % 2, 1.0, s) for n in (8, 9, 12) for s in range(3)]  # crowded
    cases += [(1000, 8, 0.3, 3)]
    for n, k, p, s in cases:
        ours = _watts_strogatz(n, k, p, s)
        ref = nx.watts_strogatz_graph(n, k, p, seed=s)
        u, v = edge_arrays(ours)   # cached at construction
        assert list(zip(u.tolist(), v.tolist())) == sorted(tuple(sorted(e)) for e in ref.edges)
        _same_graph(ref, ours)


def test_pairs_graph_fills_its_dicts_only_when_read():
    from airplan_qo.plans.graphs import PairsGraph, adjacency, degrees

    g = build_graph("erdos_renyi", 300, p=0.05, seed=1)
    assert isinstance(g, PairsGraph)
    a = adjacency(g)
    assert degrees(g).sum() == a.nnz
    assert g.__dict__["_pending_pairs"] is not None   # arrays only so far
    ref = nx.to_scipy_sparse_array(g, nodelist=range(300), format="csr")  # reads the dicts
    assert g.__dict__["_pending_pairs"] is None
    assert (a != ref).nnz == 0 and a.has_sorted_indices
    assert adjacency(g) is a   # cached beside the edge arrays ...
    g.add_edge(0, 299)          # ... until the graph changes
    assert adjacency(g) is not a and adjacency(g)[0, 299] == 1


def test_ring_is_networkx_cycle_graph():
    from airplan_qo.plans.graphs import edge_arrays

    for n in (2, 3, 4, 7, 50):
        ours, ref = build_graph("ring", n), nx.cycle_graph(n)
        _same_graph(ref, ours)
        u, v = edge_arrays(ours)
        assert list(zip(u.tolist(), v.tolist())) == sorted(tuple(sorted(e)) for e in ref.edges)


def test_pairs_graph_pickles_and_copies_as_its_networkx_graph():
    import copy
    import pickle

    from airplan_qo.plans.graphs import adjacency

    g = build_graph("clustered", 120, seed=2)
    adjacency(g)                                   # caches beside the edge arrays
    ref = _reference_graph(120, *(np.asarray(x) for x in zip(*g.edges)))  # fills g's dicts
    for other in (pickle.loads(pickle.dumps(build_graph("clustered", 120, seed=2))),
                  copy.deepcopy(build_graph("clustered", 120, seed=2)),
                  build_graph("clustered", 120, seed=2).copy(), nx.Graph(g)):
        assert sorted(map(sorted, other.edges)) == sorted(map(sorted, ref.edges))
        assert (adjacency(other) != adjacency(g)).nnz == 0
