"""The default grid's workloads where collaboration matters (airplan_qo/grids/default.toml):
data-hungry tasks (mnist1d with the MLP and the 1-D CNN, leaf_synthetic on its natural per-user
partition), each plannable and trainable as written (model, data split), with the fully connected
reference and D-Cliques among the candidates; the grid itself is not run here."""

from __future__ import annotations

from airplan_qo.evaluation import load_grid
from airplan_qo.planner.feasibility import check_data_split
from airplan_qo.planner.statistics import model_dimension


def test_the_default_grid_holds_workloads_where_collaboration_matters():
    grid = load_grid("default")
    hungry = [ws for ws in grid.workloads if ws.workload.dataset in ("mnist1d", "leaf_synthetic")]
    workloads = [ws.workload for ws in hungry]
    assert len(hungry) == 10 and len(grid.seeds) >= 4
    assert {w.model for w in workloads} == {"mlp", "cnn1d"}        # at least one CNN workload
    assert all(20 <= w.clients <= 40 and w.rounds == 100 for w in workloads)
    assert {w.alpha for w in workloads if w.dataset == "mnist1d"} == {0.1, 0.3, 1.0}
    assert {w.partition for w in workloads if w.dataset == "leaf_synthetic"} == {"natural"}
    for ws in hungry:
        families = {s.family for s in ws.specs()}
        assert {"complete", "d_cliques"} <= families and 1.0 in ws.sparsity  # reference, cliques
        check_data_split(ws.workload)                 # every client gets data
        d, classes = model_dimension(ws.workload)     # the model fits the data's shape
        assert d > 0 and classes == 10
    ref = grid.workloads[grid.reference].workload
    assert (ref.dataset, ref.clients, ref.alpha, ref.snr_db) == ("digits", 20, 0.5, 10)


def test_the_default_grid_holds_the_physical_operators():
    # the shipped ttt fit is made on this grid: it must see every transport and algorithm
    grid = load_grid("default")
    transports, algorithms = set(), set()
    for ws in grid.workloads:
        transports.update(ws.plan_transports() or ["ota"])
        algorithms.update(ws.plan_algorithms() or ["auto"])
    assert {"ota", "digital(bits=2)", "digital(bits=8)", "digital(bits=32)"} <= \
        {str(t) for t in transports}
    assert {"gradient_tracking", "push_sum", "matcha", "fedavg"} <= {str(a) for a in algorithms}
