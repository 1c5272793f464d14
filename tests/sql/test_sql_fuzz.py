"""Fuzzing: any text either parses (and binds) or fails with an AirPlanError, never otherwise."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airplan_qo.errors import AirPlanError
from airplan_qo.sql import PassThrough, bind, parse, parse_one, render

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sql"

SEEDS = [block.split("\n", 1)[1].split("\n=>\n")[0]
         for block in (FIXTURES / "normalize.txt").read_text().split("\n### ")[1:]]

WORDS = ["TRAIN", "EXPLAIN", "ANALYZE", "WORKLOAD", "ON", "CLIENTS", "WITH", "USING",
         "TOPOLOGY", "SPARSITY", "WEIGHTS", "AUTO", "IN", "SLA", "WITHIN", "ROUNDS", "SECONDS",
         "JOULES", "COST", "MODEL", "FORMAT", "JSON", "TEXT", "VERBOSE", "COSTS", "ALTERNATIVES",
         "CALIBRATE", "TRUE", "FALSE", "AND", "OR", "NOT", "accuracy", "rounds", "fc", "digits",
         "ring", "small_world", "k", "alpha", "model", "SELECT", "(", ")", ",", "=", ">=", "<",
         "*", "-", ".", ";", "'", '"', "--", "/*", "*/", "0", "1", "0.5", "20", "1e999", "$$",
         "\n", "\t", "x"]

SETTINGS = settings(derandomize=True, max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

_PIECES = re.compile(r"\w+|'[^']*'|\s+|\S")


def check(text: str) -> None:
    """Parse, render and bind; only AirPlanError may escape, and rendering is stable."""
    try:
        statements = parse(text)
    except AirPlanError:
        return
    for statement in statements:
        if isinstance(statement, PassThrough):
            assert statement.sql and statement.sql in text
            continue
        canonical = render(statement)
        assert render(parse_one(canonical)) == canonical
        try:
            bind(statement)
        except AirPlanError:
            pass


@SETTINGS
@given(st.text(max_size=80))
def test_random_text(text):
    check(text)


@SETTINGS
@given(st.lists(st.sampled_from(WORDS), max_size=25).map(" ".join))
def test_random_keyword_soup(text):
    check(text)


@st.composite
def mutated(draw):
    pieces = _PIECES.findall(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "delete", "replace", "char"]))
        i = draw(st.integers(0, max(len(pieces) - 1, 0)))
        if kind == "insert":
            pieces.insert(i, " " + draw(st.sampled_from(WORDS)) + " ")
        elif kind == "delete" and pieces:
            del pieces[i]
        elif kind == "replace" and pieces:
            pieces[i] = draw(st.sampled_from(WORDS))
        else:
            text = "".join(pieces)
            j = draw(st.integers(0, len(text)))
            ch = draw(st.characters(codec="utf-8"))
            pieces = _PIECES.findall(text[:j] + ch + text[j + 1:])
    return "".join(pieces)


@SETTINGS
@given(mutated())
def test_mutated_valid_statements(text):
    check(text)


def test_long_and_deep_predicates_fail_cleanly():
    chain = " AND ".join(["rounds <= 5"] * 1500)
    statement = parse_one(f"TRAIN digits ON 5 CLIENTS SLA {chain}")
    assert len(bind(statement).sla.constraints) == 1500
    check(f"TRAIN digits ON 5 CLIENTS SLA {chain} OR rounds < 2")
    check("TRAIN digits ON 5 CLIENTS SLA " + "(" * 500 + "accuracy >= 0.5" + ")" * 500)
