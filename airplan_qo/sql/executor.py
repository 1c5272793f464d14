"""Run a script of statements against a session: our statements and read-only catalog SQL.

The whole script is parsed and bound before anything runs, so a malformed statement anywhere
leaves the catalog untouched. ``EXPLAIN TRAIN`` plans, ``ANALYZE WORKLOAD`` collects statistics,
``TRAIN`` and ``EXPLAIN ANALYZE TRAIN`` run the execution runtime. Every other statement goes to
DuckDB unchanged on the catalog connection, read-only: the engine is the catalog's only writer,
so statements other than queries are refused with a positioned error, and queries run inside a
transaction that is always rolled back, fenced and limited (see ``airplan_qo.catalog.sandbox``).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from typing import Any

import attrs

from ..catalog.sandbox import SESSION_DEFAULT, refusal
from ..errors import CatalogError, ParseError, ResourceLimitError, SandboxError, ValidationError
from .binder import BoundAnalyze, BoundTrain, bind
from .parser import PassThrough, parse
from .positions import Source
from .results import Result, TrainResult, feedback_note

READ_ONLY_KEYWORDS = ("SELECT", "WITH", "FROM", "VALUES", "TABLE", "SHOW", "DESCRIBE", "DESC",
                      "SUMMARIZE", "EXPLAIN")
_FIRST_WORD = re.compile(r"(?:\s|--[^\n]*\n?|/\*.*?\*/)*\(?\s*([A-Za-z_]+)", re.S)
_DUCKDB_LINE = re.compile(r"LINE (\d+):")
# What may follow EXPLAIN [ANALYZE] in catalog SQL: EXPLAIN ANALYZE runs its statement.
_EXPLAINABLE = tuple(k for k in READ_ONLY_KEYWORDS if k != "EXPLAIN")
_EXPLAIN_REST = re.compile(r"\s*(?:ANALYZE\b\s*)?(?:\([^()]*\)\s*)?\(?\s*([A-Za-z_]*)", re.I)

#: TRAIN statements print no EXPLAIN, so the planner's warnings go here (the CLI shows them).
planner_log = logging.getLogger("airplan_qo.planner")
planner_log.addHandler(logging.NullHandler())


def aborted_note(result: Result) -> str | None:
    """The line a CLI prints on stderr after a training statement that was interrupted (Ctrl-C),
    or None for any other result."""
    if result.status != "aborted" or result.exec_id is None:
        return None
    why = f" ({result.reason})" if result.reason else ""
    return (f"execution {result.exec_id} aborted{why}; resume with: airplan resume "
            f"{result.exec_id}")


def _check_read_only(stmt: PassThrough, source: Source) -> None:
    m = _FIRST_WORD.match(stmt.sql)
    word = m.group(1).upper() if m else ""
    if word == "EXPLAIN":
        inner = _EXPLAIN_REST.match(stmt.sql, m.end(1))
        if inner is None or inner.group(1).upper() not in _EXPLAINABLE:
            offset = stmt.start + (inner.start(1) if inner else m.end(1))
            shown = inner.group(1) if inner and inner.group(1) else "?"
            raise source.error(
                ParseError,
                f"EXPLAIN of a '{shown}' statement is not run on the catalog: EXPLAIN ANALYZE "
                "runs its statement, and catalog SQL must be a query "
                f"({', '.join(_EXPLAINABLE)})", offset)
    elif word not in READ_ONLY_KEYWORDS:
        offset = stmt.start + (m.start(1) if m else 0)
        shown = word or stmt.sql.strip()[:20]
        kind = ("EXTENSION" if m and re.match(r"UPDATE\s+EXTENSIONS\b", stmt.sql[m.start(1):],
                                              re.I) else word)
        shown = "UPDATE EXTENSIONS" if kind == "EXTENSION" else shown
        raise source.error(
            ParseError,
            f"'{shown}' statements are not run on the catalog: {refusal(kind)}. "
            f"Catalog SQL must be a query ({', '.join(READ_ONLY_KEYWORDS)})", offset)


def prepare(text: str) -> list[tuple[Any, Any]]:
    """Parse and bind a whole script: (statement, bound or None for catalog SQL) pairs."""
    if not text or not text.strip():
        raise ParseError("empty statement", line=1, col=1)
    source = Source(text)
    out = []
    for stmt in parse(text):
        if isinstance(stmt, PassThrough):
            _check_read_only(stmt, source)
            out.append((stmt, None))
        else:
            out.append((stmt, bind(stmt)))
    if not out:
        raise ParseError("no statement to run", line=1, col=1)
    return out


def execute_script(session, text: str, *, fmt: str = "text",
                   timeout: float | None = SESSION_DEFAULT, progress=None) -> list[Result]:
    """Run every statement of ``text``; the first failure raises (earlier results are lost)."""
    return list(iter_script(session, text, fmt=fmt, timeout=timeout, progress=progress))


def iter_script(session, text: str, *, fmt: str = "text", quiet: bool = True,
                timeout: float | None = SESSION_DEFAULT, progress=None):
    """Yield one Result per statement as it completes; ``quiet=False`` shows training progress
    (on a terminal). ``timeout`` limits each catalog query (default: the session's).
    ``progress``: a callable given the steps of a long planning call (``Session.plan``)."""
    for stmt, bound in prepare(text):
        if bound is None:
            yield _run_catalog_sql(session, stmt, timeout)
        elif isinstance(bound, BoundAnalyze):
            stats = session.analyze(bound.workload)
            data = attrs.asdict(stats)
            yield Result("table", tuple(data), (tuple(data.values()),))
        else:
            yield _run_train(session, bound, fmt, quiet, progress)


def _run_train(session, bound: BoundTrain, fmt: str, quiet: bool = True,
               progress=None) -> Result:
    opts = bound.options
    out_fmt = opts.format if opts.format != "text" else ("json" if fmt == "json" else "text")
    if bound.runs_training:
        return run_training(session, bound, out_fmt, quiet=quiet, progress=progress)
    result = session.plan(
        bound.workload, progress=progress, sla=bound.sla, topologies=bound.topologies,
        weights=bound.weights, sparsity=bound.sparsity, budgets=bound.budgets,
        estimator=bound.estimator, objective=bound.objective, statement=bound.text,
        fallback=bound.fallback, transports=bound.transports, algorithms=bound.algorithms,
        **bound.plan_options(),
        **({"confidence": bound.confidence} if bound.confidence else {}))
    rendered = result.explain(format=out_fmt, verbose=opts.verbose, costs=opts.costs,
                              alternatives=opts.alternatives)
    return Result("explain", text=rendered,
                  document=json.loads(rendered) if out_fmt == "json" else None)


def run_training(session, bound: BoundTrain, fmt: str = "text", *, quiet: bool = True,
                 progress=None) -> TrainResult:
    """TRAIN / EXPLAIN ANALYZE TRAIN on ``session``: plan, then execute the chosen plan; returns
    a ``TrainResult``. The statement's ``WITH (device = ...)`` wins over the session's device."""
    from ..runtime.device import resolve_device

    device = getattr(bound, "device", None) or session.device or "cpu"
    resolve_device(device)      # a device this machine lacks fails before planning
    plan = session.plan(bound.workload, sla=bound.sla, topologies=bound.topologies,
                        weights=bound.weights, sparsity=bound.sparsity, budgets=bound.budgets,
                        estimator=bound.estimator, objective=getattr(bound, "objective", None),
                        statement=bound.text, progress=progress,
                        fallback=getattr(bound, "fallback", None),
                        transports=bound.transports, algorithms=bound.algorithms,
                        **bound.plan_options(),
                        **({"confidence": bound.confidence} if bound.confidence else {}))
    if not bound.explain:   # EXPLAIN ANALYZE prints them among its lines
        for warning in plan.warnings:
            planner_log.warning("planner warning: %s", warning)
    report = session.execute(plan, quiet=quiet, reoptimize=True, device=device)
    fields = report.analyze_fields()
    if bound.explain and bound.options.calibrate:
        fields["calibration"] = _calibration_text(session, plan.estimator)
    r = report.result
    if bound.explain:
        opts = bound.options
        text = plan.explain(format=fmt, verbose=opts.verbose, costs=opts.costs,
                            alternatives=opts.alternatives, analyze=fields)
        document = None
        if fmt == "json":
            document = json.loads(text)
            explain = plan.explain(verbose=opts.verbose, costs=opts.costs,
                                   alternatives=opts.alternatives, analyze=fields)
        else:
            explain = text
        return train_result(session, plan, report, "explain", text=text, document=document,
                            explain=explain)
    row = {"exec_id": report.exec_id, "plan_id": report.plan_id,
           "plan": plan.chosen.plan.label(),
           "status": r.status, "rounds": r.rounds, "rounds_to_target": r.rounds_to_target,
           "final_accuracy": r.final_accuracy, "channel_uses": r.total_channel_uses,
           "reason": r.reason}
    explain = plan.explain(analyze=fields)
    return train_result(session, plan, report, "table", columns=tuple(row),
                        rows=(tuple(row.values()),), explain=explain)


def _calibration_text(session, estimator: str) -> str:
    try:
        return session.calibrate(estimator).render()
    except ValidationError as exc:
        return f"calibration skipped: {exc}"


def train_result(session, plan, report, kind: str, **shown: Any) -> TrainResult:
    """The ``TrainResult`` of executing ``plan`` (a PlanResult) as ``report`` (an
    ExecutionReport); ``shown`` holds what the statement displays (``text``, ``columns``,
    ``rows``, ``document``, ``explain``)."""
    r = report.result
    est = plan.chosen.cost.estimate
    rewirings = session.catalog.query(
        "SELECT round, old_plan_id, new_plan_id FROM airplan.reoptimizations "
        "WHERE exec_id = ? AND new_plan_id IS NOT NULL ORDER BY round", [report.exec_id])
    # an aborted run's feedback rows are computed but not recorded (resume records them)
    feedback = () if r.status == "aborted" else tuple(report.feedback)
    interval = (None if est.rounds_lo is None or est.rounds_hi is None
                else (float(est.rounds_lo), float(est.rounds_hi)))
    return TrainResult(
        kind, exec_id=report.exec_id, status=r.status, reason=r.reason,
        plan_id=report.plan_id, plan=plan.chosen.plan.label(), estimator=plan.estimator,
        rounds=r.rounds, rounds_to_target=r.rounds_to_target, accuracy=r.client_acc_mean,
        avg_model_accuracy=r.final_accuracy, channel_uses=r.total_channel_uses,
        predicted_rounds=est.rounds, predicted_rounds_interval=interval,
        p_meets_sla=est.p_meets, feedback=feedback,
        feedback_note=feedback_note(r.status, feedback, rewirings),
        events=tuple(report.events), **shown)


def _run_catalog_sql(session, stmt: PassThrough, timeout: float | None = SESSION_DEFAULT
                     ) -> Result:
    try:
        columns, rows, types = session.catalog.execute_user_sql(stmt.sql, timeout=timeout,
                                                                types=True)
    except CatalogError as exc:
        raise _positioned(exc, stmt) from None
    return Result("table", tuple(columns), tuple(tuple(r) for r in rows), types=tuple(types))


def _positioned(exc: Exception, stmt: PassThrough) -> CatalogError:
    message = str(exc).strip()
    if isinstance(exc, (SandboxError, ResourceLimitError)):  # one line, its own type
        return type(exc)(f"{message} (in the statement at line {stmt.line}, column {stmt.col})")
    m = _DUCKDB_LINE.search(message)
    if m:  # DuckDB numbers lines within the statement; renumber them within the script
        line = int(m.group(1)) + stmt.line - 1
        message = _DUCKDB_LINE.sub(f"LINE {line}:", message, count=1)
        return CatalogError(message)
    return CatalogError(f"{message}\n(in the statement at line {stmt.line}, column {stmt.col})")


# ---- output ----------------------------------------------------------------------------------

def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def format_result(result: Result, fmt: str) -> str:
    if result.kind == "explain":
        return result.text
    if fmt == "json":
        return json.dumps([dict(zip(result.columns, r)) for r in result.rows], default=str,
                          indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([[("" if v is None else v) for v in r] for r in result.rows])
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in r] for r in result.rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(result.columns)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    out = [line(result.columns), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(cells)} row{'s' if len(cells) != 1 else ''})")
    return "\n".join(out)
