"""SLA values: parsing, canonical text, resolution against fc, and checks."""

from __future__ import annotations

import pytest
import sqlglot

from airplan_qo.errors import ValidationError
from airplan_qo.plans.sla import (
    DEFAULT_SLA,
    SLA,
    Constraint,
    SLAError,
    parse_sla,
    sla_from_expression,
)


def test_default_is_the_papers():
    assert SLA() == DEFAULT_SLA == SLA.default()
    assert DEFAULT_SLA.render() == "accuracy >= 0.95 * fc"
    assert parse_sla("accuracy >= 0.95 * fc") == DEFAULT_SLA
    assert DEFAULT_SLA.relative


@pytest.mark.parametrize("text,canonical", [
    ("accuracy >= 0.95 * fc AND rounds <= 300", "accuracy >= 0.95 * fc AND rounds <= 300"),
    ("ACCURACY>=fc*0.9", "accuracy >= 0.9 * fc"),
    ("0.9 <= accuracy", "accuracy >= 0.9"),
    ("fc * 0.95 < accuracy", "accuracy > 0.95 * fc"),
    ("accuracy = fc", "accuracy = 1 * fc"),
    ("(accuracy > 0.5) and (energy_j < 1e3)", "accuracy > 0.5 AND energy_j < 1000"),
    ("airtime_s <= 2.5 AND channel_uses <= 1000000 AND rounds >= 10",
     "airtime_s <= 2.5 AND channel_uses <= 1000000 AND rounds >= 10"),
    ("rounds <= 300 and accuracy >= 0.80", "rounds <= 300 AND accuracy >= 0.8"),
])
def test_parse_and_render(text, canonical):
    sla = parse_sla(text)
    assert sla.render() == canonical
    assert parse_sla(sla.render()) == sla
    assert str(sla) == canonical


@pytest.mark.parametrize("text,fragment", [
    ("accuracy >= 0.9 OR rounds < 3", "only AND, not OR: 'accuracy >= 0.9 OR rounds < 3'"),
    ("NOT accuracy >= 0.9", "not NOT"),
    ("acc >= 0.9", "unknown SLA metric 'acc' (did you mean 'accuracy'?)"),
    ("latency <= 3", "unknown SLA metric 'latency'"),
    ("accuracy >= 'high'", "SLA value 'high' must be a number"),
    ("accuracy >= TRUE", "SLA value 'TRUE' must be a number"),
    ("accuracy >= rounds", "SLA value 'rounds' must be a number"),
    ("accuracy >= 0.9 * rounds", "SLA value '0.9 * rounds'"),
    ("rounds <= 0.5 * fc", "'fc' is only allowed in accuracy constraints"),
    ("accuracy <> 0.9", "unsupported SLA term 'accuracy <> 0.9'"),
    ("accuracy BETWEEN 0.8 AND 0.9", "unsupported SLA term"),
    ("0.9 <= 0.95", "must compare a metric"),
    ("accuracy", "unsupported SLA term 'accuracy'"),
    ("accuracy >= 1e999", "out of range"),
    ("", "empty SLA"),
    ("   ", "empty SLA"),
    ("accuracy >=", "cannot parse SLA"),
    ("(((", "cannot parse SLA"),
    ("accuracy >= 0.9; rounds < 3", "single predicate"),
    ("SELECT 1", "not a statement"),
])
def test_rejections_name_the_offending_part(text, fragment):
    with pytest.raises(ValidationError) as info:
        parse_sla(text)
    assert fragment in str(info.value)


def test_sla_error_carries_the_node():
    tree = sqlglot.parse_one("accuracy >= 0.9 AND (rounds < 5 OR rounds > 9)", read="duckdb")
    with pytest.raises(SLAError) as info:
        sla_from_expression(tree)
    assert info.value.node.sql() == "rounds < 5 OR rounds > 9"


def test_resolve_and_threshold():
    sla = parse_sla("accuracy >= 0.95 * fc AND accuracy > 0.5 AND rounds <= 300")
    resolved = sla.resolve(0.92)
    assert [c.relative_to_fc for c in resolved] == [False, False, False]
    assert resolved[0].value == pytest.approx(0.874)
    assert resolved[2] == Constraint("rounds", "<=", 300)
    assert sla.accuracy_threshold(0.92) == pytest.approx(0.874)
    assert sla.accuracy_threshold(0.4) == pytest.approx(0.5)
    assert parse_sla("rounds <= 3").accuracy_threshold(0.9) is None
    assert parse_sla("accuracy >= 0.7").accuracy_threshold() == 0.7
    with pytest.raises(ValidationError, match="needs the fully-connected"):
        DEFAULT_SLA.resolve(None)


def test_check_reports_failures():
    sla = parse_sla("accuracy >= 0.95 * fc AND rounds <= 300 AND energy_j < 5")
    assert sla.check({"accuracy": 0.9, "rounds": 120, "energy_j": 1.0}, 0.92) == []
    assert sla.check({"accuracy": 0.81, "rounds": 301, "energy_j": 5}, 0.92) == [
        "accuracy 0.81 < 0.874 (0.95 * fc)",
        "rounds 301 > 300",
        "energy_j 5 >= 5",
    ]
    assert sla.check({"accuracy": 0.9, "rounds": None}, 0.92) == [
        "rounds unknown (required <= 300)",
        "energy_j unknown (required < 5)",
    ]
    assert parse_sla("rounds = 10").check({"rounds": 11}) == ["rounds 11 != 10"]
    assert parse_sla("rounds = 10").check({"rounds": 10.0}) == []


def test_empty_sla_always_holds():
    sla = SLA(())
    assert sla.render() == "" and sla.check({}, None) == []
    assert sla.accuracy_threshold(0.9) is None and not sla.relative


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(metric="latency", op=">=", value=1), "unknown SLA metric"),
    (dict(metric="rounds", op="!=", value=1), "unsupported SLA operator"),
    (dict(metric="rounds", op="<=", value=float("nan")), "finite"),
    (dict(metric="rounds", op="<=", value="300"), "must be a number"),
    (dict(metric="rounds", op="<=", value=3, relative_to_fc=True), "only allowed in accuracy"),
])
def test_constraint_validation(kwargs, fragment):
    with pytest.raises(ValidationError, match=fragment):
        Constraint(**kwargs)


def test_constraints_must_be_constraints():
    with pytest.raises(ValidationError):
        SLA(("accuracy >= 0.9",))  # type: ignore[arg-type]


def test_a_lucky_evaluation_does_not_reach_the_target():
    from airplan_qo.plans.sla import first_crossing

    noisy = [(1, 0.5), (2, 0.91), (3, 0.6), (4, 0.88), (5, 0.92), (6, 0.93), (7, 0.9)]
    # the raw curve first crosses 0.9 at round 2; its centred 3-point average at round 5
    assert first_crossing(noisy, 0.9) == 5
    assert first_crossing(noisy[:5], 0.9, complete=False) is None   # round 5 needs round 6
    assert first_crossing([(10, 0.95)], 0.9) == 10
    assert first_crossing([(1, None), (2, 0.95), (3, 0.97)], 0.9) == 2
    assert first_crossing(noisy, 0.99) is None


def test_sla_accuracy_metrics():
    from airplan_qo.plans.sla import parse_sla

    assert parse_sla("accuracy >= 0.9 * fc").accuracy_metric == "accuracy"
    sla = parse_sla("avg_model_accuracy >= 0.95 * fc AND rounds <= 50")
    assert sla.accuracy_metric == "avg_model_accuracy"
    assert sla.accuracy_threshold(0.9) == pytest.approx(0.855)
