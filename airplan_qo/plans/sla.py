"""The accuracy SLA and metric budgets as values.

An SLA is a conjunction of comparisons between a plan metric and a number, for example
``accuracy >= 0.95 * fc AND rounds <= 300``. ``fc`` stands for the accuracy of the
fully-connected, uncompressed plan on the same workload, so an SLA can be stated relative to
the best the workload allows; it is resolved to an absolute threshold once that accuracy is
known (estimated or measured). The text form is parsed with sqlglot's DuckDB parser so the SQL
surface and the Python API read SLAs identically.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import attrs
import sqlglot
import sqlglot.errors
from sqlglot import exp

from ..errors import ValidationError
from ..registry import suggest

METRICS: tuple[str, ...] = ("accuracy", "avg_model_accuracy", "rounds", "energy_j", "airtime_s",
                             "channel_uses")
"""Metrics an SLA may constrain (names as in the estimator's cost breakdown). ``accuracy`` is the
mean accuracy of the clients' own models (what a deployed device holds); ``avg_model_accuracy``
is the accuracy of the network average of the models, which no device holds."""

ACCURACY_METRICS: tuple[str, ...] = ("accuracy", "avg_model_accuracy")

OPS: tuple[str, ...] = (">=", ">", "<=", "<", "=")
"""Comparison operators an SLA may use."""

FC = "fc"
"""The name that stands for the fully-connected uncompressed plan's accuracy."""

_NEGATION = {">=": "<", ">": "<=", "<=": ">", "<": ">=", "=": "!="}
_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "=": "="}
_COMPARISONS: dict[type, str] = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<",
                                 exp.EQ: "="}


class SLAError(ValidationError):
    """An SLA predicate is not a conjunction of supported comparisons.

    ``node`` is the offending sqlglot expression (or None), so the SQL binder can point at it.
    """

    def __init__(self, message: str, node: exp.Expr | None = None):
        super().__init__(message)
        self.node = node


def _fmt(value: float) -> str:
    """Short, stable rendering of a number: integral values without a decimal point."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))


def _short(value: float) -> str:
    """A number for messages: six significant digits, so 0.95 * 0.92 reads 0.874."""
    return f"{value:.6g}"


def _check_metric(instance, attribute, value):
    if value not in METRICS:
        raise ValidationError(f"unknown SLA metric '{value}'{suggest(str(value), list(METRICS))}; "
                              f"known: {', '.join(METRICS)}")


def _check_op(instance, attribute, value):
    if value not in OPS:
        raise ValidationError(f"unsupported SLA operator '{value}'; allowed: {', '.join(OPS)}")


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"SLA value must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValidationError(f"SLA value must be finite, got {value!r}")
    return out


@attrs.frozen
class Constraint:
    """One comparison ``metric op value`` (``value * fc`` when ``relative_to_fc``)."""

    metric: str = attrs.field(validator=_check_metric)
    op: str = attrs.field(validator=_check_op)
    value: float = attrs.field(converter=_to_float)
    relative_to_fc: bool = False

    def __attrs_post_init__(self):
        if self.relative_to_fc and self.metric not in ACCURACY_METRICS:
            raise ValidationError(f"'{FC}' is only allowed in accuracy constraints, "
                                  f"not in '{self.metric}'")

    def threshold(self, fc_accuracy: float | None = None) -> float:
        """The absolute right-hand side; needs ``fc_accuracy`` when relative."""
        if not self.relative_to_fc:
            return self.value
        if fc_accuracy is None:
            raise ValidationError(f"SLA '{self.render()}' needs the fully-connected plan's "
                                  f"accuracy (fc), which is not known")
        fc = _to_float(fc_accuracy)
        return self.value * fc

    def resolve(self, fc_accuracy: float | None = None) -> "Constraint":
        """The same constraint with ``fc`` replaced by its value."""
        if not self.relative_to_fc:
            return self
        return Constraint(self.metric, self.op, self.threshold(fc_accuracy), False)

    def holds(self, actual: float, fc_accuracy: float | None = None) -> bool:
        """Whether ``actual`` satisfies this constraint."""
        bound = self.threshold(fc_accuracy)
        if self.op == ">=":
            return actual >= bound
        if self.op == ">":
            return actual > bound
        if self.op == "<=":
            return actual <= bound
        if self.op == "<":
            return actual < bound
        return math.isclose(actual, bound, rel_tol=1e-9, abs_tol=1e-12)

    def render(self) -> str:
        rhs = f"{_fmt(self.value)} * {FC}" if self.relative_to_fc else _fmt(self.value)
        return f"{self.metric} {self.op} {rhs}"


def _default_constraints() -> tuple[Constraint, ...]:
    return (Constraint("accuracy", ">=", 0.95, True),)


def _constraints_tuple(value: Any) -> tuple[Constraint, ...]:
    items = tuple(value)
    for item in items:
        if not isinstance(item, Constraint):
            raise ValidationError(f"SLA constraints must be Constraint values, got {item!r}")
    return items


@attrs.frozen
class SLA:
    """A conjunction of constraints; the default is the paper's ``accuracy >= 0.95 * fc``."""

    constraints: tuple[Constraint, ...] = attrs.field(factory=_default_constraints,
                                                      converter=_constraints_tuple)

    @classmethod
    def default(cls) -> "SLA":
        return cls()

    @property
    def relative(self) -> bool:
        """Whether any constraint needs the fully-connected plan's accuracy."""
        return any(c.relative_to_fc for c in self.constraints)

    def render(self) -> str:
        """Canonical text, parseable by :func:`parse_sla` (empty for no constraints)."""
        return " AND ".join(c.render() for c in self.constraints)

    def __str__(self) -> str:
        return self.render()

    def resolve(self, fc_accuracy: float | None = None) -> list[Constraint]:
        """Absolute constraints, ``fc`` replaced by ``fc_accuracy``."""
        return [c.resolve(fc_accuracy) for c in self.constraints]

    @property
    def accuracy_metric(self) -> str:
        """Which accuracy the SLA's lower bound is on (``accuracy`` when it has none)."""
        for c in self.constraints:
            if c.metric in ACCURACY_METRICS and c.op in (">=", ">", "="):
                return c.metric
        return "accuracy"

    def accuracy_threshold(self, fc_accuracy: float | None = None) -> float | None:
        """The tightest lower bound on accuracy (from >=, > or =), or None if there is none."""
        bounds = [c.threshold(fc_accuracy) for c in self.constraints
                  if c.metric in ACCURACY_METRICS and c.op in (">=", ">", "=")]
        return max(bounds) if bounds else None

    def check(self, metrics: Mapping[str, Any], fc_accuracy: float | None = None) -> list[str]:
        """Human-readable failures, e.g. ``accuracy 0.81 < 0.874 (0.95 * fc)``; [] if all hold.

        A constrained metric missing from ``metrics`` (or None there) is reported as unknown:
        an SLA cannot be confirmed on a value nobody measured or estimated.
        """
        failures = []
        for c in self.constraints:
            bound = c.threshold(fc_accuracy)
            origin = f" ({_fmt(c.value)} * {FC})" if c.relative_to_fc else ""
            actual = metrics.get(c.metric)
            if actual is None:
                failures.append(f"{c.metric} unknown (required {c.op} {_short(bound)}{origin})")
                continue
            actual = float(actual)
            if not c.holds(actual, fc_accuracy):
                failures.append(f"{c.metric} {_short(actual)} {_NEGATION[c.op]} "
                                f"{_short(bound)}{origin}")
        return failures


DEFAULT_SLA = SLA()
"""The paper's SLA: 95 % of the fully-connected uncompressed plan's accuracy."""


def _unwrap(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _number(node: exp.Expr) -> float | None:
    """The value of a numeric literal (optionally signed or parenthesised), else None."""
    node = _unwrap(node)
    sign = 1.0
    while isinstance(node, exp.Neg):
        sign = -sign
        node = _unwrap(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = float(str(node.this).replace("_", ""))
        except ValueError:
            return None
        if not math.isfinite(value):
            raise SLAError(f"SLA number {node.sql(dialect='duckdb')} is out of range", node)
        return sign * value
    return None


def _name(node: exp.Expr) -> str | None:
    node = _unwrap(node)
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return node.this.name.lower()
    return None


def _text(node: exp.Expr) -> str:
    """The node as SQL for a message, shortened to 80 characters."""
    try:
        text = node.sql(dialect="duckdb", comments=False)
    except Exception:  # rendering is only for the message; never mask the real problem
        text = type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _quoted(node: exp.Expr) -> str:
    text = _text(node)
    return text if text.startswith("'") else f"'{text}'"


def _value_side(node: exp.Expr) -> tuple[float, bool] | None:
    """``number``, ``fc``, ``number * fc`` or ``fc * number`` as (value, relative), else None."""
    node = _unwrap(node)
    number = _number(node)
    if number is not None:
        return number, False
    if _name(node) == FC:
        return 1.0, True
    if isinstance(node, exp.Mul):
        left, right = node.this, node.expression
        if _name(right) == FC and _number(left) is not None:
            return _number(left), True
        if _name(left) == FC and _number(right) is not None:
            return _number(right), True
    return None


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The terms of an AND chain, left to right (iterative: long chains are deep trees)."""
    out, stack = [], [node]
    while stack:
        item = _unwrap(stack.pop())
        if isinstance(item, exp.And):
            stack.extend((item.expression, item.this))
        else:
            out.append(item)
    return out


def _constraint(node: exp.Expr) -> Constraint:
    if isinstance(node, exp.Or):
        raise SLAError(f"SLA supports only AND, not OR: '{_text(node)}'", node)
    if isinstance(node, exp.Not):
        raise SLAError(f"SLA supports only AND, not NOT: '{_text(node)}'", node)
    op = _COMPARISONS.get(type(node))
    if op is None:
        raise SLAError(f"unsupported SLA term '{_text(node)}'; expected 'metric op value' with "
                       f"op one of {', '.join(OPS)}, joined by AND", node)
    left, right = node.this, node.expression
    metric_node, value_node = left, right
    if _name(left) in (None, FC) and _name(right) not in (None, FC):
        metric_node, value_node, op = right, left, _FLIP[op]
    metric = _name(metric_node)
    if metric is None or metric == FC:
        raise SLAError(f"SLA term '{_text(node)}' must compare a metric "
                       f"({', '.join(METRICS)}) with a number", metric_node)
    if metric not in METRICS:
        raise SLAError(f"unknown SLA metric '{metric}'{suggest(metric, list(METRICS))}; "
                       f"known: {', '.join(METRICS)}", metric_node)
    side = _value_side(value_node)
    if side is None:
        raise SLAError(f"SLA value {_quoted(value_node)} must be a number, '{FC}', or a number "
                       f"times '{FC}'", value_node)
    value, relative = side
    if relative and metric not in ACCURACY_METRICS:
        raise SLAError(f"'{FC}' is only allowed in accuracy constraints, not in '{metric}'",
                       value_node)
    return Constraint(metric, op, value, relative)


def sla_from_expression(expression: exp.Expr) -> SLA:
    """Turn a parsed predicate into an SLA; ``SLAError`` names (and carries) the bad part."""
    if expression is None:
        raise SLAError("empty SLA predicate")
    return SLA(tuple(_constraint(term) for term in _conjuncts(expression)))


def parse_sla(text: str) -> SLA:
    """Parse ``accuracy >= 0.95 * fc AND rounds <= 300`` (DuckDB expression syntax)."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("empty SLA predicate")
    try:
        trees = [t for t in sqlglot.parse(text, read="duckdb") if t is not None]
    except sqlglot.errors.SqlglotError as e:
        errors = getattr(e, "errors", None) or [{}]
        detail = errors[0].get("description") or str(e).split("\n")[0]
        raise ValidationError(f"cannot parse SLA '{text.strip()}': {detail}") from None
    except RecursionError:
        raise ValidationError(f"SLA '{text.strip()[:40]}' is nested too deeply") from None
    if len(trees) != 1:
        raise ValidationError(f"SLA must be a single predicate, got '{text.strip()}'")
    tree = trees[0]
    if isinstance(tree, exp.Query) or not isinstance(tree, exp.Expr):
        raise ValidationError(f"SLA must be a predicate, not a statement: '{text.strip()}'")
    return sla_from_expression(tree)


#: What an accuracy target is judged on: ``accuracy`` is the mean accuracy of the clients' own
#: models (what a deployed device holds); ``avg_model_accuracy`` is the accuracy of the network
#: average of the models, which no device holds. Keys of the round dict each one reads.
TARGET_METRICS = {"accuracy": "client_acc_mean", "avg_model_accuracy": "test_accuracy"}

#: Evaluations in the centred moving average that decides when a target is reached.
SMOOTHING_WINDOW = 3


def first_crossing(points: Sequence[tuple[int, float | None]], target: float, *,
                   complete: bool = True) -> int | None:
    """The round at which a run reaches ``target``, judged on a smoothed curve.

    ``points`` are the evaluated (round, value) pairs in order. The value of evaluation e is the
    mean of evaluations e-1, e and e+1 (those that exist: the centred moving average over
    :data:`SMOOTHING_WINDOW` evaluations), so one lucky evaluation of a noisy plan does not count
    as reaching the target. Returns the round of the first evaluation whose smoothed value is
    ``>= target``, or None. With ``complete=False`` (a run still going) the last evaluation is
    not judged yet, since its successor is not known.
    """
    half = SMOOTHING_WINDOW // 2
    vals = [(r, float(v)) for r, v in points if v is not None and math.isfinite(float(v))]
    last = len(vals) if complete else len(vals) - 1
    for i in range(max(last, 0)):
        window = [v for _, v in vals[max(0, i - half): i + half + 1]]
        if sum(window) / len(window) >= target:
            return vals[i][0]
    return None


def sla_with_target(sla, target: float | None):
    """The SLA a plan is held to, given an explicit ``sla`` (None: none given) and the
    workload's ``target_accuracy``: without an SLA, ``accuracy >= target`` replaces the default
    ``accuracy >= 0.95 * fc``; an SLA without an accuracy bound keeps ``target`` as the accuracy
    target; an SLA with an accuracy bound other than ``accuracy >= target`` is an error."""
    if target is None:
        return sla if sla is not None else DEFAULT_SLA
    own = parse_sla(f"accuracy >= {float(target)!r}")
    if sla is None or sla == own:
        return own
    bounds = [c for c in sla.constraints if c.metric in ("accuracy", "avg_model_accuracy")
              and c.op in (">=", ">", "=")]
    if bounds:
        raise ValidationError(
            f"target_accuracy = {target} and the SLA's accuracy bound "
            f"({' AND '.join(c.render() for c in bounds)}) both set the accuracy target; give "
            "one of them")
    return sla
