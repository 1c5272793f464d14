"""The time-to-target advisor judged on a measured grid, cross-validated over workload groups.

For every (workload, plan, seed) run the measured rounds to the target (smoothed crossing) are an
observation of log T, right-censored at the budget when the target was not reached. The plan
model (:mod:`airplan_qo.costmodels.time_to_target`) is fitted on the runs of the other folds
(folds group near-duplicate workloads, as for the calibrated advisor) and picks for the held-out
workloads with the chance constraint P(T <= budget) >= confidence. Two variants: the FC
reference's log T **measured** (mean over the seeds of the held-out workload's own FC runs: what
a pilot of the reference would give) and **predicted** (a Tobit model of the FC reference's log T
over workload features, fitted on the other folds).

Reported: the within-noise match, SLA-met rate and median cost ratio of the picks (the same
definitions as the rest of the report), the median absolute error of log T on held-out
uncensored runs per family, and the coverage of the nominal 90% interval on held-out runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..costmodels.time_to_target import (PLAN_FEATURES, PLAN_INTERACTIONS, PLAN_PRIORS,
                                         TARGET_RATIOS,
                                         ChooserPlan, PlanInputs, choose, expected_rounds,
                                         fc_features, fit_ceiling, fit_target_shift, fit_tobit,
                                         meets_probability, model_features, norm_cdf,
                                         pilot_update, plan_inputs, plan_inputs_features,
                                         pooled_spread,
                                         target_level, with_fc_error)
from ..plans.request import DEFAULT_CONFIDENCE
from ..plans.sla import first_crossing, parse_sla
from ..errors import ValidationError
from .metrics import compare

#: Ridge weights: interactions shrunk towards zero, main effects barely.
PENALTY = {**{f: 0.1 for f in PLAN_FEATURES}, **{f: 5.0 for f in PLAN_INTERACTIONS},
           # the quantiser's coefficient is shrunk towards its theoretical value (PLAN_PRIORS)
           "quant": 2.0}
CONFIDENCE = DEFAULT_CONFIDENCE
Z90 = 1.6448536269514722
#: Racing: contenders are cheaper candidates with at least this P(meets SLA) (at most
#: RACE_CONTENDERS of them), piloted for a quarter of the budget.
RACE_MIN_P = 0.2
RACE_CONTENDERS = 3


def _inputs(sp, cand) -> PlanInputs:
    """A candidate's :func:`~airplan_qo.costmodels.time_to_target.plan_inputs` (p of the random
    mixing matrix, heterogeneity, channel noise, quantiser slowdown): statistics, not fitted
    constants, so whatever estimator planned it, and the same as the estimator's at planning
    time."""
    ctx = sp.result.context
    return plan_inputs(cand.plan, cand.stats, ctx.alpha, ctx.n_classes, ctx.d)


def _features(sp, cand) -> dict[str, float]:
    """A candidate's plan features (without the difficulty terms: :func:`plan_x` adds them)."""
    return plan_inputs_features(_inputs(sp, cand), cand.plan, cand.stats.spectra.n_nodes)


def _fc_row(m, sp) -> dict[str, float]:
    inputs = _inputs(sp, sp.fc_candidate)
    w = m.spec.workload
    row = fc_features(inputs.zeta2, sp.fc_candidate.stats.spectra.n_nodes, inputs.noise,
                      sp.fc_candidate.plan.channel.dropout, float(w.lr) * int(w.local_steps))
    row[f"dataset:{m.spec.workload.dataset}"] = 1.0
    row.update(model_features(m.spec.workload.model))
    return row


def trained(candidates: Sequence[Any]) -> list[Any]:
    """The candidates whose every round trains: the model is fitted on (and picks among)
    those; a plan with a mixing-only tail (plans/finish.py) is costed from the average model's
    fit by the planner, not here."""
    return [c for c in candidates if not c.plan.mix_rounds]


def observations(measured, outcome_of) -> list[dict[str, Any]]:
    """One row per measured run: workload, plan, seed, relative features, log T, censoring."""
    rows = []
    for m in measured:
        key = m.spec.key
        for seed, sp in m.seeds.items():
            fc_label = sp.fc_candidate.plan.label()
            x_fc = _features(sp, sp.fc_candidate)
            fc_row = _fc_row(m, sp)
            cands = trained(sp.candidates)
            if sp.fc_candidate not in cands:
                cands.append(sp.fc_candidate)
            for c in cands:
                o = outcome_of.get((key, c.plan.label(), seed))
                if o is None:
                    continue
                x = _features(sp, c)
                rows.append({"workload": key, "plan": c.plan.label(), "seed": seed,
                             "family": c.plan.topology.family, "is_fc": c.plan.label() == fc_label,
                             "x": {f: x[f] - x_fc[f] for f in PLAN_FEATURES}, "fc_row": fc_row,
                             "log_t": math.log(max(o.rounds, 1)), "censored": not o.reached,
                             "final_accuracy": o.final_accuracy})
    return rows


def _fc_offsets(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Measured FC reference per workload: mean log T of its FC runs over the seeds."""
    by = defaultdict(list)
    for r in rows:
        if r["is_fc"]:
            by[r["workload"]].append(r["log_t"])
    return {k: float(np.mean(v)) for k, v in by.items()}


def predicted_fc(ceiling, fc_row: Mapping[str, float]) -> float:
    """The fully connected plan's final accuracy by a ceiling fit (logit scale)."""
    return 1.0 / (1.0 + math.exp(-ceiling.mean(fc_row)))


def plan_x(row: Mapping[str, Any], ceiling) -> dict[str, float]:
    """A run's relative plan features with the difficulty terms of its workload, 1 - fc by
    the ``ceiling`` fit (the planner's predicted fc, not the measured one)."""
    return with_fc_error(row["x"], 1.0 - predicted_fc(ceiling, row["fc_row"]))


def fit(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Fit the ceiling (fc) model, then the plan model (measured FC offsets, the difficulty
    from the ceiling fit) and the FC reference model on ``rows``."""
    offsets = _fc_offsets(rows)
    use = [r for r in rows if r["workload"] in offsets]
    fc_rows = [r for r in rows if r["is_fc"]]
    names = sorted({n for r in fc_rows for n in r["fc_row"]})
    ceiling = fit_ceiling([r["fc_row"] for r in fc_rows],
                          [r["final_accuracy"] for r in fc_rows], names)
    xs = [plan_x(r, ceiling) for r in use]
    # a feature with a prior coefficient (PLAN_PRIORS) is fitted only where some run exercises
    # it; otherwise it keeps the prior (a fit without digital runs says nothing of quantisers).
    # Where it is fitted, its ridge shrinks it towards the prior, not towards 0: runs of one
    # width (8 bits, a small slowdown) barely identify it, and a coefficient near 0 would then
    # call a 2-bit quantiser harmless
    plan_names = [f for f in PLAN_FEATURES
                  if f not in PLAN_PRIORS or any(x.get(f, 0.0) != 0.0 for x in xs)]
    prior = {f: v for f, v in PLAN_PRIORS.items() if f in plan_names}
    plan = fit_tobit(xs, [r["log_t"] for r in use],
                     [r["censored"] for r in use], plan_names,
                     offset=[offsets[r["workload"]] + sum(v * x.get(f, 0.0)
                                                          for f, v in prior.items())
                             for r, x in zip(use, xs)], penalty=PENALTY)
    plan = attrs.evolve(plan, coef={**plan.coef,
                                    **{f: plan.coef.get(f, 0.0) + v for f, v in prior.items()},
                                    **{f: v for f, v in PLAN_PRIORS.items()
                                       if f not in plan_names}})
    fc = fit_tobit([r["fc_row"] for r in fc_rows], [r["log_t"] for r in fc_rows],
                   [r["censored"] for r in fc_rows], names,
                   penalty={n: 0.1 for n in names if not n.startswith("dataset:")})
    # the spread of log T about the end-to-end prediction (predicted reference + plan effect):
    # the plan model's s was fitted about the *measured* reference, whose seed noise it already
    # holds, so adding the reference model's s to it (in quadrature) counts that noise twice
    joint_mu = [plan.mean(x, fc.mean(r["fc_row"])) for x, r in zip(xs, use)]
    joint = fit_tobit([{} for _ in use], [r["log_t"] for r in use], [r["censored"] for r in use],
                      [], offset=joint_mu)
    plan_mu = [plan.mean(x, offsets[r["workload"]]) for x, r in zip(xs, use)]
    spreads = {kind: dataset_spreads(use, mu, overall.sd)
               for kind, mu, overall in (("plan", plan_mu, plan), ("joint", joint_mu, joint))}
    return {"plan": plan, "fc": fc, "ceiling": ceiling, "joint": joint, "spreads": spreads}


def dataset_spreads(rows: Sequence[Mapping[str, Any]], mu: Sequence[float],
                    overall_sd: float) -> dict[str, float]:
    """Per dataset: the spread of its runs' log T about the predictions ``mu`` (a censored fit
    of the spread alone), shrunk towards ``overall_sd`` by how many of its runs reached the
    target (:func:`~airplan_qo.costmodels.time_to_target.pooled_spread`)."""
    by: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        # the dataset is the reference's indicator feature, ``dataset:NAME``
        by[next((n.removeprefix("dataset:") for n in r["fc_row"] if n.startswith("dataset:")),
                "")].append(i)
    out = {}
    for dataset, idx in sorted(by.items()):
        if len(idx) < 2:
            continue
        own = fit_tobit([{} for _ in idx], [rows[i]["log_t"] for i in idx],
                        [rows[i]["censored"] for i in idx], [], offset=[mu[i] for i in idx])
        reached = sum(1 for i in idx if not rows[i]["censored"])
        out[dataset] = pooled_spread(own.sd, reached, overall_sd)
    return out


def target_shifts(measured):
    """The level shift of the target, measured on every run's curve: for each run that reaches
    both its workload's target (the ratio rho0 of the measured fc the grid's SLA sets) and
    another ratio rho of :data:`TARGET_RATIOS`, ``g = target_level(rho) - target_level(rho0)``,
    its log T at rho0 relative to the workload's FC runs (mean over the seeds) and the shift
    ``log T(rho) - log T(rho0)``. Fitted by
    :func:`~airplan_qo.costmodels.time_to_target.fit_target_shift`; ``None`` when no run
    gives a pair (or the grid's SLA has no ratio below 1)."""
    g, rel, shift, bases = [], [], [], []
    for m in measured:
        ref = m.seeds[min(m.seeds)].fc_candidate.plan.label()
        fc_runs = [r for r in m.runs if r.plan == ref]
        if not fc_runs:
            continue
        fc = float(np.mean([r.final_accuracy for r in fc_runs]))
        target = m_target(m)
        rho0 = target / fc if fc > 0 else 1.0
        if not 0.0 < rho0 < 1.0:
            continue
        bases.append(rho0)
        curves = {id(r): [(i + 1, a) for i, a in enumerate(r.accuracy)] for r in m.runs}
        t0 = {id(r): first_crossing(curves[id(r)], target) for r in m.runs}
        fc_t = [math.log(t0[id(r)]) for r in fc_runs if t0[id(r)] is not None]
        if not fc_t:
            continue
        log_fc = float(np.mean(fc_t))
        for run in m.runs:
            if t0[id(run)] is None:
                continue
            for rho in TARGET_RATIOS:
                if abs(rho - rho0) < 1e-6:
                    continue
                t = first_crossing(curves[id(run)], rho * fc)
                if t is None:
                    continue
                g.append(target_level(rho) - target_level(rho0))
                rel.append(math.log(t0[id(run)]) - log_fc)
                shift.append(math.log(t) - math.log(t0[id(run)]))
    if len(g) < 2:
        return None
    return fit_target_shift(g, rel, shift, float(np.median(bases)))


def evaluate(measured, outcome_of, summaries: Mapping[str, Mapping[str, Any]],
             folds_of: Mapping[str, int], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Cross-validated picks and prediction quality of the time-to-target advisor."""
    if not folds_of:
        raise ValidationError("the time-to-target advisor needs cross-validation folds")
    rows = observations(measured, outcome_of)
    measured_fc = _fc_offsets(rows)
    by_key = {m.spec.key: m for m in measured}
    comparisons: dict[str, list] = {"measured_fc": [], "predicted_fc": [], "raced": []}
    pilot_shares: dict[str, float] = {}
    # the predicted-reference advisor's P(meets the SLA) of every held-out candidate
    p_meets: dict[str, dict[str, float]] = {}
    held_errors = []
    ceiling_errors = []
    for fold in sorted(set(folds_of.values())):
        held = {k for k, f in folds_of.items() if f == fold}
        models = fit([r for r in rows if r["workload"] not in held])
        plan, fcm, ceil = models["plan"], models["fc"], models["ceiling"]
        for key in sorted(held):
            m = by_key[key]
            seed0 = min(m.seeds)
            sp = m.seeds[seed0]
            budget = sp.result.context.round_budget
            candidates = trained(sp.candidates)
            cand_labels = tuple(c.plan.label() for c in sp.candidates)
            seed_costs: dict[str, dict[int, float]] = defaultdict(dict)
            for (wk, label, seed), o in outcome_of.items():
                if wk == key:
                    seed_costs[label][seed] = o.cost
            x_fc = _features(sp, sp.fc_candidate)
            # the held-out workload's dataset's own spread where the other folds have it
            spread = {kind: models["spreads"][kind].get(m.spec.workload.dataset, fit_.sd)
                      for kind, fit_ in (("plan", plan), ("joint", models["joint"]))}
            fc_pred = predicted_fc(ceil, _fc_row(m, sp))
            measured_acc = [r["final_accuracy"] for r in rows
                            if r["workload"] == key and r["is_fc"]]
            if measured_acc:
                ceiling_errors.append(100.0 * (fc_pred - float(np.mean(measured_acc))))
            offsets = {"measured_fc": measured_fc.get(key),
                       "predicted_fc": fcm.mean(_fc_row(m, sp))}
            relative = [with_fc_error({f: x[f] - x_fc[f] for f in PLAN_FEATURES}, 1.0 - fc_pred)
                        for x in (_features(sp, c) for c in candidates)]
            for variant, off in offsets.items():
                if off is None:
                    continue
                cands = [ChooserPlan(c.plan.label(), plan.mean(rel, off),
                                   float(c.cost.per_round.channel_uses),
                                   float(c.cost.startup))
                         for c, rel in zip(candidates, relative)]
                sd = spread["plan"] if variant == "measured_fc" else spread["joint"]
                pick, p, feasible = choose(cands, sd, budget, confidence)
                comparisons[variant].append(
                    compare(key, pick.label, summaries[key], cand_labels, seed_costs))
                if variant == "predicted_fc":
                    p_meets[key] = {c.label: meets_probability(c.mu, sd, budget)
                                    for c in cands}
                    raced, pilot_cost = _race(m, seed0, cands, pick, sd, budget, confidence,
                                              fc_pred)
                    cmp = compare(key, raced.label, summaries[key], cand_labels, seed_costs)
                    comparisons["raced"].append(cmp)
                    orc = next((s for s in summaries[key].values()
                                if s.plan == cmp.oracle_plan), None)
                    if orc is not None and orc.cost > 0:
                        pilot_shares[key] = pilot_cost / orc.cost
            for r in rows:
                if r["workload"] != key:
                    continue
                x = plan_x(r, ceil)
                mu = plan.mean(x, offsets["predicted_fc"])
                mu_m = plan.mean(x, offsets["measured_fc"])
                held_errors.append((r, mu, mu_m, spread["joint"], spread["plan"]))
    full = fit(rows)
    shift = target_shifts(measured)
    if shift is not None:
        full["target"] = shift
    return {"comparisons": comparisons, "errors": held_errors, "fit": full,
            "confidence": confidence, "ceiling_errors_pts": ceiling_errors,
            "pilot_cost_over_oracle": pilot_shares, "p_meets": p_meets}


def _race(m, seed: int, cands: Sequence[ChooserPlan], pick: ChooserPlan, sd: float, budget: int,
          confidence: float, ceiling: float) -> tuple[ChooserPlan, float]:
    """Pilot racing replayed on the measured runs: the cheaper candidates that might meet the
    SLA (P >= RACE_MIN_P, at most RACE_CONTENDERS, cheapest first) are piloted for a quarter of
    the budget (their measured runs' first rounds at ``seed``), their distributions updated
    (:func:`~airplan_qo.costmodels.time_to_target.pilot_update`), and the cheapest whose
    updated P reaches ``confidence`` replaces the pick. Returns (choice, pilot channel uses):
    every contender's pilot rounds are counted, including the winner's."""
    def exp_cost(c: ChooserPlan, mu: float, s: float) -> float:
        return c.startup + c.per_round_cost * expected_rounds(mu, s, budget)

    base = exp_cost(pick, pick.mu, sd)
    contenders = sorted((c for c in cands if c.label != pick.label
                         and meets_probability(c.mu, sd, budget) >= RACE_MIN_P
                         and exp_cost(c, c.mu, sd) < base),
                        key=lambda c: exp_cost(c, c.mu, sd))[:RACE_CONTENDERS]
    if not contenders:
        return pick, 0.0
    r = max(3, math.ceil(budget / 4))
    runs = {run.plan: run for run in m.runs if run.seed == seed}
    target = m_target(m)
    pilot = 0.0
    best = None
    for c in contenders:
        run = runs.get(c.label)
        if run is None:
            continue
        acc = list(run.accuracy[:r])
        pilot += float(sum(run.channel_uses[:r]))
        points = [(i + 1, a) for i, a in enumerate(acc)]
        reached = first_crossing(points, target, complete=False) is not None
        seen = [a for a in acc if a is not None][-3:]
        a_r = float(np.mean(seen)) if seen else 0.0
        mu2, sd2, p2 = pilot_update(c.mu, sd, budget, r, a_r, reached, ceiling,
                                    target / ceiling if ceiling > 0 else 1.0)
        if p2 >= confidence:
            cost = exp_cost(c, mu2, sd2)
            if best is None or cost < best[0]:
                best = (cost, c)
    return (best[1] if best is not None else pick), pilot


def m_target(m) -> float:
    """The measured target of a workload (its SLA with the measured fc, as the analysis uses)."""
    from .metrics import measured_target

    ref = m.seeds[min(m.seeds)].fc_candidate.plan.label()
    fc = float(np.mean([r.final_accuracy for r in m.runs if r.plan == ref]))
    return measured_target(parse_sla(m.spec.sla), fc)


def censored_coverage(log_budget: float, mu: float, sd: float) -> float:
    """The chance that the central 90% interval of N(mu, sd) holds a run known only to exceed
    ``log_budget``: its log T lies at a predictive quantile u uniform on [F(log B), 1] (if the
    model is right), and the interval holds quantiles 0.05 to 0.95. A run the model was sure
    would finish in time (F(log B) near 1) scores 0; one it expected to miss, about 0.9."""
    f = norm_cdf((log_budget - mu) / sd)
    if f >= 1.0:
        return 0.0
    return max(0.0, 0.95 - max(f, 0.05)) / (1.0 - f)


#: Resamples of the bootstrap over workloads behind a coverage's interval (fixed seed: the
#: report is reproducible).
BOOTSTRAP = 2000


def workload_bootstrap(values: Mapping[str, Sequence[float]], *, level: float = 0.95,
                       resamples: int = BOOTSTRAP, seed: int = 0) -> list[float] | None:
    """Central ``level`` interval of the mean of ``values`` (workload -> its runs' values)
    under a bootstrap that resamples **workloads** (a workload's runs share its errors, so
    resampling runs would understate the spread). None with fewer than 2 workloads."""
    keys = sorted(k for k, v in values.items() if len(v))
    if len(keys) < 2:
        return None
    sums = np.array([float(np.sum(values[k])) for k in keys])
    counts = np.array([len(values[k]) for k in keys], dtype=float)
    draw = np.random.default_rng(seed).integers(0, len(keys), size=(resamples, len(keys)))
    means = sums[draw].sum(axis=1) / counts[draw].sum(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    return [float(v) for v in np.percentile(means, [tail, 100.0 - tail])]


def prediction_quality(errors) -> dict[str, Any]:
    """Median |log error| of held-out uncensored runs per family, and 90% interval coverage
    (a censored run counts :func:`censored_coverage`, an uncensored one 0 or 1) with its 95%
    interval from a bootstrap over workloads (:func:`workload_bootstrap`)."""
    out: dict[str, Any] = {}
    for variant, idx in (("predicted_fc", 1), ("measured_fc", 2)):
        per_family: dict[str, list[float]] = defaultdict(list)
        cover: dict[str, list[bool]] = defaultdict(list)
        by_workload: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for e in errors:
            r, mu, sd = e[0], e[idx], e[3] if variant == "predicted_fc" else e[4]
            lo, hi = mu - Z90 * sd, mu + Z90 * sd
            if r["censored"]:
                c = censored_coverage(r["log_t"], mu, sd)
            else:
                per_family[r["family"]].append(abs(r["log_t"] - mu))
                c = float(lo <= r["log_t"] <= hi)
            cover[r["family"]].append(c)
            by_workload[r["family"]][r["workload"]].append(c)
        fams = sorted(set(per_family) | set(cover))
        abs_errors = [v for f in fams for v in per_family.get(f, [])]
        out[variant] = {
            "median_abs_log_error": {f: float(np.median(per_family[f])) if per_family.get(f)
                                     else None for f in fams},
            "coverage90": {f: float(np.mean(cover[f])) if cover[f] else None for f in fams},
            "coverage90_ci95": {f: workload_bootstrap(by_workload[f]) for f in fams},
            "coverage90_all": float(np.mean([c for f in fams for c in cover[f]]))
            if fams else None,
            "median_abs_log_error_all": float(np.median(abs_errors)) if abs_errors else None,
        }
    return out


def reference(fit_pair: Mapping[str, Any], measured, source: str) -> dict[str, Any]:
    """The shipped constants file's content: the fit on every run of the grid, and the range of
    workloads and plans it covers (the estimator flags plans outside it)."""
    from ..costmodels.time_to_target import flatten

    specs = [m.spec for m in measured]
    seeds = [sp for m in measured for sp in m.seeds.values()]
    plans = [c.plan for sp in seeds for c in sp.candidates]
    bits = [p.bits for p in plans if p.transport == "digital"]
    return {
        "version": 1, "source": source,
        # what the fit's rounds were judged on (one grid judges one metric): the planner warns
        # when an SLA bounds the other one
        "metric": parse_sla(specs[0].sla).accuracy_metric,
        "observations": {"plan": fit_pair["plan"].n_obs, "censored": fit_pair["plan"].n_censored,
                         "fc": fit_pair["fc"].n_obs},
        "constants": flatten(fit_pair["plan"], fit_pair["fc"], fit_pair.get("ceiling"),
                             fit_pair.get("joint"), fit_pair.get("target"),
                             fit_pair.get("spreads")),
        "range": {
            "clients": [min(s.workload.clients for s in specs),
                        max(s.workload.clients for s in specs)],
            # per dataset too: a dataset fitted at N <= 40 is extrapolated at N = 100, though
            # another reached 100
            "clients_by_dataset": {
                ds: [min(s.workload.clients for s in specs if s.workload.dataset == ds),
                     max(s.workload.clients for s in specs if s.workload.dataset == ds)]
                for ds in sorted({s.workload.dataset for s in specs})},
            "k": sorted({p.k_ratio for p in plans}),
            # the operators (the estimator widens a plan outside them): transports by name,
            # the digital widths as an interval (they enter through the continuous ``quant``
            # feature), algorithms by the name that runs
            "transports": sorted({p.transport for p in plans}),
            **({"bits": [min(bits), max(bits)]} if bits else {}),
            "algorithms": sorted({p.effective_algorithm for p in plans}),
            "families": sorted({p.topology.family for p in plans}),
            "datasets": sorted({s.workload.dataset for s in specs}),
            "models": sorted({s.workload.model for s in specs}),
            "snr_db": [min(s.workload.snr_db for s in specs),
                       max(s.workload.snr_db for s in specs)],
            "dropout": [min(s.workload.dropout for s in specs),
                        max(s.workload.dropout for s in specs)],
            # the alpha the estimator used: from the workloads' statistics, as when planning
            "alpha": [min(sp.result.context.alpha for sp in seeds),
                      max(sp.result.context.alpha for sp in seeds)],
            # the ratios of fc the target may take (the shift was measured between them)
            **({"target_ratio": [min(TARGET_RATIOS + (target.coef["base"],)),
                                 max(TARGET_RATIOS + (target.coef["base"],))]}
               if (target := fit_pair.get("target")) is not None else {}),
        },
    }


__all__ = ["observations", "fit", "dataset_spreads", "target_shifts", "evaluate",
           "censored_coverage", "prediction_quality", "workload_bootstrap",
           "reference", "CONFIDENCE", "PENALTY"]
