"""Advisor-quality metrics over a table of measured runs: pure functions, no catalog, no torch.

Definitions (docs/evaluation.md states them with examples; the tests check them on a hand-made
table):

* target: the SLA's accuracy bound with ``fc`` = the **measured** mean final accuracy (over
  seeds) of the fully connected, uncompressed plan with Metropolis weights after the round
  budget (for an absolute SLA, the bound itself).
* per run: ``reached`` when the test accuracy of the average model reaches the target within
  the budget; ``rounds`` = the first round it does (else the rounds run, a lower bound);
  ``cost`` = channel uses up to that round plus the statistics broadcast (else those of the
  whole run, a lower bound).
* per plan (seeds aggregated): accuracy = mean final accuracy; cost, rounds = means over
  seeds (censored seeds at their lower bounds); the plan **meets the SLA** when it reaches the
  target in a strict majority of its seeds (so every seed for one or two seeds) and the SLA's
  other bounds (rounds, channel uses, energy, airtime) hold for those means.
* oracle: among the candidates that meet the SLA, the lowest cost (channel uses by default),
  ties broken by higher accuracy, then the plan label. None when no candidate meets the SLA.
* match: the advisor's plan label equals the oracle's (topology, parameters, weights rule and
  k); family match compares topology families only.
* regret: accuracy in points = 100 (oracle accuracy - advisor accuracy); cost in percent =
  100 (advisor cost - oracle cost) / oracle cost. Both can be negative.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import ValidationError
from ..plans.sla import ACCURACY_METRICS, first_crossing


@attrs.frozen
class RunOutcome:
    """One measured run (workload, plan, seed) after the target has been applied."""

    workload: str
    plan: str
    family: str
    seed: int
    final_accuracy: float
    reached: bool
    rounds: float
    cost: float
    energy_j: float | None = None
    airtime_s: float | None = None


@attrs.frozen
class PlanSummary:
    """A plan's measurements over the seeds of one workload."""

    workload: str
    plan: str
    family: str
    n_seeds: int
    n_reached: int
    accuracy: float
    accuracy_std: float
    cost: float
    rounds: float
    energy_j: float | None
    airtime_s: float | None
    meets_sla: bool

    @property
    def majority_reached(self) -> bool:
        return 2 * self.n_reached > self.n_seeds


@attrs.frozen
class Comparison:
    """The advisor's pick beside the oracle for one workload."""

    workload: str
    advisor_plan: str
    advisor_family: str
    oracle_plan: str | None
    oracle_family: str | None
    match: bool | None
    family_match: bool | None
    regret_acc_pts: float | None
    regret_cost_pct: float | None
    advisor_meets_sla: bool
    within_noise: bool | None = None
    cost_ratio: float | None = None


@attrs.frozen
class FamilyScore:
    family: str
    precision: float | None
    recall: float | None
    f1: float | None
    support: int          # workloads whose oracle is this family
    predicted: int        # workloads where the advisor picked this family


@attrs.frozen
class PairedTest:
    """A paired t-test (``scipy.stats.ttest_rel``) of a - b."""

    name: str
    n: int
    mean_a: float | None
    mean_b: float | None
    mean_diff: float | None
    t: float | None
    p: float | None


def outcome_from_curve(accuracy: Sequence[float | None], round_cost: Sequence[float],
                       startup: float, target: float) -> tuple[bool, int, float]:
    """(reached, rounds, cost) of one run: the round at which the accuracy curve (mean
    client-model accuracy, 1-based rounds, None where not evaluated) reaches ``target`` on the
    smoothed rule of :func:`~airplan_qo.plans.sla.first_crossing` (centred moving average
    over 3 evaluations), and the channel uses up to and including it plus ``startup``; when the
    target is never reached, the rounds run and the whole run's channel uses (lower bounds)."""
    if len(accuracy) != len(round_cost):
        raise ValidationError(f"curve has {len(accuracy)} accuracies but {len(round_cost)} "
                              "per-round costs")
    reached = first_crossing(list(enumerate(accuracy, 1)), target)
    rounds = reached if reached is not None else len(accuracy)
    spent = float(startup) + float(sum(float(c or 0.0) for c in round_cost[:rounds]))
    return reached is not None, rounds, spent


def measured_target(sla, fc_accuracy: float | None) -> float:
    """The SLA's accuracy bound with ``fc`` = the measured fully connected accuracy."""
    bound = sla.accuracy_threshold(fc_accuracy)
    if bound is None:
        raise ValidationError(f"SLA '{sla.render()}' has no accuracy bound")
    return float(bound)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.mean(vals)) if vals else None


def summarize(outcomes: Iterable[RunOutcome], sla=None, fc_accuracy: float | None = None
              ) -> dict[tuple[str, str], PlanSummary]:
    """Aggregate runs per (workload, plan) over seeds and decide whether each meets the SLA.

    The accuracy bound of the SLA is judged by ``reached`` (strict majority of seeds); its other
    bounds (rounds, channel_uses, energy_j, airtime_s) on the seed means.
    """
    groups: dict[tuple[str, str], list[RunOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.workload, o.plan)].append(o)
    out: dict[tuple[str, str], PlanSummary] = {}
    for key, runs in groups.items():
        seeds = [r.seed for r in runs]
        if len(set(seeds)) != len(seeds):
            raise ValidationError(f"workload {key[0]!r}, plan {key[1]!r}: seed measured twice")
        families = {r.family for r in runs}
        if len(families) != 1:
            raise ValidationError(f"plan {key[1]!r} has several families: {sorted(families)}")
        acc = np.array([r.final_accuracy for r in runs], dtype=float)
        n_reached = sum(1 for r in runs if r.reached)
        summary = PlanSummary(
            workload=key[0], plan=key[1], family=runs[0].family, n_seeds=len(runs),
            n_reached=n_reached, accuracy=float(acc.mean()),
            accuracy_std=float(acc.std(ddof=1)) if len(runs) > 1 else 0.0,
            cost=float(np.mean([r.cost for r in runs])),
            rounds=float(np.mean([r.rounds for r in runs])),
            energy_j=_mean(r.energy_j for r in runs), airtime_s=_mean(r.airtime_s for r in runs),
            meets_sla=False)
        out[key] = attrs.evolve(summary, meets_sla=_meets(summary, sla, fc_accuracy))
    return out


def _meets(s: PlanSummary, sla, fc_accuracy: float | None) -> bool:
    if not s.majority_reached:
        return False
    if sla is None:
        return True
    values = {"rounds": s.rounds, "channel_uses": s.cost, "energy_j": s.energy_j,
              "airtime_s": s.airtime_s}
    for c in sla.constraints:
        if c.metric in ACCURACY_METRICS:
            continue
        actual = values.get(c.metric)
        if actual is None or not c.holds(float(actual), fc_accuracy):
            return False
    return True


def oracle(summaries: Iterable[PlanSummary]) -> PlanSummary | None:
    """The cheapest plan that meets the SLA; ties: higher accuracy, then the plan label."""
    ok = [s for s in summaries if s.meets_sla]
    if not ok:
        return None
    return min(ok, key=lambda s: (s.cost, -s.accuracy, s.plan))


def within_noise(pick: Mapping[int, float], best: Mapping[int, float], meets_sla: bool,
                 tolerance: float = math.log(1.10)) -> bool:
    """Within-noise match: the pick meets the SLA and its paired (by seed) mean log-cost excess
    over the oracle is at most ``max(t_{0.975, n-1} SE, log 1.10)`` (SE of the mean paired
    difference; with one seed only the tolerance applies)."""
    from scipy import stats

    if not meets_sla:
        return False
    seeds = sorted(set(pick) & set(best))
    if not seeds:
        return False
    diff = np.array([math.log(pick[s]) - math.log(best[s]) for s in seeds])
    band = tolerance
    if diff.size > 1:
        se = float(diff.std(ddof=1)) / math.sqrt(diff.size)
        band = max(band, float(stats.t.ppf(0.975, diff.size - 1)) * se)
    return float(diff.mean()) <= band


def compare(workload: str, advisor_plan: str, by_plan: Mapping[str, PlanSummary],
            candidates: Iterable[str] | None = None,
            seed_costs: Mapping[str, Mapping[int, float]] | None = None) -> Comparison:
    """Match and regret of the advisor's pick against the oracle: the cheapest of
    ``candidates`` (default: every plan of ``by_plan``, keyed by label) that meets the SLA.
    The advisor's plan must have been measured; it may lie outside ``candidates`` (the
    planner's fully connected fallback)."""
    if advisor_plan not in by_plan:
        raise ValidationError(f"workload {workload!r}: the advisor's plan {advisor_plan!r} was "
                              "not measured")
    adv = by_plan[advisor_plan]
    allowed = set(by_plan) if candidates is None else set(candidates)
    orc = oracle(s for s in by_plan.values() if s.plan in allowed)
    if orc is None:
        return Comparison(workload, adv.plan, adv.family, None, None, None, None, None, None,
                          adv.meets_sla)
    regret_cost = (100.0 * (adv.cost - orc.cost) / orc.cost) if orc.cost > 0 else None
    noise = None
    if seed_costs is not None and adv.plan in seed_costs and orc.plan in seed_costs:
        noise = within_noise(seed_costs[adv.plan], seed_costs[orc.plan], adv.meets_sla)
    return Comparison(workload, adv.plan, adv.family, orc.plan, orc.family,
                      adv.plan == orc.plan, adv.family == orc.family,
                      100.0 * (orc.accuracy - adv.accuracy), regret_cost, adv.meets_sla,
                      noise, adv.cost / orc.cost if orc.cost > 0 else None)


def geometric_mean(ratios: Sequence[float]) -> float | None:
    """exp(mean(log r)) over positive ratios (None when there are none): the typical cost
    ratio, which, unlike the median, moves when a minority of workloads gets cheaper."""
    pos = [float(r) for r in ratios if r is not None and r > 0]
    return float(np.exp(np.mean(np.log(pos)))) if pos else None


def policy_of(label: str) -> str:
    """The fixed policy a plan label belongs to: the label itself, except that a mixing-only tail
    on the plan's own topology is named ``mix=own``, since its length is the planner's rule for
    each workload's budget and graph (``mix=34`` at N = 60, ``mix=42`` at N = 100): "always
    Base-2 with its own tail" is one policy."""
    return re.sub(r" mix=\d+$", " mix=own", label)


def policy_plans(policy: str, by_plan: Mapping[str, Any]) -> list[str]:
    """The plan labels of one workload (``by_plan``'s keys) that follow ``policy``."""
    return [label for label in by_plan if policy_of(label) == policy]


def policy_table(per_workload: Mapping[str, tuple[Mapping[str, PlanSummary], PlanSummary | None]]
                 ) -> list[dict[str, Any]]:
    """Every fixed single-plan policy ("always this plan", :func:`policy_of`): over the
    workloads where that plan was measured, the fraction whose SLA it meets and its median and
    geometric-mean cost ratio to the oracle (over workloads with an oracle). Sorted by SLA-met
    rate (high first), then median ratio."""
    per_workload = {k: ({policy_of(p): s for p, s in by_plan.items()}, orc)
                    for k, (by_plan, orc) in per_workload.items()}
    labels = sorted({p for by_plan, _ in per_workload.values() for p in by_plan})
    out = []
    for label in labels:
        met, ratios = [], []
        for by_plan, orc in per_workload.values():
            s = by_plan.get(label)
            if s is None:
                continue
            met.append(s.meets_sla)
            if orc is not None and orc.cost > 0:
                ratios.append(s.cost / orc.cost)
        out.append({"policy": label, "workloads": len(met),
                    "sla_met_rate": sum(met) / len(met) if met else None,
                    "median_cost_ratio": float(np.median(ratios)) if ratios else None,
                    "gmean_cost_ratio": geometric_mean(ratios)})
    return sorted(out, key=lambda r: (-(r["sla_met_rate"] or 0.0),
                                      r["median_cost_ratio"] or math.inf, r["policy"]))


def best_policy(policies: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The best fixed policy of a :func:`policy_table`, chosen in hindsight: among the policies
    measured on at least half as many workloads as the widest (a plan that exists in one corner
    of a grid is not a rule for the grid), the one meeting the SLA most often, then the
    cheapest by geometric-mean cost ratio to the oracle. None when none was scored."""
    scored = [p for p in policies if p.get("sla_met_rate") is not None]
    most = max((p["workloads"] for p in scored), default=0)
    wide = [p for p in scored if p["workloads"] >= 0.5 * most]
    return max(wide, key=lambda p: (p["sla_met_rate"], -(p.get("gmean_cost_ratio")
                                                          or math.inf)), default=None)


def hindsight_pick(outcomes: Iterable[RunOutcome], candidates: Sequence[str],
                   seeds: Sequence[int], need: int) -> str | None:
    """The pick of an advisor that has *measured* ``seeds`` of every candidate: the cheapest
    (mean cost over those seeds) of the candidates that reached the target in at least ``need``
    of them, ties to the plan label; None when none did."""
    seen, allowed = set(seeds), set(candidates)
    runs: dict[str, list[RunOutcome]] = defaultdict(list)
    for o in outcomes:
        if o.seed in seen and o.plan in allowed:
            runs[o.plan].append(o)
    ok = [(float(np.mean([o.cost for o in rs])), plan) for plan, rs in runs.items()
          if sum(o.reached for o in rs) >= need]
    return min(ok)[1] if ok else None


def noise_ceiling(workloads: Mapping[str, tuple[Any, Sequence[str], str]],
                  outcomes: Iterable[RunOutcome], picks: Mapping[str, Mapping[str, str]],
                  seeds: Sequence[int]) -> dict[str, Any] | None:
    """How well *any* advisor can score when the oracle itself is measured on few seeds.

    The seeds are split in two halves: every advisor is judged (oracle, SLA met, within-noise
    match, cost ratio) on the second half only, and two hindsight advisors pick from the
    first half's measurements of every candidate: "every seen seed reached" (what an advisor
    confident that its pick meets the SLA aims at) and "most seen seeds reached" (the oracle's
    own majority rule). ``workloads`` maps a workload to (its SLA, its candidate labels, the
    label of its fallback plan, picked when a hindsight advisor finds nothing); ``picks`` names
    further advisors (name -> workload -> plan label), judged on the same half. None with fewer
    than 2 seeds."""
    order = sorted(set(seeds))
    if len(order) < 2:
        return None
    half = len(order) // 2
    seen, judged = order[:half], order[half:]
    rules = {"hindsight: every seen seed reached": len(seen),
             "hindsight: most seen seeds reached": len(seen) // 2 + 1}
    rows = _judge_hindsight(workloads, outcomes, picks, seen, judged, rules)
    return {"seen_seeds": seen, "judged_seeds": judged, "advisors": rows}


def full_hindsight(workloads: Mapping[str, tuple[Any, Sequence[str], str]],
                   outcomes: Iterable[RunOutcome], seeds: Sequence[int]
                   ) -> dict[str, Any] | None:
    """What an advisor that knew every measured run could score while staying confident:
    hindsight advisors that have seen **all** the seeds the oracle is measured on pick the
    cheapest plan that reached the target in at least m of the n seeds, for m from n down to
    the last count above the oracle's own majority rule (m = n // 2 + 1 picks the oracle
    itself), judged on the same seeds. The within-noise match of the every-seed row is the
    most an advisor that only picks plans it is sure of can reach. ``workloads`` as for
    :func:`noise_ceiling`; None with fewer than 3 seeds (no count above the majority's)."""
    order = sorted(set(seeds))
    n = len(order)
    needs = range(n, n // 2 + 1, -1)
    if not needs:
        return None
    rules = {(f"hindsight: reached in all {n} seeds" if m == n else
              f"hindsight: reached in at least {m} of {n} seeds"): m for m in needs}
    rows = _judge_hindsight(workloads, outcomes, {}, order, order, rules)
    return {"seeds": order, "advisors": rows}


def _judge_hindsight(workloads, outcomes, picks, seen, judged, rules) -> dict[str, Any]:
    """Hindsight advisors (name -> seeds needed among ``seen``) and the advisors of ``picks``,
    each judged against the oracle of the ``judged`` seeds."""
    by_workload: dict[str, list[RunOutcome]] = defaultdict(list)
    for o in outcomes:
        by_workload[o.workload].append(o)
    cmps: dict[str, list[Comparison]] = defaultdict(list)
    judged_set = set(judged)
    for key, (sla, candidates, fallback) in workloads.items():
        outs = by_workload.get(key, [])
        late = [o for o in outs if o.seed in judged_set]
        by_plan = {s.plan: s for s in summarize(late, sla, None).values()}
        seed_costs: dict[str, dict[int, float]] = defaultdict(dict)
        for o in late:
            seed_costs[o.plan][o.seed] = o.cost
        chosen = {name: hindsight_pick(outs, candidates, seen, need) or fallback
                  for name, need in rules.items()}
        chosen.update({name: p[key] for name, p in picks.items() if key in p})
        for name, label in chosen.items():
            if label in by_plan:
                cmps[name].append(compare(key, label, by_plan, candidates, seed_costs))
    rows = {}
    for name in [*rules, *picks]:
        cs = cmps.get(name, [])
        with_oracle = [c for c in cs if c.oracle_plan is not None]
        ratios = [c.cost_ratio for c in with_oracle if c.cost_ratio is not None]
        rows[name] = {"workloads": len(cs), "with_oracle": len(with_oracle),
                      "within_noise_rate": rate(c.within_noise for c in with_oracle)[0],
                      "advisor_meets_sla_rate": rate(c.advisor_meets_sla for c in cs)[0],
                      "median_cost_ratio": float(np.median(ratios)) if ratios else None,
                      "gmean_cost_ratio": geometric_mean(ratios)}
    return rows


def family_scores(pairs: Iterable[tuple[str, str | None]]) -> dict[str, FamilyScore]:
    """Per-family precision, recall and F1 of (advisor family, oracle family) pairs.

    precision = hits / advisor picks of F, recall = hits / oracle choices of F, F1 their
    harmonic mean; None where the denominator is 0. Pairs without an oracle are left out.
    """
    from sklearn.metrics import precision_recall_fscore_support

    pairs = [(a, o) for a, o in pairs if o is not None]
    families = sorted({a for a, _ in pairs} | {o for _, o in pairs})
    if not families:
        return {}
    picked, truth = [a for a, _ in pairs], [o for _, o in pairs]
    p, r, f1, support = precision_recall_fscore_support(
        truth, picked, labels=families, zero_division=np.nan)

    def value(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    out = {}
    for i, f in enumerate(families):
        pi, ri, fi = value(p[i]), value(r[i]), value(f1[i])
        # F1 is undefined (None) unless precision and recall are; 0 when both are 0
        f1_i = None if pi is None or ri is None else (0.0 if fi is None else fi)
        out[f] = FamilyScore(f, pi, ri, f1_i, int(support[i]), sum(1 for a in picked if a == f))
    return out


def mape(pairs: Iterable[tuple[float | None, float]]) -> tuple[float | None, int, int]:
    """(MAPE in percent, n used, n unpredicted) of (predicted, actual) pairs: pairs whose
    prediction is None ("never") are counted as unpredicted and left out; actual must be > 0."""
    from sklearn.metrics import mean_absolute_percentage_error

    used, never = [], 0
    for pred, act in pairs:
        if pred is None:
            never += 1
            continue
        if not act > 0:
            raise ValidationError(f"MAPE needs actual values > 0, got {act}")
        used.append((float(pred), float(act)))
    if not used:
        return None, 0, never
    pred_v, act_v = zip(*used)
    return 100.0 * float(mean_absolute_percentage_error(act_v, pred_v)), len(used), never


def paired_test(name: str, a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """``scipy.stats.ttest_rel(a, b)``; t and p are None with fewer than two pairs or when
    every difference is the same (the statistic is undefined)."""
    from scipy import stats

    if len(a) != len(b):
        raise ValidationError(f"paired test {name}: {len(a)} values against {len(b)}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = int(x.size)
    if n == 0:
        return PairedTest(name, 0, None, None, None, None, None)
    diff = x - y
    t = p = None
    if n >= 2 and float(np.ptp(diff)) > 0:
        res = stats.ttest_rel(x, y)
        t, p = float(res.statistic), float(res.pvalue)
    return PairedTest(name, n, float(x.mean()), float(y.mean()), float(diff.mean()), t, p)


def assign_folds(keys: Sequence[str], folds: int, seed: int,
                 groups: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Workload -> fold (0..folds-1) with scikit-learn's ``GroupKFold`` (groups shuffled with
    ``seed``): workloads of one group (by default each its own; the analysis groups by
    (dataset, N, alpha), so dropout variants and SNR triplets of one workload never sit on both
    sides of a split) always share a fold. ``folds`` is capped at the number of groups."""
    from sklearn.model_selection import GroupKFold

    if folds < 2:
        raise ValidationError(f"cross-validation needs at least 2 folds, got {folds}")
    ordered = sorted(keys)
    group_of = {k: (groups[k] if groups is not None else k) for k in ordered}
    names = sorted({repr(g) for g in group_of.values()})
    label = np.array([names.index(repr(group_of[k])) for k in ordered])
    k = min(folds, len(names))
    if k < 2:
        raise ValidationError("cross-validation needs at least 2 groups of workloads")
    out: dict[str, int] = {}
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    for f, (_, test) in enumerate(splitter.split(np.zeros(len(ordered)), groups=label)):
        for i in test.tolist():
            out[ordered[i]] = f
    return out


def confident_oracle(by_plan: Mapping[str, PlanSummary]) -> str | None:
    """The label of the cheapest measured plan that reached the target in every seed (None
    where every plan misses in some seed)."""
    sure = [(s.cost, label) for label, s in by_plan.items()
            if s.n_seeds and s.n_reached == s.n_seeds and s.cost > 0]
    return min(sure)[1] if sure else None


def seed_run_figures(picks: Mapping[str, str],
                     summaries: Mapping[str, Mapping[str, PlanSummary]]) -> dict[str, Any]:
    """What a user of ``picks`` (workload -> plan label) sees run by run: the share of the
    picks' seed runs that reach the target, how many picks reach it in every seed, and the
    pick's cost ratio to the **confident oracle**, the cheapest measured plan that reached the
    target in every seed (over the workloads that have one; some have none, where every plan
    misses in some seed)."""
    reached = seeds = always = 0
    ratios = []
    for key, label in picks.items():
        by_plan = summaries.get(key, {})
        pick = by_plan.get(label)
        if pick is None:
            continue
        reached += pick.n_reached
        seeds += pick.n_seeds
        always += pick.n_reached == pick.n_seeds
        sure = confident_oracle(by_plan)
        if sure is not None:
            ratios.append(pick.cost / by_plan[sure].cost)
    return {"workloads": sum(1 for k, lab in picks.items() if lab in summaries.get(k, {})),
            "seed_runs_reached": reached / seeds if seeds else None,
            "picks_reached_every_seed": int(always),
            "with_confident_oracle": len(ratios),
            "median_ratio_to_confident_oracle": float(np.median(ratios)) if ratios else None,
            "gmean_ratio_to_confident_oracle": geometric_mean(ratios)}


def rate(values: Iterable[bool | None]) -> tuple[float | None, int]:
    """(fraction of True, n) over the values that are not None."""
    vals = [bool(v) for v in values if v is not None]
    return (sum(vals) / len(vals) if vals else None), len(vals)


def stats_of(values: Iterable[float | None]) -> dict[str, Any]:
    """n, mean, median, max of the finite values (None when there are none)."""
    vals = np.array([float(v) for v in values if v is not None and math.isfinite(float(v))])
    if vals.size == 0:
        return {"n": 0, "mean": None, "median": None, "max": None, "min": None}
    return {"n": int(vals.size), "mean": float(vals.mean()), "median": float(np.median(vals)),
            "max": float(vals.max()), "min": float(vals.min())}


__all__ = ["RunOutcome", "PlanSummary", "Comparison", "FamilyScore", "PairedTest",
           "outcome_from_curve", "measured_target", "summarize", "oracle", "confident_oracle", "compare",
           "within_noise", "policy_table", "policy_of", "policy_plans", "best_policy",
           "geometric_mean", "hindsight_pick", "noise_ceiling", "full_hindsight",
           "family_scores", "mape", "paired_test", "assign_folds", "rate", "seed_run_figures",
           "stats_of"]
