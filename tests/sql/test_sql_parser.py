"""Parser: golden normalisation, canonical fixed point, pass-through, positions."""

from __future__ import annotations

from pathlib import Path

import attrs
import duckdb
import pytest
import sqlglot
from sqlglot import exp

from airplan_qo.errors import BindError, ParseError
from airplan_qo.sql import (
    AnalyzeWorkload,
    ExplainTrain,
    PassThrough,
    Train,
    bind,
    normalize,
    parse,
    parse_one,
    render,
)
from airplan_qo.sql.expressions import AirPlanNode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sql"


def load_normalize_cases() -> list[tuple[str, str, list[str]]]:
    """(name, input, expected canonical lines) from normalize.txt."""
    text = (FIXTURES / "normalize.txt").read_text()
    cases = []
    for block in text.split("\n### ")[1:]:
        name, rest = block.split("\n", 1)
        source, expected = rest.split("\n=>\n")
        cases.append((name.strip(), source, expected.strip().split("\n")))
    return cases


CASES = load_normalize_cases()
IDS = [c[0] for c in CASES]


def test_fixture_is_large_enough():
    ours = [c for c in CASES if not c[2][0].startswith(("SELECT", "CREATE"))]
    assert len(ours) >= 15
    joined = "\n".join(line for c in CASES for line in c[2])
    for piece in ("WITH (", "USING TOPOLOGY AUTO", "USING TOPOLOGY ring", "USING SPARSITY AUTO",
                  "USING SPARSITY IN", "USING SPARSITY 0.1", "USING WEIGHTS AUTO",
                  "USING WEIGHTS metropolis", "SLA ", "WITHIN 500 ROUNDS", "SECONDS", "JOULES",
                  "MINIMIZE energy_j", "COST MODEL", "EXPLAIN TRAIN", "EXPLAIN ANALYZE",
                  "VERBOSE", "COSTS FALSE",
                  "FORMAT JSON", "FORMAT TEXT", "ALTERNATIVES", "CALIBRATE", "ANALYZE WORKLOAD"):
        assert piece in joined, piece


@pytest.mark.parametrize("name,source,expected", CASES, ids=IDS)
def test_golden_normalisation(name, source, expected):
    assert [render(s) for s in parse(source)] == expected
    assert normalize(source) == ";\n".join(expected)


@pytest.mark.parametrize("name,source,expected", CASES, ids=IDS)
def test_render_is_a_fixed_point(name, source, expected):
    for statement in parse(source):
        once = render(statement)
        again = parse_one(once)
        assert render(again) == once
        if not isinstance(statement, PassThrough):
            assert again == parse_one(render(again))


@pytest.mark.parametrize("name,source,expected", CASES, ids=IDS)
def test_canonical_text_binds_the_same(name, source, expected):
    for statement in parse(source):
        if isinstance(statement, PassThrough):
            continue
        try:
            bound = bind(statement)
        except BindError:
            continue
        rebound = bind(parse_one(render(statement)))
        assert attrs.evolve(bound, text="") == attrs.evolve(rebound, text="")


def test_statement_kinds():
    stmts = parse("EXPLAIN TRAIN digits ON 4 CLIENTS; TRAIN digits ON 4 CLIENTS;"
                  "ANALYZE WORKLOAD digits ON 4 CLIENTS; SELECT 1")
    assert [type(s) for s in stmts] == [ExplainTrain, Train, AnalyzeWorkload, PassThrough]
    assert isinstance(stmts[0].this, Train)


def test_empty_and_comment_only_scripts():
    assert parse("") == []
    assert parse("  ;;\n ; ") == []
    assert parse("-- nothing here\n/* still ; nothing */") == []


PASS_THROUGH = [
    "SELECT 1",
    "select * from airplan.plans where chosen",
    "CREATE TABLE t (a INTEGER, b VARCHAR)",
    "EXPLAIN SELECT 1",
    "EXPLAIN ANALYZE SELECT 42",
    "explain select train from (select 1 as train)",
    "ANALYZE",
    "ANALYZE workload_table",
    "SELECT 'TRAIN digits ON 20 CLIENTS; not ours' AS s",
    'SELECT 1 AS "train"',
    "SELECT $$a;b$$ AS d",
    "SELECT 1 /* ; inside a comment */ + 1",
    "PRAGMA version",
    "CALL pragma_version()",
    "SET threads = 1",
    "WITH t AS (SELECT 1 AS a) SELECT a FROM t",
    "(SELECT 3)",
    "SELECT E'it\\'s' AS s",
]


@pytest.mark.parametrize("sql", PASS_THROUGH)
def test_pass_through_keeps_exact_text(sql):
    (stmt,) = parse(sql)
    assert isinstance(stmt, PassThrough)
    assert stmt.sql == sql
    assert render(stmt) == sql


def test_pass_through_text_runs_in_duckdb():
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE workload_table (a INTEGER)")
    con.execute("CREATE SCHEMA airplan")
    con.execute("CREATE TABLE airplan.plans (chosen BOOLEAN)")
    for stmt in parse(";\n".join(PASS_THROUGH)):
        assert isinstance(stmt, PassThrough)
        con.execute(stmt.sql)


def test_pass_through_positions_and_script_splitting():
    script = "SELECT 1;\n  -- comment ; with semicolon\n  SELECT 'x;y' ;\nTRAIN digits ON 5 CLIENTS"
    first, second, third = parse(script)
    assert (first.sql, first.line, first.col, first.start) == ("SELECT 1", 1, 1, 0)
    assert second.sql == "SELECT 'x;y'"
    assert (second.line, second.col) == (3, 3)
    assert script[second.start:].startswith("SELECT 'x;y'")
    assert isinstance(third, Train)
    assert third.statement_text == "TRAIN digits ON 5 CLIENTS"


def test_broken_pass_through_is_left_to_duckdb():
    (stmt,) = parse("SELECT 'unterminated")
    assert stmt == PassThrough("SELECT 'unterminated", 1, 1, 0)
    first, second = parse("TRAIN digits ON 5 CLIENTS; SELECT \"x")
    assert isinstance(first, Train) and second.sql == 'SELECT "x'


def test_explain_with_options_of_duckdb_is_pass_through():
    (stmt,) = parse("EXPLAIN (FORMAT JSON) SELECT 1")
    assert isinstance(stmt, PassThrough)


def test_our_statement_keeps_its_original_text():
    script = "select 1;\n  explain  train digits on 5 clients -- note\n  ;"
    _, stmt = parse(script)
    assert stmt.statement_text == "explain  train digits on 5 clients -- note"
    assert bind(stmt).text == stmt.statement_text
    assert stmt.source_text == script


def test_nodes_keep_source_positions():
    text = ("EXPLAIN (FORMAT JSON, ALTERNATIVES 2)\nTRAIN digits ON 20 CLIENTS "
            "WITH (alpha = 0.5)\nUSING TOPOLOGY small_world(k=4) USING WEIGHTS max_degree "
            "USING SPARSITY IN (0.1) SLA accuracy >= 0.9 WITHIN 5 ROUNDS COST MODEL paper")
    stmt = parse_one(text)
    for node in stmt.walk():
        if isinstance(node, (AirPlanNode, exp.Identifier, exp.Literal)):
            assert node.meta.get("start") is not None, type(node).__name__
        if isinstance(node, AirPlanNode):
            assert node.offset == node.meta["start"]
    lit = next(n for n in stmt.walk() if isinstance(n, exp.Literal) and n.this == "4")
    assert text[lit.meta["start"]] == "4"
    assert stmt.this.meta["line"] == 2


def test_parse_one_rejects_scripts():
    with pytest.raises(ParseError) as info:
        parse_one("SELECT 1; SELECT 2")
    assert (info.value.line, info.value.col) == (1, 11)
    with pytest.raises(ParseError):
        parse_one("   ")


def test_sqlglot_api_reads_the_dialect():
    trees = sqlglot.parse("TRAIN digits ON 5 CLIENTS SLA accuracy >= .9; SELECT 2",
                          read="airplan")
    assert isinstance(trees[0], Train)
    assert trees[0].sql(dialect="airplan") == "TRAIN digits ON 5 CLIENTS SLA accuracy >= 0.9"
    assert isinstance(trees[1], exp.Select)


def test_error_carries_caret_excerpt_with_tabs():
    with pytest.raises(ParseError) as info:
        parse("SELECT 1;\n\tTRAIN digits ON 5 CLIENTZ")
    err = info.value
    assert (err.line, err.col) == (2, 20)
    line, caret = err.excerpt.split("\n")
    assert line == "\tTRAIN digits ON 5 CLIENTZ"
    assert caret == "\t" + " " * 18 + "^"
    assert "(line 2, column 20)" in str(err)


def test_parse_needs_text():
    with pytest.raises(TypeError):
        parse(None)  # type: ignore[arg-type]
