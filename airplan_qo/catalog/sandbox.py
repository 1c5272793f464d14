"""The fence around SQL that users run on a catalog: no reach outside it, bounded time and memory.

SQL typed into ``airplan sql``, ``airplan shell`` or ``Session.sql()`` may come from someone
other than the machine's owner (a notebook, a dashboard, a service), so by default it can read
the catalog and nothing else:

- external access is off on the catalog's DuckDB database: no file, glob or URL reads by table
  functions (``read_csv``, ``read_parquet``, ``glob``, ...), no COPY, no ATTACH, no extension
  loading or installing, no scans of Python variables; ``lock_configuration`` then stops a
  query from turning any of it back on;
- every user statement has a time limit (a timer thread interrupts it) and the database a memory
  limit and a thread count; spilling to a temporary directory is off, so the memory limit is a
  real bound, and rows handed back to Python count against the same limit.

Settings of a DuckDB database apply to all of its connections, and DuckDB lets one process attach
a file only once, so the engine's own connection to the catalog runs under the same settings.
The engine needs none of what is turned off: it attaches the file before the fence goes up and
then only reads and writes the attached catalog. ``allow_external_access=True`` (CLI
``--allow-external-access``) skips the fence for trusted local use; the limits still apply.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import threading
import time
from typing import Any

import attrs
import duckdb

from airplan_qo.errors import (
    AirPlanError,
    MemoryLimitError,
    SandboxError,
    StatementTimeoutError,
    ValidationError,
)

#: Seconds a user statement may run before it is interrupted.
DEFAULT_TIMEOUT = 30.0
#: Memory limit of the catalog's DuckDB database (and of the rows a user query hands back).
DEFAULT_MEMORY_LIMIT = 1 << 30
#: The smallest memory limit accepted: below it DuckDB cannot run the engine's own statements.
MIN_MEMORY_LIMIT = 32 << 20
#: Share of the memory limit given to DuckDB's own ``memory_limit``: DuckDB bounds its buffers
#: but builds a single large value (a string doubled by a recursive CTE) on top of them, up to
#: about a fifth more, so the rest is headroom that keeps the whole of catalog SQL within the
#: limit (docs/sql.md, Security).
DUCKDB_SHARE = 0.8
#: Threads DuckDB may use for one statement.
DEFAULT_THREADS = max(1, min(4, os.cpu_count() or 1))
MAX_THREADS = 1024

_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
_FETCH_ROWS = 8192
_FLAG_HINT = ("--allow-external-access (connect(..., allow_external_access=True)) lifts this "
              "for trusted local use")


class _SessionDefault:
    """The marker for "the limit the session was opened with"."""

    def __repr__(self) -> str:
        return "SESSION_DEFAULT"


#: Passed as ``timeout``: use the session's (or catalog's) statement time limit.
SESSION_DEFAULT: Any = _SessionDefault()


def parse_memory_limit(value: int | str | None) -> int:
    """A memory limit in bytes from an int (bytes) or a size such as ``'512MB'``, ``'2GiB'``.

    Units follow DuckDB: KB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB powers of 1024;
    no unit means bytes. None gives :data:`DEFAULT_MEMORY_LIMIT`.
    """
    if value is None:
        return DEFAULT_MEMORY_LIMIT
    if isinstance(value, bool):
        raise ValidationError(f"memory limit must be a size such as '2GB', got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        m = _SIZE.match(str(value))
        unit = _UNITS.get(m.group(2).lower()) if m else None
        if unit is None:
            raise ValidationError(f"memory limit must be a size such as '512MB' or '2GiB' "
                                  f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got {value!r}")
        size = int(float(m.group(1)) * unit)
    if size < MIN_MEMORY_LIMIT:
        raise ValidationError(f"memory limit must be at least {format_bytes(MIN_MEMORY_LIMIT)}, "
                              f"got {format_bytes(size) if size >= 0 else value!r}")
    return size


def check_timeout(value: float | int | None) -> float | None:
    """A statement time limit in seconds; None or 0 mean no limit."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationError(f"timeout must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"timeout must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValidationError(f"timeout must be a finite number of seconds >= 0 (0: no limit), "
                              f"got {value!r}")
    return seconds or None


def check_threads(value: int | None) -> int:
    """A thread count between 1 and :data:`MAX_THREADS`; None gives :data:`DEFAULT_THREADS`."""
    if value is None:
        return DEFAULT_THREADS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise ValidationError(f"threads must be an integer in [1, {MAX_THREADS}], got {value!r}")
    return value


def format_bytes(size: int) -> str:
    """``1073741824`` -> ``'1 GiB'``, ``1500000000`` -> ``'1.4 GiB'``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"


def format_seconds(seconds: float) -> str:
    return f"{seconds:g} s"


@attrs.frozen
class SqlLimits:
    """Settings of the catalog's DuckDB database: external access, memory limit, threads."""

    allow_external_access: bool = False
    memory_limit: int = DEFAULT_MEMORY_LIMIT
    threads: int = DEFAULT_THREADS

    @classmethod
    def create(cls, *, allow_external_access: bool = False, memory_limit: int | str | None = None,
               threads: int | None = None) -> SqlLimits:
        """Checked limits; None for the memory limit or threads picks the default."""
        return cls(bool(allow_external_access), parse_memory_limit(memory_limit),
                   check_threads(threads))

    @property
    def duckdb_memory_limit(self) -> int:
        """DuckDB's own ``memory_limit``: :data:`DUCKDB_SHARE` of the limit (at least
        :data:`MIN_MEMORY_LIMIT`)."""
        return max(MIN_MEMORY_LIMIT, int(self.memory_limit * DUCKDB_SHARE))

    def describe(self) -> str:
        access = "on" if self.allow_external_access else "off"
        return (f"external access {access}, memory limit {format_bytes(self.memory_limit)}, "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}")

    def apply(self, root: duckdb.DuckDBPyConnection) -> None:
        """Set the limits on a database whose catalog is attached; then raise the fence.

        Order matters: ``temp_directory`` cannot change once external access is off, and
        nothing can change once the configuration is locked.
        """
        root.execute("SET temp_directory = ''")  # no spilling: the memory limit is a bound
        root.execute(f"SET memory_limit = '{self.duckdb_memory_limit} bytes'")
        root.execute(f"SET threads = {int(self.threads)}")
        if self.allow_external_access:
            return
        root.execute("SET autoinstall_known_extensions = false")
        root.execute("SET autoload_known_extensions = false")
        root.execute("SET allow_community_extensions = false")
        root.execute("SET enable_external_access = false")
        root.execute("SET lock_configuration = true")


# ---- one user statement ----------------------------------------------------------------------

_WRITER = ("they change the catalog, and the engine is its only writer (TRAIN and ANALYZE "
           "WORKLOAD add data)")
_OWN_DUCKDB = "run it in a DuckDB session of your own, e.g. duckdb -readonly airplan.duckdb"
#: Why a statement other than a query is not run, by its first keyword (or DuckDB's statement
#: type name): each kind of statement gets the reason that fits it.
REFUSALS = {
    **{w: "catalog SQL cannot change settings; its limits are set when the catalog is opened "
          "(--timeout, --memory-limit, --threads; connect(...))"
       for w in ("SET", "RESET", "VARIABLE_SET")},
    "USE": "catalog SQL runs on the catalog only; name its tables as airplan.TABLE",
    **{w: f"catalog SQL cannot install or load DuckDB extensions; {_OWN_DUCKDB}"
       for w in ("INSTALL", "LOAD", "FORCE", "EXTENSION")},
    **{w: f"catalog SQL reads only the catalog, not other databases; {_OWN_DUCKDB}"
       for w in ("ATTACH", "DETACH")},
    **{w: "each catalog query runs on its own and changes nothing, so it needs no transaction"
       for w in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "TRANSACTION")},
    "PRAGMA": ("pragmas change settings or read outside the catalog; for the catalog's tables "
               "and columns query duckdb_tables() or duckdb_columns()"),
    "CALL": "call a table function with SELECT * FROM name(...) instead",
    **{w: "prepared statements are not kept between catalog queries; run the query itself"
       for w in ("PREPARE", "EXECUTE", "DEALLOCATE")},
}


def refusal(kind: str) -> str:
    """Why catalog SQL does not run a statement of ``kind`` (its first keyword, or DuckDB's
    statement type name): settings, extensions, other databases, transactions and writes each
    get their own reason."""
    return REFUSALS.get(str(kind).upper(), _WRITER)


_EXPLAIN_PREFIX = re.compile(
    r"^(?:\s|--[^\n]*\n?|/\*.*?\*/)*EXPLAIN\s+(?:ANALYZE\s+)?(?:\([^()]*\)\s*)?", re.I | re.S)


def check_query(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything but one query (SELECT and its kin, or EXPLAIN of one) by DuckDB's parser.

    ``EXPLAIN ANALYZE`` runs its statement, so ``EXPLAIN ANALYZE COPY ... TO 'file'`` would
    write; only an EXPLAIN of a query passes. Parse errors propagate as ``duckdb.Error``.
    """
    statements = con.extract_statements(sql)
    if len(statements) != 1:
        raise SandboxError(f"catalog SQL must be one read-only query per statement, got "
                           f"{len(statements)} statements in {_excerpt(sql)!r}")
    try:
        kind = statements[0].type
    except ValueError:   # a statement type this duckdb module has no name for
        raise SandboxError(f"catalog SQL must be a read-only query, got {_excerpt(sql)!r}"
                           ) from None
    if kind == duckdb.StatementType.EXPLAIN:
        m = _EXPLAIN_PREFIX.match(sql)
        inner = con.extract_statements(sql[m.end():]) if m else []
        if len(inner) != 1 or inner[0].type != duckdb.StatementType.SELECT:
            raise SandboxError(f"catalog SQL may EXPLAIN only a query, got {_excerpt(sql)!r}; "
                               "the catalog is read-only to user SQL")
    elif kind != duckdb.StatementType.SELECT:
        name = getattr(kind, "name", str(kind))
        first = re.match(r"(?:\s|--[^\n]*\n?|/\*.*?\*/)*([A-Za-z_]+)", sql, re.S)
        word = first.group(1).upper() if first else name
        reason = refusal(word) if word.upper() in REFUSALS else refusal(name)
        raise SandboxError(f"catalog SQL must be a read-only query; {word} statements are not "
                           f"run: {reason}")


def _excerpt(sql: str, width: int = 60) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[:width - 3] + "..."


class Watchdog:
    """Interrupts a DuckDB connection when ``seconds`` have passed (None: never).

    ``fired`` tells afterwards whether it did. Leaving the block stops the timer; an interrupt
    racing with the end of the statement is harmless (DuckDB clears it at the next statement).
    DuckDB also clears an interrupt that arrives before the statement has started, so once the
    deadline has passed the interrupt is repeated every :attr:`REPEAT` seconds until the block
    is left: a statement that began late (a busy machine) is still stopped.
    """

    #: Seconds between repeated interrupts after the deadline.
    REPEAT = 0.2

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float | None):
        self.con, self.seconds = con, seconds
        self.fired = False
        self._lock = threading.Lock()
        self._active = False
        self._timer: threading.Timer | None = None
        self._deadline = math.inf

    def _fire(self) -> None:
        with self._lock:
            if not self._active:
                return
            self.fired = True
            self.con.interrupt()
            self._start(self.REPEAT)

    def _start(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self._deadline

    def __enter__(self) -> Watchdog:
        if self.seconds is not None:
            self._active = True
            self._deadline = time.monotonic() + self.seconds
            self._start(self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active = False
            timer = self._timer
        if timer is not None:
            timer.cancel()


def run_query(con: duckdb.DuckDBPyConnection, sql: str, *, limits: SqlLimits,
              timeout: float | None, types: bool = False
              ) -> tuple[list[str], list[tuple[Any, ...]]] | tuple[list[str], list[tuple[Any, ...]],
                                                                 list[Any]]:
    """Run one checked query on ``con`` under the time limit; the rows count against the memory
    limit as they are fetched. Raises CatalogError subclasses for the limits and the fence,
    and lets other ``duckdb.Error``s through.

    Returns (column names, rows); with ``types``, (column names, rows, column types): the
    DuckDB types of the columns (``duckdb.DuckDBPyType``) from the cursor's description."""
    check_query(con, sql)
    rss0 = resident_bytes()
    watchdog = Watchdog(con, timeout)
    try:
        with watchdog:
            cur = con.execute(sql)
            names = [d[0] for d in cur.description or ()]
            column_types = [d[1] for d in cur.description or ()]
            nested = [i for i, d in enumerate(cur.description or ()) if _is_nested(d[1])]
            rows: list[tuple[Any, ...]] = []
            if names:
                used = 0
                while True:
                    chunk = cur.fetchmany(_FETCH_ROWS)
                    if not chunk:
                        break
                    rows.extend(chunk)
                    used += _rows_size(chunk, nested)
                    rss = resident_bytes()
                    grown = rss - rss0 if rss is not None and rss0 is not None else 0
                    if max(used, grown) > limits.memory_limit:
                        raise MemoryLimitError(
                            f"query result is larger than the memory limit of "
                            f"{format_bytes(limits.memory_limit)} for catalog SQL (stopped after "
                            f"{len(rows)} rows); add a LIMIT or aggregate, or raise the limit "
                            "with --memory-limit SIZE (connect(..., memory_limit=...))")
                    if watchdog.expired():
                        raise _timeout(timeout)
            return (names, rows, column_types) if types else (names, rows)
    except duckdb.Error as exc:
        raise translate(exc, limits=limits, timeout=timeout, timed_out=watchdog.fired) from None


def resident_bytes() -> int | None:
    """The process's resident memory (Linux ``/proc/self/statm``), or None where unknown: what a
    query's result adds to it while it is fetched counts against the memory limit, DuckDB's
    buffers and the Python rows together."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _timeout(timeout: float | None) -> StatementTimeoutError:
    return StatementTimeoutError(
        f"query stopped at the statement time limit of {format_seconds(timeout or 0)}; the "
        "catalog is unchanged (raise the limit with --timeout SECONDS, or timeout=... in "
        "connect() or sql())")


def translate(exc: duckdb.Error, *, limits: SqlLimits, timeout: float | None,
              timed_out: bool) -> duckdb.Error | AirPlanError:
    """The error a user sees for a DuckDB error raised by user SQL (others come back as is)."""
    detail = _first_line(exc)
    if isinstance(exc, duckdb.InterruptException) and timed_out:
        return _timeout(timeout)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return MemoryLimitError(
            f"query stopped at the memory limit of {format_bytes(limits.memory_limit)} for "
            f"catalog SQL ({detail}); the catalog is unchanged (raise the limit with "
            "--memory-limit SIZE, or connect(..., memory_limit=...))")
    if isinstance(exc, duckdb.PermissionException):
        return SandboxError(f"external access is off for catalog SQL, which can read only the "
                            f"catalog: {detail}; {_FLAG_HINT}")
    if "configuration has been locked" in str(exc):
        return SandboxError(f"catalog SQL cannot change settings: {detail}")
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^[A-Za-z ]*Error: ", "", text).strip()


_NESTED_TYPES = {"list", "array", "struct", "map", "union"}


def _is_nested(dtype: Any) -> bool:
    return str(getattr(dtype, "id", "")).lower() in _NESTED_TYPES


def _rows_size(rows: list[tuple[Any, ...]], nested: list[int]) -> int:
    """About how many bytes a chunk of fetched rows holds in Python: tuples and values, counted
    once each (shared small values too), the contents of the ``nested`` columns to the bottom."""
    total = sum(map(sys.getsizeof, rows))
    total += sum(map(sys.getsizeof, itertools.chain.from_iterable(rows)))
    for i in nested:
        total += sum(_size(row[i]) for row in rows)
    return total


def _size(value: Any) -> int:
    if isinstance(value, (tuple, list, set)):
        return sys.getsizeof(value) + sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_size(k) + _size(v) for k, v in value.items())
    return sys.getsizeof(value)
