import networkx as nx
import pytest

from airplan_qo.plans.families import FAMILIES, build_graph
from airplan_qo.plans.schedule import Schedule, is_valid, ota_schedule


def _distance_ok(g, schedule):
    dist = dict(nx.all_pairs_shortest_path_length(g, cutoff=2))
    for members in schedule.slots:
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if b in dist[a]:
                    return False
    return True


@pytest.mark.parametrize("family", [f for f in FAMILIES.names() if f != "from_edges"])
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
    assert ota_schedule(build_graph("ring", 50)).slots_per_round in (4, 5)  # 50 % 3 != 0
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
