"""Public entry: split a script into statements and parse ours; pass the rest to DuckDB.

A statement is ours when it starts with ``TRAIN``, ``ANALYZE WORKLOAD`` or
``EXPLAIN [ANALYZE] [(options)] TRAIN``; every other statement becomes a :class:`PassThrough`
holding exactly the text the user typed, for DuckDB to run and to report its own errors.
Statements are split on ``;`` tokens, so semicolons inside strings, quoted names, dollar-quoted
strings and comments do not split.
"""

from __future__ import annotations

from typing import Union

import attrs
import sqlglot.errors
from sqlglot.tokens import Token, TokenType

from ..errors import ParseError
from .dialect import AirPlan, is_ours
from .dialect import render as _render
from .expressions import AnalyzeWorkload, ExplainTrain, Statement as _Ours, Train
from .positions import Source

_DIALECT = AirPlan()


@attrs.frozen
class PassThrough:
    """A statement for DuckDB, verbatim; ``line``/``col`` locate it in the parsed text."""

    sql: str
    line: int = 1
    col: int = 1
    start: int = 0

    def render(self) -> str:
        return self.sql


Statement = Union[ExplainTrain, Train, AnalyzeWorkload, PassThrough]


def _describe_token_error(text: str, offset: int, cause: BaseException | None) -> str:
    detail = str(cause or "")
    if text.startswith("/*", offset):
        return "unterminated comment: missing */"
    if detail.startswith("Missing "):
        mark = detail.split()[1]
        what = "quoted name" if mark == '"' else "string"
        return f"unterminated {what}: missing {mark}"
    return "cannot read the statement from here"


def _tokenize(text: str) -> tuple[list[Token], int | None, str]:
    """All tokens, and where tokenizing stopped (offset) with why, if it failed."""
    tokenizer = _DIALECT.tokenizer()
    try:
        return tokenizer.tokenize(text), None, ""
    except sqlglot.errors.TokenError as e:
        tokens = list(tokenizer.tokens)
        offset = getattr(tokenizer._core, "_start", None)
        if not isinstance(offset, int) or offset < 0:
            offset = tokens[-1].end + 1 if tokens else 0
        return tokens, offset, _describe_token_error(text, offset, e.__cause__)


def _chunks(tokens: list[Token]) -> list[tuple[list[Token], Token | None]]:
    """Tokens of each statement with the semicolon that ends it (None for the last)."""
    out: list[tuple[list[Token], Token | None]] = [([], None)]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            out[-1] = (out[-1][0], tok)
            out.append(([], None))
        else:
            out[-1][0].append(tok)
    return out


def parse(text: str) -> list[Statement]:
    """Parse a script of ``;``-separated statements, ours and DuckDB's, in order.

    Raises ``ParseError`` (1-based line/column, caret excerpt) for a malformed statement of
    ours; DuckDB statements are not checked here.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() needs a str, got {type(text).__name__}")
    source = Source(text)
    tokens, failed_at, why = _tokenize(text)
    chunks = _chunks(tokens)
    out: list[Statement] = []
    for i, (chunk, semicolon) in enumerate(chunks):
        last = i == len(chunks) - 1
        broken = last and failed_at is not None
        if not chunk and not broken:
            continue
        start = chunk[0].start if chunk else failed_at
        if semicolon is not None:
            end = semicolon.start
        else:
            end = len(text)
        end = start + len(text[start:end].rstrip())
        if broken and chunk and is_ours(chunk):
            raise source.error(ParseError, why, failed_at)
        if is_ours(chunk):
            parser = _DIALECT.parser()
            out.append(parser.parse_statement(chunk, source, start, end))
        else:
            line, col = source.locate(start)
            out.append(PassThrough(text[start:end], line, col, start))
    return out


def parse_one(text: str) -> Statement:
    """Parse exactly one statement."""
    statements = parse(text)
    if len(statements) != 1:
        offset = len(text)
        if len(statements) > 1:
            second = statements[1]
            offset = (second.start if isinstance(second, PassThrough)
                      else second.meta.get("stmt_start", 0))
        raise Source(text).error(ParseError, f"expected one statement, got {len(statements)}",
                                 offset)
    return statements[0]


def render(statement: Statement) -> str:
    """Canonical text of a statement (a pass-through statement is returned as typed)."""
    if isinstance(statement, PassThrough):
        return statement.sql
    if not isinstance(statement, _Ours):
        raise TypeError(f"cannot render {type(statement).__name__}")
    return _render(statement)


def normalize(text: str) -> str:
    """Every statement of a script in canonical form, one per line, ``;``-separated."""
    return ";\n".join(render(s) for s in parse(text))
