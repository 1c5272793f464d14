"""Error positions: every malformed statement in errors.txt fails at an exact line/column."""

from __future__ import annotations

from pathlib import Path

import pytest

from airplan_qo.errors import AirPlanError, BindError, ParseError
from airplan_qo.sql import PassThrough, bind, parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sql"


def load_error_cases() -> list[tuple[str, str, str, int, int, str]]:
    """(name, statement, kind, line, col, fragment) from errors.txt."""
    text = (FIXTURES / "errors.txt").read_text()
    cases = []
    for block in text.split("\n### ")[1:]:
        name, rest = block.split("\n", 1)
        source, expected = rest.split("\n=> ")
        kind, where, fragment = expected.strip().split(" ", 2)
        line, col = (int(x) for x in where.split(":"))
        cases.append((name.strip(), source, kind, line, col, fragment))
    return cases


CASES = load_error_cases()


def parse_and_bind(text: str) -> None:
    for statement in parse(text):
        if not isinstance(statement, PassThrough):
            bind(statement)


def test_enough_error_cases():
    assert len(CASES) >= 15
    assert {c[2] for c in CASES} == {"ParseError", "BindError"}
    assert any(c[3] == 2 for c in CASES) and any(c[3] == 3 for c in CASES)


@pytest.mark.parametrize("name,source,kind,line,col,fragment", CASES, ids=[c[0] for c in CASES])
def test_error_position(name, source, kind, line, col, fragment):
    with pytest.raises(AirPlanError) as info:
        parse_and_bind(source)
    err = info.value
    assert type(err).__name__ == kind, str(err)
    assert (err.line, err.col) == (line, col), str(err)
    assert fragment in str(err)
    assert f"(line {line}, column {col})" in str(err)
    text_line, caret = err.excerpt.split("\n")
    assert text_line == source.split("\n")[line - 1]
    assert caret.index("^") == col - 1


def test_bind_error_is_a_parse_error():
    assert issubclass(BindError, ParseError)
    with pytest.raises(ParseError):
        parse_and_bind("TRAIN nowhere ON 5 CLIENTS")


def test_error_kinds_are_airplan_errors_and_exit_two():
    with pytest.raises(AirPlanError) as info:
        parse("TRAIN digits")
    assert info.value.exit_code == 2
