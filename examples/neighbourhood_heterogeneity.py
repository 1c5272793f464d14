"""Label heterogeneity each candidate topology leaves after one mixing step, from the statistics.

Analyses a label-skewed workload (the released per-client label counts, never raw labels), plans
it, and prints for every candidate topology its effective number of neighbours
(1 / mean_i sum_j W_ij^2, Vogels et al. 2022) and zeta^2_W / zeta^2, the share of the clients'
label heterogeneity left after one averaging step with W; for D-Cliques with Clique Averaging
also the share its cliques leave (the `residual` the cost models use).

    python examples/neighbourhood_heterogeneity.py [CATALOG]   (default: an in-memory catalog)
"""

import sys

import airplan_qo as aq
from airplan_qo.costmodels.features import effective_neighbours, neighbourhood_heterogeneity
from airplan_qo.planner.statistics import label_statistics
from airplan_qo.plans.topology import build

path = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
w = aq.Workload(dataset="digits", clients=30, alpha=0.1)
with aq.connect(path) as db:
    db.analyze(w)
    counts = label_statistics(db.catalog, w).counts
    seen = set()
    print(f"{'topology':72s} {'neighbours':>10s} {'zeta2_W/zeta2':>14s} {'cliques leave':>14s}")
    for cand in db.plan(w).candidates:
        spec = cand.plan.topology
        if (spec.family, spec.params, spec.weights) in seen:
            continue
        seen.add((spec.family, spec.params, spec.weights))
        weights = build(spec).weights
        residual = spec.param_dict.get("residual")
        print(f"{spec.label() + ' [' + spec.weights + ']':72s} "
              f"{effective_neighbours(weights):10.2f} "
              f"{neighbourhood_heterogeneity(weights, counts):14.3f} "
              f"{'' if residual is None else format(residual, '.3f'):>14s}")
