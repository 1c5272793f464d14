"""The grid of workloads where collaboration matters (airplan_qo/grids/collab.toml): it loads,
its workloads are the data-hungry ones the time-to-target model has not been fitted on, and each
is plannable and trainable as written (model, data split); the grid itself is not run here."""

from __future__ import annotations

from airplan_qo.costmodels.time_to_target import load_reference
from airplan_qo.evaluation import builtin_grids, load_grid
from airplan_qo.planner.feasibility import check_data_split
from airplan_qo.planner.statistics import model_dimension


def test_the_collaboration_grid_loads_and_covers_what_the_fit_lacks():
    assert "collab" in builtin_grids()
    grid = load_grid("collab")
    workloads = [ws.workload for ws in grid.workloads]
    assert {w.dataset for w in workloads} == {"mnist1d", "leaf_synthetic"}
    assert {w.model for w in workloads} == {"mlp", "cnn1d"}
    assert all(20 <= w.clients <= 40 for w in workloads)
    assert {w.alpha for w in workloads if w.dataset == "mnist1d"} == {0.1, 0.3, 1.0}
    assert {w.partition for w in workloads if w.dataset == "leaf_synthetic"} == {"natural"}
    assert len(grid.seeds) >= 3 and len(grid.workloads) == 15 and grid.n_runs == 1260
    fitted = load_reference()["range"]
    # what refitting on it adds: datasets and a model the shipped fit never saw
    assert not {w.dataset for w in workloads} & set(fitted["datasets"])
    assert "cnn1d" not in fitted["models"]
    for ws in grid.workloads:
        families = {s.family for s in ws.specs()}
        assert {"complete", "d_cliques"} <= families and 1.0 in ws.sparsity  # reference, cliques
        check_data_split(ws.workload)                 # every client gets data
        d, classes = model_dimension(ws.workload)     # the model fits the data's shape
        assert d > 0 and classes == 10
    ref = grid.workloads[grid.reference].workload
    assert (ref.dataset, ref.clients, ref.alpha, ref.model) == ("mnist1d", 20, 0.3, "mlp")
