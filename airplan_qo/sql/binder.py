"""Binder: resolve a parsed statement's names and values against the registries.

Parsing checks the shape of a statement; binding checks what it names: the dataset, workload
parameters, topology families and their parameters, mixing-weights rules, sparsity ratios, the
SLA, budgets, the objective (MINIMIZE), the cost estimator and EXPLAIN options. Every problem is
a ``BindError`` pointing at the offending name or value in the original text, with a "did you
mean" hint for names.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs
from sqlglot import exp

from ..data.datasets import DATASETS
from ..errors import BindError, UnknownNameError, ValidationError
from ..plans.families import FAMILIES
from ..plans.mixing import WEIGHTS
from ..plans.operators import (AUTO_TRANSPORTS, EXACT_BITS, check_algorithm, check_bits,
                               check_transport, exclusion)
from ..plans.plan import OBJECTIVES
from ..plans.sla import DEFAULT_SLA, SLA, SLAError, sla_from_expression, sla_with_target
from ..plans.workload import NOT_SETTINGS, WORKLOAD_PARAMS, Workload, coerce_param
from ..registry import suggest
from ..runtime.device import check_device
from .dialect import node_offset
from .expressions import AnalyzeWorkload, ExplainTrain, Statement, Train
from .positions import Source

DEFAULT_ESTIMATORS: tuple[str, ...] = ("paper", "dsgd")
"""Estimator names accepted when the estimator registry cannot be imported."""

_INT_TEXT = re.compile(r"-?[0-9]+\Z")
#: WITH keys that are execution options, not workload parameters: they say how a TRAIN runs,
#: not what is planned, so they stay out of the Workload (and of every key derived from it).
EXECUTION_OPTIONS = ("device",)
#: WITH keys that are planning options: a pilot of the fully connected reference trained
#: before the choice (``pilot = 'fc'``, ``pilot_rounds = R``; plans/pilot.py).
PLANNING_OPTIONS = ("pilot", "pilot_rounds", "mix_rounds")
_PARAM_IN_MESSAGE = re.compile(r"parameter '([^']+)'")


@attrs.frozen
class ExplainOptions:
    """EXPLAIN options with their defaults (see docs/sql.md)."""

    verbose: bool = False
    costs: bool = True
    format: str = "text"
    alternatives: int = 0
    calibrate: bool = False


@attrs.frozen
class BoundTrain:
    """A bound EXPLAIN [ANALYZE] TRAIN or TRAIN statement: everything the planner needs."""

    workload: Workload
    explain: bool = False
    analyze: bool = False
    options: ExplainOptions = ExplainOptions()
    topologies: tuple[tuple[str, dict[str, Any]], ...] | None = None
    weights: tuple[str, ...] | None = None
    sparsity: tuple[float, ...] | None = None
    #: ``USING TRANSPORT``: (name, bits or None for the default widths); None = AUTO
    transports: tuple[tuple[str, int | None], ...] | None = None
    #: ``USING ALGORITHM``: algorithm names; None = AUTO
    algorithms: tuple[str, ...] | None = None
    sla: SLA = DEFAULT_SLA
    confidence: float | None = None
    budgets: dict[str, float] = attrs.field(factory=dict)
    estimator: str | None = None
    text: str = ""
    #: ``WITH (device = ...)``, normalised (None: the session's default).
    device: str | None = None
    #: ``FALLBACK AUTO | COMPLETE | ERROR`` in lower case (None: not given).
    fallback: str | None = None
    #: ``WITH (pilot = 'fc', pilot_rounds = R)`` (None: no pilot; rounds None: the default).
    pilot: str | None = None
    pilot_rounds: int | None = None
    #: ``WITH (mix_rounds = 'auto' | m | 'off')``: mixing-only tails planned beside each plan
    #: (plans/finish.py); 0: none; None: the planner's default
    mix_rounds: str | int | None = None
    #: ``MINIMIZE metric`` (None: the planner's default, channel uses; ``c_ours`` with
    #: ``COST MODEL paper``)
    objective: str | None = None

    def plan_options(self) -> dict[str, Any]:
        """The pilot and tail keywords of ``Session.plan`` this statement asks for (the pilot
        trains on the statement's device; ``mix_rounds`` None: the planner's default)."""
        out: dict[str, Any] = {} if self.pilot is None else {
            "pilot": self.pilot, "pilot_rounds": self.pilot_rounds, "device": self.device}
        out["mix_rounds"] = self.mix_rounds
        return out

    @property
    def runs_training(self) -> bool:
        """TRAIN and EXPLAIN ANALYZE train; plain EXPLAIN only plans."""
        return self.analyze or not self.explain


@attrs.frozen
class BoundAnalyze:
    """A bound ANALYZE WORKLOAD statement: collect statistics for this workload."""

    workload: Workload
    text: str = ""


class _Binder:
    """Binding state for one statement: its source text, for positioned errors."""

    def __init__(self, root: Statement):
        self.root = root
        self.source = Source(root.source_text)
        self.fallback = root.meta.get("stmt_start", 0)
        #: execution options found in the WITH clause (see EXECUTION_OPTIONS)
        self.execution: dict[str, Any] = {}
        #: planning options found in the WITH clause (see PLANNING_OPTIONS), with their nodes
        self.planning: dict[str, tuple[Any, exp.Expr]] = {}

    def error(self, message: str, node: exp.Expr | None, operator: bool = False) -> BindError:
        offset = node_offset(node, operator) if node is not None else None
        return self.source.error(BindError, message,
                                 self.fallback if offset is None else offset)

    @staticmethod
    def value(node: exp.Expr) -> Any:
        """The Python value of a literal node."""
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return str(node.this)
            text = str(node.this)
            return int(text) if _INT_TEXT.match(text) else float(text)
        raise ValidationError(f"expected a literal, got {node.sql()}")

    def workload(self, stmt: Train | AnalyzeWorkload) -> Workload:
        ident = stmt.this
        name = str(ident.this).lower()
        try:
            DATASETS.get(name)
        except UnknownNameError as e:
            raise self.error(str(e), ident) from None
        clients_node = stmt.args["clients"]
        clients = int(clients_node.this)
        if clients < 2:
            raise self.error(f"number of clients must be an integer >= 2, got {clients}",
                             clients_node)
        params: dict[str, Any] = {}
        clause = stmt.args.get("params")
        for setting in clause.expressions if clause else []:
            key = str(setting.this.this).lower()
            if key in EXECUTION_OPTIONS:
                if isinstance(stmt, AnalyzeWorkload):
                    raise self.error(f"'{key}' is an execution option of TRAIN and EXPLAIN "
                                     "ANALYZE TRAIN; ANALYZE WORKLOAD does not train",
                                     setting.this)
                try:
                    self.execution[key] = check_device(self.value(setting.expression))
                except ValidationError as e:
                    raise self.error(str(e), setting.expression) from None
                continue
            if key in PLANNING_OPTIONS:
                if isinstance(stmt, AnalyzeWorkload):
                    raise self.error(f"'{key}' is a planning option of TRAIN and EXPLAIN TRAIN; "
                                     "ANALYZE WORKLOAD does not plan", setting.this)
                self.planning[key] = (self.value(setting.expression), setting)
                continue
            if key in NOT_SETTINGS:
                raise self.error(f"'{key}' is not a workload setting: {NOT_SETTINGS[key]}",
                                 setting.this)
            if key not in WORKLOAD_PARAMS:
                known = [*WORKLOAD_PARAMS, *EXECUTION_OPTIONS, *PLANNING_OPTIONS]
                raise self.error(f"unknown parameter '{key}'{suggest(key, known)}"
                                 f"; known: {', '.join(sorted(known))}", setting.this)
            try:
                value = coerce_param(key, self.value(setting.expression))
                if key == "weights":
                    value = _canonical(WEIGHTS, value)
            except ValidationError as e:
                raise self.error(str(e), setting.expression) from None
            params[key] = value
        try:
            return Workload.from_params(name, clients, params)
        except ValidationError as e:
            raise self.error(str(e), clause if clause is not None else stmt) from None

    def pilot(self, estimator: str | None) -> tuple[str | None, int | None]:
        """``WITH (pilot = 'fc', pilot_rounds = R)``: (kind, rounds), (None, None) without."""
        from ..plans.pilot import check_pilot

        kind = self.planning.get("pilot")
        rounds = self.planning.get("pilot_rounds")
        if kind is None:
            if rounds is not None:
                raise self.error("pilot_rounds needs a pilot: WITH (pilot = 'fc', "
                                 "pilot_rounds = ...)", rounds[1].this)
            return None, None
        try:
            check_pilot(kind[0])
        except ValidationError as e:
            raise self.error(str(e), kind[1].expression) from None
        if rounds is not None:
            try:
                check_pilot(kind[0], rounds[0])
            except ValidationError as e:
                raise self.error(str(e), rounds[1].expression) from None
        if estimator is not None and estimator != "ttt":
            raise self.error(f"a pilot of the fully connected reference feeds the ttt "
                             f"estimator; COST MODEL {estimator} does not use it",
                             kind[1].this)
        return str(kind[0]).lower(), None if rounds is None else int(rounds[0])

    def mix_rounds(self, estimator: str | None) -> str | int | None:
        """``WITH (mix_rounds = 'auto' | m | 'off')``: the mixing-only tails to plan; None
        without it (the planner's default: ``'auto'`` where the cost model costs them)."""
        from ..plans.request import check_mix_rounds

        given = self.planning.get("mix_rounds")
        if given is None:
            return None
        try:
            value = check_mix_rounds(given[0])
        except ValidationError as e:
            raise self.error(str(e), given[1].expression) from None
        if value and estimator is not None and estimator != "ttt":
            raise self.error(f"mix_rounds: COST MODEL {estimator} does not model mixing-only "
                             f"rounds; COST MODEL ttt does", given[1].this)
        return value

    def topologies(self, stmt: Train, clients: int):
        clause = stmt.args.get("topology")
        if clause is None or clause.args.get("auto"):
            return None
        out = []
        for spec in clause.expressions:
            try:
                family = FAMILIES.get(str(spec.this.this))
            except UnknownNameError as e:
                raise self.error(str(e), spec.this) from None
            known = [p.name for p in family.params]
            given: dict[str, Any] = {}
            nodes: dict[str, exp.Expr] = {}
            for setting in spec.expressions:
                key = str(setting.this.this).lower()
                if key not in known:
                    allowed = ", ".join(known) or "none"
                    raise self.error(f"unknown parameter '{key}' for topology '{family.name}'"
                                     f"{suggest(key, known)}; allowed: {allowed}", setting.this)
                given[key] = self.value(setting.expression)
                nodes[key] = setting.expression
            try:
                resolved = family.resolve(clients, given)
            except ValidationError as e:
                match = _PARAM_IN_MESSAGE.search(str(e))
                node = nodes.get(match.group(1)) if match else None
                raise self.error(str(e), node if node is not None else spec.this) from None
            out.append((family.name, {k: resolved[k] for k in given}))
        return tuple(out)

    def weights(self, stmt: Train):
        clause = stmt.args.get("weights")
        if clause is None or clause.args.get("auto"):
            return None
        names = []
        for ident in clause.expressions:
            try:
                name = _canonical(WEIGHTS, str(ident.this))
            except UnknownNameError as e:
                raise self.error(str(e), ident) from None
            if name not in names:
                names.append(name)
        return tuple(names)

    def sparsity(self, stmt: Train):
        clause = stmt.args.get("sparsity")
        if clause is None or clause.args.get("auto"):
            return None
        values: list[float] = []
        for literal in clause.expressions:
            k = float(self.value(literal))
            if not (math.isfinite(k) and 0 < k <= 1):
                raise self.error(f"sparsity must be in (0, 1], got {literal.this}", literal)
            if k not in values:
                values.append(k)
        return tuple(values)

    def transports(self, stmt: Train):
        clause = stmt.args.get("transport")
        if clause is None or clause.args.get("auto"):
            return None
        out: list[tuple[str, int | None]] = []
        for spec in clause.expressions:
            try:
                name = check_transport(spec.this.this)
            except ValidationError as e:
                raise self.error(str(e), spec.this) from None
            bits: int | None = None
            for setting in spec.expressions or []:
                key = str(setting.this.this).lower()
                if key != "bits":
                    raise self.error(f"unknown parameter '{key}' for transport '{name}'"
                                     f"{suggest(key, ['bits'])}; allowed: "
                                     f"{'bits' if name == 'digital' else 'none'}", setting.this)
                if name != "digital":
                    raise self.error("bits applies to the digital transport only: an "
                                     "over-the-air payload is analog (not quantised)",
                                     setting.this)
                try:
                    bits = check_bits(self.value(setting.expression))
                except ValidationError as e:
                    raise self.error(str(e), setting.expression) from None
            if (name, bits) not in out:
                out.append((name, bits))
        return tuple(out)

    def algorithms(self, stmt: Train):
        clause = stmt.args.get("algorithm")
        if clause is None or clause.args.get("auto"):
            return None
        names: list[str] = []
        for ident in clause.expressions:
            try:
                name = check_algorithm(ident.this)
            except ValidationError as e:
                raise self.error(str(e), ident) from None
            if name not in names:
                names.append(name)
        return tuple(names)

    def check_operators(self, stmt: Train, workload: Workload,
                        transports: tuple | None, algorithms: tuple | None) -> None:
        """An algorithm named in USING ALGORITHM that every transport of the statement excludes
        (a rule that holds whatever the topology and k) is a BindError at its name, with the
        rule's reason."""
        clause = stmt.args.get("algorithm")
        if clause is None or algorithms is None:
            return
        pairs = ([(t, b if b is not None else EXACT_BITS) for t, b in transports]
                 if transports is not None else list(AUTO_TRANSPORTS))
        for ident in clause.expressions:
            name = check_algorithm(ident.this)
            reasons = [exclusion(name, t, bits=b, access_point=workload.access_point)
                       for t, b in pairs]
            if all(r is not None for r in reasons):
                raise self.error(f"USING ALGORITHM {name}: {reasons[0]}", ident)

    def confidence(self, stmt: Train) -> float | None:
        clause = stmt.args.get("sla")
        literal = clause.args.get("confidence") if clause is not None else None
        if literal is None:
            return None
        value = float(literal.this)
        if not 0.0 < value < 1.0:
            raise self.error(f"CONFIDENCE must be a probability in (0, 1), got {literal.this}",
                             literal)
        return value

    def sla(self, stmt: Train, target: float | None = None) -> SLA:
        """The statement's SLA; ``target`` (the workload's target_accuracy) replaces the default
        SLA and conflicts with an SLA clause that bounds accuracy (see
        :func:`airplan_qo.plans.sla.sla_with_target`)."""
        clause = stmt.args.get("sla")
        if clause is None:
            return DEFAULT_SLA if target is None else sla_with_target(None, target)
        try:
            sla = sla_from_expression(clause.this)
        except SLAError as e:
            node = e.node if e.node is not None else clause.this
            raise self.error(str(e), node, operator=isinstance(node, (exp.Or, exp.Not))) from None
        except ValidationError as e:
            raise self.error(str(e), clause.this) from None
        try:
            return sla_with_target(sla, target)
        except ValidationError as e:
            raise self.error(str(e), clause.this) from None

    def budgets(self, stmt: Train) -> dict[str, float]:
        out: dict[str, float] = {}
        for clause in stmt.args.get("within") or []:
            unit = clause.args["unit"].lower()
            value = self.value(clause.this)
            if unit == "rounds":
                if not isinstance(value, int) or value < 1:
                    raise self.error(f"WITHIN ROUNDS needs a positive integer, got "
                                     f"{clause.this.this}", clause.this)
            elif not (math.isfinite(value) and value > 0):
                raise self.error(f"WITHIN {unit.upper()} needs a positive number, got "
                                 f"{clause.this.this}", clause.this)
            out[unit] = value if unit == "rounds" else float(value)
        return out

    def estimator(self, stmt: Train) -> str | None:
        clause = stmt.args.get("cost_model")
        if clause is None:
            return None
        name = str(clause.this.this).lower()
        try:
            from ..costmodels import ESTIMATORS
        except ImportError:
            known = list(DEFAULT_ESTIMATORS)
            if name not in known:
                raise self.error(f"unknown cost estimator '{name}'{suggest(name, known)}; "
                                 f"known: {', '.join(known)}", clause.this) from None
            return name
        try:
            return _canonical(ESTIMATORS, name)
        except UnknownNameError as e:
            raise self.error(str(e), clause.this) from None

    def objective(self, stmt: Train, estimator: str | None) -> str | None:
        """``MINIMIZE metric``: one of OBJECTIVES; ``c_ours`` is the paper estimator's
        composite cost, so it needs ``COST MODEL paper``."""
        clause = stmt.args.get("objective")
        if clause is None:
            return None
        name = str(clause.this.this).lower()
        if name not in OBJECTIVES:
            raise self.error(f"unknown objective '{name}'{suggest(name, list(OBJECTIVES))}; "
                             f"use one of {', '.join(OBJECTIVES)}", clause.this)
        if name == "c_ours" and estimator != "paper":
            used = (f"COST MODEL {estimator}" if estimator is not None
                    else "the default COST MODEL ttt")
            raise self.error(f"MINIMIZE c_ours needs COST MODEL paper: c_ours is the paper "
                             f"estimator's composite cost, which {used} does not define",
                             clause.this)
        return name

    def options(self, stmt: ExplainTrain) -> ExplainOptions:
        values: dict[str, Any] = {}
        for option in stmt.args.get("options") or []:
            name, node = option.this, option.expression
            if name in ("VERBOSE", "COSTS", "CALIBRATE"):
                values[name.lower()] = bool(node.this) if node is not None else True
            elif name == "FORMAT":
                fmt = str(node.this).lower()
                if fmt not in ("text", "json"):
                    raise self.error(f"FORMAT must be TEXT or JSON, got {node.this}", node)
                values["format"] = fmt
            elif name == "ALTERNATIVES":
                text = str(node.this)
                if not _INT_TEXT.match(text) or int(text) < 0:
                    raise self.error(f"ALTERNATIVES must be a non-negative integer, got {text}",
                                     node)
                values["alternatives"] = int(text)
            else:
                raise self.error(f"unknown EXPLAIN option {name}", option)
        return ExplainOptions(**values)


def _canonical(registry, name: str) -> str:
    """The registry's own spelling of ``name`` (raises UnknownNameError with a hint)."""
    registry.get(name)
    return str(name).lower()


def bind(statement: Statement) -> BoundTrain | BoundAnalyze:
    """Bind a parsed statement of ours; raises ``BindError`` positioned at the bad part."""
    if not isinstance(statement, (ExplainTrain, Train, AnalyzeWorkload)):
        raise TypeError(f"bind() takes EXPLAIN/TRAIN/ANALYZE WORKLOAD statements, "
                        f"got {type(statement).__name__}")
    root = statement.root()
    binder = _Binder(root)
    text = root.statement_text
    if isinstance(statement, AnalyzeWorkload):
        return BoundAnalyze(workload=binder.workload(statement), text=text)
    explain = isinstance(statement, ExplainTrain)
    train = statement.this if explain else statement
    options = binder.options(statement) if explain else ExplainOptions()
    workload = binder.workload(train)
    transports, algorithms = binder.transports(train), binder.algorithms(train)
    binder.check_operators(train, workload, transports, algorithms)
    estimator = binder.estimator(train)
    pilot, pilot_rounds = binder.pilot(estimator)
    return BoundTrain(
        workload=workload,
        explain=explain,
        analyze=bool(statement.args.get("analyze")) if explain else False,
        options=options,
        topologies=binder.topologies(train, workload.clients),
        weights=binder.weights(train),
        sparsity=binder.sparsity(train),
        transports=transports,
        algorithms=algorithms,
        sla=binder.sla(train, workload.target_accuracy),
        confidence=binder.confidence(train),
        budgets=binder.budgets(train),
        estimator=estimator,
        text=text,
        device=binder.execution.get("device"),
        fallback=(str(train.args["fallback"].this.this).lower()
                  if train.args.get("fallback") else None),
        pilot=pilot,
        pilot_rounds=pilot_rounds,
        mix_rounds=binder.mix_rounds(estimator),
        objective=binder.objective(train, estimator),
    )
