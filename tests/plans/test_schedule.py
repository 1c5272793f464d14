import networkx as nx
import numpy as np
import pytest

from airplan_qo.plans.families import FAMILIES, build_graph
from airplan_qo.plans.schedule import (Schedule, _greedy, _iterated_greedy, is_valid,
                                       ota_schedule, square_adjacency)


def _distance_ok(g, schedule):
    dist = dict(nx.all_pairs_shortest_path_length(g, cutoff=2))
    for members in schedule.slots:
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if b in dist[a]:
                    return False
    return True


@pytest.mark.parametrize("family", [f for f in FAMILIES.names()
                                    if f not in ("from_edges", "d_cliques")])
@pytest.mark.parametrize("n", [2, 7, 50])
def test_schedule_valid(family, n):
    g = build_graph(family, n, seed=5)
    s = ota_schedule(g)
    assert is_valid(g, s)
    assert _distance_ok(g, s)
    assert s.slots_per_round >= s.lower_bound == max(d for _, d in g.degree()) + 1


def test_known_slot_counts():
    assert ota_schedule(build_graph("complete", 50)).slots_per_round == 50
    assert ota_schedule(build_graph("star", 50)).slots_per_round == 50
    assert ota_schedule(build_graph("ring", 50)).slots_per_round == 4  # 50 % 3 != 0
    assert ota_schedule(build_graph("ring", 51)).slots_per_round == 3
    er = ota_schedule(build_graph("erdos_renyi", 50, p=0.2, seed=0)).slots_per_round
    assert 20 <= er <= 35


def test_is_valid_rejects_conflicts():
    g = nx.path_graph(4)
    assert not is_valid(g, Schedule(slots=((0, 2), (1,), (3,)), lower_bound=3))
    assert not is_valid(g, Schedule(slots=((0,), (1,), (2,)), lower_bound=3))
    assert is_valid(g, Schedule(slots=((0, 3), (1,), (2,)), lower_bound=3))


def test_large_schedule_uses_fast_path():
    g = build_graph("small_world", 5000, seed=0, k=6)
    s = ota_schedule(g)
    assert is_valid(g, s)


@pytest.mark.parametrize("n", range(5, 31))
def test_ring_gets_chromatic_number_of_its_square(n):
    g = nx.cycle_graph(n)
    s = ota_schedule(g)
    assert is_valid(g, s) and _distance_ok(g, s)
    assert s.slots_per_round == (5 if n == 5 else 3 if n % 3 == 0 else 4)


@pytest.mark.parametrize("family, n, params, seed, slots", [
    ("small_world", 20, {"k": 4}, 0, 7),  # = max degree + 1
    ("clustered", 20, {}, 33, 8),  # = max degree + 1
    ("torus", 20, {}, 0, 7),
    ("k_regular", 50, {}, 0, 7),
])
def test_small_graphs_get_fewer_slots(family, n, params, seed, slots):
    g = build_graph(family, n, seed=seed, **params)
    s = ota_schedule(g)
    assert is_valid(g, s) and _distance_ok(g, s)
    assert s.slots_per_round == slots


def _chromatic_number(g2: nx.Graph) -> int:
    """Smallest k with a proper k-colouring, by plain backtracking (independent of the code)."""
    nodes = sorted(g2, key=g2.degree, reverse=True)
    for k in range(1, len(nodes) + 1):
        colour: dict[int, int] = {}

        def extend(i: int) -> bool:
            if i == len(nodes):
                return True
            v = nodes[i]
            used = {colour[u] for u in g2[v] if u in colour}
            for c in range(min(k, max(colour.values(), default=-1) + 2)):
                if c not in used:
                    colour[v] = c
                    if extend(i + 1):
                        return True
                    del colour[v]
            return False

        if extend(0):
            return k
    return 0


def test_small_random_graphs_get_the_optimum():
    rng = np.random.default_rng(3)
    checked = 0
    while checked < 40:
        n, p = int(rng.integers(8, 17)), float(rng.uniform(0.1, 0.35))
        g = nx.gnp_random_graph(n, p, seed=int(rng.integers(2**31)))
        if not nx.is_connected(g):
            continue
        s = ota_schedule(g)
        assert is_valid(g, s) and _distance_ok(g, s)
        assert s.slots_per_round == _chromatic_number(nx.power(g, 2)), sorted(g.edges())
        checked += 1


def test_iterated_greedy_never_adds_colours():
    g = build_graph("small_world", 3000, seed=1, k=6)
    a2 = square_adjacency(g)
    first = _greedy(a2, np.argsort(-np.diff(a2.indptr), kind="stable"))
    improved = _iterated_greedy(a2, first)
    coo = a2.tocoo()
    assert np.all(improved[coo.row] != improved[coo.col])
    assert improved.max() <= first.max()
    assert ota_schedule(g).slots_per_round <= improved.max() + 1


def test_iterated_greedy_stops_at_the_first_pass_without_a_gain_on_a_large_square(
        monkeypatch):
    from airplan_qo.plans import schedule

    g = build_graph("erdos_renyi", 2000, seed=3, p=0.01)
    a2 = square_adjacency(g)
    first = _greedy(a2, np.argsort(-np.diff(a2.indptr), kind="stable"))
    full = _iterated_greedy(a2, first)
    counts = []
    recolour = schedule._recolour_classes

    def counted(rows, colour, order):
        out = recolour(rows, colour, order)
        counts.append((schedule._colours(colour), schedule._colours(out)))
        return out

    monkeypatch.setattr(schedule, "_recolour_classes", counted)
    monkeypatch.setattr(schedule, "ITERATED_GREEDY_FULL_NNZ", a2.nnz - 1)   # "large"
    early = _iterated_greedy(a2, first)
    coo = a2.tocoo()
    assert np.all(early[coo.row] != early[coo.col])
    # every pass but the last saved a colour; the last saved none (or the passes ran out)
    assert all(after < before for before, after in counts[:-1])
    assert counts[-1][1] == counts[-1][0] or len(counts) == schedule.ITERATED_GREEDY_PASSES
    assert schedule._colours(full) <= schedule._colours(early) <= schedule._colours(first)
    counts.clear()
    monkeypatch.setattr(schedule, "ITERATED_GREEDY_FULL_NNZ", a2.nnz)       # not large
    assert np.array_equal(_iterated_greedy(a2, first), full)
    assert len(counts) == schedule.ITERATED_GREEDY_PASSES


@pytest.mark.parametrize("family,n,params", [("erdos_renyi", 400, {"p": 0.05}),
                                             ("small_world", 300, {"k": 6}),
                                             ("clustered", 200, {})])
def test_schedule_without_the_square_is_valid_above_the_entry_limit(monkeypatch, family, n,
                                                                   params):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    g = build_graph(family, n, seed=2, **params)
    exact = ota_schedule(g)
    squared = []
    monkeypatch.setattr(schedule, "square_adjacency",
                        lambda graph: squared.append(1) or square_adjacency(graph))
    entries = square_adjacency(g).nnz
    monkeypatch.setattr(schedule, "SQUARE_ENTRY_LIMIT", entries)       # at the limit: G^2 built
    assert ota_schedule(g) == exact and squared
    squared.clear()
    monkeypatch.setattr(schedule, "SQUARE_ENTRY_LIMIT", entries - 1)   # above it: never built
    fast = ota_schedule(g)
    assert not squared
    assert is_valid(g, fast) and _distance_ok(g, fast)
    assert fast.lower_bound == exact.lower_bound
    assert exact.slots_per_round <= fast.slots_per_round
    # the same pass as the greedy over G^2 in the order of walks: a colouring of G^2
    colour = schedule._distance2_greedy(adjacency(g))
    assert np.array_equal(colour, fast.slot_of())


def test_square_entries_are_counted_or_bounded_without_the_square(monkeypatch):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    for g in (build_graph("clustered", 600, seed=1, c=12),
              build_graph("erdos_renyi", 600, seed=1, p=0.03)):
        a = adjacency(g)
        entries = square_adjacency(g).nnz
        walks = int((np.diff(a.indptr).astype(np.int64) ** 2).sum())
        assert entries <= walks == schedule._square_entries(a)          # the bound, below it
        monkeypatch.setattr(schedule, "SQUARE_ENTRY_LIMIT", 0)
        monkeypatch.setattr(schedule, "SQUARE_SAMPLE", 600)             # every node counted
        assert schedule._square_entries(a) == entries
        monkeypatch.setattr(schedule, "SQUARE_SAMPLE", 100)             # an estimate
        assert schedule._square_entries(a) == pytest.approx(entries, rel=0.15)
        monkeypatch.undo()


@pytest.mark.parametrize("family,n,params", [("erdos_renyi", 300, {"p": 0.05}),
                                             ("small_world", 500, {"k": 6}),
                                             ("torus", 64, {}), ("star", 20, {})])
def test_greedy_over_g_is_the_greedy_over_its_square(family, n, params):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    g = build_graph(family, n, seed=4, **params)
    a2 = square_adjacency(g)
    for order in (np.argsort(-np.diff(a2.indptr), kind="stable"),
                  np.random.default_rng(0).permutation(n)):
        assert np.array_equal(schedule._distance2_greedy(adjacency(g), order), _greedy(a2, order))


@pytest.mark.parametrize("family,n,params", [("small_world", 3000, {"k": 6}),
                                             ("erdos_renyi", 2000, {"p": 0.01}),
                                             ("clustered", 1500, {}),
                                             ("exponential", 1500, {})])
def test_large_schedules_read_g_and_match_the_stages_over_its_square(monkeypatch, family, n,
                                                                    params):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    g = build_graph(family, n, seed=1, **params)
    a, a2 = adjacency(g), square_adjacency(g)
    monkeypatch.setattr(schedule, "SQUARE_BLOCK_ENTRIES", 5000)   # many blocks of rows
    deg2 = schedule._square_degrees(a)
    assert np.array_equal(deg2, np.diff(a2.indptr))
    hub = int(np.argmax(np.diff(a.indptr)))
    seed = [hub, *a.indices[a.indptr[hub]:a.indptr[hub + 1]].tolist()]
    assert schedule._clique_distance2(a, deg2, seed) == schedule._clique(a2, seed)
    first = schedule._distance2_greedy(a, np.argsort(-deg2, kind="stable"))
    k = schedule._colours(first)
    for order in (np.arange(k)[::-1], np.random.default_rng(0).permutation(k)):
        assert np.array_equal(schedule._recolour_classes_distance2(a, first, order),
                              schedule._recolour_classes(schedule._structure(a2), first, order))
    for limit in (a2.nnz, a2.nnz - 1):      # all passes, and stopping at the first without gain
        monkeypatch.setattr(schedule, "ITERATED_GREEDY_FULL_NNZ", limit)
        assert np.array_equal(schedule._iterated_greedy_distance2(a, first, a2.nnz),
                              _iterated_greedy(a2, first))
    squared = []
    monkeypatch.setattr(schedule, "square_adjacency",
                        lambda graph: squared.append(1) or square_adjacency(graph))
    s = ota_schedule(g)
    assert not squared   # G^2 is not formed above the size of the later stages
    assert np.array_equal(s.slot_of(), schedule._staged_colouring(a2, seed, first=first))
    assert is_valid(g, s)


@pytest.mark.parametrize("family,n,params", [("ring", 301, {}), ("small_world", 400, {"k": 6}),
                                             ("erdos_renyi", 300, {"p": 0.2})])
def test_greedy_with_integer_bit_sets_is_the_same_greedy(monkeypatch, family, n, params):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    a = adjacency(build_graph(family, n, seed=4, **params))
    for order in (None, np.random.default_rng(1).permutation(n)):
        monkeypatch.setattr(schedule, "BITSET_GREEDY_MAX_DEGREE", 0)      # numpy rows
        rows = schedule._distance2_greedy(a, order)
        monkeypatch.setattr(schedule, "BITSET_GREEDY_MAX_DEGREE", n)      # bit sets
        assert np.array_equal(schedule._distance2_greedy(a, order), rows)


@pytest.mark.parametrize("family,n,params", [("ring", 1001, {}), ("exponential", 1500, {}),
                                             ("exponential", 1024, {}), ("torus", 1200, {}),
                                             ("small_world", 1200, {"k": 4, "beta": 0.0})])
def test_square_degrees_of_circulant_graphs_come_from_their_offsets(monkeypatch, family, n,
                                                                    params):
    from airplan_qo.plans import schedule
    from airplan_qo.plans.graphs import adjacency

    a = adjacency(build_graph(family, n, **params))
    circulant = family != "torus"   # a torus's wrap-around offsets differ by column
    assert (schedule._circulant_offsets(a) is not None) == circulant
    got = schedule._square_degrees(a)
    monkeypatch.setattr(schedule, "_circulant_offsets", lambda a: None)
    assert np.array_equal(got, schedule._square_degrees(a))
