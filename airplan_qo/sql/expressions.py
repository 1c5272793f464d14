"""Syntax-tree nodes of our statements (EXPLAIN TRAIN, TRAIN, ANALYZE WORKLOAD).

They are ordinary sqlglot expressions, so they render through the dialect's generator and carry
source positions in ``meta`` (``line``, ``col``, ``start``, ``end`` as sqlglot sets them from a
token: ``start``/``end`` are inclusive character offsets into the parsed text). Statement roots
also keep the whole parsed text and their own span, so the binder can point into it.
"""

from __future__ import annotations

from sqlglot import exp


class AirPlanNode(exp.Expression):
    """Base of our nodes: a source offset helper on top of sqlglot's Expression."""

    @property
    def offset(self) -> int | None:
        """Character offset of the node's first token in the parsed text, if known."""
        return self._meta.get("start") if self._meta else None


class Statement(AirPlanNode):
    """A statement root: keeps the parsed text and the statement's span within it."""

    @property
    def source_text(self) -> str:
        """The whole text the statement was parsed from (all statements of one ``parse``)."""
        return (self._meta or {}).get("source", "")

    @property
    def statement_text(self) -> str:
        """Exactly what the user typed for this statement (no trailing ``;``)."""
        meta = self._meta or {}
        return meta.get("source", "")[meta.get("stmt_start", 0):meta.get("stmt_end", 0)]


class Setting(AirPlanNode):
    """``name = literal`` inside WITH (...) or a topology's parentheses."""

    arg_types = {"this": True, "expression": True}


class ExplainOption(AirPlanNode):
    """One EXPLAIN option: ``this`` is the upper-case name, ``expression`` its value or None."""

    arg_types = {"this": True, "expression": False}


class WithClause(AirPlanNode):
    """``WITH (name = literal, ...)``: workload parameters."""

    arg_types = {"expressions": True}


class TopologyItem(AirPlanNode):
    """One item of ``USING TOPOLOGY``: a topology family with optional parameters, e.g.
    ``small_world(k=6)``; the binder turns it into a plan value,
    :class:`~airplan_qo.plans.topology.TopologySpec`."""

    arg_types = {"this": True, "expressions": False}


class TopologyClause(AirPlanNode):
    """``USING TOPOLOGY AUTO | spec, ...``."""

    arg_types = {"expressions": False, "auto": False}


class WeightsClause(AirPlanNode):
    """``USING WEIGHTS AUTO | name, ...``: mixing-weights rules to consider."""

    arg_types = {"expressions": False, "auto": False}


class SparsityClause(AirPlanNode):
    """``USING SPARSITY AUTO | number | IN (number, ...)``: top-k ratios to consider."""

    arg_types = {"expressions": False, "auto": False, "in_list": False}


class TransportSpec(AirPlanNode):
    """One transport of ``USING TRANSPORT``: ``ota`` or ``digital[(bits = b)]``."""

    arg_types = {"this": True, "expressions": False}


class TransportClause(AirPlanNode):
    """``USING TRANSPORT AUTO | transport, ...``: the transports to consider."""

    arg_types = {"expressions": False, "auto": False}


class AlgorithmClause(AirPlanNode):
    """``USING ALGORITHM AUTO | name, ...``: the algorithms to consider."""

    arg_types = {"expressions": False, "auto": False}


class SlaClause(AirPlanNode):
    """``SLA predicate [CONFIDENCE p]``; the predicate is a plain sqlglot expression."""

    arg_types = {"this": True, "confidence": False}


class WithinClause(AirPlanNode):
    """``WITHIN number unit``; ``unit`` is ROUNDS, SECONDS or JOULES."""

    arg_types = {"this": True, "unit": True}


class CostModelClause(AirPlanNode):
    """``COST MODEL name``: the cost estimator to plan with."""

    arg_types = {"this": True}


class FallbackClause(AirPlanNode):
    """``FALLBACK AUTO | COMPLETE | ERROR``: what planning does when nothing in the USING
    restriction meets the SLA (plan the whole space, take the fully connected plan, refuse)."""

    arg_types = {"this": True}


class MinimizeClause(AirPlanNode):
    """``MINIMIZE metric``: the resource the planner minimises among the feasible plans
    (``channel_uses``, ``energy_j``, ``airtime_s``, or ``c_ours`` with ``COST MODEL paper``);
    the binder checks the name against :data:`~airplan_qo.plans.plan.OBJECTIVES`."""

    arg_types = {"this": True}


class Train(Statement):
    """``TRAIN dataset ON n CLIENTS clause*``."""

    arg_types = {
        "this": True,
        "clients": True,
        "params": False,
        "topology": False,
        "weights": False,
        "sparsity": False,
        "transport": False,
        "algorithm": False,
        "sla": False,
        "within": False,
        "cost_model": False,
        "fallback": False,
        "objective": False,
    }


class ExplainTrain(Statement):
    """``EXPLAIN [ANALYZE] [(option, ...)] TRAIN ...``."""

    arg_types = {"this": True, "analyze": False, "options": False}


class AnalyzeWorkload(Statement):
    """``ANALYZE WORKLOAD dataset ON n CLIENTS [WITH (...)]``: collect statistics only."""

    arg_types = {"this": True, "clients": True, "params": False}


WITHIN_UNITS: tuple[str, ...] = ("ROUNDS", "SECONDS", "JOULES")
"""Budget units, in canonical order."""

EXPLAIN_OPTIONS: tuple[str, ...] = ("ANALYZE", "VERBOSE", "COSTS", "FORMAT", "ALTERNATIVES",
                                    "CALIBRATE")
"""EXPLAIN options, in canonical order (ANALYZE is rendered as ``EXPLAIN ANALYZE``)."""

BOOLEAN_OPTIONS: frozenset[str] = frozenset({"ANALYZE", "VERBOSE", "COSTS", "CALIBRATE"})
