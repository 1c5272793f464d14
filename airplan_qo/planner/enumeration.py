"""The plan space the planner enumerates: topology families and their parameter variants, mixing
rules and sparsity values (the defaults, or the request's restriction), less the topologies
whose planning would not fit in memory.
"""

from __future__ import annotations

import math
from typing import Any

from ..catalog.store import Catalog
from ..errors import PlanningError
from ..plans.families import FAMILIES
from ..plans.mixing import WEIGHTS
from ..plans.request import PlanRequest
from ..plans.topology import TopologySpec
from ..plans.workload import Workload
from .clique_planning import d_cliques_params
from .statistics import LabelStatistics, label_statistics

DEFAULT_FAMILIES = ("ring", "erdos_renyi", "small_world", "clustered", "complete", "exponential")
#: The mixing-weight rules planned when a request names none.
PLANNED_WEIGHTS = ("metropolis_hastings", "best_constant")
DENSE_FAMILY_LIMIT = 2000


def parameter_variants(family: str, n: int) -> list[dict[str, Any]]:
    """Parameter variants the enumerator tries for a family at n clients.

    Dense families are kept sparse at large n (expected degree O(log n), communities of 50) so
    that planning stays tractable; the defaults of the paper are used up to n = 250.
    """
    if family == "erdos_renyi":
        if n <= DENSE_FAMILY_LIMIT:
            return [{"p": p} for p in (0.1, 0.2, 0.3)]
        base = math.log(n) / n
        return [{"p": round(m * base, 6)} for m in (2, 4)]
    if family == "small_world":
        ks = sorted({k for k in (4, 6, 8) if k < n - 1}) or [2]
        return [{"k": k} for k in ks]
    if family == "clustered":
        if n > 250:
            return [{"c": n // 50}]
        return [{}]
    return [{}]


def fitting(specs: list[TopologySpec], w: Workload) -> tuple[list[TopologySpec], list[str]]:
    """The candidate topologies whose planning fits in memory, and warnings naming the ones
    skipped (and more clients than training records); PlanningError when none fits."""
    from ..plans.footprint import gib, more_clients_than_records, split_by_memory

    fits, skipped, budget = split_by_memory(specs)
    notes = []
    if skipped:
        names = "; ".join(dict.fromkeys(  # one entry per graph, whatever the weights rule
            f"{spec.label()} needs ~{gib(need)}" for spec, need in skipped))
        if not fits:
            raise PlanningError(
                f"no candidate topology fits in memory at {w.clients} clients ({names}; "
                f"{gib(budget)} available): choose a sparser topology or fewer clients")
        notes.append(f"skipped (memory): {names}; {gib(budget)} available")
    crowded = more_clients_than_records(w.dataset, w.clients)
    if crowded:
        notes.append(crowded)
    return fits, notes


def candidate_specs(catalog: Catalog, request: PlanRequest,
                    labels: LabelStatistics | None = None) -> list[TopologySpec]:
    """The topology specs to cost. d_cliques cliques are formed from ``labels`` (read from
    the catalog when not given); without statistics their ``cliques`` stays unset."""
    w = request.workload
    if labels is None and request.topologies and any(
            FAMILIES.get(f).name == "d_cliques" for f, _ in request.topologies):
        labels = label_statistics(catalog, w)
    weights = request.weights or PLANNED_WEIGHTS
    for rule in weights:
        WEIGHTS.get(rule)
    if request.topologies:
        topo = [(FAMILIES.get(f).name, [dict(p)]) for f, p in request.topologies]
    else:
        topo = [(f, parameter_variants(f, w.clients)) for f in DEFAULT_FAMILIES]
        if labels is not None and labels.counts.shape[0] == w.clients \
                and w.clients > labels.counts.shape[1]:
            # the workload's statistics allow D-Cliques (with Clique Averaging) of more
            # than one clique; with one clique it is the complete graph
            topo.append(("d_cliques", [{}]))
    specs: list[TopologySpec] = []
    for family, variants in topo:
        # every registered rule gives W = 11^T/N on the complete graph, and periodic families
        # prescribe their own W_t: one candidate suffices
        rules = weights[:1] if family == "complete" or FAMILIES.get(family).periodic \
            else weights
        for params in variants:
            if family == "d_cliques":
                params = d_cliques_params(params, w, labels)
            for rule in rules:
                spec = TopologySpec.create(family, w.clients, seed=w.topology_seed,
                                           weights=rule, **params)
                if spec not in specs:
                    specs.append(spec)
    return specs


__all__ = ["DEFAULT_FAMILIES", "PLANNED_WEIGHTS", "candidate_specs", "fitting",
           "parameter_variants"]
