"""Mid-run monitoring and re-optimisation: the paper's Phase 4, plus a prediction-based trigger.

A :class:`Monitor` is fed one round row at a time (the ``round_stats`` keys) and answers a
:class:`Trigger` or None. Two triggers, each firing at most once per plan:

* ``consensus_distance`` (the paper's): the consensus distance exceeds ``factor`` (3) times its
  value at round ``reference_round`` (10) of the plan;
* ``prediction``: the observed error (1 - test accuracy) stays above the estimator's upper error
  band (its lower accuracy curve) for ``patience`` consecutive evaluated rounds, checked from
  round ``warmup`` of the plan on.

The monitor also keeps running means of the observed client dropout and link-drop rates.

A :class:`Reoptimizer` acts on a trigger during an execution: it re-plans the same workload with
the observed statistics (dropout, and the link-drop rate as an effective truncation threshold
g_th = -ln(1 - drop)), restricted to better plans (static mixing p at least the current one,
at the same k on another topology or at a larger k), rewires the trainer (new topology and W,
and the new k when it rose; every client model kept) and records the event in
``reoptimizations``. After a
rewiring the monitor re-arms with the new plan's prediction, shifted in time to the accuracy
already reached; at most ``max_replans`` re-plans happen per run.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping, Sequence

import attrs
import numpy as np

from ..catalog.store import Catalog
from ..errors import AirPlanError, ExecutionError, ValidationError
from ..plans.families import FAMILIES
from ..plans.topology import TopologySpec, build, describe

__all__ = ["MonitorConfig", "Trigger", "PredictedCurve", "Monitor", "Event", "Reoptimizer",
           "TRIGGERS", "observed_workload", "request_to_json", "request_from_json",
           "spec_from_plan_row"]

TRIGGERS = ("consensus_distance", "prediction")
_MAX_DROPOUT = 0.95


def _positive_int(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValidationError(f"{attr.name} must be a positive integer, got {value!r}")


def _factor(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValidationError(f"{attr.name} must be a positive number, got {value!r}")


def _triggers(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    unknown = [t for t in value if t not in TRIGGERS]
    if unknown:
        raise ValidationError(f"unknown trigger {unknown[0]!r}; use {', '.join(TRIGGERS)}")


@attrs.frozen
class MonitorConfig:
    """Thresholds of the two triggers and the re-plan cap (defaults: the paper's 3 x round 10)."""

    factor: float = attrs.field(default=3.0, validator=_factor)
    reference_round: int = attrs.field(default=10, validator=_positive_int)
    patience: int = attrs.field(default=3, validator=_positive_int)
    warmup: int = attrs.field(default=10, validator=_positive_int)
    max_replans: int = attrs.field(default=2, validator=attrs.validators.instance_of(int))
    triggers: tuple[str, ...] = attrs.field(default=TRIGGERS, converter=tuple,
                                            validator=_triggers)

    def as_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["triggers"] = list(self.triggers)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MonitorConfig":
        return cls(**{k: v for k, v in d.items() if k in attrs.fields_dict(cls)})


@attrs.frozen
class Trigger:
    """Why the monitor fired: ``kind`` (one of :data:`TRIGGERS`), the round, and a sentence."""

    kind: str
    round: int
    detail: str


def _interp(curve: Sequence[float], t: float) -> float:
    """curve[i] is the value after i + 1 rounds; linear in between, flat beyond the ends."""
    if not curve:
        return float("nan")
    x = min(max(t, 1.0), float(len(curve)))
    i = int(math.floor(x))
    if i >= len(curve):
        return float(curve[-1])
    frac = x - i
    return float(curve[i - 1]) * (1.0 - frac) + float(curve[i]) * frac


@attrs.frozen
class PredictedCurve:
    """A plan's predicted accuracy curve and its lower band, aligned with the run's rounds.

    ``accuracy[i]`` / ``accuracy_lo[i]``: predicted after i + 1 rounds of the plan. The plan
    took over at run round ``start`` where, in its own time, it stood at round ``offset`` (0 for
    the plan a run starts with; after a rewiring, the round at which the new plan's curve reaches
    the accuracy already observed).
    """

    accuracy: tuple[float, ...] = attrs.field(converter=tuple)
    accuracy_lo: tuple[float, ...] = attrs.field(converter=tuple)
    start: int = 0
    offset: float = 0.0

    @classmethod
    def from_basis(cls, basis: Mapping[str, Any], *, start: int = 0,
                   observed_accuracy: float | None = None) -> "PredictedCurve":
        curve = tuple(float(a) for a in basis.get("accuracy_curve") or ())
        lo = tuple(float(a) for a in basis.get("accuracy_curve_lo") or curve)
        offset = 0.0
        if start > 0 and observed_accuracy is not None and curve:
            reached = [i + 1 for i, a in enumerate(curve) if a >= observed_accuracy]
            offset = float(reached[0] if reached else len(curve))
        return cls(curve, lo, start, offset)

    def at(self, round_: int) -> tuple[float, float]:
        """(predicted accuracy, lower band) at run round ``round_``."""
        t = self.offset + (round_ - self.start)
        return _interp(self.accuracy, t), _interp(self.accuracy_lo, t)


class Monitor:
    """Compares a run's rows with the plan's prediction; see the module docstring."""

    def __init__(self, prediction: PredictedCurve | None, config: MonitorConfig | None = None):
        self.config = config or MonitorConfig()
        self.prediction = prediction
        self.start = 0
        self.armed = True
        self.fired = 0
        self.reference: float | None = None
        self._reference_round = 0
        self.streak = 0
        self.last_accuracy: float | None = None
        self._n = 0
        self._dropout = 0.0
        self._drop = 0.0
        self._drop_n = 0

    # ---- observation -------------------------------------------------------------------------

    def observe(self, row: Mapping[str, Any]) -> Trigger | None:
        """Feed one round; returns the trigger that fired, or None."""
        self._track(row)
        if not self.armed or self.fired >= self.config.max_replans:
            return None
        r = int(row["round"])
        rel = r - self.start
        trig = None
        if "consensus_distance" in self.config.triggers:
            trig = self._consensus(row, r, rel)
        if trig is None and "prediction" in self.config.triggers:
            trig = self._prediction(row, r, rel)
        if trig is not None:
            self.armed = False
            self.fired += 1
        return trig

    def _track(self, row: Mapping[str, Any]) -> None:
        self._n += 1
        d = row.get("dropout_rate")
        if d is not None and math.isfinite(d):
            self._dropout += (float(d) - self._dropout) / self._n
        drop = row.get("link_drop_rate")
        if drop is not None and math.isfinite(drop):
            self._drop_n += 1
            self._drop += (float(drop) - self._drop) / self._drop_n
        acc = row.get("client_acc_mean")
        if acc is not None and math.isfinite(acc):
            self.last_accuracy = float(acc)

    def _consensus(self, row: Mapping[str, Any], r: int, rel: int) -> Trigger | None:
        cfg = self.config
        cd = row.get("consensus_distance")
        if cd is None or not math.isfinite(cd):
            return None
        if rel < cfg.reference_round:
            return None
        if self.reference is None:
            self.reference = float(cd)
            self._reference_round = r
            return None
        if self.reference > 0 and cd > cfg.factor * self.reference:
            return Trigger("consensus_distance", r,
                           f"consensus_distance {cd:.3g} > {cfg.factor:g} x {self.reference:.3g} "
                           f"at round {self._reference_round}")
        return None

    def _prediction(self, row: Mapping[str, Any], r: int, rel: int) -> Trigger | None:
        acc = row.get("client_acc_mean")
        if self.prediction is None or acc is None or not math.isfinite(acc):
            return None
        if rel < self.config.warmup:
            return None
        predicted, lo = self.prediction.at(r)
        if not math.isfinite(lo):
            return None
        err, band = 1.0 - float(acc), 1.0 - lo
        self.streak = self.streak + 1 if err > band else 0
        if self.streak >= self.config.patience:
            return Trigger("prediction", r,
                           f"error {err:.3f} above the predicted band {band:.3f} (predicted "
                           f"{1.0 - predicted:.3f}) for {self.streak} evaluated rounds")
        return None

    # ---- state -------------------------------------------------------------------------------

    def rearm(self, prediction: PredictedCurve | None, start: int) -> None:
        """Watch a new plan that took over at run round ``start``."""
        self.prediction = prediction
        self.start = int(start)
        self.armed = True
        self.reference = None
        self.streak = 0

    def observed(self) -> dict[str, Any]:
        """Running statistics of the run so far (what a re-plan uses)."""
        return {"rounds": self._n, "dropout_rate": self._dropout if self._n else None,
                "link_drop_rate": self._drop if self._drop_n else None,
                "test_accuracy": self.last_accuracy}


# ---- re-planning -----------------------------------------------------------------------------

def observed_workload(workload: Any, observed: Mapping[str, Any]) -> Any:
    """The workload with the observed client dropout and link-drop rate (as the truncation
    threshold that explains it, drop = 1 - exp(-g_th)); SNR and the rest unchanged."""
    changes: dict[str, Any] = {}
    d = observed.get("dropout_rate")
    if d is not None:
        changes["dropout"] = float(min(max(d, 0.0), _MAX_DROPOUT))
    drop = observed.get("link_drop_rate")
    if workload.channel == "ota" and drop is not None and 0.0 < drop < 1.0:
        changes["g_th"] = float(-math.log1p(-drop))
    return attrs.evolve(workload, **changes) if changes else workload


def request_to_json(request: Any) -> dict[str, Any] | None:
    """What a resumed run needs to re-plan like the original request (None when the request
    holds values JSON cannot carry, e.g. a user-supplied graph)."""
    doc = {"sla": request.sla.render(),
           "topologies": ([[f, dict(p)] for f, p in request.topologies]
                          if request.topologies else None),
           "weights": list(request.weights) if request.weights else None,
           "sparsity": list(request.sparsity) if request.sparsity else None,
           "transports": ([list(t) for t in request.transports]
                          if request.transports else None),
           "algorithms": list(request.algorithms) if request.algorithms else None,
           "budgets": [[k, v] for k, v in request.budgets],
           "estimator": request.estimator, "objective": request.objective,
           "statement": request.statement, "confidence": request.confidence}
    try:
        json.dumps(doc)
    except (TypeError, ValueError):
        return None
    return doc


def request_from_json(doc: Mapping[str, Any], workload: Any) -> Any:
    """The PlanRequest stored by :func:`request_to_json`, for ``workload``."""
    from ..plans.request import DEFAULT_CONFIDENCE, PlanRequest
    from ..plans.sla import SLA, parse_sla

    return PlanRequest(
        workload=workload, sla=parse_sla(doc["sla"]) if doc.get("sla") else SLA(()),
        topologies=(tuple((f, tuple(sorted(p.items()))) for f, p in doc["topologies"])
                    if doc.get("topologies") else None),
        weights=tuple(doc["weights"]) if doc.get("weights") else None,
        sparsity=tuple(doc["sparsity"]) if doc.get("sparsity") else None,
        transports=([tuple(t) for t in doc["transports"]] if doc.get("transports") else None),
        algorithms=doc.get("algorithms") or None,
        budgets=tuple((k, v) for k, v in doc.get("budgets") or ()),
        estimator=doc.get("estimator"), objective=doc.get("objective"),
        statement=doc.get("statement") or "",
        confidence=float(doc.get("confidence") or DEFAULT_CONFIDENCE))


def plan_mixing_p(catalog: Catalog, row: Mapping[str, Any], spec: TopologySpec) -> float:
    """The mixing p the planner saw for a recorded plan: its cached topology's, or recomputed
    for a topology the cache does not hold (a periodic one); 0 when neither is known."""
    if row.get("topology_id") is not None:
        found = catalog.query("SELECT mixing_p FROM airplan.topologies WHERE topology_id = ?",
                              [row["topology_id"]])
        if found and found[0]["mixing_p"] is not None:
            return float(found[0]["mixing_p"])
    if spec.periodic:
        return float(describe(spec)[1].spectra.mixing_p)
    return 0.0


def spec_from_plan_row(row: Mapping[str, Any], n: int) -> TopologySpec:
    """The topology of a ``plans`` row."""
    params = row["topology_params"]
    params = json.loads(params) if isinstance(params, str) else dict(params or {})
    return TopologySpec.create(row["family"], n, seed=row["topology_seed"],
                               weights=row["weights_rule"], **params)


def _label(spec: TopologySpec) -> str:
    return f"{spec.label()} [{spec.weights}]"


@attrs.frozen
class _InForce:
    """The plan a run is executing now."""

    plan_id: int | None
    spec: TopologySpec
    k_ratio: float
    mixing_p: float


@attrs.frozen
class Event:
    """One recorded re-optimisation (a ``reoptimizations`` row) and its EXPLAIN line."""

    event_id: int
    round: int
    trigger: str
    text: str
    old_plan_id: int | None
    new_plan_id: int | None
    planning_run_id: int | None
    observed: dict[str, Any]


def _transport_of(config: Any) -> tuple[str, int | None]:
    """The (transport, bits) a running configuration uses, as a request names it (over the
    air without bits)."""
    return (config.transport, config.bits if config.transport == "digital" else None)


class Reoptimizer:
    """Monitors an execution and re-plans, rewires and records on a trigger.

    ``request`` is the planning request of the plan being executed and ``planner`` plans a
    request (a PlanRequest to a PlanResult, recorded in the catalog: the session hands in its
    optimizer's ``plan``); without either the monitor only monitors and records, never re-plans.
    ``plan_id``, ``spec``, ``k_ratio`` and ``mixing_p`` describe the plan being executed.
    """

    def __init__(self, catalog: Catalog, exec_id: int, request: Any, *, plan_id: int | None,
                 spec: TopologySpec, k_ratio: float, mixing_p: float,
                 basis: Mapping[str, Any] | None, config: MonitorConfig | None = None,
                 planner: Callable[[Any], Any] | None = None):
        self.catalog = catalog
        self.exec_id = exec_id
        self.request = request
        self.planner = planner
        self.config = config or MonitorConfig()
        self.monitor = Monitor(PredictedCurve.from_basis(basis) if basis else None, self.config)
        self.current = _InForce(plan_id, spec, float(k_ratio), float(mixing_p))
        self.events: list[Event] = []

    @property
    def rewired(self) -> bool:
        return any(e.new_plan_id is not None for e in self.events)

    def after_round(self, row: Mapping[str, Any], trainer: Any) -> Event | None:
        """Feed one round; on a trigger re-plan, rewire ``trainer`` and record the event.
        Nothing happens from the round before the plan's mixing-only tail on (its rounds only
        mix, on the topology the plan chose for them) and at the run's last round (there is no
        round left to rewire for)."""
        trig = self.monitor.observe(row)
        cfg = trainer.config
        if trig is None or int(row["round"]) >= cfg.rounds - cfg.mix_rounds:
            return None
        observed = dict(self.monitor.observed(),
                        consensus_distance=row.get("consensus_distance"),
                        consensus_reference=self.monitor.reference)
        old = self.current
        cand, result, note = self._replan(trig, observed, trainer.config)
        new_plan_id = None
        basis = None
        if cand is not None:
            from .feedback import feedback_basis

            chosen = attrs.evolve(result, chosen=cand)
            basis = feedback_basis(chosen)
            trainer.rewire(build(cand.plan.topology), k_ratio=cand.plan.k_ratio)
            new_plan_id = cand.plan_id
            self.current = _InForce(cand.plan_id, cand.plan.topology, cand.plan.k_ratio,
                                    cand.stats.spectra.mixing_p)
            self.monitor.rearm(PredictedCurve.from_basis(
                basis, start=trig.round, observed_accuracy=self.monitor.last_accuracy),
                trig.round)
            note = f"rewired {_label(old.spec)} -> {_label(cand.plan.topology)}"
            if cand.plan.k_ratio != old.k_ratio:
                note += f", k {old.k_ratio:g} -> {cand.plan.k_ratio:g}"
            observed["new_plan_estimate"] = {"rounds": cand.cost.rounds,
                                             "accuracy": cand.cost.estimate.accuracy}
        if self.request is not None:
            observed["snr_db"] = self.request.workload.snr_db
        if result is not None:
            w = result.request.workload
            observed.update(planned_dropout=w.dropout, planned_g_th=w.g_th)
        text = f"round {trig.round}: {trig.detail}; {note}"
        event = self._record(trig, text, old.plan_id, new_plan_id,
                             result.planning_run_id if result is not None else None, observed,
                             basis)
        self.events.append(event)
        return event

    def _replan(self, trig: Trigger, observed: Mapping[str, Any], config: Any):
        """(candidate to rewire to or None, the planning result or None, a note). A run
        rewires its topology and k only: the new plan keeps the run's transport, algorithm and
        mixing-only tail (``config``, the trainer's RunConfig), so no tail is planned."""
        cur = self.current
        if self.request is None or self.planner is None:
            return None, None, f"re-planning unavailable; kept {_label(cur.spec)}"
        from ..plans.request import DEFAULT_SPARSITY

        # a better-connected topology at the same k, or at least as well connected at a larger k
        ks = tuple(k for k in (self.request.sparsity or DEFAULT_SPARSITY) if k >= cur.k_ratio)
        if cur.mixing_p >= 1.0 - 1e-12 and max(ks, default=0.0) <= cur.k_ratio:
            return None, None, (f"no better plan: {_label(cur.spec)} is fully connected and "
                                f"uncompressed as far as the plan space allows")
        req = attrs.evolve(
            self.request, workload=observed_workload(self.request.workload, observed),
            sparsity=ks or (cur.k_ratio,), min_mixing_p=cur.mixing_p,
            transports=(_transport_of(config),),
            algorithms=(config.algorithm,), mix_rounds=0,
            # the current topology stays a candidate only where it can run with a larger k
            exclude_topologies=() if max(ks, default=0.0) > cur.k_ratio else (cur.spec,),
            statement=(f"re-optimisation of execution {self.exec_id} at round {trig.round} "
                       f"({trig.kind} trigger)"))
        try:
            result = self.planner(req)
        except AirPlanError as exc:
            return None, None, f"re-planning failed ({exc}); kept {_label(cur.spec)}"
        cand = _pick(result, cur)
        if cand is None:
            return None, result, f"no better-connected plan; kept {_label(cur.spec)}"
        return cand, result, ""

    def _record(self, trig: Trigger, text: str, old_plan_id: int | None,
                new_plan_id: int | None, planning_run_id: int | None,
                observed: dict[str, Any], basis: Mapping[str, Any] | None) -> Event:
        observed = _jsonable(observed)
        row = {"exec_id": self.exec_id, "round": trig.round, "trigger": trig.kind,
               "detail": text, "old_plan_id": old_plan_id, "new_plan_id": new_plan_id,
               "planning_run_id": planning_run_id, "observed": observed}
        with self.catalog.transaction():
            same = self.catalog.query(
                "SELECT event_id FROM airplan.reoptimizations WHERE exec_id = ? AND round = ? "
                "AND trigger = ?", [self.exec_id, trig.round, trig.kind])
            if same:
                event_id = int(same[0]["event_id"])
                self.catalog.update_row("reoptimizations", event_id,
                                        {k: v for k, v in row.items() if k != "exec_id"})
            else:
                event_id = int(self.catalog.insert_row("reoptimizations", row))
            if basis is not None:
                self._store_basis(event_id, basis)
        return Event(event_id, trig.round, trig.kind, text, old_plan_id, new_plan_id,
                     planning_run_id, observed)

    def _store_basis(self, event_id: int, basis: Mapping[str, Any]) -> None:
        """Keep the new plan's prediction with the execution, for a resumed run's monitor."""
        rows = self.catalog.query("SELECT options FROM airplan.executions WHERE exec_id = ?",
                                  [self.exec_id])
        if not rows:
            return
        options = rows[0]["options"]
        options = json.loads(options) if isinstance(options, str) else dict(options or {})
        section = options.setdefault("reoptimization", {})
        section.setdefault("bases", {})[str(event_id)] = _jsonable(dict(basis))
        self.catalog.update_row("executions", self.exec_id,
                                {"options": json.dumps(options, sort_keys=True)})

    # ---- resuming ----------------------------------------------------------------------------

    def restore(self, trainer: Any, state: Mapping[str, Any],
                bases: Mapping[str, Any] | None = None) -> None:
        """Bring a resumed run to where the checkpoint ``state`` left it: rewire ``trainer`` to
        the topology in force at the checkpoint and replay the monitor over the checkpointed
        history (deterministic, so it fires where the original run fired and takes the recorded
        outcome of each event)."""
        ckpt_round = int(state["round"])
        events = self.catalog.query(
            "SELECT event_id, round, trigger, detail, old_plan_id, new_plan_id, planning_run_id, "
            "observed FROM airplan.reoptimizations WHERE exec_id = ? AND round <= ? "
            "ORDER BY round, event_id", [self.exec_id, ckpt_round])
        by_round = {int(e["round"]): e for e in events}
        bases = dict(bases or {})
        n = trainer.n
        for row in state.get("history") or ():
            trig = self.monitor.observe(row)
            if trig is None:
                continue
            ev = by_round.get(trig.round)
            if ev is None:
                continue
            observed = ev["observed"]
            observed = json.loads(observed) if isinstance(observed, str) else dict(observed or {})
            self.events.append(Event(int(ev["event_id"]), int(ev["round"]), ev["trigger"],
                                     ev["detail"] or "", ev["old_plan_id"], ev["new_plan_id"],
                                     ev["planning_run_id"], observed))
            if ev["new_plan_id"] is None:
                continue
            plan_row = self.catalog.query("SELECT * FROM airplan.plans WHERE plan_id = ?",
                                          [ev["new_plan_id"]])[0]
            spec = spec_from_plan_row(plan_row, n)
            p = plan_mixing_p(self.catalog, plan_row, spec)
            self.current = _InForce(int(ev["new_plan_id"]), spec, float(plan_row["k_ratio"]),
                                    float(p))
            basis = bases.get(str(ev["event_id"]))
            self.monitor.rearm(PredictedCurve.from_basis(
                basis, start=trig.round, observed_accuracy=self.monitor.last_accuracy)
                if basis else None, trig.round)
        if self.rewired:
            trainer.rewire(build(self.current.spec), k_ratio=self.current.k_ratio)
        if trainer.checkpoint_in_tail(state):     # written on the tail's topology
            trainer.enter_tail()
        from .checkpoint import same_schedule

        if not same_schedule(trainer, state):
            raise ExecutionError(
                f"execution {self.exec_id}: the checkpoint's topology does not match the plan "
                f"in force at round {ckpt_round} ({_label(self.current.spec)}) recorded in "
                f"reoptimizations")


def _pick(result: Any, cur: _InForce):
    """The candidate to rewire to: the chosen plan when it is better (a better-connected
    topology at the same k, or one at least as well connected at a larger k), else the
    best-ranked such candidate inside the connectivity restriction (when nothing meets the SLA,
    the one nearest to it). The planner's fully connected fallback counts only when the
    request's topologies allow it."""
    requested = result.request.topologies
    families = None if requested is None else {FAMILIES.get(f).name for f, _ in requested}

    def ok(c: Any) -> bool:
        if result.fallback and c is result.chosen and families is not None \
                and c.plan.topology.family not in families:
            return False
        better = (c.plan.k_ratio > cur.k_ratio
                  or (c.plan.k_ratio == cur.k_ratio and c.plan.topology != cur.spec))
        return (better and not (c.pruned_reason or "").startswith("connectivity")
                and c.stats.spectra.mixing_p >= cur.mixing_p * (1.0 - 1e-9)
                and c.plan_id is not None)

    if ok(result.chosen):
        return result.chosen
    return next((c for c in result.candidates if ok(c)), None)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
