"""The AirPlan paper's baselines (its Table 3) as fixed policies of an evaluation grid.

A grid whose workloads name transports or algorithms (docs/evaluation.md) plans the baselines
as ordinary candidates: digital D-SGD over the same topology, FedAvg through the access point
(over the air and digital), gradient tracking, push-sum, MATCHA and the fixed small world. Each
such plan label is a fixed single-plan policy ("always this plan"); this module names them the
way the paper does, measures them per workload (accuracy, rounds, channel uses and energy to the
target, with the min-max over the seeds) and over the grid (share of workloads whose SLA the
policy meets, cost ratio to the oracle), and sets beside them the advisor choosing among all of
them. A plan whose transport or algorithm the shipped ``ttt`` fit's runs did not use (its range's
``transports``, ``bits`` and ``algorithms``; over-the-air D-SGD and CHOCO for a fit that lists
none) is *widened* (its rounds interval and P(meets SLA)), and the table says which.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from ..costmodels.time_to_target import fitted_operators, load_reference, operator_fitted
from ..plans.plan import PhysicalPlan
from .metrics import RunOutcome, geometric_mean

#: How the paper (and this report) names what an algorithm runs.
ALGORITHM_NAMES = {"dsgd": "D-SGD", "choco": "CHOCO-SGD", "gradient_tracking": "GT-DSGD",
                   "push_sum": "push-sum (SGP)", "matcha": "MATCHA", "fedavg": "FedAvg",
                   "fedprox": "FedProx"}
FAMILY_NAMES = {"small_world": "SW", "complete": "complete", "ring": "ring"}

#: The paper's Table 3 row each measured plan stands for: (algorithm, transport, family or
#: None for any) -> (row, accuracy %, normalised cost). Its setting: CIFAR-10, N = 50, 10 dB.
#: The fixed small world is its topology table's row (cost normalised to the ring's).
PAPER_TABLE3 = {
    ("fedavg", "ota", None): ("FedAvg (server)", "93.0 +- 0.3", "4.0"),
    ("fedavg", "digital", None): ("FedAvg (server)", "93.0 +- 0.3", "4.0"),
    ("dsgd", "digital", "small_world"): ("Digital D-SGD (SW)", "88.5 +- 0.5", "2.5"),
    ("gradient_tracking", "digital", "small_world"): ("GT-DSGD (SW)", "89.4 +- 0.4", "2.6"),
    ("push_sum", "digital", None): ("SGP", "88.9 +- 0.5", "2.4"),
    ("push_sum", "ota", None): ("OTA-SGP", "90.1 +- 0.5", "2.0"),
    ("matcha", "ota", None): ("MATCHA (OTA-adapted)", "89.1 +- 0.4", "2.2"),
    ("dsgd", "ota", "small_world"): ("fixed small world (topology table)", "90.2 +- 0.4",
                                     "2.0"),
    ("gradient_tracking", "ota", None): ("OTA-GT", "90.7 +- 0.4", "2.1"),
}
#: The paper's own row: AirPlan choosing the topology.
PAPER_AIRPLAN = ("AirPlan (auto)", "91.0 +- 0.3", "2.3")


def names_operators(grid) -> bool:
    """Whether any workload of the grid names transports or algorithms (the baselines)."""
    return any(ws.transports or ws.algorithms for ws in grid.workloads)


@functools.lru_cache(maxsize=1)
def shipped_range() -> Mapping:
    """The fitted range of the shipped ``ttt`` constants (what the advisor as shipped uses),
    read once."""
    return MappingProxyType(dict(load_reference().get("range", {})))


def fitted(plan: PhysicalPlan, fitted_range: Mapping | None = None) -> bool:
    """Whether the ``ttt`` fit of ``fitted_range`` (default: the shipped one) saw runs of this
    plan's transport and algorithm (if not, the model widens its prediction:
    ``TimeToTargetEstimator.operator_spread``; the same rule,
    :func:`~airplan_qo.costmodels.time_to_target.operator_fitted`)."""
    return operator_fitted(shipped_range() if fitted_range is None else fitted_range, plan)


def transport_text(plan: PhysicalPlan) -> str:
    return "over the air" if plan.transport == "ota" else f"digital, {plan.bits} bits"


def baseline_name(plan: PhysicalPlan) -> str:
    """A readable name: ``GT-DSGD (SW), digital, 8 bits``, ``FedAvg via the access point, over
    the air``."""
    alg = plan.effective_algorithm
    name = ALGORITHM_NAMES.get(alg, alg)
    family = plan.topology.family
    where = ("via the access point" if alg in ("fedavg", "fedprox")
             else f"({FAMILY_NAMES.get(family, family)})")
    return f"{name} {where}, {transport_text(plan)}"


def paper_row(plan: PhysicalPlan) -> tuple[str, str, str] | None:
    """The paper's Table 3 row (name, accuracy, normalised cost) the plan stands for."""
    alg, family = plan.effective_algorithm, plan.topology.family
    return (PAPER_TABLE3.get((alg, plan.transport, family))
            or PAPER_TABLE3.get((alg, plan.transport, None)))


def _band(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": float(np.mean(values)), "min": float(np.min(values)),
            "max": float(np.max(values))}


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _plan_rows(key: str, labels: Iterable[str], plans: Mapping[str, PhysicalPlan],
               outs: Mapping[str, list[RunOutcome]], summaries, reference: str | None,
               per_round: Mapping[str, tuple[list[float], list[float]]],
               planned: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    ref_cost = None
    if reference in outs:
        ref_cost = float(np.mean([o.cost for o in outs[reference]]))
    for label in labels:
        plan, runs = plans[label], outs.get(label, [])
        if not runs:
            continue
        s = summaries.get(label)
        paper = paper_row(plan)
        cost = _band([o.cost for o in runs])
        uses_round, energy_round = per_round.get(label, ([], []))
        cand = planned[label]
        rows.append({
            "workload": key, "plan": label, "baseline": baseline_name(plan),
            "algorithm": plan.effective_algorithm, "transport": plan.transport,
            "bits": plan.bits if plan.transport == "digital" else None,
            "family": plan.topology.family, "fitted": fitted(plan),
            "seeds": len(runs), "reached": sum(o.reached for o in runs),
            "accuracy": _band([o.final_accuracy for o in runs]),
            "rounds": _band([o.rounds for o in runs]),
            "channel_uses": cost,
            "energy_j": _band([o.energy_j for o in runs if o.energy_j is not None]),
            "cost_over_reference": (cost["mean"] / ref_cost if ref_cost else None),
            "meets_sla": bool(s.meets_sla) if s is not None else None,
            "paper": list(paper) if paper else None,
            # per round, measured on the runtime (mean over rounds and seeds) and as the
            # planner costed it, and the planner's predicted rounds to its own target
            "measured_per_round": {"channel_uses": _mean(uses_round),
                                   "energy_j": _mean(energy_round)},
            "planned_per_round": {"channel_uses": float(cand.cost.per_round.channel_uses),
                                  "energy_j": float(cand.cost.per_round.energy_j)},
            "planned_rounds": (float(cand.cost.rounds) if cand.cost.rounds is not None
                               else None)})
    return rows


def baselines_block(grid, measured, results, outcomes: Sequence[RunOutcome]
                    ) -> dict[str, Any] | None:
    """The baselines section of ``summary.json`` (None for a grid that names no operators).

    ``per_workload``: every measured plan of every workload, with its baseline name, the
    paper's row, the seeds' mean and min-max of final accuracy, rounds, channel uses and energy
    to the target, the channel uses and energy per round as measured and as planned (where the
    runtime and the cost model disagree), and its cost over the reference plan (over-the-air D-SGD on the ring when
    measured, the paper's normalisation; else the fully connected reference). ``policies``:
    each plan label as a fixed policy over the grid, and the advisor choosing among them all.
    ``unseen``: the plan labels the ``ttt`` fit never saw (widened)."""
    if not names_operators(grid):
        return None
    by_run: dict[tuple[str, str], list[RunOutcome]] = defaultdict(list)
    for o in outcomes:
        by_run[(o.workload, o.plan)].append(o)
    per_workload: dict[str, list[dict[str, Any]]] = {}
    plans_of: dict[str, PhysicalPlan] = {}
    for m, w in zip(measured, results):
        seed0 = min(m.seeds)
        labels = list(w.candidates)
        fc_label = m.seeds[seed0].fc_candidate.plan.label()
        if fc_label not in labels:
            labels.append(fc_label)
        cands = {label: m.candidate(seed0, label)[1] for label in labels}
        plans = {label: c.plan for label, c in cands.items()}
        plans_of.update(plans)
        per_round: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for r in m.runs:
            if r.channel_uses:
                per_round[r.plan][0].append(float(np.mean(r.channel_uses)))
                per_round[r.plan][1].append(float(np.mean(r.energy_j)))
        ring = next((lb for lb, p in plans.items() if p.topology.family == "ring"
                     and p.transport == "ota" and p.effective_algorithm == "dsgd"), None)
        outs = {label: by_run.get((w.key, label), []) for label in labels}
        per_workload[w.key] = _plan_rows(w.key, labels, plans, outs, w.summaries,
                                         ring or fc_label, per_round, cands)
    policies = []
    for label in sorted(plans_of):
        met, ratios, acc = [], [], []
        for w in results:
            s = w.summaries.get(label)
            if s is None or label not in w.candidates:
                continue
            met.append(s.meets_sla)
            acc.append(s.accuracy)
            if w.oracle is not None and w.oracle.cost > 0:
                ratios.append(s.cost / w.oracle.cost)
        if not met:
            continue
        plan = plans_of[label]
        policies.append({"policy": label, "baseline": baseline_name(plan),
                         "fitted": fitted(plan), "workloads": len(met),
                         "sla_met_rate": sum(met) / len(met),
                         "accuracy": float(np.mean(acc)),
                         "median_cost_ratio": float(np.median(ratios)) if ratios else None,
                         "gmean_cost_ratio": geometric_mean(ratios)})
    policies.sort(key=lambda r: (-r["sla_met_rate"], r["gmean_cost_ratio"] or np.inf,
                                 r["policy"]))
    picks = []
    for w in results:
        label = w.before.advisor_plan
        s = w.summaries[label]
        plan = plans_of.get(label)
        picks.append({"workload": w.key, "plan": label,
                      "baseline": baseline_name(plan) if plan is not None else label,
                      "fitted": fitted(plan) if plan is not None else True,
                      "meets_sla": bool(w.before.advisor_meets_sla), "accuracy": s.accuracy,
                      "cost_ratio": w.before.cost_ratio,
                      "oracle": w.oracle.plan if w.oracle is not None else None,
                      "oracle_baseline": (baseline_name(plans_of[w.oracle.plan])
                                          if w.oracle is not None and w.oracle.plan in plans_of
                                          else None)})
    ratios = [p["cost_ratio"] for p in picks if p["cost_ratio"] is not None]
    advisor = {"estimator": grid.estimator, "workloads": len(picks),
               "sla_met_rate": sum(p["meets_sla"] for p in picks) / len(picks) if picks else None,
               "accuracy": float(np.mean([p["accuracy"] for p in picks])) if picks else None,
               "median_cost_ratio": float(np.median(ratios)) if ratios else None,
               "gmean_cost_ratio": geometric_mean(ratios),
               "widened_picks": sum(not p["fitted"] for p in picks), "picks": picks}
    ops = fitted_operators(shipped_range())
    unseen = sorted(label for label, p in plans_of.items() if not ops.fitted(p))
    settings = {ws.key: {"dataset": ws.workload.dataset, "clients": ws.workload.clients,
                         "alpha": ws.workload.alpha, "snr_db": ws.workload.snr_db,
                         "rounds": ws.workload.rounds} for ws in grid.workloads}
    return {"reference": grid.workloads[grid.reference].key, "workloads": settings,
            "per_workload": per_workload,
            "policies": policies, "advisor": advisor, "unseen": unseen,
            "fitted_transports": [
                f"digital({ops.bits[0]}..{ops.bits[1]})" if t == "digital" and ops.bits else t
                for t in ops.transports],
            "fitted_algorithms": list(ops.algorithms)}


__all__ = ["ALGORITHM_NAMES", "PAPER_TABLE3", "PAPER_AIRPLAN", "baseline_name", "baselines_block",
           "fitted", "names_operators", "paper_row"]
