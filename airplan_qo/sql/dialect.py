"""The AirPlan SQL dialect: DuckDB plus EXPLAIN [ANALYZE] TRAIN, TRAIN and ANALYZE WORKLOAD.

sqlglot's tokenizer treats ``EXPLAIN`` as a command keyword and swallows the rest of the
statement as one opaque string; we drop it from the keywords so the statement is tokenized
normally, then parse our statements with a recursive-descent parser on top of sqlglot's
(reusing its expression parser for SLA predicates) and render them back with a generator that
prints a canonical form: upper-case keywords, canonical clause and option order, normalised
numbers, lower-case unquoted names. Parsing that canonical form gives the same tree again.
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Any, Sequence

import sqlglot.errors
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

from ..errors import ParseError, ValidationError
from ..registry import suggest
from .expressions import (
    BOOLEAN_OPTIONS,
    EXPLAIN_OPTIONS,
    WITHIN_UNITS,
    AlgorithmClause,
    AnalyzeWorkload,
    CostModelClause,
    ExplainOption,
    ExplainTrain,
    FallbackClause,
    MinimizeClause,
    Setting,
    SlaClause,
    SparsityClause,
    Statement,
    TopologyClause,
    TopologyItem,
    Train,
    TransportClause,
    TransportSpec,
    WeightsClause,
    WithClause,
    WithinClause,
)
from .positions import Source

_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
_INT_RE = re.compile(r"[0-9]+\Z")

_NOT_WORDS = frozenset({
    TokenType.STRING, TokenType.IDENTIFIER, TokenType.NUMBER, TokenType.BIT_STRING,
    TokenType.BYTE_STRING, TokenType.HEREDOC_STRING, TokenType.HEX_STRING,
    TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.UNICODE_STRING,
})

_UNIT_WORDS = {"ROUNDS": "ROUNDS", "ROUND": "ROUNDS", "SECONDS": "SECONDS", "SECOND": "SECONDS",
               "JOULES": "JOULES", "JOULE": "JOULES"}
_CLAUSE_WORDS = ("WITH", "USING", "SLA", "WITHIN", "MINIMIZE", "COST", "FALLBACK")
_CLAUSE_LIST = ("WITH, USING TOPOLOGY, USING WEIGHTS, USING SPARSITY, USING TRANSPORT, "
                "USING ALGORITHM, SLA, WITHIN, MINIMIZE, COST MODEL or FALLBACK")
_USING_WORDS = ("TOPOLOGY", "WEIGHTS", "SPARSITY", "TRANSPORT", "ALGORITHM")
_FALLBACK_WORDS = ("AUTO", "COMPLETE", "ERROR")
_TRUE_WORDS = {"TRUE": True, "ON": True, "FALSE": False, "OFF": False}


def word(token: Token | None) -> str | None:
    """The upper-case text of a bare word token (keyword or unquoted name), else None."""
    if not token or token.token_type in _NOT_WORDS or not _WORD_RE.match(token.text):
        return None
    return token.text.upper()


def is_ours(tokens: Sequence[Token]) -> bool:
    """Whether a statement's tokens start one of our statements (else it goes to DuckDB).

    Ours: ``TRAIN ...``, ``ANALYZE WORKLOAD ...`` and ``EXPLAIN [ANALYZE] [(...)] TRAIN ...``.
    In the EXPLAIN form a TRAIN word inside an unclosed option list also counts, so a missing
    ``)`` is reported by us rather than handed to DuckDB.
    """
    if not tokens:
        return False
    first = word(tokens[0])
    if first == "TRAIN":
        return True
    if first == "ANALYZE":
        return len(tokens) > 1 and word(tokens[1]) == "WORKLOAD"
    if first != "EXPLAIN":
        return False
    i = 1
    if i < len(tokens) and word(tokens[i]) == "ANALYZE":
        i += 1
    if i < len(tokens) and tokens[i].token_type == TokenType.L_PAREN:
        depth = 0
        while i < len(tokens):
            kind = tokens[i].token_type
            if kind == TokenType.L_PAREN:
                depth += 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            elif word(tokens[i]) == "TRAIN":
                return True
            i += 1
    return i < len(tokens) and word(tokens[i]) == "TRAIN"


def normalize_number(text: str) -> str:
    """Canonical text of an unsigned numeric literal: ``007`` -> ``7``, ``1e6`` -> ``1000000.0``."""
    text = text.replace("_", "")
    if _INT_RE.match(text):
        return str(int(text))
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return repr(value)


class _PositionedError(sqlglot.errors.ParseError):
    """A sqlglot-internal parse error, with the character offset it refers to."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.description = message
        self.offset = offset


def _span(node: exp.Expr) -> tuple[int, int] | None:
    """(first, last) character offsets covered by a subtree, from its positioned nodes.

    Spans cached under ``meta["span"]`` are used without descending, so annotating a long
    AND chain node by node stays linear.
    """
    lo = hi = None
    stack = [node]
    while stack:
        sub = stack.pop()
        meta = sub._meta
        if meta and "span" in meta:
            first, last = meta["span"]
        else:
            stack.extend(sub.iter_expressions())
            if not (meta and meta.get("start") is not None):
                continue
            first, last = meta["start"], meta["end"]
        lo = first if lo is None else min(lo, first)
        hi = last if hi is None else max(hi, last)
    return None if lo is None else (lo, hi)


def node_offset(node: exp.Expr, operator: bool = False) -> int | None:
    """Best source offset of a node: its own position, else its earliest descendant's.

    With ``operator``, an operator node (``a OR b``, ``NOT a``) points at its keyword.
    """
    meta = node._meta
    if operator and meta and meta.get("operator") is not None:
        return meta["operator"]
    if meta and meta.get("start") is not None:
        return meta["start"]
    span = _span(node)
    return span[0] if span else None


class AirPlanParser(DuckDBParser):
    """DuckDB's parser plus our statements; errors are ``airplan_qo.errors.ParseError``."""

    _source: Source | None = None
    _stmt_end: int = 0
    _annotating: bool = False
    _starts: list[int] = []

    # entry points -------------------------------------------------------------------------

    def parse_statement(self, tokens: list[Token], source: Source, stmt_start: int,
                        stmt_end: int) -> Statement:
        """Parse one of our statements from its tokens (no semicolons) within ``source``."""
        self.reset()
        self.sql = source.text
        self._source = source
        self._tokens = tokens
        self._tokens_size = len(tokens)
        self._starts = [t.start for t in tokens]
        self._stmt_end = tokens[-1].end + 1 if tokens else stmt_end
        self._index = -1
        self._advance()
        try:
            node = self._parse_ours()
        except _PositionedError as e:
            raise source.error(ParseError, e.description, e.offset) from None
        except sqlglot.errors.SqlglotError as e:
            raise self._error(str(e).split("\n")[0]) from None
        except RecursionError:
            raise self._error("statement is nested too deeply") from None
        node.meta.update(source=source.text, stmt_start=stmt_start, stmt_end=stmt_end)
        return node

    def _parse_statement(self) -> exp.Expr | None:
        if self._curr and self._index == 0 and is_ours(self._tokens):
            if self._source is None or self._source.text != self.sql:
                self._source = Source(self.sql)
            self._starts = [t.start for t in self._tokens]
            self._stmt_end = self._tokens[-1].end + 1
            node = self._parse_ours()
            node.meta.update(source=self.sql, stmt_start=self._tokens[0].start,
                             stmt_end=self._stmt_end)
            return node
        if word(self._curr) == "EXPLAIN":
            start = self._curr
            self._advance()
            return self._parse_as_command(start)
        return super()._parse_statement()

    # errors and positions ------------------------------------------------------------------

    def raise_error(self, message: str, token: Token | None = None) -> None:
        token = token or self._curr
        offset = token.start if token else self._stmt_end
        if message.startswith("Required keyword"):
            message = "incomplete expression"
        context = "invalid SLA predicate: " if self._annotating else ""
        raise _PositionedError(f"{context}{message}", offset)

    def _error(self, message: str, token: Token | None = None,
               offset: int | None = None) -> ParseError:
        if offset is None:
            token = token or self._curr
            offset = token.start if token else self._stmt_end
        source = self._source or Source(self.sql)
        return source.error(ParseError, message, offset)

    def _found(self) -> str:
        tok = self._curr
        if not tok:
            return "found end of statement"
        text = tok.text if tok.token_type != TokenType.STRING else f"'{tok.text}'"
        if len(text) > 30:
            text = text[:27] + "..."
        return f"found '{text}'"

    def _expect_word(self, expected: str, message: str) -> Token:
        if word(self._curr) != expected:
            raise self._error(f"{message}, {self._found()}")
        self._advance()
        return self._prev

    def _expect(self, token_type: TokenType, message: str) -> Token:
        if self._curr.token_type != token_type or not self._curr:
            raise self._error(f"{message}, {self._found()}")
        self._advance()
        return self._prev

    def expression(self, instance, token=None, comments=None):
        instance = super().expression(instance, token, comments)
        if self._annotating and not (instance._meta and "start" in instance._meta):
            self._annotate(instance)
        return instance

    def _token_at(self, offset: int) -> int | None:
        i = bisect.bisect_left(self._starts, offset)
        return i if i < len(self._starts) and self._starts[i] == offset else None

    def _annotate(self, node: exp.Expr) -> None:
        """Position a predicate node: a leaf gets its token; an operator node keeps its
        operator token's offset under ``meta["operator"]`` (its span comes from its leaves)."""
        children = list(node.iter_expressions())
        if not children:
            if self._prev:
                node.update_positions(self._prev)
            return
        if isinstance(node, exp.Binary):
            left = _span(node.this) if node.this is not None else None
            if left is not None:
                i = bisect.bisect_right(self._starts, left[1])
                while i < len(self._tokens) and self._tokens[i].token_type == TokenType.R_PAREN:
                    i += 1
                if i < len(self._tokens):
                    node.meta["operator"] = self._tokens[i].start
        elif isinstance(node, exp.Unary) and node.this is not None:
            inner = _span(node.this)
            i = self._token_at(inner[0]) if inner else None
            if i is not None:
                while i > 0 and self._tokens[i - 1].token_type == TokenType.L_PAREN:
                    i -= 1
                if i > 0:
                    node.meta["operator"] = self._tokens[i - 1].start
        span = _span(node)
        if span is not None:
            node.meta["span"] = span

    # small pieces --------------------------------------------------------------------------

    def _name(self) -> exp.Identifier | None:
        """A bare word (lower-cased) or a quoted identifier (kept as written)."""
        tok = self._curr
        if word(tok) is not None:
            ident = exp.Identifier(this=tok.text.lower(), quoted=False)
        elif tok and tok.token_type == TokenType.IDENTIFIER:
            ident = exp.Identifier(this=tok.text, quoted=True)
        else:
            return None
        self._advance()
        return ident.update_positions(tok)

    def _number(self, signed: bool = True) -> exp.Literal | None:
        """A numeric literal, optionally signed; ``.5`` is accepted; None if there is none."""
        index, first = self._index, self._curr
        sign = ""
        if signed and self._curr.token_type in (TokenType.DASH, TokenType.PLUS):
            sign = "-" if self._curr.token_type == TokenType.DASH else ""
            self._advance()
        if self._curr.token_type == TokenType.NUMBER:
            text = self._curr.text
            self._advance()
        elif (self._curr.token_type == TokenType.DOT and self._next.token_type == TokenType.NUMBER
              and self._curr.end + 1 == self._next.start and _INT_RE.match(self._next.text)):
            text = "0." + self._next.text
            self._advance(2)
        else:
            self._retreat(index)
            return None
        try:
            text = normalize_number(text)
        except (ValueError, OverflowError):
            raise self._error(f"number {text} is out of range", first) from None
        if sign and text.startswith("-"):
            sign = ""
        literal = exp.Literal(this=sign + text, is_string=False)
        return literal.update_positions(line=first.line, col=first.col, start=first.start,
                                        end=self._prev.end)

    def _value(self) -> exp.Expr | None:
        """A literal: number, 'string', TRUE/FALSE, or a bare word taken as a string."""
        tok = self._curr
        number = self._number()
        if number is not None:
            return number
        if tok.token_type == TokenType.STRING:
            self._advance()
            return exp.Literal.string(tok.text).update_positions(tok)
        if tok.token_type in (TokenType.TRUE, TokenType.FALSE):
            self._advance()
            return exp.Boolean(this=tok.token_type == TokenType.TRUE).update_positions(tok)
        name = self._name()
        if name is not None:
            return exp.Literal.string(name.this).update_positions(tok)
        return None

    def _settings(self, what: str, allow_empty: bool) -> list[Setting]:
        """``( name = literal, ... )`` after WITH or a topology family."""
        self._expect(TokenType.L_PAREN, f"expected '(' after {what}")
        settings: list[Setting] = []
        seen: set[str] = set()
        if allow_empty and self._curr.token_type == TokenType.R_PAREN:
            self._advance()
            return settings
        while True:
            start = self._curr
            name = self._name()
            if name is None:
                raise self._error(f"expected a parameter name in {what} (...), {self._found()}")
            if name.this in seen:
                raise self._error(f"parameter '{name.this}' given twice in {what} (...)", start)
            seen.add(name.this)
            self._expect(TokenType.EQ, f"expected '=' after {name.this}")
            value = self._value()
            if value is None:
                raise self._error(f"expected a value for {name.this}, {self._found()}")
            settings.append(Setting(this=name, expression=value).update_positions(start))
            if self._match(TokenType.COMMA):
                continue
            if self._match(TokenType.R_PAREN):
                return settings
            raise self._error(f"expected ',' or ')' in {what} (...), {self._found()}")

    def _bool_option(self, name: str) -> exp.Boolean:
        tok = self._curr
        if not tok or tok.token_type in (TokenType.COMMA, TokenType.R_PAREN) or \
                word(tok) == "TRAIN":
            return exp.Boolean(this=True)
        if tok.token_type in (TokenType.TRUE, TokenType.FALSE):
            self._advance()
            return exp.Boolean(this=tok.token_type == TokenType.TRUE).update_positions(tok)
        if word(tok) in _TRUE_WORDS:
            self._advance()
            return exp.Boolean(this=_TRUE_WORDS[word(tok)]).update_positions(tok)
        if tok.token_type == TokenType.NUMBER and tok.text in ("0", "1"):
            self._advance()
            return exp.Boolean(this=tok.text == "1").update_positions(tok)
        raise self._error(f"expected TRUE, FALSE, ON or OFF after {name}, {self._found()}")

    # statements ----------------------------------------------------------------------------

    def _parse_ours(self) -> Statement:
        first = word(self._curr)
        if first == "TRAIN":
            node = self._parse_train()
        elif first == "ANALYZE":
            node = self._parse_analyze_workload()
        else:
            node = self._parse_explain_train()
        if self._curr:
            raise self._error(f"unexpected '{self._curr.text}' at the end of the statement")
        return node

    def _parse_explain_train(self) -> ExplainTrain:
        start = self._expect_word("EXPLAIN", "expected EXPLAIN")
        analyze: bool | None = None
        seen: dict[str, Token] = {}
        if word(self._curr) == "ANALYZE":
            seen["ANALYZE"] = self._curr
            analyze = True
            self._advance()
        options: list[ExplainOption] = []
        if self._curr.token_type == TokenType.L_PAREN:
            self._advance()
            while True:
                tok = self._curr
                name = word(tok)
                if name not in EXPLAIN_OPTIONS:
                    if name == "TRAIN" or not tok:
                        raise self._error(f"expected ')' to close the EXPLAIN options, "
                                          f"{self._found()}")
                    if name is None:
                        raise self._error(f"expected an EXPLAIN option, {self._found()}")
                    hint = suggest(name, list(EXPLAIN_OPTIONS)) if name else ""
                    raise self._error(f"unknown EXPLAIN option '{tok.text}'{hint}; expected one "
                                      f"of {', '.join(EXPLAIN_OPTIONS)}")
                if name in seen:
                    raise self._error(f"EXPLAIN option {name} given twice", tok)
                seen[name] = tok
                self._advance()
                if name in BOOLEAN_OPTIONS:
                    value: exp.Expr = self._bool_option(name)
                elif name == "FORMAT":
                    fmt = word(self._curr)
                    if fmt not in ("TEXT", "JSON"):
                        raise self._error(f"expected TEXT or JSON after FORMAT, {self._found()}")
                    value = exp.Var(this=fmt).update_positions(self._curr)
                    self._advance()
                else:
                    number = self._number()
                    if number is None:
                        raise self._error(f"expected a number after {name}, {self._found()}")
                    value = number
                if name == "ANALYZE":
                    analyze = bool(value.this)
                else:
                    options.append(ExplainOption(this=name, expression=value)
                                   .update_positions(tok))
                if self._match(TokenType.COMMA):
                    continue
                if self._match(TokenType.R_PAREN):
                    break
                raise self._error(f"expected ',' or ')' after EXPLAIN option {name}, "
                                  f"{self._found()}")
        if word(self._curr) != "TRAIN":
            raise self._error(f"expected TRAIN after EXPLAIN, {self._found()}")
        train = self._parse_train()
        node = ExplainTrain(this=train, analyze=bool(analyze), options=options)
        return node.update_positions(start)

    def _parse_head(self, keyword: str) -> tuple[exp.Identifier, exp.Literal]:
        """``dataset ON n CLIENTS`` after TRAIN or ANALYZE WORKLOAD."""
        dataset = self._name()
        if dataset is None:
            raise self._error(f"expected a dataset name after {keyword}, {self._found()}")
        self._expect_word("ON", f"expected ON after {keyword} {dataset.this}")
        tok = self._curr
        clients = self._number(signed=False)
        if clients is None:
            raise self._error(f"expected the number of clients after ON, {self._found()}")
        if not _INT_RE.match(clients.this):
            raise self._error(f"number of clients must be an integer, got {tok.text}", tok)
        self._expect_word("CLIENTS", f"expected CLIENTS after ON {clients.this}")
        return dataset, clients

    def _parse_analyze_workload(self) -> AnalyzeWorkload:
        start = self._expect_word("ANALYZE", "expected ANALYZE")
        self._expect_word("WORKLOAD", "expected WORKLOAD after ANALYZE")
        dataset, clients = self._parse_head("ANALYZE WORKLOAD")
        node = AnalyzeWorkload(this=dataset, clients=clients)
        if word(self._curr) == "WITH":
            tok = self._curr
            self._advance()
            node.set("params", WithClause(expressions=self._settings("WITH", False))
                     .update_positions(tok))
        if self._curr:
            raise self._error(f"unexpected '{self._curr.text}'; only WITH (...) may follow "
                              f"ANALYZE WORKLOAD ... CLIENTS")
        return node.update_positions(start)

    def _parse_train(self) -> Train:
        start = self._expect_word("TRAIN", "expected TRAIN")
        dataset, clients = self._parse_head("TRAIN")
        node = Train(this=dataset, clients=clients)
        seen: dict[str, Token] = {}
        within: list[WithinClause] = []
        while self._curr:
            tok = self._curr
            kw = word(tok)
            if kw == "USING":
                sub = word(self._next)
                if sub not in _USING_WORDS:
                    self._advance()
                    raise self._error(f"expected TOPOLOGY, WEIGHTS, SPARSITY, TRANSPORT or "
                                      f"ALGORITHM after USING, {self._found()}")
                key = f"USING {sub}"
            elif kw == "COST":
                key = "COST MODEL"
            elif kw in _CLAUSE_WORDS:
                key = kw
            else:
                hint = suggest(kw, list(_CLAUSE_WORDS)) if kw else ""
                what = f"unknown clause '{tok.text}'" if kw else f"unexpected '{tok.text}'"
                raise self._error(f"{what}{hint}; expected {_CLAUSE_LIST}")
            if key in seen and key != "WITHIN":
                first = self._source.locate(seen[key].start) if self._source else None
                where = f" (first at line {first[0]}, column {first[1]})" if first else ""
                raise self._error(f"duplicate {key} clause{where}", tok)
            seen.setdefault(key, tok)
            self._advance(2 if key.startswith("USING") else 1)
            if key == "WITH":
                node.set("params", WithClause(expressions=self._settings("WITH", False))
                         .update_positions(tok))
            elif key == "USING TOPOLOGY":
                node.set("topology", self._topology_clause().update_positions(tok))
            elif key == "USING WEIGHTS":
                node.set("weights", self._weights_clause().update_positions(tok))
            elif key == "USING SPARSITY":
                node.set("sparsity", self._sparsity_clause().update_positions(tok))
            elif key == "USING TRANSPORT":
                node.set("transport", self._transport_clause().update_positions(tok))
            elif key == "USING ALGORITHM":
                node.set("algorithm", self._algorithm_clause().update_positions(tok))
            elif key == "SLA":
                clause = SlaClause(this=self._sla_predicate())
                if word(self._curr) == "CONFIDENCE":
                    self._advance()
                    number = self._number(signed=False)
                    if number is None:
                        raise self._error(f"expected a probability after CONFIDENCE, "
                                          f"{self._found()}")
                    clause.set("confidence", number)
                node.set("sla", clause.update_positions(tok))
            elif key == "WITHIN":
                clause = self._within_clause().update_positions(tok)
                for other in within:
                    if other.args["unit"] == clause.args["unit"]:
                        raise self._error(f"duplicate WITHIN ... {clause.args['unit']} clause",
                                          tok)
                within.append(clause)
            elif key == "MINIMIZE":
                # a clause word where the metric should be is a missing metric
                metric = None if word(self._curr) in _CLAUSE_WORDS else self._name()
                if metric is None:
                    raise self._error(f"expected a metric after MINIMIZE (channel_uses, energy_j, "
                                      f"airtime_s or c_ours), {self._found()}")
                node.set("objective", MinimizeClause(this=metric).update_positions(tok))
            elif key == "FALLBACK":
                choice = self._curr
                if word(choice) not in _FALLBACK_WORDS:
                    raise self._error(f"expected AUTO, COMPLETE or ERROR after FALLBACK, "
                                      f"{self._found()}")
                self._advance()
                node.set("fallback", FallbackClause(this=exp.Identifier(this=word(choice)))
                         .update_positions(tok))
            else:
                self._expect_word("MODEL", "expected MODEL after COST")
                name = self._name()
                if name is None:
                    raise self._error(f"expected an estimator name after COST MODEL, "
                                      f"{self._found()}")
                node.set("cost_model", CostModelClause(this=name).update_positions(tok))
        if within:
            within.sort(key=lambda c: WITHIN_UNITS.index(c.args["unit"]))
            node.set("within", within)
        return node.update_positions(start)

    def _name_list(self, what: str) -> list[exp.Identifier]:
        names = []
        while True:
            tok = self._curr
            if names and word(tok) == "AUTO":
                raise self._error(f"AUTO cannot be combined with other {what} names", tok)
            name = self._name()
            if name is None:
                raise self._error(f"expected a {what} name, {self._found()}")
            names.append(name)
            if not self._match(TokenType.COMMA):
                return names

    def _topology_clause(self) -> TopologyClause:
        if word(self._curr) == "AUTO":
            self._advance()
            return TopologyClause(auto=True)
        specs = []
        while True:
            tok = self._curr
            if specs and word(tok) == "AUTO":
                raise self._error("AUTO cannot be combined with other topology names", tok)
            name = self._name()
            if name is None:
                raise self._error(f"expected AUTO or a topology family after USING TOPOLOGY, "
                                  f"{self._found()}" if not specs else
                                  f"expected a topology family, {self._found()}")
            spec = TopologyItem(this=name).update_positions(tok)
            if self._curr.token_type == TokenType.L_PAREN:
                spec.set("expressions", self._settings(f"topology {name.this}", True))
            specs.append(spec)
            if not self._match(TokenType.COMMA):
                return TopologyClause(expressions=specs)

    def _weights_clause(self) -> WeightsClause:
        if word(self._curr) == "AUTO":
            self._advance()
            return WeightsClause(auto=True)
        if word(self._curr) is None and self._curr.token_type != TokenType.IDENTIFIER:
            raise self._error(f"expected AUTO or a mixing weights rule after USING WEIGHTS, "
                              f"{self._found()}")
        return WeightsClause(expressions=self._name_list("weights"))

    def _transport_clause(self) -> TransportClause:
        if word(self._curr) == "AUTO":
            self._advance()
            return TransportClause(auto=True)
        specs = []
        while True:
            tok = self._curr
            if specs and word(tok) == "AUTO":
                raise self._error("AUTO cannot be combined with other transport names", tok)
            name = self._name()
            if name is None:
                raise self._error(f"expected AUTO or a transport (ota, digital) after USING "
                                  f"TRANSPORT, {self._found()}" if not specs else
                                  f"expected a transport, {self._found()}")
            spec = TransportSpec(this=name).update_positions(tok)
            if self._curr.token_type == TokenType.L_PAREN:
                spec.set("expressions", self._settings(f"transport {name.this}", False))
            specs.append(spec)
            if not self._match(TokenType.COMMA):
                return TransportClause(expressions=specs)

    def _algorithm_clause(self) -> AlgorithmClause:
        if word(self._curr) == "AUTO":
            self._advance()
            return AlgorithmClause(auto=True)
        if word(self._curr) is None and self._curr.token_type != TokenType.IDENTIFIER:
            raise self._error(f"expected AUTO or an algorithm name after USING ALGORITHM, "
                              f"{self._found()}")
        return AlgorithmClause(expressions=self._name_list("algorithm"))

    def _sparsity_clause(self) -> SparsityClause:
        if word(self._curr) == "AUTO":
            self._advance()
            return SparsityClause(auto=True)
        if self._match(TokenType.IN):
            self._expect(TokenType.L_PAREN, "expected '(' after USING SPARSITY IN")
            values = []
            while True:
                number = self._number()
                if number is None:
                    raise self._error(f"expected a number in USING SPARSITY IN (...), "
                                      f"{self._found()}")
                values.append(number)
                if self._match(TokenType.COMMA):
                    continue
                if self._match(TokenType.R_PAREN):
                    return SparsityClause(expressions=values, in_list=True)
                raise self._error(f"expected ',' or ')' in USING SPARSITY IN (...), "
                                  f"{self._found()}")
        number = self._number()
        if number is None:
            raise self._error(f"expected AUTO, a number or IN (...) after USING SPARSITY, "
                              f"{self._found()}")
        return SparsityClause(expressions=[number])

    def _sla_predicate(self) -> exp.Expr:
        index = self._index
        if word(self._curr) in _CLAUSE_WORDS:
            raise self._error(f"expected a predicate after SLA, {self._found()}")
        self._annotating = True
        try:
            predicate = self._parse_disjunction()
        finally:
            self._annotating = False
        if predicate is None or self._index == index:
            raise self._error(f"expected a predicate after SLA, {self._found()}")
        for node in predicate.walk():
            if isinstance(node, exp.Literal) and not node.is_string:
                try:
                    node.set("this", normalize_number(str(node.this)))
                except (ValueError, OverflowError):
                    raise self._error(f"number {node.this} is out of range",
                                      offset=node_offset(node)) from None
            elif isinstance(node, exp.Identifier) and not node.quoted:
                node.set("this", str(node.this).lower())
        return predicate

    def _within_clause(self) -> WithinClause:
        number = self._number()
        if number is None:
            raise self._error(f"expected a number after WITHIN, {self._found()}")
        unit = _UNIT_WORDS.get(word(self._curr) or "")
        if unit is None:
            raise self._error(f"expected ROUNDS, SECONDS or JOULES after WITHIN {number.this}, "
                              f"{self._found()}")
        self._advance()
        return WithinClause(this=number, unit=unit)


def _quote_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class AirPlanGenerator(DuckDBGenerator):
    """DuckDB's generator plus the canonical text of our statements."""

    def _name_sql(self, ident: exp.Identifier) -> str:
        text = str(ident.this)
        if ident.args.get("quoted"):
            return '"' + text.replace('"', '""') + '"'
        return text

    def _value_sql(self, value: exp.Expr) -> str:
        if isinstance(value, exp.Boolean):
            return "TRUE" if value.this else "FALSE"
        if isinstance(value, exp.Literal):
            return _quote_string(str(value.this)) if value.is_string else str(value.this)
        return self.sql(value)

    def _settings_sql(self, settings: list[Setting], sep: str) -> str:
        return ", ".join(f"{self._name_sql(s.this)}{sep}{self._value_sql(s.expression)}"
                         for s in settings)

    def _predicate_sql(self, predicate: exp.Expr) -> str:
        from ..plans.sla import sla_from_expression

        try:
            return sla_from_expression(predicate).render()
        except ValidationError:
            return self.sql(predicate)

    def _train_sql(self, e: Train) -> str:
        parts = [f"TRAIN {self._name_sql(e.this)} ON {e.args['clients'].this} CLIENTS"]
        params = e.args.get("params")
        if params:
            parts.append(f"WITH ({self._settings_sql(params.expressions, ' = ')})")
        topology = e.args.get("topology")
        if topology:
            if topology.args.get("auto"):
                parts.append("USING TOPOLOGY AUTO")
            else:
                specs = []
                for spec in topology.expressions:
                    text = self._name_sql(spec.this)
                    if spec.expressions:
                        text += f"({self._settings_sql(spec.expressions, '=')})"
                    specs.append(text)
                parts.append("USING TOPOLOGY " + ", ".join(specs))
        weights = e.args.get("weights")
        if weights:
            names = "AUTO" if weights.args.get("auto") else ", ".join(
                self._name_sql(n) for n in weights.expressions)
            parts.append(f"USING WEIGHTS {names}")
        sparsity = e.args.get("sparsity")
        if sparsity:
            if sparsity.args.get("auto"):
                parts.append("USING SPARSITY AUTO")
            elif sparsity.args.get("in_list"):
                values = ", ".join(self._value_sql(v) for v in sparsity.expressions)
                parts.append(f"USING SPARSITY IN ({values})")
            else:
                parts.append(f"USING SPARSITY {self._value_sql(sparsity.expressions[0])}")
        transport = e.args.get("transport")
        if transport:
            if transport.args.get("auto"):
                parts.append("USING TRANSPORT AUTO")
            else:
                specs = []
                for spec in transport.expressions:
                    text = self._name_sql(spec.this)
                    if spec.expressions:
                        text += f"({self._settings_sql(spec.expressions, ' = ')})"
                    specs.append(text)
                parts.append("USING TRANSPORT " + ", ".join(specs))
        algorithm = e.args.get("algorithm")
        if algorithm:
            names = "AUTO" if algorithm.args.get("auto") else ", ".join(
                self._name_sql(n) for n in algorithm.expressions)
            parts.append(f"USING ALGORITHM {names}")
        sla = e.args.get("sla")
        if sla:
            parts.append(f"SLA {self._predicate_sql(sla.this)}")
            if sla.args.get("confidence") is not None:
                parts.append(f"CONFIDENCE {self._value_sql(sla.args['confidence'])}")
        for clause in e.args.get("within") or []:
            parts.append(f"WITHIN {self._value_sql(clause.this)} {clause.args['unit']}")
        objective = e.args.get("objective")
        if objective:
            parts.append(f"MINIMIZE {self._name_sql(objective.this)}")
        cost = e.args.get("cost_model")
        if cost:
            parts.append(f"COST MODEL {self._name_sql(cost.this)}")
        fallback = e.args.get("fallback")
        if fallback:
            parts.append(f"FALLBACK {fallback.this.this}")
        return " ".join(parts)

    def _explain_sql(self, e: ExplainTrain) -> str:
        head = "EXPLAIN ANALYZE" if e.args.get("analyze") else "EXPLAIN"
        options = sorted(e.args.get("options") or [],
                         key=lambda o: EXPLAIN_OPTIONS.index(o.this))
        rendered = []
        for option in options:
            value = option.expression
            if isinstance(value, exp.Boolean):
                rendered.append(option.this if value.this else f"{option.this} FALSE")
            elif isinstance(value, exp.Var):
                rendered.append(f"{option.this} {value.this}")
            else:
                rendered.append(f"{option.this} {self._value_sql(value)}")
        if rendered:
            head += f" ({', '.join(rendered)})"
        return f"{head} {self._train_sql(e.this)}"

    def _analyze_sql(self, e: AnalyzeWorkload) -> str:
        text = f"ANALYZE WORKLOAD {self._name_sql(e.this)} ON {e.args['clients'].this} CLIENTS"
        params = e.args.get("params")
        if params:
            text += f" WITH ({self._settings_sql(params.expressions, ' = ')})"
        return text

    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        Train: _train_sql,
        ExplainTrain: _explain_sql,
        AnalyzeWorkload: _analyze_sql,
    }


class AirPlan(DuckDB):
    """DuckDB with our statements; ``EXPLAIN`` is an ordinary word to the tokenizer."""

    class Tokenizer(DuckDB.Tokenizer):
        KEYWORDS = {k: v for k, v in DuckDB.Tokenizer.KEYWORDS.items() if k != "EXPLAIN"}

    Parser = AirPlanParser
    Generator = AirPlanGenerator


def render(node: exp.Expr, **opts: Any) -> str:
    """Canonical text of one of our statements (or any expression) in the AirPlan dialect."""
    return AirPlan().generate(node, comments=False, **opts)
