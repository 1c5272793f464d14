"""What the planner reads from the catalog about a workload: its row and latest ANALYZE WORKLOAD
statistics (:func:`workload_facts`), the heterogeneity estimators use (:func:`heterogeneity`),
the released per-client label counts (:func:`label_statistics`) and the model's size. Topology
statistics are read here (:func:`cached_topologies`) for
:meth:`airplan_qo.planner.optimizer.Optimizer.topology_stats`, the planner's topology cache.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs

from ..catalog.analyze import read_label_counts, workload_fingerprint
from ..catalog.store import Catalog
from ..data import dataset_info
from ..plans.spectra import SpectralStats
from ..plans.topology import TopologySpec, TopologyStats
from ..plans.workload import Workload


def model_dimension(workload: Workload) -> tuple[int, int]:
    """(d, n_classes) of the workload's model on its dataset, without importing torch."""
    from ..model_size import parameter_count

    shape, n_classes = dataset_info(workload.dataset)
    return int(parameter_count(workload.model, tuple(shape), n_classes)), n_classes


@attrs.frozen
class WorkloadFacts:
    """What the catalog knows of a workload's data: its ``workloads`` row id (None when never
    registered) and its latest ANALYZE WORKLOAD statistics (version None when none)."""

    workload_id: int | None = None
    stats_version: int | None = None
    alpha_dirichlet: float | None = None
    privacy_epsilon: float | None = None


def workload_facts(catalog: Catalog, w: Workload) -> WorkloadFacts:
    """The workload's id, latest statistics version, its Dirichlet alpha and the privacy spent
    on it (one query, two when the workload has statistics)."""
    alpha = w.alpha if w.partition == "dirichlet" else None
    rows = catalog.query(
        "SELECT w.workload_id, s.stats_version, s.alpha_dirichlet "
        "FROM airplan.workloads w LEFT JOIN airplan.workload_stats s "
        "ON s.workload_id = w.workload_id WHERE w.fingerprint = ? "
        "ORDER BY s.stats_version DESC NULLS LAST LIMIT 1",
        [workload_fingerprint(w.dataset, w.clients, w.partition, alpha, w.seed)])
    if not rows:
        return WorkloadFacts()
    r = rows[0]
    if r["stats_version"] is None:
        return WorkloadFacts(int(r["workload_id"]))
    # a separate statement: DuckDB plans a correlated subquery at twice the cost of this one
    eps = catalog.query("SELECT max(cumulative_epsilon) AS eps FROM airplan.privacy_ledger "
                        "WHERE workload_id = ?", [r["workload_id"]])[0]["eps"]
    return WorkloadFacts(int(r["workload_id"]), int(r["stats_version"]), r["alpha_dirichlet"],
                         eps)


def heterogeneity(facts: WorkloadFacts, w: Workload) -> tuple[float, str, float | None]:
    """alpha used by estimators: from the latest ANALYZE WORKLOAD statistics when present."""
    if facts.stats_version is not None:
        a = facts.alpha_dirichlet
        return (math.inf if a is None else float(a),
                f"estimated from sketches: workload {facts.workload_id}, "
                f"stats v{facts.stats_version}", facts.privacy_epsilon)
    if w.partition == "iid":
        return math.inf, "declared: iid partition", None
    return float(w.alpha), "declared: no ANALYZE WORKLOAD statistics", None


@attrs.frozen
class LabelStatistics:
    """The per-client label counts of a workload's latest ANALYZE WORKLOAD statistics."""

    workload_id: int
    stats_version: int
    counts: Any = attrs.field(eq=False)   # (n_clients, n_classes) float array

    @property
    def key(self) -> str:
        """Identity of these statistics in a topology's parameters: ``w<id>v<version>``."""
        return f"w{self.workload_id}v{self.stats_version}"


def label_statistics(catalog: Catalog, w: Workload, facts: WorkloadFacts | None = None
                     ) -> LabelStatistics | None:
    """The released label counts of the latest statistics of ``w``'s data, or None
    (``facts``: the workload's :func:`workload_facts` when already read)."""
    facts = workload_facts(catalog, w) if facts is None else facts
    if facts.stats_version is None:
        return None
    return LabelStatistics(facts.workload_id, facts.stats_version,
                           read_label_counts(catalog, facts.workload_id, facts.stats_version))



def cacheable(spec: TopologySpec) -> bool:
    """Whether the catalog's ``topologies`` table can hold ``spec``'s statistics (periodic
    topologies carry per-round figures it does not hold; user graphs have no family)."""
    return spec.family != "from_edges" and not spec.periodic


def cache_key(spec: TopologySpec) -> tuple:
    """The identity of ``spec``'s row in the ``topologies`` table (with its n)."""
    return (spec.family, spec.params_json(), spec.seed, spec.weights)


def cached_topologies(catalog: Catalog, specs: list[TopologySpec]
                      ) -> dict[tuple, tuple[TopologyStats, int]]:
    """The statistics and row id of each of ``specs`` (all on the same n) that the catalog's
    ``topologies`` table holds, by :func:`cache_key` (one query)."""
    if not specs:
        return {}
    n = specs[0].n
    rows = catalog.query(
        "SELECT topology_id, family, params::VARCHAR AS params, seed, weights_rule, n_edges, "
        "max_degree, mean_degree, lambda2_laplacian, lambda2_normalized, mixing_rho, "
        "mixing_gap, mixing_p, slots_per_round, slots_lower_bound, compute_ms "
        "FROM airplan.topologies WHERE n_nodes = ? AND list_contains(?, seed)",
        [n, sorted({s.seed for s in specs})])
    by_key = {(r["family"], json.dumps(json.loads(r["params"]), sort_keys=True), r["seed"],
               r["weights_rule"]): r for r in rows}
    found: dict[tuple, tuple[TopologyStats, int]] = {}
    for spec in specs:
        row = by_key.get(cache_key(spec))
        if row is None:
            continue
        spectra = SpectralStats(
            n_nodes=n, n_edges=row["n_edges"], max_degree=row["max_degree"],
            mean_degree=row["mean_degree"], lambda2_laplacian=row["lambda2_laplacian"],
            lambda2_normalized=row["lambda2_normalized"], mixing_rho=row["mixing_rho"],
            mixing_gap=row["mixing_gap"], mixing_p=row["mixing_p"], method="cached")
        found[cache_key(spec)] = (TopologyStats(
            spec, spectra, row["slots_per_round"], row["slots_lower_bound"],
            row["compute_ms"] or 0.0), row["topology_id"])
    return found


__all__ = ["LabelStatistics", "WorkloadFacts", "cache_key", "cacheable", "cached_topologies",
           "heterogeneity", "label_statistics", "model_dimension", "workload_facts"]
