"""The plan space the planner enumerates: topology families and their parameter variants, mixing
rules and sparsity values (the defaults, or the request's restriction), less the topologies
whose planning would not fit in memory; and for each topology and k the physical operators,
transport and algorithm (the request's, or AUTO's: :data:`~airplan_qo.plans.operators.
AUTO_TRANSPORTS` and :data:`~airplan_qo.plans.operators.AUTO_ALGORITHMS`), less the
combinations an exclusion rule or the estimator rules out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import attrs

from ..catalog.store import Catalog
from ..costmodels.features import survival_factor
from ..errors import PlanningError, ValidationError
from ..plans.families import FAMILIES
from ..plans.mixing import WEIGHTS
from ..plans.finish import complete_tail_rounds, tail_rounds
from ..plans.operators import (AUTO_ALGORITHMS, AUTO_TRANSPORTS, DEFAULT_DIGITAL_BITS,
                               EXACT_BITS, MIXING_ONLY, PLAN_ALGORITHMS, PRESETS, canonical,
                               exclusion)
from ..plans.plan import PhysicalPlan
from ..plans.request import PlanRequest
from ..plans.topology import TopologySpec, TopologyStats
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
    presets = [PRESETS[a] for a in request.algorithms or () if a in PRESETS]
    if request.topologies:
        topo = [(FAMILIES.get(f).name, [dict(p)]) for f, p in request.topologies]
    elif presets and len(presets) == len(request.algorithms):
        # only presets named: each plans exactly its own topology
        topo = [(f, [dict(p)]) for f, p in dict.fromkeys(
            (f, tuple(sorted(p.items()))) for f, p in presets)]
    else:
        topo = [(f, parameter_variants(f, w.clients)) for f in DEFAULT_FAMILIES]
        if labels is not None and labels.counts.shape[0] == w.clients \
                and w.clients > labels.counts.shape[1]:
            # the workload's statistics allow D-Cliques (with Clique Averaging) of more
            # than one clique; with one clique it is the complete graph
            topo.append(("d_cliques", [{}]))
        # a preset named beside other algorithms: its topology joins the default ones
        topo += [(f, [dict(p)]) for f, p in presets]
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


def transport_choices(request: PlanRequest) -> list[tuple[str, int]]:
    """The (transport, bits) pairs to plan: the request's (``digital`` without a width at
    :data:`~airplan_qo.plans.operators.DEFAULT_DIGITAL_BITS`), else
    :data:`~airplan_qo.plans.operators.AUTO_TRANSPORTS`."""
    if request.transports is None:
        return list(AUTO_TRANSPORTS)
    out: list[tuple[str, int]] = []
    for name, bits in request.transports:
        if name == "ota":
            out.append(("ota", EXACT_BITS))
        else:
            out += [("digital", b) for b in ((bits,) if bits is not None
                                             else DEFAULT_DIGITAL_BITS)]
    return list(dict.fromkeys(out))


@attrs.frozen
class OperatorChoices:
    """The operators (algorithm, transport, bits) the planner costs for each topology and k,
    and why the combinations it skips were excluded (for the error of an explicit request
    that nothing is left of)."""

    algorithms: tuple[str, ...]
    transports: tuple[tuple[str, int], ...]
    explicit_algorithms: bool
    explicit_transports: bool
    access_point: bool
    local_steps: int
    refuse: Callable[[PhysicalPlan], str | None]
    #: the request's mixing-only tails (``PlanRequest.mix_rounds``) and the round budget
    mix_rounds: str | int = 0
    budget: int = 0
    reasons: dict[str, list[str]] = attrs.field(factory=dict)
    planned: set[str] = attrs.field(factory=set)

    def for_plan(self, spec: TopologySpec, k: float, channel,
                 stats: TopologyStats | None = None) -> list[PhysicalPlan]:
        """The plans to cost for topology ``spec`` at sparsity ``k``. Under AUTO, D-SGD and
        CHOCO are costed only where the default rule runs them (D-SGD at k = 1, CHOCO
        below): such plans are labelled with the rule (``auto``), as before. With mixing-only
        tails asked for, each plan that can run them follows with its tail (``'auto'``: the
        tail its topology needs, from ``stats``; plans/finish.py), or is replaced by its tail
        of the request's fixed number of rounds; ``'auto'`` also plans each D-SGD plan with a
        tail on the complete graph (:meth:`complete_tail`)."""
        out: list[PhysicalPlan] = []
        built: dict[tuple, tuple[PhysicalPlan, str | None]] = {}
        added: set[tuple] = set()
        for alg, transport, bits, name, why in operator_list(
                self.algorithms, self.transports, self.explicit_algorithms, k, spec.family,
                self.access_point, self.local_steps, FAMILIES.get(spec.family).periodic):
            key = (name, transport, bits)
            if why is None:
                if key not in built:
                    plan = PhysicalPlan(spec, k, channel, algorithm=name, transport=transport,
                                        bits=bits)
                    built[key] = (plan, self.refuse(plan))
                plan, why = built[key]
            if why is not None:
                for named in (alg, transport):
                    seen = self.reasons.setdefault(named, [])
                    if why not in seen:
                        seen.append(why)
                continue
            self.planned.update((alg, transport))
            if key not in added:
                added.add(key)
                tail = self.tail(plan, stats)
                tailed = attrs.evolve(plan, mix_rounds=tail) if tail else None
                if tailed is not None and self.refuse(tailed) is not None:
                    tailed = None
                if tailed is None or self.mix_rounds == "auto":
                    out.append(plan)
                if tailed is not None:
                    out.append(tailed)
                on_complete = self.complete_tail(plan)
                if on_complete is not None:
                    out.append(on_complete)
        return out

    def complete_tail(self, plan: PhysicalPlan) -> PhysicalPlan | None:
        """``plan`` with a tail on the complete graph (``'auto'`` tails only; plans/finish.py),
        or None where it has none or the estimator refuses it."""
        if self.mix_rounds != "auto":
            return None
        m = complete_tail_rounds(plan.topology.family, plan.effective_algorithm, self.budget)
        if not m:
            return None
        tailed = attrs.evolve(plan, mix_rounds=m, mix_on="complete")
        return tailed if self.refuse(tailed) is None else None

    def tail(self, plan: PhysicalPlan, stats: TopologyStats | None) -> int:
        """The mixing-only rounds to plan ``plan`` with as well (0: none)."""
        if not self.mix_rounds or plan.effective_algorithm not in MIXING_ONLY:
            return 0
        if self.mix_rounds == "auto":
            if stats is None:
                return 0
            p = stats.spectra.mixing_p * survival_factor(plan, stats)
            return tail_rounds(p, plan.effective_algorithm, self.budget)
        return self.mix_rounds

    def check(self) -> None:
        """ValidationError when an algorithm or transport the request names explicitly has no
        plan left: the reason of the rule that excluded it."""
        named = ([a for a in self.algorithms if self.explicit_algorithms]
                 + [t for t in dict.fromkeys(t for t, _ in self.transports)
                    if self.explicit_transports])
        for name in named:
            if name not in self.planned:
                what = "ALGORITHM" if name in PLAN_ALGORITHMS else "TRANSPORT"
                why = "; ".join(self.reasons.get(name) or ["no plan to cost"])
                raise ValidationError(f"USING {what} {name}: {why}")


@functools.lru_cache(maxsize=1024)
def operator_list(algorithms: tuple[str, ...], transports: tuple[tuple[str, int], ...],
                  explicit_algorithms: bool, k: float, family: str, access_point: bool,
                  local_steps: int, periodic: bool
                  ) -> tuple[tuple[str, str, int, str, str | None], ...]:
    """The operator combinations of one topology family and k, in the order they are planned:
    (algorithm as asked, transport, bits, the plan's algorithm name, the exclusion rule's
    reason or None). Under AUTO (``explicit_algorithms`` false), D-SGD and CHOCO are asked as
    the default rule (``auto``). A pure function, kept for the process."""
    if not explicit_algorithms:
        # AUTO: the default rule covers dsgd and choco (each where it runs)
        ruled = [a for a in algorithms if a in ("dsgd", "choco")]
        algorithms = (("auto",) if ruled else ()) + tuple(
            a for a in algorithms if a not in ruled)
    return tuple(
        (alg, transport, bits, canonical(alg, k),
         exclusion(alg, transport, bits=bits, k_ratio=k, family=family,
                   access_point=access_point, local_steps=local_steps, periodic=periodic))
        for alg in algorithms for transport, bits in transports)


def operator_choices(request: PlanRequest, refuse: Callable[[PhysicalPlan], str | None],
                     budget: int = 0) -> OperatorChoices:
    """The request's algorithms and transports (AUTO: :data:`AUTO_ALGORITHMS` and
    :data:`AUTO_TRANSPORTS`) and mixing-only tails; ``refuse`` gives the estimator's reason
    not to cost a plan; ``budget``: the round budget the tails end."""
    return OperatorChoices(
        algorithms=tuple(request.algorithms or AUTO_ALGORITHMS),
        transports=tuple(transport_choices(request)),
        explicit_algorithms=request.algorithms is not None,
        explicit_transports=request.transports is not None,
        access_point=bool(request.workload.access_point),
        local_steps=int(request.workload.local_steps), refuse=refuse,
        mix_rounds=request.mix_rounds, budget=int(budget))


__all__ = ["DEFAULT_FAMILIES", "OperatorChoices", "PLANNED_WEIGHTS", "candidate_specs",
           "fitting", "operator_choices", "operator_list", "parameter_variants",
           "transport_choices"]
