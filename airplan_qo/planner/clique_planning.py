"""How the planner treats D-Cliques candidates: their parameters (clique size, cliques formed from
the released label counts, residual heterogeneity), a placeholder assignment to cost a candidate
planned without statistics, and the facts EXPLAIN VERBOSE shows. The clique algorithms
themselves are in :mod:`airplan_qo.plans.cliques`.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..data import dataset_info
from ..plans.cliques import (clique_sizes, clique_skew, decode_cliques, encode_cliques,
                             form_cliques, random_cliques, residual_heterogeneity)
from ..plans.topology import TopologySpec
from ..plans.workload import Workload
from .statistics import LabelStatistics

#: The pruning reason of a d_cliques candidate planned without label statistics.
NO_CLIQUE_STATISTICS = "statistics: d_cliques needs ANALYZE WORKLOAD"


#: Partition schemes whose clients differ only in their label mix, so that cliques balanced on
#: the released label counts remove the heterogeneity those counts show. Elsewhere (``natural``:
#: each client's users label their data their own way, as in ``leaf_synthetic``) the counts
#: miss how the clients differ, and a d_cliques plan is costed without that credit.
LABEL_PARTITIONS = frozenset({"dirichlet", "shards", "iid"})


def d_cliques_params(params: dict[str, Any], w: Workload, labels: LabelStatistics | None
                      ) -> dict[str, Any]:
    """d_cliques parameters with the size defaulted (classes, at most N) and, when statistics
    exist and no assignment was given, the cliques formed from the released label counts."""
    params = dict(params)
    if params.get("size") is None:
        n_classes = labels.counts.shape[1] if labels is not None else dataset_info(w.dataset)[1]
        params["size"] = min(int(n_classes), w.clients)
    if params.get("cliques") is None and labels is not None:
        cliques = form_cliques(labels.counts, int(params["size"]), w.topology_seed)
        params["cliques"] = encode_cliques(cliques)
        params["stats"] = labels.key
    if params.get("cliques") is not None and params.get("residual") is None \
            and labels is not None and labels.counts.shape[0] == w.clients \
            and w.partition in LABEL_PARTITIONS:
        groups = decode_cliques(params["cliques"], w.clients)
        params["residual"] = float(f"{residual_heterogeneity(labels.counts, groups):.4g}")
    return params


def clique_details(spec: TopologySpec, labels: LabelStatistics | None) -> dict[str, Any]:
    """EXPLAIN VERBOSE facts of a d_cliques spec: cliques, size and mean TV skews."""

    p = spec.param_dict
    size = int(p["size"])
    out: dict[str, Any] = {"cliques": len(clique_sizes(spec.n, size)), "clique_size": size}
    if p.get("cliques") is None:
        return out
    groups = decode_cliques(p["cliques"], spec.n)
    out["cliques"] = len(groups)
    if labels is not None and labels.counts.shape[0] == spec.n:
        out["clique_tv_mean"] = round(clique_skew(labels.counts, groups), 4)
        out["random_tv_mean"] = round(
            clique_skew(labels.counts, random_cliques(spec.n, size, spec.seed)), 4)
    return out


def placeholder(spec: TopologySpec) -> TopologySpec:
    """A d_cliques spec without an assignment, with consecutive clients as cliques: the same
    graph up to relabelling (so the same spectra and slots) for costing a pruned candidate."""
    sizes = clique_sizes(spec.n, int(spec.param_dict["size"]))
    start, groups = 0, []
    for s in sizes:
        groups.append(list(range(start, start + s)))
        start += s
    return attrs.evolve(spec, params={**spec.param_dict, "cliques": encode_cliques(groups)})


__all__ = ["NO_CLIQUE_STATISTICS", "clique_details", "d_cliques_params", "placeholder"]
