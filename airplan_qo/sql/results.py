"""What ``Session.sql()`` returns: one result per statement, usable from Python.

A :class:`Result` is a table (``columns``, ``rows``) or a document (EXPLAIN ``text``, and
``document`` for FORMAT JSON). Tables answer like a DuckDB relation: ``.fetchall()``,
``.arrow()``, ``.df()``, ``.columns``, iteration and ``len()``.

The rows are materialised, not a live ``duckdb.DuckDBPyRelation``: a catalog query runs inside a
transaction that is rolled back as soon as its rows are fetched, under the statement time limit
and with the fetched rows counted against the memory limit (``catalog/sandbox.py``). A relation
handed back to the caller would be re-run lazily on every ``.df()`` or ``.fetchall()``, outside
that transaction, after the time limit's timer has stopped and without the memory accounting, and
it would read whatever the engine has written since. The rows the sandbox fetched are the
statement's answer; ``.arrow()`` and ``.df()`` convert those.

TRAIN and EXPLAIN ANALYZE TRAIN give a :class:`TrainResult`: the same ``.text`` / ``.rows`` as
before, and typed fields for the execution (see its docstring and docs/sql.md, Python API).
"""

from __future__ import annotations

from typing import Any, Iterator

import attrs

from ..errors import ValidationError


@attrs.frozen
class Result:
    """The outcome of one statement: a table (columns, rows) or a document (explain text/JSON)."""

    kind: str
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    text: str = ""
    document: Any = None
    #: For TRAIN and EXPLAIN ANALYZE TRAIN: the execution and how it ended.
    exec_id: int | None = None
    status: str | None = None
    reason: str | None = None

    # ---- DuckDB-relation-like access to a table ---------------------------------------------

    def _table(self, what: str) -> None:
        if self.kind != "table":
            raise ValidationError(
                f"{what} needs a table result; this {self.kind} result is a document: read "
                ".text (or .document for FORMAT JSON)")

    def fetchall(self) -> list[tuple[Any, ...]]:
        """The rows as a list of tuples (as ``duckdb``'s ``fetchall()``)."""
        self._table("fetchall()")
        return list(self.rows)

    def arrow(self):
        """The rows as a ``pyarrow.Table`` with the result's column names.

        Types are inferred from the fetched values; a column pyarrow cannot type (an integer beyond
        64 bits, a MAP with non-text keys) is converted to text, and a column of
        NULLs only (or of an empty result) has Arrow's null type."""
        import pyarrow as pa

        self._table("arrow()")
        arrays = []
        for i in range(len(self.columns)):
            values = [row[i] for row in self.rows]
            try:
                arrays.append(pa.array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                arrays.append(pa.array([None if v is None else str(v) for v in values],
                                       type=pa.string()))
        return pa.Table.from_arrays(arrays, names=[str(c) for c in self.columns])

    def df(self):
        """The rows as a ``pandas.DataFrame`` (needs pandas: ``pip install pandas``)."""
        self._table("df()")
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ValidationError("Result.df() needs pandas: pip install pandas (or use "
                                  ".arrow() or .fetchall())") from None
        frame = self.arrow().to_pandas()
        frame.columns = list(self.columns)
        return frame

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """Iterates over the rows of a table (a document has none)."""
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


@attrs.frozen
class TrainResult(Result):
    """The outcome of TRAIN or EXPLAIN ANALYZE TRAIN.

    ``kind`` is ``"table"`` for TRAIN (one row: ``exec_id``, ``plan_id``, ``plan``, ``status``,
    ``rounds``, ``rounds_to_target``, ``final_accuracy`` (the average model's), ``channel_uses``,
    ``reason``) and ``"explain"`` for EXPLAIN ANALYZE (``text`` and, for FORMAT JSON,
    ``document``). Both carry the fields below; a figure the run or the estimator did not
    produce is None.
    """

    #: The chosen plan (``airplan.plans``) and its label, e.g. ``ring [metropolis_hastings] k=1``.
    #: After a rewiring (``events``) the run ended on another plan; this is the planned one.
    plan_id: int | None = None
    plan: str = ""
    #: The cost model that planned it (``dsgd``, ``ttt``, ``paper``).
    estimator: str = ""
    #: Rounds run, and the first round the SLA's accuracy target was reached (None: not reached).
    rounds: int | None = None
    rounds_to_target: int | None = None
    #: Final mean accuracy of the clients' own models (what a device holds) and of the network's
    #: average model (which no device holds), on the test set.
    accuracy: float | None = None
    avg_model_accuracy: float | None = None
    #: Channel uses of the whole run.
    channel_uses: float | None = None
    #: The estimator's predicted rounds to the target, its interval ``(lo, hi)`` (90% for
    #: ``ttt``) and the probability of meeting the SLA (estimators that predict a distribution).
    predicted_rounds: float | None = None
    predicted_rounds_interval: tuple[float, float] | None = None
    p_meets_sla: float | None = None
    #: The EXPLAIN ANALYZE text of the run (for EXPLAIN ANALYZE, the same as ``text`` in text
    #: format); for TRAIN, rendered with the default options.
    explain: str = ""
    #: The estimate-vs-actual rows recorded in ``airplan.feedback`` (dicts with ``metric``,
    #: ``estimated``, ``actual``, ``censored``, ...), and why there are none when there are none.
    feedback: tuple[dict[str, Any], ...] = ()
    feedback_note: str | None = None
    #: Re-optimisation events of the run (``Event:`` lines of EXPLAIN ANALYZE).
    events: tuple[str, ...] = ()


def feedback_note(status: str, feedback: tuple[dict[str, Any], ...],
                  rewirings: list[dict[str, Any]]) -> str | None:
    """Why a run has no recorded feedback rows (None when it has them).

    ``rewirings`` are its ``airplan.reoptimizations`` rows that switched to a new plan."""
    if rewirings:
        first = min(rewirings, key=lambda e: e["round"])
        return (f"no feedback recorded: the run was re-optimised and rewired at round "
                f"{first['round']} (plan {first['old_plan_id']} -> {first['new_plan_id']}); "
                "its curve mixes plans, so calibration would attribute it to the first")
    if status == "aborted":
        return ("no feedback recorded: the run was aborted; resume it (airplan resume EXEC_ID) "
                "to finish and record it")
    if not feedback:
        return f"no feedback recorded: the run ended with status {status}"
    return None
