"""The optimizer: enumerate physical plans, cost them, enforce the SLA and budgets, pick one.

Like a query optimizer: statistics come from the catalog (topology spectra are computed and
cached on a miss; heterogeneity from ``ANALYZE WORKLOAD`` when available, else the declared
alpha), every candidate is costed by the chosen estimator, constraints prune, and the cheapest
feasible plan under the objective wins. When nothing is feasible the fully connected,
uncompressed plan is returned as the paper does, with a warning that lists the nearest candidates
and what each failed. Every planning run and all its candidates are recorded in the catalog.

This module is the driver; the steps it drives are the other modules of the package (statistics,
enumeration, clique_planning, pruning, restriction, feasibility, progress, plan_cache,
recording).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from ..catalog.privacy import choose_release
from ..catalog.sketch import dimensions
from ..catalog.store import Catalog
from ..costmodels import (DEFAULT_ESTIMATOR, ESTIMATORS, EstimationContext, estimate_many,
                          plans_mixing_tails, recorded_range, refuser,
                          resolve_constants)
from ..errors import PlanningError, ValidationError
from ..plans.families import FAMILIES
from ..plans.plan import OBJECTIVES, Cost, PhysicalPlan, round_cost
from ..plans.request import DEFAULT_SPARSITY, Candidate, PlanRequest, PlanResult
from ..plans.sla import SLA
from ..plans.topology import TopologySpec, TopologyStats, describe_many
from ..plans.workload import Workload
from .clique_planning import clique_details, placeholder
from .enumeration import candidate_specs, fitting, operator_choices
from .feasibility import check_data_split
from .progress import PlanningProgress
from .pruning import Pruning, budget_limits, pruned_reason
from .plan_cache import CachedPlan, Lookup, PlanCache, served
from .recording import record, store_topologies
from .restriction import respect_restriction
from .statistics import (cache_key, cacheable, cached_topologies, heterogeneity, label_statistics,
                         model_dimension, workload_facts)

#: Edges of a topology kept in its catalog row at most (larger graphs are rebuilt when trained).
MAX_CACHED_EDGES = 1_000_000

#: Statistics of periodic topologies kept by this process, oldest dropped first beyond
#: ``PERIODIC_KEPT``: the catalog's cache does not hold their per-round figures, and building
#: their rounds' schedules is most of the time of planning a small workload again.
PERIODIC_KEPT = 256
_PERIODIC: dict[TopologySpec, TopologyStats] = {}
_PERIODIC_LOCK = threading.Lock()

#: A predicted fully connected accuracy below this multiple of chance (1 / classes) after the
#: budget draws a warning: an SLA relative to it (``0.95 * fc``) is then met by an untrained model.
CHANCE_MARGIN = 1.5



#: How a warning names what an accuracy metric measures.
_METRIC_WORDS = {"accuracy": "the clients' own models",
                 "avg_model_accuracy": "the network-average model"}

#: The share of fc above which the tails' level model was measured overconfident: of the runs
#: planned at P 0.95 and more to clear 0.97 of fc, 79-82% did (docs/planner.md).
TAIL_OVERCONFIDENT_RATIO = 0.96


def tail_warning(plan, target: float | None, fc_accuracy: float | None) -> str | None:
    """The warning a chosen plan with a mixing-only tail gets where its target lies within
    (1 - :data:`TAIL_OVERCONFIDENT_RATIO`) of fc; None elsewhere."""
    if not plan.mix_rounds or not target or not fc_accuracy:
        return None
    ratio = target / fc_accuracy
    if ratio <= TAIL_OVERCONFIDENT_RATIO:
        return None
    return (f"the chosen plan ends with mixing-only rounds at a target {ratio:.3g} of fc: above "
            f"{TAIL_OVERCONFIDENT_RATIO:g} of fc its p_meets_sla was measured overconfident "
            "(tails planned at P 0.95 and more to clear 0.97 of fc did in 79-82% of the runs "
            "measured; docs/planner.md, Mixing-only tails)")


class Optimizer:
    """Plans workloads against one catalog.

    ``progress``: a callable given a one-line message at each step of a planning call that runs
    longer than :data:`PROGRESS_AFTER` seconds (see :class:`PlanningProgress`; it may be called
    from a timer thread); None (the default) reports nothing.
    """

    def __init__(self, catalog: Catalog, progress: Callable[[str], Any] | None = None):
        self.catalog = catalog
        self.progress = progress
        self._steps = PlanningProgress(None)
        #: The workloads' catalog facts read by the planning call under way (read once a call).
        self._facts: dict[Workload, Any] = {}

    def _workload_facts(self, w: Workload):
        facts = self._facts.get(w)
        if facts is None:
            facts = self._facts[w] = workload_facts(self.catalog, w)
        return facts

    def _step(self, message: str) -> None:
        self._steps.step(message)

    # ---- statistics --------------------------------------------------------------------------

    def topology_stats(self, specs: list[TopologySpec]) -> tuple[list[TopologyStats], list[int]]:
        """Statistics for each spec: from the catalog cache (its rows kept in the catalog's
        memo once read), computing and caching the misses. The planner's only topology cache:
        periodic topologies, whose per-round figures the catalog does not hold, are kept by this
        process instead."""
        if not specs:
            return [], []
        n = specs[0].n
        memo = self.catalog.memo.setdefault("topologies", {})
        keys = {spec: cache_key(spec) for spec in specs}   # each a JSON text: built once
        cached: dict[tuple, tuple[TopologyStats, int]] = {}
        for spec in specs:
            hit = memo.get((n, keys[spec])) if cacheable(spec) else None
            if hit is not None:
                st, tid = hit
                cached[keys[spec]] = (st if st.spec == spec
                                      else attrs.evolve(st, spec=spec), tid)
        unread = [s for s in specs if cacheable(s) and keys[s] not in cached]
        for key, hit in cached_topologies(self.catalog, unread).items():
            cached[key] = memo[(n, key)] = hit
        with _PERIODIC_LOCK:   # periodic: not in the catalog, but a pure function of the spec
            for spec in specs:
                if spec.periodic and spec in _PERIODIC:
                    cached[keys[spec]] = (_PERIODIC[spec], None)
        missing = [s for s in specs if keys[s] not in cached]
        if missing:
            graphs: dict[tuple, list[TopologySpec]] = {}   # one graph, several weight rules
            for spec in missing:
                graphs.setdefault((spec.family, spec.params, spec.seed), []).append(spec)
            computed = []
            for i, members in enumerate(graphs.values(), 1):
                self._step(f"building topology {i}/{len(graphs)}: {members[0].label()} on "
                           f"{n} clients (graph, OTA schedule, spectra; weights "
                           f"{', '.join(s.weights for s in members)})")
                computed += describe_many(members, max_edges_kept=MAX_CACHED_EDGES)
            with _PERIODIC_LOCK:
                for stats, _ in computed:
                    if stats.spec.periodic:
                        _PERIODIC[stats.spec] = stats
                while len(_PERIODIC) > PERIODIC_KEPT:
                    del _PERIODIC[next(iter(_PERIODIC))]
            storable = [c for c in computed if cacheable(c[0].spec)]
            ids = (store_topologies(self.catalog, storable)
                   if storable and not self.catalog.read_only else [])
            for (stats, _), tid in zip(storable, ids):
                cached[cache_key(stats.spec)] = (stats, tid)
            for stats, _ in computed:
                cached.setdefault(cache_key(stats.spec), (stats, None))
        out = [cached[keys[s]] for s in specs]
        return [o[0] for o in out], [o[1] for o in out]

    # ---- planning ----------------------------------------------------------------------------

    def plan(self, request: PlanRequest) -> PlanResult:
        """Enumerate, cost and choose; the steps go to ``progress`` when the call is long.
        The data split is checked before anything is built; a request refused by its
        restriction (planner/restriction.py) leaves the catalog as it was. A request planned
        before, with nothing it read changed since, is served from the plan cache
        (planner/plan_cache.py) and recorded in full all the same."""
        cache = PlanCache.of(self.catalog)
        lookup = cache.lookup(request)   # before the transaction: see Catalog.changes
        if not cache.holds(lookup):      # a cached request's data split passed this check
            check_data_split(request.workload)
            lookup = attrs.evolve(lookup, split_checked=True) if lookup is not None else None
        self._steps = PlanningProgress(self.progress)
        self._facts = {}
        try:
            if self.catalog.read_only:
                return self._plan_respecting(request, cache, lookup)
            with self.catalog.transaction():
                return self._plan_respecting(request, cache, lookup)
        finally:
            self._steps.close()
            self._facts = {}

    def _plan_respecting(self, request: PlanRequest, cache: PlanCache,
                         lookup: Lookup | None) -> PlanResult:
        start = time.perf_counter()
        cached = cache.get(lookup)
        if cached is not None:
            result = served(cached, request, (time.perf_counter() - start) * 1e3)
            if self.catalog.read_only:
                return result
            return record(self.catalog, result, cached.workload_id, self._step,
                          copy_of=cached.planning_run_id)
        if lookup is not None and not lookup.split_checked:
            check_data_split(request.workload)
        result = respect_restriction(request, self._plan(request), self._plan)
        if self.catalog.read_only:
            cache.put(lookup, CachedPlan(result, None, None))
            return result
        workload_id = self._workload_facts(request.workload).workload_id
        recorded = record(self.catalog, result, workload_id, self._step)
        cache.put(lookup, CachedPlan(result, workload_id, recorded.planning_run_id))
        return recorded

    def _plan(self, request: PlanRequest) -> PlanResult:
        """Plan ``request`` without recording it."""
        start = time.perf_counter()
        w = request.workload
        est_name = (request.estimator or DEFAULT_ESTIMATOR).lower()
        estimator = ESTIMATORS.get(est_name)
        objective = request.objective or ("c_ours" if est_name == "paper" else "channel_uses")
        if objective not in OBJECTIVES:
            raise ValidationError(f"unknown objective '{objective}'; use one of "
                                  f"{', '.join(OBJECTIVES)}")
        if objective == "c_ours" and est_name != "paper":
            raise ValidationError("objective c_ours is only defined by the paper estimator")
        if request.mix_rounds is None:   # the default: tails where the estimator costs them
            request = attrs.evolve(request, mix_rounds="auto" if plans_mixing_tails(estimator)
                                   else 0)
        if request.mix_rounds and not plans_mixing_tails(estimator):
            raise ValidationError(f"mix_rounds = {request.mix_rounds!r}: estimator {est_name} "
                                  f"does not model mixing-only rounds; COST MODEL ttt does")
        budgets = budget_limits(request)
        if request.min_mixing_p is not None and not 0.0 <= request.min_mixing_p <= 1.0:
            raise ValidationError(f"min_mixing_p must be in [0, 1], got {request.min_mixing_p}")
        sparsity = tuple(request.sparsity or DEFAULT_SPARSITY)
        for k in sparsity:
            if not 0 < k <= 1:
                raise ValidationError(f"sparsity k must be in (0, 1], got {k}")

        d, n_classes = model_dimension(w)
        facts = self._workload_facts(w)
        alpha, alpha_source, privacy_eps = heterogeneity(facts, w)
        rows = self.catalog.current_calibration(est_name)
        constants, cal_ids = resolve_constants(estimator, rows, w.dataset)
        round_budget = int(min(w.rounds, budgets.get("rounds", math.inf)))
        if isinstance(request.mix_rounds, int) and request.mix_rounds >= round_budget:
            raise ValidationError(f"mix_rounds = {request.mix_rounds} leaves no training round "
                                  f"in a budget of {round_budget} rounds")
        ctx = EstimationContext(n_classes=n_classes, d=d, alpha=alpha, alpha_source=alpha_source,
                                round_budget=round_budget, constants=constants,
                                calibration_ids=cal_ids, privacy_epsilon=privacy_eps,
                                dataset=w.dataset, fitted_range=recorded_range(rows, cal_ids),
                                model=w.model, pilot=request.pilot,
                                step=float(w.lr) * int(w.local_steps),
                                local_steps=int(w.local_steps))
        channel = w.channel_config
        depth, width = dimensions(w.sketch_eps, w.sketch_delta)
        release = choose_release(n_classes, depth, width, w.dp_epsilon,
                                 w.dp_delta if w.dp_epsilon is not None else None)
        startup = float(w.clients * math.ceil(release.cells / 2))

        labels = None
        if not request.topologies or any(FAMILIES.get(f).name == "d_cliques"
                                         for f, _ in request.topologies):
            labels = label_statistics(self.catalog, w, facts)
        specs, too_big = fitting(candidate_specs(self.catalog, request, labels), w)
        unanalysed = [s for s in specs
                      if s.family == "d_cliques" and s.param_dict.get("cliques") is None]
        fc_spec = TopologySpec.fully_connected(w.clients, seed=w.topology_seed)
        built = [s for s in specs if s not in unanalysed]
        all_stats, ids = self.topology_stats(built + ([fc_spec] if fc_spec not in specs else []))
        stats_of = {s.spec: (s, i) for s, i in zip(all_stats, ids)}
        if unanalysed:  # costed on the same graph up to relabelling, never cached
            for spec, (st, _) in zip(unanalysed, describe_many([placeholder(s)
                                                                for s in unanalysed])):
                stats_of[spec] = (st, None)
        fc_plan = PhysicalPlan(fc_spec, 1.0, channel)
        fc_accuracy = (estimator.reference(ctx).fc_accuracy if request.pilot is not None
                       else estimator.accuracy_at(ctx, fc_plan, stats_of[fc_spec][0],
                                                  round_budget))
        target = self._target(request.sla, w, fc_accuracy)

        family_ctx = {}
        if any(r["scope"] == "dataset_family" for r in rows):
            for family in {s.family for s in specs}:
                consts, ids_f = resolve_constants(estimator, rows, w.dataset, family)
                family_ctx[family] = attrs.evolve(ctx, constants=consts, calibration_ids=ids_f,
                                                  fitted_range=recorded_range(rows, ids_f))
        pruning = Pruning(request, fc_accuracy, budgets, round_budget, tuple(unanalysed))
        operators = operator_choices(request, refuser(estimator), round_budget)
        # the plans of consecutive topologies costed in one context are costed in one batch
        # (an estimator that costs many at once computes what they share once: estimate_many),
        # enumerated as the batch consumes them
        plans: list[tuple[PhysicalPlan, TopologyStats, TopologySpec, Any, dict]] = []

        def enumerated(run):
            for i, spec in run:
                self._step(f"costing {i}/{len(specs)}: {spec.label()} [{spec.weights}] x "
                           f"{len(sparsity)} values of k")
                st, tid = stats_of[spec]
                details = clique_details(spec, labels) if spec.family == "d_cliques" else {}
                for k in sparsity:
                    for plan in operators.for_plan(st.spec, k, channel, st):
                        plans.append((plan, st, spec, tid, details))
                        yield plan, st

        estimates: list[Any] = []
        for used, run in itertools.groupby(enumerate(specs, 1),
                                           key=lambda t: family_ctx.get(t[1].family, ctx)):
            items = enumerated(run)
            estimates += estimate_many(estimator, used, items, target)
            if next(items, None) is not None or len(estimates) != len(plans):
                raise PlanningError(f"estimator {est_name} did not return one estimate for "
                                    f"each plan it was given (estimate_many)")
        operators.check()
        ranked = []
        tails: dict[tuple, Any] = {}

        def tail_cost(plan: PhysicalPlan):
            """A round of ``plan``'s tail on the complete graph (``mix_on``), over the same
            transport and channel: the fully connected reference's round."""
            if plan.mix_on is None:
                return None
            key = (plan.transport, plan.bits, plan.channel, plan.k_ratio,
                   plan.effective_algorithm)
            if key not in tails:
                fc_st = stats_of[fc_spec][0]
                tails[key] = round_cost(attrs.evolve(plan, topology=fc_spec, mix_rounds=0,
                                                     mix_on=None), fc_st, d)
            return tails[key]

        for (plan, st, spec, tid, details), est in zip(plans, estimates):
            cost = Cost(est, round_cost(plan, st, d), startup, objective, request.pilot,
                        continues_pilot=_continues(request.pilot, plan), tail=tail_cost(plan))
            if st.spec != spec:  # costed on the placeholder: recorded as requested
                plan, st = attrs.evolve(plan, topology=spec), attrs.evolve(st, spec=spec)
            cand = Candidate(plan=plan, stats=st, cost=cost, topology_id=tid,
                             topology_details=details)
            reason = pruned_reason(cand, pruning)
            ranked.append(((reason is not None,) + cost.sort_key(plan.label()), cand, reason))
        ranked.sort(key=lambda r: r[0])
        candidates: list[Candidate] = [
            Candidate(plan=c.plan, stats=c.stats, cost=c.cost, pruned_reason=reason, rank=rank,
                      topology_id=c.topology_id, topology_details=c.topology_details)
            for rank, (_, c, reason) in enumerate(ranked, 1)]
        feasible = [c for c in candidates if c.feasible]
        warnings: list[str] = list(too_big)
        fallback = not feasible
        if feasible:
            chosen = feasible[0]
        else:
            at = next((i for i, c in enumerate(candidates) if c.plan == fc_plan), None)
            if at is None:
                fc_st, fc_tid = stats_of[fc_spec]
                fc = self._cost(estimator, ctx, fc_plan, fc_st, d, startup, objective, target,
                                request.pilot)
                candidates.append(attrs.evolve(fc, topology_id=fc_tid,
                                               rank=len(candidates) + 1))
                at = len(candidates) - 1
            near = sorted((c for c in candidates if c.pruned_reason is not None),  # rejected
                          key=lambda c: -(c.cost.estimate.accuracy or 0.0))[:3]
            warnings.append(
                "no candidate satisfies all constraints; falling back to the fully connected "
                "uncompressed plan. Nearest candidates: " + "; ".join(
                    f"{c.plan.label()} ({c.pruned_reason})" for c in near))
            # the fallback is chosen in spite of its pruning: it is listed as not pruned
            chosen = candidates[at] = attrs.evolve(candidates[at], pruned_reason=None)
        if chosen.cost.estimate.notes:
            warnings.append(f"the {est_name} estimate of the chosen plan extrapolates beyond "
                            "what it was fitted on: " + "; ".join(chosen.cost.estimate.notes))
        tail = tail_warning(chosen.plan, target, fc_accuracy)
        if tail:
            warnings.append(tail)
        fitted = getattr(estimator, "fitted_metric", None)
        if fitted is not None and fitted != request.sla.accuracy_metric:
            warnings.append(
                f"the {est_name} model is fitted on {_METRIC_WORDS[fitted]} (the SLA metric "
                f"{fitted}); this {request.sla.accuracy_metric} SLA is planned as if it bounded "
                f"that, which is " + ("conservative: the average model reaches a target no "
                                      "later in every run measured, and much sooner on sparse "
                                      "plans" if fitted == "accuracy" else
                                      "optimistic: the clients' own models reach a target no "
                                      "sooner than their average")
                + " (docs/planner.md, The SLA's metric)")
        chance = 1.0 / n_classes if n_classes else 0.0
        if request.pilot is None and request.sla.relative and \
                fc_accuracy < CHANCE_MARGIN * chance:
            warnings.append(
                f"the fully connected reference is predicted at {fc_accuracy:.3g} after the "
                f"{round_budget}-round budget, near or below chance for {n_classes} classes "
                f"({chance:.3g}): an SLA relative to fc asks for next to nothing; give more "
                "rounds, an absolute target (accuracy >= X), or a pilot (WITH (pilot = 'fc'))")
        if alpha_source.startswith("declared") and w.partition == "dirichlet":
            warnings.append("heterogeneity is the declared alpha; run ANALYZE WORKLOAD for "
                            "sketch-based statistics")
        planning_ms = (time.perf_counter() - start) * 1e3
        return PlanResult(request=request, context=ctx, estimator=est_name,
                          objective=objective, chosen=chosen, candidates=tuple(candidates),
                          fc_accuracy=fc_accuracy, target_accuracy=target, fallback=fallback,
                          warnings=tuple(warnings), planning_time_ms=planning_ms,
                          planning_run_id=None)

    @staticmethod
    def _target(sla: SLA, w: Workload, fc_accuracy: float) -> float:
        threshold = sla.accuracy_threshold(fc_accuracy)
        if threshold is not None:
            return float(threshold)
        if w.target_accuracy is not None:
            return float(w.target_accuracy)
        return 0.95 * fc_accuracy

    @staticmethod
    def _cost(estimator, ctx, plan, stats, d, startup, objective, target,
              pilot=None) -> Candidate:
        est = estimator.estimate(ctx, plan, stats, target)
        return Candidate(plan=plan, stats=stats,
                         cost=Cost(est, round_cost(plan, stats, d), startup, objective, pilot,
                                   continues_pilot=_continues(pilot, plan)))


def _continues(pilot, plan) -> bool:
    """Whether ``plan``'s run would continue from the reference pilot's last round."""
    return pilot is not None and pilot.continues(plan)


__all__ = ["MAX_CACHED_EDGES", "Optimizer", "PERIODIC_KEPT"]
