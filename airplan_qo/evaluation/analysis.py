"""From measured runs to advisor-quality numbers: oracle, picks, cross-validation, statistics.

Input: the :class:`~.runner.Measured` workloads of a grid. Output: an :class:`Analysis` with
per-workload comparisons before calibration (the estimator's priors) and after calibration
(constants fitted on the other folds' runs, k-fold cross-validation over workloads), MAPE of
predicted rounds per family, statistics overhead, paired t-tests against fixed-topology
policies, the per-topology table, a scalability extrapolation and, for a grid that names
transports or algorithms, the paper's baselines as fixed policies (:mod:`.baselines`). Nothing here trains; the
only catalog access is reading observations for the fits (no calibration rows are written).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import AirPlanError
from ..costmodels.calibration import fit
from ..costmodels.observation_loader import load_observations
from ..costmodels import ESTIMATORS
from ..plans.families import FAMILIES
from ..plans.plan import Cost
from ..plans.sla import parse_sla
from ..plans.topology import TopologySpec
from .advisor import REFERENCE_OPERATORS, Pick, fc_plan, pick, predicted_rounds
from .advisor import estimate as advisor_estimate
from .ttt_crossval import CONFIDENCE as TTT_CONFIDENCE
from .ttt_crossval import evaluate as evaluate_ttt
from .ttt_crossval import prediction_quality
from .ttt_crossval import reference as ttt_reference
from .baselines import baselines_block
from .grid import Grid, WorkloadSpec
from .metrics import (Comparison, PairedTest, PlanSummary, RunOutcome, assign_folds, compare,
                      family_scores, full_hindsight, geometric_mean, mape, measured_target,
                      noise_ceiling, oracle, paired_test, policy_plans, policy_table, rate,
                      seed_run_figures, best_policy, stats_of, summarize)
from .runner import Measured, RunRecord, _matches, client_variance


@attrs.frozen
class WorkloadResult:
    """The advisor judged on one workload."""

    key: str
    spec: WorkloadSpec
    fold: int | None
    fc_measured: float
    target: float
    summaries: dict[str, PlanSummary]
    candidates: tuple[str, ...]
    oracle: PlanSummary | None
    planner_pick: str
    before: Comparison
    after: Comparison | None
    pick_before: Pick
    pick_after: Pick | None
    predicted_before: float | None
    predicted_after: float | None
    constants_after: dict[str, float] | None
    sketch_over_model: float | None
    startup: float
    ranking_before: Comparison | None = None     # picks with the measured fc (ranking error)
    ranking_after: Comparison | None = None


@attrs.frozen
class RunPrediction:
    """Predicted rounds to the measured target beside the measured rounds, for one run."""

    workload: str
    plan: str
    family: str
    seed: int
    exec_id: int
    actual: float
    censored: bool
    before: float | None
    after: float | None


@attrs.frozen
class FoldFit:
    """One fit of the estimator's constants: for a fold (None: on all runs) and a scope
    (``global`` or ``dataset NAME``)."""

    fold: int | None
    scope: str
    n_obs: int
    constants: dict[str, float] | None
    in_sample_mape: float | None
    notes: tuple[str, ...]


@attrs.frozen
class Analysis:
    grid: Grid
    workloads: tuple[WorkloadResult, ...]
    runs: tuple[RunRecord, ...]
    outcomes: tuple[RunOutcome, ...]
    predictions: tuple[RunPrediction, ...]
    folds: tuple[FoldFit, ...]
    full_fit: dict[str, float] | None
    all_fits: tuple[FoldFit, ...]
    ttests: tuple[PairedTest, ...]
    topology_table: tuple[dict[str, Any], ...]
    family_table: tuple[dict[str, Any], ...]
    scalability: tuple[dict[str, Any], ...]
    fixed_plans: dict[str, dict[str, str]]
    summary: dict[str, Any]
    notes: tuple[str, ...]

    def workload(self, key: str) -> WorkloadResult:
        return next(w for w in self.workloads if w.key == key)


def _outcome(run: RunRecord, target: float, bandwidth_hz: float) -> RunOutcome:
    from .metrics import outcome_from_curve

    reached, rounds, cost = outcome_from_curve(run.accuracy, run.channel_uses, run.startup,
                                               target)
    energy = float(sum(run.energy_j[:rounds]))
    airtime = (cost - run.startup) / bandwidth_hz
    return RunOutcome(run.workload, run.plan, run.family, run.seed, run.final_accuracy, reached,
                      float(rounds), float(cost), energy, airtime)


def fixed_plan(m: Measured, family: str, baseline_k: float | None) -> str | None:
    """The fixed-topology policy's plan for a family: its first listed variant, first weights
    rule (a periodic family's own, ``prescribed``), at ``baseline_k`` (default and fallback:
    the workload's largest k)."""
    ws = m.spec
    k = baseline_k if baseline_k is not None and baseline_k in ws.sparsity else max(ws.sparsity)
    sp = m.seeds[min(m.seeds)]
    for spec in ws.specs():
        if spec.family != family or (spec.weights != ws.weights[0] and not spec.periodic):
            continue
        for c in sp.candidates:
            if _matches(spec, c.plan.topology) and c.plan.k_ratio == k:
                return c.plan.label()
    return None


def _seed_costs(outcome_of, key: str, plan: str) -> list[float]:
    return [o.cost for (wk, p, _s), o in sorted(outcome_of.items()) if wk == key and p == plan]


def _skew_table(results: Sequence[WorkloadResult], outcome_of, fixed,
                max_alpha: float = 0.1) -> list[dict[str, Any]]:
    """Label-skewed workloads (alpha <= ``max_alpha``) with a d_cliques plan: its channel uses
    to the target (mean over the seeds, with the seeds' standard error), reach and accuracy
    beside the fully connected plan's, the best static family's (the cheapest other plan of
    the workload meeting the SLA at the same k; without one, the most accurate) and the best
    time-varying family's (chosen alike among the periodic families)."""
    rows = []
    for w in results:
        if w.spec.workload.alpha is None or w.spec.workload.alpha > max_alpha:
            continue
        plans = fixed.get(w.key, {})
        dc, fc = plans.get("d_cliques"), plans.get("complete")
        if dc is None or fc is None:
            continue
        others = [w.summaries[p] for f, p in plans.items()
                  if f not in ("d_cliques", "complete") and not FAMILIES.get(f).periodic]
        varying = [w.summaries[p] for f, p in plans.items() if FAMILIES.get(f).periodic]
        best, best_varying = _best(others), _best(varying)
        row: dict[str, Any] = {"workload": w.key, "target": w.target}
        for name, plan in (("d_cliques", dc), ("complete", fc),
                           ("best_static", best.plan if best else None),
                           ("time_varying", best_varying.plan if best_varying else None)):
            if plan is None:
                row[name] = None
                continue
            s = w.summaries[plan]
            costs = _seed_costs(outcome_of, w.key, plan)
            sem = float(np.std(costs, ddof=1) / math.sqrt(len(costs))) if len(costs) > 1 else 0.0
            row[name] = {"plan": plan, "family": s.family, "cost": s.cost, "cost_sem": sem,
                         "reached": s.n_reached, "seeds": s.n_seeds, "accuracy": s.accuracy,
                         "meets_sla": s.meets_sla}
        fc_cost = row["complete"]["cost"]
        row["dcliques_over_fc"] = row["d_cliques"]["cost"] / fc_cost if fc_cost > 0 else None
        row["time_varying_over_fc"] = (row["time_varying"]["cost"] / fc_cost
                                       if row["time_varying"] and fc_cost > 0 else None)
        rows.append(row)
    return rows


def _best(summaries: Sequence[PlanSummary]) -> PlanSummary | None:
    """The cheapest plan meeting the SLA; without one, the most accurate (None if empty)."""
    meeting = [s for s in summaries if s.meets_sla]
    if meeting:
        return min(meeting, key=lambda s: s.cost)
    return max(summaries, key=lambda s: s.accuracy) if summaries else None


def analyze(session, grid: Grid, measured: Sequence[Measured], *,
            scalability: bool = True) -> Analysis:
    """Compute every number of the report from the measured runs."""
    notes: list[str] = []
    est_name = ESTIMATORS.get(grid.estimator).name
    priors = dict(ESTIMATORS.get(est_name).priors)
    keys = [m.spec.key for m in measured]

    # ---- targets, outcomes, summaries ---------------------------------------------------------
    targets: dict[str, float] = {}
    fc_acc: dict[str, float] = {}
    outcomes: list[RunOutcome] = []
    summaries: dict[str, dict[str, PlanSummary]] = {}
    for m in measured:
        sla = parse_sla(m.spec.sla)
        ref_label = m.seeds[min(m.seeds)].fc_candidate.plan.label()
        fc_runs = [r for r in m.runs if r.plan == ref_label]
        fc_acc[m.spec.key] = float(np.mean([r.final_accuracy for r in fc_runs]))
        target = measured_target(sla, fc_acc[m.spec.key])
        targets[m.spec.key] = target
        bw = m.spec.workload.bandwidth_hz
        outs = [_outcome(r, target, bw) for r in m.runs]
        outcomes.extend(outs)
        summaries[m.spec.key] = {s.plan: s for s in summarize(outs, sla, fc_acc[m.spec.key])
                                 .values()}
    outcome_of = {(o.workload, o.plan, o.seed): o for o in outcomes}

    # ---- observations for the cross-validated fits ------------------------------------------
    runs = [r for m in measured for r in m.runs]
    workloads_of: dict[int, set[str]] = defaultdict(set)
    for r in runs:
        workloads_of[r.exec_id].add(r.workload)
    obs_all = []
    try:
        loaded = load_observations(session.catalog, est_name)
    except AirPlanError as exc:
        loaded = []
        notes.append(f"observations could not be loaded: {exc}")
    run_of_exec = {r.exec_id: r for r in runs}
    #: workloads whose SLA bounds the average model: their runs' curves are its (RunRecord)
    average_model = {m.spec.key: parse_sla(m.spec.sla).accuracy_metric == "avg_model_accuracy"
                     for m in measured}
    for o in loaded:
        if o.exec_id not in run_of_exec:
            continue
        r = run_of_exec[o.exec_id]
        out = outcome_of[(r.workload, r.plan, r.seed)]
        o = attrs.evolve(o, target_error=1.0 - targets[r.workload], rounds_actual=out.rounds,
                         censored=not out.reached)
        if average_model[r.workload]:   # the loader's curve is the clients' mean
            acc = np.array([np.nan if a is None else a for a in r.accuracy], dtype=float)
            seen = np.isfinite(acc)
            o = attrs.evolve(o, rounds=np.arange(1, acc.size + 1, dtype=float)[seen],
                             errors=1.0 - acc[seen])
        obs_all.append(o)
    group_of = {m.spec.key: (m.spec.workload.dataset, m.spec.workload.clients,
                             m.spec.workload.alpha) for m in measured}
    folds_of = (assign_folds(keys, grid.folds, grid.cv_seed, group_of)
                if len(set(group_of.values())) >= 2 else {})
    n_folds = len(set(folds_of.values()))
    if not folds_of:
        notes.append("cross-validation needs at least two workloads; the calibrated advisor is "
                     "not evaluated")
    dataset_of = {r.exec_id: m.spec.workload.dataset for m in measured for r in m.runs}
    fold_fits: list[FoldFit] = []
    constants_of_fold: dict[int, dict[str | None, dict[str, float] | None]] = {}
    for f in range(n_folds):
        held = {k for k, v in folds_of.items() if v == f}
        train = [o for o in obs_all if not (workloads_of[o.exec_id] & held)]
        scoped, fits = _fit_scoped(train, dataset_of, est_name, priors, f)
        constants_of_fold[f] = scoped
        fold_fits.extend(fits)
        for ff in fits:
            if ff.constants is None:
                notes.append(f"fold {f}, {ff.scope}: no fit ({'; '.join(ff.notes)})")
    all_scoped, all_fits = _fit_scoped(obs_all, dataset_of, est_name, priors, None)
    ref_dataset = measured[grid.reference].spec.workload.dataset
    full_fit = _constants(all_scoped, ref_dataset)
    if full_fit is None:
        notes.append("no fit on all runs; the extrapolation uses the priors only")

    def fold_constants(key: str, dataset: str) -> dict[str, float] | None:
        fold = folds_of.get(key)
        if fold is None:
            return None
        return _constants(constants_of_fold[fold], dataset)

    # ---- per workload: picks, oracle, regret ------------------------------------------------
    results: list[WorkloadResult] = []
    calibrated_planner: list[str] = []
    for m in measured:
        key = m.spec.key
        seed0 = min(m.seeds)
        sp = m.seeds[seed0]
        by_plan = summaries[key]
        cand_labels = tuple(c.plan.label() for c in sp.candidates)
        seed_costs: dict[str, dict[int, float]] = defaultdict(dict)
        for (wk, plan, seed), o in outcome_of.items():
            if wk == key:
                seed_costs[plan][seed] = o.cost
        pick_b = pick(sp.result, priors, sp.candidates, sp.fc_candidate)
        cmp_b = compare(key, pick_b.label, by_plan, cand_labels, seed_costs)
        fold = folds_of.get(key)
        consts = fold_constants(key, m.spec.workload.dataset)
        pick_a = cmp_a = None
        if consts is not None:
            pick_a = pick(sp.result, consts, sp.candidates, sp.fc_candidate)
            cmp_a = compare(key, pick_a.label, by_plan, cand_labels, seed_costs)
        # the ranking alone: the same picks with the measured ceiling in place of the predicted
        rank_b = compare(key, pick(sp.result, priors, sp.candidates, sp.fc_candidate,
                                           fc_acc[key]).label, by_plan, cand_labels, seed_costs)
        rank_a = None
        if consts is not None:
            rank_a = compare(key, pick(sp.result, consts, sp.candidates,
                                               sp.fc_candidate, fc_acc[key]).label,
                             by_plan, cand_labels, seed_costs)
        target = targets[key]
        res_b, cand_b = m.candidate(seed0, pick_b.label)
        pred_b = predicted_rounds(res_b, cand_b, priors, target)
        pred_a = None
        if pick_a is not None:
            res_a, cand_a = m.candidate(seed0, pick_a.label)
            pred_a = predicted_rounds(res_a, cand_a, consts, target)
        results.append(WorkloadResult(
            key=key, spec=m.spec, fold=fold, fc_measured=fc_acc[key], target=target,
            summaries=by_plan, candidates=cand_labels, oracle=oracle(
                s for s in by_plan.values() if s.plan in cand_labels),
            planner_pick=sp.result.chosen.plan.label(), before=cmp_b, after=cmp_a,
            pick_before=pick_b, pick_after=pick_a, predicted_before=pred_b,
            predicted_after=pred_a, constants_after=consts,
            sketch_over_model=getattr(sp.stats, "stats_overhead", None),
            startup=float(sp.fc_candidate.cost.startup), ranking_before=rank_b,
            ranking_after=rank_a))
        if sp.result.context.calibration_ids:
            calibrated_planner.append(key)

    if calibrated_planner:
        notes.append(f"the catalog holds calibrated constants, which the planner used for "
                     f"{len(calibrated_planner)} workload(s); 'priors' re-costs their candidates "
                     "with the estimator's priors, so the recorded planner pick may differ")

    # ---- rounds predictions per run ----------------------------------------------------------
    preds: list[RunPrediction] = []
    for m in measured:
        for r in m.runs:
            res, cand = m.candidate(r.seed, r.plan)
            out = outcome_of[(r.workload, r.plan, r.seed)]
            target = targets[r.workload]
            consts = fold_constants(r.workload, m.spec.workload.dataset)
            preds.append(RunPrediction(
                r.workload, r.plan, r.family, r.seed, r.exec_id, out.rounds, not out.reached,
                predicted_rounds(res, cand, priors, target),
                predicted_rounds(res, cand, consts, target) if consts else None))

    fixed = {}
    families = sorted({s.family for w in results for s in w.summaries.values()
                       if s.plan in w.candidates})
    for m in measured:
        fixed[m.spec.key] = {f: p for f in families
                             if (p := fixed_plan(m, f, grid.baseline_k)) is not None}
    ttests = _ttests(results, outcome_of, fixed, grid.seeds, families)
    topo_table = _topology_table(measured[grid.reference], results[grid.reference],
                                 fixed[measured[grid.reference].spec.key])
    fam_table = _family_table(results, fixed, families)
    scal: list[dict[str, Any]] = []
    if scalability:
        scal = _scalability(grid, measured[grid.reference], results[grid.reference], priors,
                            full_fit, notes)
    summary = _summary(grid, results, runs, preds, fold_fits, ttests, n_folds)
    summary["label_skew"] = _skew_table(results, outcome_of, fixed)
    block = baselines_block(grid, measured, results, outcomes)
    if block is not None:
        summary["baselines"] = block
    summary["seed_runs"] = _seed_runs(results, measured, summaries, summary["policies"])
    summary["time_to_target"] = _time_to_target(measured, outcome_of, summaries, folds_of, notes,
                                                f"airplan evaluate --grid {grid.name} "
                                                + (f"--sla '{grid.sla_override}' "
                                                   if grid.sla_override else "")
                                                + f"(grid sha256 {grid.sha[:16]})",
                                                grid.confidence or TTT_CONFIDENCE)
    return Analysis(grid, tuple(results), tuple(runs), tuple(outcomes), tuple(preds),
                    tuple(fold_fits), full_fit, tuple(all_fits), tuple(ttests), tuple(topo_table),
                    tuple(fam_table), tuple(scal), fixed, summary, tuple(dict.fromkeys(notes)))


def _fit_scoped(observations, dataset_of: dict[int, str], estimator: str,
                priors: dict[str, float], fold: int | None
                ) -> tuple[dict[str | None, dict[str, float] | None], list[FoldFit]]:
    """Constants fitted the way the catalog scopes them: a global fit from the priors, then one
    fit per dataset starting from the global constants (the planner reads dataset constants
    over global ones; datasets differ in their error floor by an order of magnitude)."""
    out: dict[str | None, dict[str, float] | None] = {}
    fits: list[FoldFit] = []
    groups: list[tuple[str | None, str, list]] = [(None, "global", list(observations))]
    datasets = sorted({dataset_of[o.exec_id] for o in observations})
    if len(datasets) > 1:
        groups += [(d, f"dataset {d}", [o for o in observations if dataset_of[o.exec_id] == d])
                   for d in datasets]
    for key, scope, obs in groups:
        start = priors if key is None else (out.get(None) or priors)
        try:
            res = fit(obs, estimator, start, min_obs=3, **_fit_options(estimator, obs))
        except AirPlanError as exc:
            out[key] = None
            fits.append(FoldFit(fold, scope, len(obs), None, None, (str(exc),)))
            continue
        out[key] = dict(res.constants)
        fits.append(FoldFit(fold, scope, len(obs), dict(res.constants), res.rounds_mape,
                            tuple(res.notes)))
    return out, fits


def _constants(scoped: dict[str | None, dict[str, float] | None], dataset: str
               ) -> dict[str, float] | None:
    """Dataset constants over global ones, as ``resolve_constants`` ranks them."""
    return scoped.get(dataset) or scoped.get(None)


def _fit_options(estimator: str, observations) -> dict[str, Any]:
    """Fit beta_k too (dsgd) when the runs span several k: the grid varies k, and the prior
    compression exponent is otherwise never corrected."""
    if estimator == "dsgd" and len({o.k_ratio for o in observations}) >= 2:
        return {"fixed": ()}
    return {}


def _ttests(results: Sequence[WorkloadResult], outcome_of, fixed, seeds, families
            ) -> list[PairedTest]:
    tests: list[PairedTest] = []
    for label, attr in (("advisor (priors)", "before"), ("advisor (calibrated)", "after")):
        for fam in families:
            # one pair per workload (seed means): the seeds of a workload are not independent
            acc_a, acc_b, cost_a, cost_b = [], [], [], []
            for w in results:
                cmp = getattr(w, attr)
                plan = fixed.get(w.key, {}).get(fam)
                if cmp is None or plan is None:
                    continue
                pairs = [(outcome_of.get((w.key, cmp.advisor_plan, s)),
                          outcome_of.get((w.key, plan, s))) for s in seeds]
                pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
                if not pairs:
                    continue
                acc_a.append(100 * float(np.mean([a.final_accuracy for a, _ in pairs])))
                acc_b.append(100 * float(np.mean([b.final_accuracy for _, b in pairs])))
                cost_a.append(float(np.mean([a.cost for a, _ in pairs])))
                cost_b.append(float(np.mean([b.cost for _, b in pairs])))
            if acc_a:
                tests.append(paired_test(f"accuracy (pts): {label} vs fixed {fam}", acc_a, acc_b))
                tests.append(paired_test(f"channel uses to target: {label} vs fixed {fam}",
                                         cost_a, cost_b))
    pairs = [(w.before, w.after) for w in results
             if w.after is not None and w.before.oracle_plan is not None]
    if pairs:
        tests.append(paired_test("regret accuracy (pts): calibrated vs priors",
                                 [a.regret_acc_pts for _, a in pairs],
                                 [b.regret_acc_pts for b, _ in pairs]))
        cost = [(a.regret_cost_pct, b.regret_cost_pct) for b, a in pairs
                if a.regret_cost_pct is not None and b.regret_cost_pct is not None]
        tests.append(paired_test("regret cost (%): calibrated vs priors",
                                 [a for a, _ in cost], [b for _, b in cost]))
    return tests


def _topology_table(m: Measured, w: WorkloadResult, fixed: dict[str, str]
                    ) -> list[dict[str, Any]]:
    """The paper's per-topology table for the reference workload (fixed-policy plans)."""
    rows = []
    ref_cost = None
    if "ring" in fixed:
        ref_cost = w.summaries[fixed["ring"]].cost
    elif fixed:
        ref_cost = min(w.summaries[p].cost for p in fixed.values())
    for fam, plan in fixed.items():
        s = w.summaries[plan]
        runs = [r for r in m.runs if r.plan == plan]
        var = [v for r in runs if (v := client_variance(r)) is not None]
        rows.append({
            "family": fam, "plan": plan, "accuracy_pct": 100 * s.accuracy,
            "accuracy_std_pct": 100 * s.accuracy_std, "cost": s.cost,
            "norm_cost": s.cost / ref_cost if ref_cost else None,
            "fairness_var_e3": 1e3 * float(np.mean(var)) if var else None,
            "fairness_var_std_e3": 1e3 * float(np.std(var, ddof=1)) if len(var) > 1 else None,
            "rounds": s.rounds, "reached": s.n_reached, "seeds": s.n_seeds,
            "meets_sla": s.meets_sla})
    return rows


def _family_table(results: Sequence[WorkloadResult], fixed, families) -> list[dict[str, Any]]:
    """Per family over all workloads: fixed-policy accuracy and cost relative to the oracle,
    how often it meets the SLA, is the oracle's family and is the advisor's pick."""
    rows = []
    for fam in families:
        acc, rel, meets = [], [], []
        for w in results:
            plan = fixed.get(w.key, {}).get(fam)
            if plan is None:
                continue
            s = w.summaries[plan]
            acc.append(100 * s.accuracy)
            meets.append(s.meets_sla)
            if w.oracle is not None and w.oracle.cost > 0:
                rel.append(s.cost / w.oracle.cost)
        rows.append({
            "family": fam, "workloads": len(acc),
            "accuracy_pct": float(np.mean(acc)) if acc else None,
            "cost_vs_oracle": float(np.mean(rel)) if rel else None,
            "meets_sla": rate(meets)[0],
            "oracle": sum(1 for w in results if w.oracle is not None and w.oracle.family == fam),
            "advisor_priors": sum(1 for w in results if w.before.advisor_family == fam),
            "advisor_calibrated": sum(1 for w in results
                                      if w.after is not None and w.after.advisor_family == fam)})
    return rows


def _scalability(grid: Grid, m: Measured, w: WorkloadResult, priors, full_fit, notes
                 ) -> list[dict[str, Any]]:
    """Predicted rounds and channel uses of the fixed-family plans of the reference workload
    at other client counts (a scratch in-memory catalog; nothing is written to the real one)."""
    from ..session import connect

    ws = m.spec
    k = grid.baseline_k if grid.baseline_k in ws.sparsity else max(ws.sparsity)
    constants = {"priors": priors, "calibrated": full_fit}
    rows: list[dict[str, Any]] = []
    with connect(":memory:") as scratch:
        for n in grid.scalability_clients:
            wl = attrs.evolve(ws.workload, clients=int(n))
            topologies = []
            for fam, params in ws.topologies:
                try:
                    TopologySpec.create(fam, n, **dict(params))
                    topologies.append((fam, dict(params)))
                except AirPlanError as exc:
                    notes.append(f"scalability: {fam} left out at N = {n} ({exc})")
            if not topologies:
                continue
            try:
                result = scratch.plan(wl, sla=ws.sla, topologies=topologies,
                                      weights=[ws.weights[0]], sparsity=[k],
                                      estimator=grid.estimator, objective=grid.objective,
                                      confidence=grid.confidence, fallback="complete",
                                      transports=ws.plan_transports(),
                                      algorithms=ws.plan_algorithms(), mix_rounds=0)
            except AirPlanError as exc:
                notes.append(f"scalability: planning at N = {n} failed ({exc})")
                continue
            fc = next((c for c in result.candidates if c.plan == fc_plan(result)), None)
            if fc is None:
                fc_res = scratch.plan(wl, sla=ws.sla, topologies=["complete"],
                                      weights=["metropolis_hastings"], sparsity=[1.0],
                                      estimator=grid.estimator, objective=grid.objective,
                                      confidence=grid.confidence, fallback="complete",
                                      mix_rounds=0, **REFERENCE_OPERATORS)
                fc = fc_res.chosen
            wanted = {fam for fam, _ in topologies}
            for which, consts in constants.items():
                if consts is None:
                    continue
                p = pick(result, consts, [c for c in result.candidates
                                                  if c.plan.topology.family in wanted], fc)
                for c in result.candidates:
                    if c.plan.topology.family not in wanted:
                        continue
                    e = advisor_estimate(result, c, consts, p.target)
                    cost = Cost(e, c.cost.per_round, c.cost.startup, result.objective,
                                tail=c.cost.tail)
                    total = cost.total("channel_uses")
                    rows.append({
                        "clients": int(n), "constants": which,
                        "family": c.plan.topology.family, "plan": c.plan.label(),
                        "rounds": e.rounds, "accuracy": e.accuracy, "channel_uses": total,
                        "per_round_channel_uses": c.cost.per_round.channel_uses,
                        "startup": c.cost.startup,
                        "startup_share": (c.cost.startup / total) if total else None,
                        "advisor": p.label == c.plan.label(),
                        "measured": n == ws.workload.clients})
    return rows


def _comparison_block(cmps: list[Comparison], preds: list[tuple[float | None, float]],
                      pairs_family) -> dict[str, Any]:
    match, n = rate(c.match for c in cmps)
    fam_match, _ = rate(c.family_match for c in cmps)
    meets, _ = rate(c.advisor_meets_sla for c in cmps)
    noise, _ = rate(c.within_noise for c in cmps)
    ratios = [c.cost_ratio for c in cmps if c.cost_ratio is not None]
    m, n_used, never = mape(preds)
    scores = family_scores(pairs_family)
    f1s = [s.f1 for s in scores.values() if s.f1 is not None]
    return {
        "workloads": len(cmps), "with_oracle": n, "match_rate": match,
        "family_match_rate": fam_match, "advisor_meets_sla_rate": meets,
        "within_noise_rate": noise,
        "median_cost_ratio": float(np.median(ratios)) if ratios else None,
        "gmean_cost_ratio": geometric_mean(ratios),
        "regret_acc_pts": stats_of(c.regret_acc_pts for c in cmps),
        "regret_cost_pct": stats_of(c.regret_cost_pct for c in cmps),
        "rounds_mape_pct": m, "rounds_mape_n": n_used, "rounds_unpredicted": never,
        "family_scores": {f: attrs.asdict(s) for f, s in scores.items()},
        "macro_f1": float(np.mean(f1s)) if f1s else None,
    }


def _seed_runs(results, measured, summaries, policies) -> dict[str, Any]:
    """What a user sees run by run (:func:`seed_run_figures`) from the advisor as planned (the
    estimator's priors: the shipped fit), always the fully connected reference, and the best
    fixed single-plan policy (:func:`metrics.best_policy`)."""
    fc = {m.spec.key: m.seeds[min(m.seeds)].fc_candidate.plan.label() for m in measured}
    out = {"advisor (priors)": seed_run_figures(
        {w.key: w.before.advisor_plan for w in results}, summaries),
        "always the fully connected reference": seed_run_figures(fc, summaries)}
    best = best_policy(policies)
    if best is not None:
        picks = {w.key: plans[0] for w in results
                 if (plans := policy_plans(best["policy"], w.summaries))}
        out[f"best fixed: {best['policy']}"] = seed_run_figures(picks, summaries)
    return out


def _time_to_target(measured, outcome_of, summaries, folds_of, notes: list[str],
                    source: str, confidence: float) -> dict[str, Any] | None:
    """The cross-validated time-to-target advisor (evaluation/ttt_crossval.py)."""
    if not folds_of:
        return None
    try:
        ev = evaluate_ttt(measured, outcome_of, summaries, folds_of,
                                     confidence=confidence)
    except AirPlanError as exc:
        notes.append(f"time-to-target advisor not evaluated: {exc}")
        return None
    out: dict[str, Any] = {"confidence": ev["confidence"]}
    for variant, cmps in ev["comparisons"].items():
        out[variant] = _comparison_block(cmps, [], [(c.advisor_family, c.oracle_family)
                                                   for c in cmps]) if cmps else None
    out["prediction"] = prediction_quality(ev["errors"])
    out["noise_ceiling"] = _noise_ceiling(measured, outcome_of, ev)
    fc = {m.spec.key: m.seeds[min(m.seeds)].fc_candidate.plan.label() for m in measured}
    out["seed_runs"] = {
        "time-to-target advisor (reference predicted)": seed_run_figures(
            {c.workload: c.advisor_plan for c in ev["comparisons"]["predicted_fc"]}, summaries),
        "always the fully connected reference": seed_run_figures(fc, summaries)}
    by_key = ev["pilot_cost_over_oracle"]
    shares = list(by_key.values())
    with_pilot = [c.cost_ratio + by_key.get(c.workload, 0.0)
                  for c in ev["comparisons"]["raced"] if c.cost_ratio is not None]
    # per workload: the predicted-reference advisor's pick, and the candidates it predicted
    # to meet the SLA (P >= the confidence) out of how many
    out["picks"] = {c.workload: c.advisor_plan for c in ev["comparisons"]["predicted_fc"]}
    out["predicted_reachable"] = {
        key: sorted(label for label, p in ps.items() if p >= ev["confidence"])
        for key, ps in ev["p_meets"].items()}
    out["pilot_cost_over_oracle"] = {
        "median": float(np.median(shares)) if shares else None,
        "max": float(np.max(shares)) if shares else None,
        "raced": int(sum(1 for v in shares if v > 0)),
        "median_cost_ratio_with_pilot": float(np.median(with_pilot)) if with_pilot else None}
    errs = ev["ceiling_errors_pts"]
    out["ceiling"] = {"n": len(errs),
                      "mean_abs_error_pts": float(np.mean(np.abs(errs))) if errs else None,
                      "bias_pts": float(np.mean(errs)) if errs else None,
                      "max_abs_error_pts": float(np.max(np.abs(errs))) if errs else None}
    fit = ev["fit"]
    out["fit"] = {name: {"coef": f.coef, "sd": f.sd, "n_obs": f.n_obs,
                         "n_censored": f.n_censored} for name, f in fit.items()
                  if name != "spreads"}
    out["fit"]["spreads"] = fit["spreads"]
    out["reference"] = ttt_reference(fit, measured, source)
    out["per_task"] = _per_task(measured, outcome_of, summaries, ev["comparisons"]["predicted_fc"])
    out["per_workload"] = [
        {"workload": c.workload, "pick": c.advisor_plan, "oracle": c.oracle_plan,
         "meets_sla": c.advisor_meets_sla, "within_noise": c.within_noise,
         "cost_ratio": c.cost_ratio,
         "seeds_reached": summaries[c.workload][c.advisor_plan].n_reached,
         "seeds": summaries[c.workload][c.advisor_plan].n_seeds}
        for c in ev["comparisons"]["predicted_fc"]]
    return out


def task_of(workload) -> str:
    """A workload's task: its dataset, and its model where that is not the MLP."""
    return workload.dataset if workload.model == "mlp" else f"{workload.dataset} ({workload.model})"


def _costs_by_workload(outcome_of) -> dict[str, dict[str, dict[int, float]]]:
    """workload -> plan -> seed -> the run's cost, read once from the measured outcomes."""
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (wk, plan, seed), o in outcome_of.items():
        out[wk][plan][seed] = o.cost
    return out


def _policy_figures(keys: Sequence[str], picks: Mapping[str, str], costs,
                    summaries) -> dict[str, Any]:
    """Within-noise match, SLA met, cost ratio to the oracle and the seed-run figures of
    ``picks`` (workload -> plan label) over ``keys``; ``costs``: :func:`_costs_by_workload`."""
    cmps = [compare(key, picks[key], summaries[key], None, costs[key]) for key in keys
            if picks.get(key) in summaries[key]]
    ratios = [c.cost_ratio for c in cmps if c.cost_ratio is not None]
    return {"workloads": len(cmps),
            "within_noise_rate": rate(c.within_noise for c in cmps)[0],
            "meets_sla_rate": rate(c.advisor_meets_sla for c in cmps)[0],
            "median_cost_ratio": float(np.median(ratios)) if ratios else None,
            "gmean_cost_ratio": geometric_mean(ratios),
            **seed_run_figures({c.workload: c.advisor_plan for c in cmps}, summaries)}


def _per_task(measured, outcome_of, summaries, cmps: Sequence[Comparison]
              ) -> list[dict[str, Any]]:
    """Per task (:func:`task_of`): the cross-validated time-to-target advisor beside the best
    fixed single-plan policy on that task's workloads (chosen in hindsight: the one meeting the
    SLA on most of them, then the cheapest by median cost ratio to the oracle) and beside
    always the fully connected reference."""
    picks = {c.workload: c.advisor_plan for c in cmps}
    costs = _costs_by_workload(outcome_of)
    out = []
    for task in sorted({task_of(m.spec.workload) for m in measured}):
        ms = [m for m in measured if task_of(m.spec.workload) == task]
        keys = [m.spec.key for m in ms]
        oracles = {k: oracle(summaries[k].values()) for k in keys}
        table = policy_table({k: (summaries[k], oracles[k]) for k in keys})
        full = [r for r in table if r["workloads"] == len(keys)] or table
        best = full[0]["policy"] if full else None
        fc = {m.spec.key: m.seeds[min(m.seeds)].fc_candidate.plan.label() for m in ms}
        follow = {k: plans[0] for k in keys
                  if best and (plans := policy_plans(best, summaries[k]))}
        out.append({
            "task": task, "workloads": len(keys),
            "advisor": _policy_figures(keys, picks, costs, summaries),
            "best_fixed_policy": best,
            "best_fixed": _policy_figures(keys, follow, costs, summaries) if best else None,
            "fully_connected": _policy_figures(keys, fc, costs, summaries)})
    return out


def _noise_ceiling(measured, outcome_of, ev) -> dict[str, Any] | None:
    """The time-to-target advisor and the fully connected reference beside two hindsight
    advisors, all judged on the second half of the seeds (:func:`metrics.noise_ceiling`), and
    under ``full_hindsight`` the advisors that have seen every seed
    (:func:`metrics.full_hindsight`)."""
    workloads, fc = {}, {}
    for m in measured:
        sp = m.seeds[min(m.seeds)]
        fc[m.spec.key] = sp.fc_candidate.plan.label()
        workloads[m.spec.key] = (parse_sla(m.spec.sla),
                                 tuple(c.plan.label() for c in sp.candidates), fc[m.spec.key])
    picks = {"time-to-target advisor (reference predicted)":
             {c.workload: c.advisor_plan for c in ev["comparisons"]["predicted_fc"]},
             "always the fully connected reference": fc}
    seeds = sorted({o.seed for o in outcome_of.values()})
    out = noise_ceiling(workloads, outcome_of.values(), picks, seeds)
    if out is not None:
        out["full_hindsight"] = full_hindsight(workloads, outcome_of.values(), seeds)
    return out


def _ceiling(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """The predicted fully connected accuracy against the measured one, in points."""
    errors = [100.0 * (p - m) for p, m in pairs if p is not None and m is not None]
    return {"n": len(errors),
            "mean_abs_error_pts": float(np.mean(np.abs(errors))) if errors else None,
            "bias_pts": float(np.mean(errors)) if errors else None,
            "max_abs_error_pts": float(np.max(np.abs(errors))) if errors else None}


def _summary(grid: Grid, results: Sequence[WorkloadResult], runs: Sequence[RunRecord],
             preds: Sequence[RunPrediction], folds: Sequence[FoldFit],
             ttests: Sequence[PairedTest], n_folds: int) -> dict[str, Any]:
    def per_family(attr: str) -> dict[str, Any]:
        out = {}
        for fam in sorted({p.family for p in preds}):
            pairs = [(getattr(p, attr), p.actual) for p in preds
                     if p.family == fam and not p.censored]
            m, n, never = mape(pairs)
            out[fam] = {"mape_pct": m, "n": n, "unpredicted": never,
                        "censored": sum(1 for p in preds if p.family == fam and p.censored)}
        return out

    uncensored = [p for p in preds if not p.censored]
    cal = [w for w in results if w.after is not None]
    before = _comparison_block(
        [w.before for w in results], [(p.before, p.actual) for p in uncensored],
        [(w.before.advisor_family, w.before.oracle_family) for w in results])
    # the calibrated predictions exist only for workloads of folds that could be fitted
    cal_keys = {w.key for w in cal}
    after = _comparison_block(
        [w.after for w in cal], [(p.after, p.actual) for p in uncensored if p.workload in cal_keys],
        [(w.after.advisor_family, w.after.oracle_family) for w in cal]) if cal else None
    before["rounds_mape_by_family"] = per_family("before")
    if after is not None:
        keep = [p for p in preds if p.workload in cal_keys]
        after["rounds_mape_by_family"] = {
            fam: {"mape_pct": (r := mape([(p.after, p.actual) for p in keep
                                          if p.family == fam and not p.censored]))[0],
                  "n": r[1], "unpredicted": r[2],
                  "censored": sum(1 for p in keep if p.family == fam and p.censored)}
            for fam in sorted({p.family for p in keep})}
    shares_adv = [w.startup / w.summaries[w.before.advisor_plan].cost for w in results
                  if w.summaries[w.before.advisor_plan].cost > 0]
    shares_cal = [w.startup / w.summaries[w.after.advisor_plan].cost for w in cal
                  if w.summaries[w.after.advisor_plan].cost > 0]
    shares_orc = [w.startup / w.oracle.cost for w in results
                  if w.oracle is not None and w.oracle.cost > 0]
    sketch = [w.sketch_over_model for w in results]
    walls = [r.wall_s for r in runs if r.wall_s is not None and not r.cached]
    return {
        "grid": grid.name, "grid_sha": grid.sha, "estimator": grid.estimator,
        "confidence": grid.confidence,
        "objective": grid.objective, "workloads": len(results), "seeds": list(grid.seeds),
        "folds": n_folds, "runs": len(runs),
        "trained": sum(1 for r in runs if not r.cached),
        "cached": sum(1 for r in runs if r.cached),
        "candidates_per_workload": stats_of(len(w.candidates) for w in results),
        "train_seconds": float(sum(walls)) if walls else 0.0,
        "seconds_per_trained_run": float(np.mean(walls)) if walls else None,
        "no_oracle": sum(1 for w in results if w.oracle is None),
        "uncalibrated": before, "calibrated": after,
        "overhead": {
            "sketch_over_model_pct": stats_of(100 * v for v in sketch if v is not None),
            "broadcast_share_of_advisor_training_pct": stats_of(100 * v for v in shares_adv),
            "broadcast_share_of_calibrated_advisor_training_pct": stats_of(
                100 * v for v in shares_cal),
            "broadcast_share_of_oracle_training_pct": stats_of(100 * v for v in shares_orc)},
        "folds_fit": [{"fold": f.fold, "scope": f.scope, "n_obs": f.n_obs,
                       "in_sample_mape_pct": f.in_sample_mape, "constants": f.constants}
                      for f in folds],
        "ttests": [attrs.asdict(t) for t in ttests],
        "ceiling": {
            "uncalibrated": _ceiling([(w.pick_before.fc_accuracy, w.fc_measured)
                                      for w in results]),
            "calibrated": _ceiling([(w.pick_after.fc_accuracy, w.fc_measured)
                                    for w in cal if w.pick_after is not None])},
        "ranking_given_measured_fc": {
            "uncalibrated": _comparison_block(
                [w.ranking_before for w in results], [],
                [(w.ranking_before.advisor_family, w.ranking_before.oracle_family)
                 for w in results]),
            "calibrated": _comparison_block(
                [w.ranking_after for w in cal if w.ranking_after is not None], [],
                [(w.ranking_after.advisor_family, w.ranking_after.oracle_family)
                 for w in cal if w.ranking_after is not None]) if cal else None},
        "policies": policy_table({w.key: ({p: s for p, s in w.summaries.items()
                                           if p in w.candidates}, w.oracle) for w in results}),
    }


__all__ = ["Analysis", "WorkloadResult", "RunPrediction", "FoldFit", "analyze", "fixed_plan"]
