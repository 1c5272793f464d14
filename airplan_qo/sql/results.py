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
statement's answer; ``.arrow()`` and ``.df()`` convert those, to the column types DuckDB gave the
query (``types``, from the cursor's description) where they have an Arrow counterpart.

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
    #: For a catalog query: the DuckDB types of the columns (``duckdb.DuckDBPyType``, as a
    #: relation's ``.types``); empty for tables the engine builds (ANALYZE WORKLOAD, TRAIN).
    types: tuple[Any, ...] = ()

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

        A catalog query's columns keep the DuckDB type of the query (``types``): an empty
        result keeps its schema, a column of NULLs only its type, DECIMAL(p,s) is
        ``decimal128(p, s)``, TIMESTAMP a timestamp (see :func:`arrow_type` for the mapping).
        A column whose type has no Arrow counterpart here (HUGEINT, UNION, BIT, TIME WITH TIME
        ZONE, ...), and every column of a table the engine builds, is typed from the fetched
        values: a column pyarrow cannot type (an integer beyond 64 bits, a MAP with non-text
        keys) is converted to text, and a column of NULLs only has Arrow's null type."""
        import pyarrow as pa

        self._table("arrow()")
        arrays = []
        for i in range(len(self.columns)):
            values = [row[i] for row in self.rows]
            array = _typed_array(self.types[i], values) if i < len(self.types) else None
            if array is None:
                try:
                    array = pa.array(values)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                    array = pa.array([None if v is None else str(v) for v in values],
                                     type=pa.string())
            arrays.append(array)
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


# ---- DuckDB column types as Arrow types --------------------------------------------------------

_SIMPLE = {
    "boolean": "bool_", "tinyint": "int8", "smallint": "int16", "integer": "int32",
    "bigint": "int64", "utinyint": "uint8", "usmallint": "uint16", "uinteger": "uint32",
    "ubigint": "uint64", "float": "float32", "double": "float64", "varchar": "string",
    "blob": "binary", "date": "date32", "null": "null",
}
_TIMESTAMP_UNITS = {"timestamp": "us", "timestamp_ns": "ns", "timestamp_ms": "ms",
                    "timestamp_s": "s"}


def arrow_type(dtype: Any, tz: str = "UTC"):
    """The Arrow type of a DuckDB column type and how to convert a fetched Python value to it:
    ``(pyarrow.DataType, convert or None)``, or None when the type has no Arrow counterpart here.

    BOOLEAN, the signed and unsigned integers, FLOAT, DOUBLE, DECIMAL(p,s), VARCHAR (JSON
    included), ENUM and UUID (as text), BLOB, DATE, TIME, TIMESTAMP (``_S``, ``_MS``, ``_NS``
    and WITH TIME ZONE, in ``tz``), INTERVAL (month_day_nano) and LIST, fixed-size ARRAY,
    STRUCT and MAP of those. ``convert`` (None: the value as fetched) turns a non-NULL value
    into what pyarrow accepts for the type (a UUID into text, a MAP's dict into pairs)."""
    import pyarrow as pa

    kind = str(getattr(dtype, "id", "")).lower()
    children = getattr(dtype, "children", None) if kind in (
        "decimal", "list", "array", "struct", "map") else None
    if kind in _SIMPLE:
        return getattr(pa, _SIMPLE[kind])(), None
    if kind in ("uuid", "enum"):
        return pa.string(), str
    if kind in _TIMESTAMP_UNITS:
        return pa.timestamp(_TIMESTAMP_UNITS[kind]), None
    if kind == "timestamp with time zone":
        return pa.timestamp("us", tz=tz), None
    if kind == "time":
        return pa.time64("us"), None
    if kind == "interval":
        return pa.month_day_nano_interval(), None
    if kind == "decimal":
        fields = dict(children)
        return pa.decimal128(int(fields["precision"]), int(fields["scale"])), None
    if kind in ("list", "array"):
        fields = dict(children)
        child = arrow_type(fields["child"], tz)
        if child is None:
            return None
        ctype, conv = child
        listed = pa.list_(ctype, int(fields["size"])) if kind == "array" else pa.list_(ctype)
        return listed, None if conv is None else (
            lambda v: [None if x is None else conv(x) for x in v])
    if kind == "struct":
        parts = [(name, arrow_type(child, tz)) for name, child in children]
        if any(part is None for _, part in parts):
            return None
        convs = {name: conv for name, (_, conv) in parts if conv is not None}
        struct = pa.struct([(name, ctype) for name, (ctype, _) in parts])
        return struct, None if not convs else (
            lambda v: {k: x if x is None or k not in convs else convs[k](x) for k, x in v.items()})
    if kind == "map":
        fields = dict(children)
        key, value = arrow_type(fields["key"], tz), arrow_type(fields["value"], tz)
        if key is None or value is None:
            return None
        (ktype, kconv), (vtype, vconv) = key, value
        return pa.map_(ktype, vtype), (
            lambda v: [(k if kconv is None else kconv(k),
                        x if x is None or vconv is None else vconv(x)) for k, x in v.items()])
    return None


def _typed_array(dtype: Any, values: list[Any]):
    """``values`` as an Arrow array of the column's DuckDB type; None when the type has no Arrow
    counterpart or a value does not convert (the caller then types the column from its values).
    A TIMESTAMP WITH TIME ZONE column takes the time zone of its values (DuckDB's TimeZone
    setting), UTC when it has none."""
    import pyarrow as pa

    tz = next((getattr(v.tzinfo, "key", None) for v in values
               if v is not None and getattr(v, "tzinfo", None) is not None), None) or "UTC"
    try:
        found = arrow_type(dtype, tz)
    except (KeyError, TypeError, ValueError):
        return None
    if found is None:
        return None
    atype, convert = found
    if convert is not None:
        try:
            values = [None if v is None else convert(v) for v in values]
        except (AttributeError, TypeError, ValueError):
            return None
    try:
        return pa.array(values, type=atype)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
            TypeError, ValueError):
        return None


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
