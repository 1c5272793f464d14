"""Recording a planning run: its ``planning_runs`` row and a ``plans`` row for every candidate,
chosen, feasible or pruned, with its estimate, costs and pruning reason; and caching computed
topologies as ``topologies`` rows."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import attrs
import pyarrow as pa

from ..catalog.analyze import register_workload
from ..catalog.store import Catalog
from ..plans.request import Candidate, PlanResult
from ..plans.topology import TopologySpec, TopologyStats, WeightArrays


#: The ``plans`` columns of a candidate, besides its plan id and planning run.
PLAN_COLUMNS = (
    "chosen", "rank", "family", "topology_params", "topology_seed", "weights_rule",
    "topology_id", "k_ratio", "algorithm", "transport", "bits_per_coord", "snr_db", "g_th",
    "tx_power_dbm", "est_rounds", "reaches_target", "est_accuracy", "est_accuracy_lo",
    "est_accuracy_hi", "channel_uses", "slots", "airtime_s", "energy_j", "bits",
    "privacy_epsilon", "total_cost", "pruned_reason", "calibration_ids", "terms", "mix_rounds",
    "mix_on")


def candidate_rows(catalog: Catalog, result: PlanResult) -> pa.Table:
    """The ``plans`` rows of ``result``'s candidates (every column but the plan id and the
    planning run), as the Arrow table :func:`record` inserts."""
    params_json: dict[TopologySpec, str] = {}
    rows = []
    for c in result.candidates:
        bd, e, spec, ch = c.cost.breakdown(), c.cost.estimate, c.plan.topology, c.plan.channel
        if spec not in params_json:
            params_json[spec] = spec.params_json()
        rows.append((
            c is result.chosen, c.rank, spec.family, params_json[spec], spec.seed, spec.weights,
            c.topology_id, c.plan.k_ratio, c.plan.effective_algorithm, c.plan.transport,
            c.plan.bits, ch.snr_db, ch.g_th, ch.tx_power_dbm, e.rounds, c.cost.reaches_target,
            e.accuracy, e.accuracy_lo, e.accuracy_hi, bd["channel_uses"], bd["slots"],
            bd["airtime_s"], bd["energy_j"], bd["bits"], bd["privacy_epsilon"], c.cost.total(),
            c.pruned_reason, list(e.calibration_ids), _terms_json(finite(e.terms)),
            c.plan.mix_rounds, c.plan.mix_on))
    return catalog.arrow_rows("plans", dict(zip(PLAN_COLUMNS,
                                                (list(col) for col in zip(*rows)))))


def record(catalog: Catalog, result: PlanResult, workload_id: int | None,
           step: Callable[[str], Any] | None = None, copy_of: int | None = None
           ) -> PlanResult:
    """Record the run and its candidates in ``catalog`` (``workload_id``: the workload's row,
    registered here when None; ``step``: told that recording starts; ``copy_of``: a planning
    run recorded with the same candidates, whose ``plans`` rows are copied instead of built
    again: the plan cache's). Returns ``result`` as recorded: with the run's id, and each
    candidate with its plan's id.

    Two statements: the candidates' rows (from :func:`candidate_rows`, or copied), their plan
    ids and the run's id drawn as they are inserted, then the run's row, naming its chosen
    plan."""
    req, w = result.request, result.request.workload
    cands = result.candidates
    if step is not None:
        step(f"recording {len(cands)} candidates in the catalog")
    with catalog.transaction():
        if copy_of is None:
            ids, run_id = catalog.insert_numbered("plans", candidate_rows(catalog, result),
                                                  key="rank", parent="planning_run_id")
        else:
            ids, run_id = catalog.insert_copies("plans", "planning_run_id", copy_of,
                                                key="rank", keys=[c.rank for c in cands])
        chosen = next(i for i, c in enumerate(cands) if c is result.chosen)
        catalog.insert_row("planning_runs", {
            "planning_run_id": run_id,
            "workload_id": (register_workload(catalog, w) if workload_id is None
                            else workload_id),
            "statement": req.statement or f"plan {w.dataset} on {w.clients} clients",
            "estimator": result.estimator, "objective": result.objective,
            "sla": req.sla.render(), "sla_threshold": result.target_accuracy,
            "n_candidates": len(cands), "fallback": result.fallback,
            "warnings": list(result.warnings),
            "planning_time_ms": result.planning_time_ms, "chosen_plan_id": int(ids[chosen]),
            **pilot_columns(result)})
    # each candidate with its plan id (the constructor: a third of attrs.evolve's time)
    recorded = tuple(Candidate(plan=c.plan, stats=c.stats, cost=c.cost,
                               pruned_reason=c.pruned_reason, plan_id=pid, rank=c.rank,
                               topology_id=c.topology_id, topology_details=c.topology_details)
                     for c, pid in zip(cands, ids.tolist()))
    return attrs.evolve(result, candidates=recorded, chosen=recorded[chosen],
                        planning_run_id=int(run_id))


#: ``json.dumps(terms, sort_keys=True)`` with its encoder built once (one per candidate).
_terms_json = json.JSONEncoder(sort_keys=True).encode


def pilot_columns(result: PlanResult) -> dict[str, Any]:
    """The ``planning_runs`` columns of a run planned with a pilot of the fully connected
    reference (``pilot_exec_id`` and the ``pilot`` JSON); none without one."""
    pilot = result.request.pilot
    if pilot is None:
        return {}
    from ..costmodels.time_to_target import BASE_RATIO, reference_from_pilot

    base = result.context.constants.get("target.base", BASE_RATIO)
    measured = reference_from_pilot(pilot, base)
    return {"pilot_exec_id": pilot.exec_id, "pilot": json.dumps(finite({
        "rounds": pilot.rounds, "budget": pilot.budget, "fc_accuracy": measured.fc_accuracy,
        "rounds_to_target": math.exp(measured.log_t), "base_ratio": base,
        "crossed": measured.crossed, "extrapolated": measured.extrapolated,
        "planning_run_id": pilot.planning_run_id, **pilot.traffic()}), sort_keys=True)}


def finite(terms: dict[str, Any]) -> dict[str, Any]:
    """``terms`` with NaN and infinite floats as None (JSON has neither)."""
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
            for k, v in terms.items()}


def store_topologies(catalog: Catalog, computed: list[tuple[TopologyStats, WeightArrays | None]]
                     ) -> list[int]:
    """Cache computed topologies (statistics and weight arrays) as ``topologies`` rows; returns
    their ids."""
    cols: dict[str, list[Any]] = {k: [] for k in (
        "family", "params", "n_nodes", "seed", "weights_rule", "n_edges", "max_degree",
        "mean_degree", "lambda2_laplacian", "lambda2_normalized", "mixing_rho", "mixing_gap",
        "mixing_p", "slots_per_round", "slots_lower_bound", "edges_src", "edges_dst",
        "weights", "self_weights", "compute_ms")}
    for st, arrays in computed:
        s = st.spectra
        lists = ((arrays.src.tolist(), arrays.dst.tolist(), arrays.edge_weights.tolist(),
                  arrays.self_weights.tolist()) if arrays is not None else (None,) * 4)
        for key, value in (("family", st.spec.family), ("params", st.spec.params_json()),
                           ("n_nodes", st.spec.n), ("seed", st.spec.seed),
                           ("weights_rule", st.spec.weights), ("n_edges", s.n_edges),
                           ("max_degree", s.max_degree), ("mean_degree", s.mean_degree),
                           ("lambda2_laplacian", s.lambda2_laplacian),
                           ("lambda2_normalized", s.lambda2_normalized),
                           ("mixing_rho", s.mixing_rho), ("mixing_gap", s.mixing_gap),
                           ("mixing_p", s.mixing_p), ("slots_per_round", st.slots_per_round),
                           ("slots_lower_bound", st.slots_lower_bound),
                           ("edges_src", lists[0]), ("edges_dst", lists[1]),
                           ("weights", lists[2]), ("self_weights", lists[3]),
                           ("compute_ms", st.compute_ms)):
            cols[key].append(value)
    with catalog.transaction():
        ids = catalog.insert_rows("topologies", cols)
    return [int(i) for i in ids]


__all__ = ["PLAN_COLUMNS", "candidate_rows", "finite", "pilot_columns", "record",
           "store_topologies"]
