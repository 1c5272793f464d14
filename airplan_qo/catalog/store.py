"""The DuckDB catalog store: the engine's memory and the only code that writes to it.

One :class:`Catalog` wraps one DuckDB connection to one file (or ``:memory:``). Opening it for
writing creates or migrates the schema; opening it read-only checks that the schema is there.
Bulk data (sketches, candidate plans, per-round statistics) travels through Arrow in both
directions, never through per-row Python loops. DuckDB errors are turned into
:class:`~airplan_qo.errors.CatalogError` (or a subclass) whose message names the file.

The file is attached under the database name ``airplan`` (see
:data:`~airplan_qo.catalog.schema.CATALOG_NAME`), so ``airplan.<table>`` works on the connection
whatever the file is called. DuckDB allows one read-write process per file, and while a writer
holds the file no other process can open it at all, not even read-only; several read-only
processes can share a file. Within one process, Catalogs on the same file and mode share one
DuckDB database (each with its own connection and transactions). A long writer (training) holds
the file only while it writes: :meth:`Catalog.release` gives the file back and the next use
reopens it, waiting for another process's lock. ``running`` executions and evaluations are
therefore judged by their owner process (:mod:`~airplan_qo.catalog.owners`), not by the lock.

Every helper reads its results to the end: DuckDB 2.0 refuses new work (registering an Arrow
table, starting a relation) on a connection whose last ``execute()`` result is only partly read.

Once the file is attached, the database is fenced for user SQL (see
:mod:`~airplan_qo.catalog.sandbox`): external access off and the configuration locked, a memory
limit and a thread count, unless the Catalog is opened with ``allow_external_access=True``.
These are settings of the whole database, so Catalogs sharing one must ask for the same ones.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import itertools
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa

from airplan_qo.catalog.owners import describe_owner, owner_alive, this_owner
from airplan_qo.catalog.sandbox import (
    DEFAULT_TIMEOUT,
    SESSION_DEFAULT,
    SqlLimits,
    check_timeout,
    run_query,
)
from airplan_qo.catalog.schema import (
    CATALOG_NAME,
    COUNT_MIN,
    HISTOGRAM,
    ID_COLUMNS,
    RELEASE_KINDS,
    SCHEMA_VERSION,
    SEQUENCES,
    TABLES,
    pending,
)
from airplan_qo.errors import (
    CatalogError,
    CatalogLockedError,
    SchemaVersionError,
    ValidationError,
)

ENV_VAR = "AIRPLAN_CATALOG"
DEFAULT_PATH = "airplan.duckdb"
MEMORY = ":memory:"

#: Seconds an open waits for another process's lock when the Catalog is given no ``wait``
#: (0: fail at once); the CLI sets it from ``--wait`` with :func:`set_default_wait`.
_default_wait = 0.0

#: Seconds a Catalog reopened after :meth:`Catalog.release` waits at least for another
#: process's lock (another training's flush, a reader's query).
REACQUIRE_WAIT = 10.0

_LOCK_RE = re.compile(r"Conflicting lock is held in (?P<exe>.+?) \(PID (?P<pid>\d+)\)")
_INT32_MAX = np.iinfo(np.int32).max
_INT32_MIN = np.iinfo(np.int32).min
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min
_arrow_names = itertools.count()

# Fully qualified prefix of every catalog object on a Catalog connection.
_Q = f"{CATALOG_NAME}.main"

#: Writes by this process to each database it opens, by database and table (see
#: :meth:`Catalog.changes`); ``_ANY_TABLE`` counts statements whose table is not known.
_changes: dict[str, dict[str, int]] = {}
_ANY_TABLE = "*"

# Databases opened by this process, by (path, read_only): root connection, users, SqlLimits.
_open_databases: dict[tuple[str, bool], list[Any]] = {}
_open_lock = threading.RLock()  # re-entrant: __del__ may close a Catalog while one opens

#: Notes a user should see (executions recovered on open); the CLI prints them on stderr.
log = logging.getLogger("airplan_qo.catalog")
log.addHandler(logging.NullHandler())


def check_wait(seconds: Any) -> float:
    """A lock wait in seconds as a float; ValidationError unless a finite number >= 0."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise ValidationError(f"the lock wait must be a number of seconds >= 0, got {seconds!r}"
                              ) from None
    if not 0.0 <= value < float("inf"):
        raise ValidationError(f"the lock wait must be a number of seconds >= 0, got {seconds!r}")
    return value


def set_default_wait(seconds: float) -> float:
    """Make Catalogs opened without ``wait`` wait up to ``seconds`` for another process's lock
    (the CLI's ``--wait``); returns the previous default."""
    global _default_wait
    value = check_wait(seconds)
    previous, _default_wait = _default_wait, value
    return previous


def default_wait() -> float:
    """Seconds a Catalog opened without ``wait`` waits for another process's lock."""
    return _default_wait


class Sketches(NamedTuple):
    """Per-client label releases of one workload statistics version, as numpy arrays.

    ``kind`` is ``count_min`` (a Count-Min sketch, hashed with ``hash_seed``) or ``histogram``
    (depth 1, one cell per class). For a noised release ``n_records`` is derived from the noised
    cells, never the exact count.
    """

    counts: np.ndarray  # (n_clients, depth, width) int32
    n_records: np.ndarray  # (n_clients,) int64
    hash_seed: int
    noise_sigma: float
    kind: str = COUNT_MIN


def resolve_path(path: str | os.PathLike[str] | None = None) -> str:
    """The catalog location: ``path``, else ``$AIRPLAN_CATALOG``, else ``./airplan.duckdb``."""
    if path is None:
        path = os.environ.get(ENV_VAR) or DEFAULT_PATH
    path = os.fspath(path)
    if path == MEMORY:
        return MEMORY
    return str(Path(path).expanduser().absolute())


def canonical_json(value: Any) -> str:
    """A JSON text with sorted keys and no spaces, so equal objects compare equal as text."""
    if isinstance(value, str):
        value = json.loads(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class Catalog:
    """A connection to the AirPlan catalog (a DuckDB file or ``:memory:``).

    Use :meth:`open` (or the constructor) and close it with :meth:`close` or a ``with`` block.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
                 allow_external_access: bool = False, memory_limit: int | str | None = None,
                 threads: int | None = None, timeout: float | None = DEFAULT_TIMEOUT,
                 adopt: bool = False, wait: float | None = None):
        self.path = resolve_path(path)
        #: Seconds the open may wait for another process's lock (``wait``, or when None the
        #: process default, :func:`default_wait`); 0: fail at once.
        self.wait = check_wait(_default_wait if wait is None else wait)
        self.read_only = bool(read_only)
        #: Whether a read-write open may add the catalog to a DuckDB file that already holds
        #: other objects (refused by default: the file is probably not meant to be a catalog).
        self.adopt = bool(adopt)
        #: Database settings for user SQL (external access, memory limit, threads).
        self.limits = SqlLimits.create(allow_external_access=allow_external_access,
                                       memory_limit=memory_limit, threads=threads)
        #: Default time limit in seconds of :meth:`execute_user_sql` (None: no limit).
        self.timeout = check_timeout(timeout)
        self._tx_depth = 0
        #: Tables written by the transaction under way (counted again when it ends).
        self._tx_changed: set[str] = set()
        #: Whose writes :meth:`changes` counts: the file's (shared by the Catalogs on it in
        #: this process), or this Catalog's own for ``:memory:``.
        self._changes_key = (self.path if self.path != MEMORY
                             else f"{MEMORY}{uuid.uuid4()}")
        self._columns: dict[str, dict[str, str]] = {}
        #: Rows the engine never changes once committed (cached topologies), and the plan
        #: cache (planner/plan_cache.py), kept in memory by whoever reads them, one dict per
        #: kind: emptied when the connection is closed or released (another process may write
        #: meanwhile) and on every rollback (a row read inside a transaction may be one of its
        #: own, undone).
        self.memo: dict[str, dict[Any, Any]] = {}
        if self.read_only and self.path == MEMORY:
            raise CatalogError("an in-memory catalog cannot be opened read-only: it would be empty")
        if self.path != MEMORY:
            folder = os.path.dirname(self.path)
            if not os.path.isdir(folder):
                what = "is not a directory" if os.path.exists(folder) else "does not exist"
                raise CatalogError(
                    f"cannot open catalog file {self.path}: its folder {folder} {what}"
                    + ("" if self.read_only or os.path.exists(folder) else
                       f"; create it first (mkdir -p {folder})"))
        if self.read_only and not os.path.exists(self.path):
            raise CatalogError(f"catalog file {self.path} does not exist; a read-only open needs "
                               "an existing catalog (open it once read-write to create it)")
        self._con: duckdb.DuckDBPyConnection | None = None
        #: Whether the connection was given up by :meth:`release` (reopened on the next use).
        self._released = False
        #: Seconds a reopen after :meth:`release` waits for another process's lock (at least
        #: the open's own ``wait``): a training flush waits for another's short transaction.
        self.reacquire_wait = max(self.wait, REACQUIRE_WAIT)
        #: Executions this open found ``running`` with their owner process gone and marked
        #: ``interrupted`` (dicts with exec_id, owner_pid, owner_host); empty when none.
        self.recovered: tuple[dict[str, Any], ...] = ()
        #: The same for evaluations (dicts with evaluation_id, owner_pid, owner_host).
        self.recovered_evaluations: tuple[dict[str, Any], ...] = ()
        self._con = self._connect_waiting()
        try:
            if self.read_only:
                self._check_schema_read_only()
            else:
                self._migrate()
            self._load_columns()
            if not self.read_only:
                if self.path != MEMORY and "catalog_info" in self._columns:
                    self._check_identity()
                self.recover()
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
             **limits: Any) -> Catalog:
        """Open the catalog at ``path`` (see :func:`resolve_path`); writers create or migrate it.

        ``limits``: ``allow_external_access``, ``memory_limit``, ``threads``, ``timeout``,
        ``adopt`` (create the catalog in a DuckDB file that already holds other objects) and
        ``wait`` (seconds to wait for another process's lock) as for the constructor.
        """
        return cls(path, read_only=read_only, **limits)

    #: Same as :meth:`open`, for readers who expect DB-API naming.
    connect = open

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # a forgotten Catalog must not keep the file locked for the rest of the process
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        state = "closed" if self._con is None else "open"
        return f"Catalog({self.path!r}, {mode}, {state})"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._con is None and not self._released

    @property
    def released(self) -> bool:
        """Whether the connection is given up by :meth:`release` until the next use."""
        return self._released

    def close(self) -> None:
        """Close the connection (and release the file lock with the last user); idempotent."""
        self._released = False
        self._disconnect()
        if self.path == MEMORY:     # its write counts die with it (a file's are shared)
            _changes.pop(self._changes_key, None)

    def release(self) -> None:
        """Give the file back to other processes until this Catalog is used again: close the
        connection (the file lock goes with this process's last connection to the file); the
        next use reopens it, waiting up to :attr:`reacquire_wait` seconds for another process's
        lock. Training calls this between its flushes of round statistics so that readers and
        other writers can open the file meanwhile. A no-op for ``:memory:`` (closing would
        lose it) and for a closed Catalog; not allowed inside :meth:`transaction`."""
        if self._con is None or self.path == MEMORY:
            return
        if self._tx_depth:
            raise CatalogError(f"catalog {self.path} cannot be released inside a transaction")
        self._disconnect()
        self._released = True

    def reacquire(self, wait: float | None = None, *, quiet: bool = True) -> None:
        """Reopen a connection given up by :meth:`release` (nothing to do when open), waiting
        up to ``wait`` seconds (default :attr:`reacquire_wait`) for another process's lock;
        raises CatalogLockedError when the file stays locked, and stays released then. The
        wait is noted on the ``airplan_qo.catalog`` logger unless ``quiet``."""
        if self._con is not None or not self._released:
            return
        limit = self.reacquire_wait if wait is None else check_wait(wait)
        con = self._connect_waiting(limit, quiet=quiet)
        self._con, self._released = con, False
        try:
            current = self._current_version()
        except duckdb.Error as exc:
            self._disconnect()
            raise CatalogError(f"cannot read catalog file {self.path}: {_strip(str(exc))}"
                               ) from None
        if current != SCHEMA_VERSION:
            self._disconnect()
            raise CatalogError(
                f"catalog file {self.path} changed schema version to {current} while this "
                f"process had it released (this version of airplan-qo writes "
                f"{SCHEMA_VERSION}); reopen it")

    def _disconnect(self) -> None:
        """Close this Catalog's connection, and the database with the process's last user."""
        if self._con is None:
            return
        con, self._con = self._con, None
        self.memo.clear()
        with contextlib.suppress(duckdb.Error):
            con.close()
        if self.path == MEMORY:
            with contextlib.suppress(duckdb.Error):
                self._memory_root.close()
            return
        key = (self.path, self.read_only)
        with _open_lock:
            entry = _open_databases.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del _open_databases[key]
                with contextlib.suppress(duckdb.Error):
                    entry[0].close()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """A connection whose default database is the catalog file, attached as ``airplan``."""
        key = (self.path, self.read_only)
        with _open_lock:
            entry = _open_databases.get(key)
            if entry is None:
                if self.path != MEMORY and (self.path, not self.read_only) in _open_databases:
                    mode = "read-write" if self.read_only else "read-only"
                    raise _locked(
                        f"catalog file {self.path} is already open {mode} in this process; "
                        "DuckDB cannot open one file read-only and read-write in the same "
                        "process. Close the other Catalog first or reuse it.",
                        sys.executable, os.getpid())
                root = duckdb.connect()
                try:
                    options = "TYPE DUCKDB, READ_ONLY" if self.read_only else "TYPE DUCKDB"
                    root.execute(f"ATTACH ? AS {CATALOG_NAME} ({options})", [self.path])
                except duckdb.Error as exc:
                    root.close()
                    raise self._open_error(exc) from None
                try:
                    self.limits.apply(root)
                except duckdb.Error as exc:
                    root.close()
                    raise CatalogError(f"cannot set the SQL limits of catalog {self.path} "
                                       f"({self.limits.describe()}): {_strip(str(exc))}") from None
                entry = [root, 0, self.limits]
                if self.path != MEMORY:
                    _open_databases[key] = entry
            elif entry[2] != self.limits:
                raise CatalogError(
                    f"catalog file {self.path} is already open in this process with "
                    f"{entry[2].describe()}; DuckDB applies these to the whole database, so "
                    f"it cannot also be opened with {self.limits.describe()}. Open it with "
                    "the same settings or close the other session first.")
            try:
                con = entry[0].cursor()
                con.execute(f"USE {CATALOG_NAME}")
            except duckdb.Error as exc:
                raise self._open_error(exc) from None
            entry[1] += 1
            if self.path == MEMORY:
                self._memory_root = entry[0]  # an in-memory catalog dies with its Catalog
            return con

    def _connect_waiting(self, wait: float | None = None, *, quiet: bool = False
                         ) -> duckdb.DuckDBPyConnection:
        """:meth:`_connect`, retried while another process holds the file, for up to ``wait``
        seconds (default ``self.wait``). The wait is reported once on the ``airplan_qo.catalog``
        logger (the CLI prints it on stderr; at debug level when ``quiet``); a conflict inside
        this process never waits."""
        wait = self.wait if wait is None else wait
        deadline: float | None = None
        delay = 0.02
        while True:
            try:
                return self._connect()
            except CatalogLockedError as exc:
                pid = getattr(exc, "holder_pid", None)
                if wait <= 0 or pid == os.getpid():
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + wait
                    log.log(logging.DEBUG if quiet else logging.WARNING,
                            "catalog file %s is locked by %s (PID %s); waiting up to %g s "
                            "for it (--wait SECONDS)", self.path,
                            getattr(exc, "holder_exe", "another process"), pid, wait)
                elif now >= deadline:
                    raise _locked(f"{exc} Waited {wait:g} s for it (--wait SECONDS to wait "
                                  "longer).", getattr(exc, "holder_exe", ""), pid) from None
                time.sleep(max(0.0, min(delay, deadline - now)))
                delay = min(delay * 2, 0.25)

    def _open_error(self, exc: duckdb.Error) -> CatalogError:
        msg = str(exc)
        lock = _LOCK_RE.search(msg)
        if lock is not None:
            exe, pid = lock.group("exe"), int(lock.group("pid"))
            if "read-only mode" in msg:
                hint = ("That process has it open read-only, so you can open it read-only too "
                        "(--read-only, or Catalog.open(path, read_only=True)); writing has to "
                        "wait until it exits.")
            elif self.read_only:
                hint = ("That process holds it for writing, and while it does DuckDB lets no "
                        "other process open the file, not even with --read-only. A training run "
                        "holds it only for its short writes, so a --wait SECONDS of a few "
                        "seconds gets in between them; other holders: wait for them to finish "
                        "or stop them.")
            else:
                hint = ("DuckDB allows one read-write process per file. A training run holds it "
                        "only for its short writes, so a --wait SECONDS of a few seconds gets in "
                        "between them; other holders: wait for them to finish or stop them. Readers that "
                        "only query can share the file with --read-only (Catalog.open(path, "
                        "read_only=True)) when no writer holds it.")
            return _locked(f"catalog file {self.path} is locked by another process: {exe} "
                           f"(PID {pid}). {hint}", exe, pid)
        if "Unique file handle conflict" in msg:
            return _locked(f"catalog file {self.path} is already open in this process under "
                           f"another name ({_strip(msg)}); close it first",
                           sys.executable, os.getpid())
        if "not a valid DuckDB database" in msg or "Corrupt database" in msg:
            return CatalogError(f"catalog file {self.path} is not a DuckDB database or is "
                                f"corrupt ({_strip(msg)}); it was left unchanged")
        if "does not exist" in msg and self.read_only:
            return CatalogError(f"catalog file {self.path} does not exist; a read-only open needs "
                                "an existing catalog")
        return CatalogError(f"cannot open catalog file {self.path}: {_strip(msg)}")

    # ---- schema ------------------------------------------------------------------------------

    def _current_version(self) -> int | None:
        """The recorded schema version, or None when the file has no ``airplan`` catalog."""
        found = self._con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? "
            "AND schema_name = 'main' AND table_name = 'schema_version'",
            [CATALOG_NAME]).fetchall()[0][0]
        if not found:
            return None
        row = self._con.execute(f"SELECT max(version) FROM {_Q}.schema_version").fetchall()[0]
        return 0 if row[0] is None else int(row[0])

    def _newer_error(self, version: int) -> SchemaVersionError:
        return SchemaVersionError(
            f"catalog file {self.path} has schema version {version}, but this version of "
            f"airplan-qo understands schema versions up to {SCHEMA_VERSION}. Upgrade airplan-qo "
            "to use this catalog (the file was left unchanged).")

    def _migrate(self) -> None:
        """Create the schema or bring it forward, all in one transaction."""
        con = self._con
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                current = self._current_version()
                if current is not None and current > SCHEMA_VERSION:
                    raise self._newer_error(current)
                if current is None and not self.adopt:
                    self._refuse_foreign()
                for step in pending(current or 0):
                    self._changed(_ANY_TABLE)
                    for statement in step.statements:
                        con.execute(statement)
                    con.execute(f"INSERT INTO {_Q}.schema_version (version, description) "
                                "VALUES (?, ?)", [step.version, step.description])
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            if pending(current or 0):
                self._changed(_ANY_TABLE)
        except duckdb.Error as exc:
            raise CatalogError(f"cannot create or migrate the catalog schema in {self.path}: "
                               f"{_strip(str(exc))}") from None

    def recover(self) -> tuple[dict[str, Any], ...]:
        """Mark ``interrupted`` every execution and evaluation left ``running`` by a process
        that is gone (killed, crashed, power loss); returns the executions (also kept in
        :attr:`recovered`, the evaluations in :attr:`recovered_evaluations`).

        Called on every read-write open, and by ``resume`` and ``abandon`` before they read a
        row. Training holds the file only while it writes, so a ``running`` row may belong to a
        live process in this one or another: its owner decides
        (:func:`~airplan_qo.catalog.owners.owner_alive`), and a live owner's row is left alone.
        """
        executions = self._recover_table("executions", "exec_id")
        evaluations = self._recover_table("evaluations", "evaluation_id")
        for row in executions:
            log.warning("execution %s was left running by %s, which is gone; marked "
                        "interrupted. Resume with: airplan resume %s (or give it up: airplan "
                        "abandon %s)", row["exec_id"],
                        describe_owner(row["owner_pid"], row["owner_host"]), row["exec_id"],
                        row["exec_id"])
        for row in evaluations:
            log.warning("evaluation %s was left running by %s, which is gone; marked "
                        "interrupted. Run the same airplan evaluate again: the runs it recorded "
                        "are reused", row["evaluation_id"],
                        describe_owner(row["owner_pid"], row["owner_host"]))
        self.recovered = executions
        self.recovered_evaluations = evaluations
        return executions

    def _recover_table(self, table: str, id_col: str) -> tuple[dict[str, Any], ...]:
        columns = self._columns.get(table, {})
        if "owner_pid" not in columns:
            return ()
        extra = ", ".join(c for c in ("owner_started", "heartbeat_at") if c in columns)
        rows = self.query(f"SELECT {id_col}, owner_pid, owner_host{', ' + extra if extra else ''}"
                          f" FROM {_Q}.{table} WHERE status = 'running' ORDER BY {id_col}")
        if not rows:
            return ()
        now = now_utc()
        dead = [r for r in rows if not owner_alive(r, now=now)]
        if not dead:
            return ()
        found = now.isoformat(sep=" ", timespec="seconds")
        done = []
        with self.transaction():
            for row in dead:
                owner = describe_owner(row["owner_pid"], row["owner_host"])
                reason = (f"interrupted: {owner} stopped without recording an outcome "
                          f"(killed or crashed); found running when the catalog was "
                          f"opened for writing at {found} UTC")
                # only if still running with the same owner: another process may have
                # finished or resumed it since it was read
                with self._errors(f"recovery of {CATALOG_NAME}.{table}"):
                    self._changed(table)
                    hit = self._live.execute(
                        f"UPDATE {_Q}.{table} SET status = 'interrupted', reason = ? "
                        f"WHERE {id_col} = ? AND status = 'running' "
                        f"AND owner_pid IS NOT DISTINCT FROM ? RETURNING {id_col}",
                        [reason, row[id_col], row["owner_pid"]]).fetchall()
                if hit:
                    done.append(row)
        return tuple({k: row[k] for k in (id_col, "owner_pid", "owner_host")} for row in done)

    @property
    def catalog_id(self) -> str:
        """The catalog's identity: a random UUID drawn when the file was created (or migrated
        to schema 3); it keys where the catalog's checkpoints live."""
        value = self._scalar(f"SELECT value FROM {_Q}.catalog_info WHERE key = 'catalog_id'")
        if value is None:  # only a damaged file lacks it: give the catalog one now
            if self.read_only:
                raise CatalogError(f"catalog {self.path} has no catalog_id in "
                                   f"{CATALOG_NAME}.catalog_info; open it read-write once")
            value = str(uuid.uuid4())
            self.insert_row("catalog_info", {"key": "catalog_id", "value": value})
        return str(value)

    @property
    def ancestors(self) -> tuple[str, ...]:
        """The catalog ids of the catalogs this one was copied from, nearest first (empty for
        an original): a checkpoint written before the copy names one of them."""
        value = self._scalar(f"SELECT value FROM {_Q}.catalog_info WHERE key = 'copied_from'")
        return tuple(str(value).split()) if value else ()

    def _check_identity(self) -> None:
        """Give a copied catalog file its own catalog id, so that its checkpoints are kept apart
        from the original's.

        Each read-write open records where the file is (``catalog_path``, its absolute path,
        and ``catalog_file``, its device and inode) in ``catalog_info``. A file opened at
        another path than the recorded one, while the recorded path still holds the recorded
        file, is a copy: it draws a new catalog id and remembers the old one in
        ``copied_from``. A file found at another path with the original gone (moved or
        renamed), or at its own path with a new inode (restored from a backup), keeps its id.
        """
        try:
            st = os.stat(self.path)
        except OSError:
            return
        here = f"{st.st_dev}:{st.st_ino}"
        info = {r["key"]: r["value"] for r in self.query(
            f"SELECT key, value FROM {_Q}.catalog_info WHERE key IN "
            f"('catalog_id', 'catalog_path', 'catalog_file', 'copied_from')")}
        path, file = info.get("catalog_path"), info.get("catalog_file")
        if path == self.path and file == here:
            return
        copy = False
        if path is not None and path != self.path and file is not None and file != here:
            try:
                original = os.stat(path)
            except OSError:
                original = None
            copy = original is not None and f"{original.st_dev}:{original.st_ino}" == file
        values = {"catalog_path": self.path, "catalog_file": here}
        old_id = info.get("catalog_id")
        if copy and old_id:
            values["catalog_id"] = str(uuid.uuid4())
            values["copied_from"] = " ".join([old_id, *(info.get("copied_from") or "").split()])
        with self.transaction(), self._errors(f"recording the identity of {self.path}"):
            for key, value in values.items():
                self._changed("catalog_info")
                self._live.execute(
                    f"INSERT INTO {_Q}.catalog_info (key, value) VALUES (?, ?) "
                    f"ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])
        if "copied_from" in values:
            log.warning("catalog file %s is a copy of %s (catalog id %s); it gets its own id %s "
                        "so that its checkpoints are kept apart from the original's", self.path,
                        path, old_id, values["catalog_id"])

    def _refuse_foreign(self) -> None:
        """Raise when the file holds objects but no AirPlan catalog: writing the schema into an
        unrelated database would change it behind its owner's back."""
        rows = self._con.execute(
            "SELECT schema_name || '.' || table_name FROM duckdb_tables() "
            "WHERE database_name = $db UNION ALL "
            "SELECT schema_name || '.' || view_name FROM duckdb_views() "
            "WHERE database_name = $db AND NOT internal UNION ALL "
            "SELECT schema_name || '.' || sequence_name FROM duckdb_sequences() "
            "WHERE database_name = $db ORDER BY 1", {"db": CATALOG_NAME}).fetchall()
        if not rows:
            return
        names = ", ".join(r[0] for r in rows[:3]) + (", ..." if len(rows) > 3 else "")
        raise CatalogError(
            f"{self.path} is a DuckDB database with {len(rows)} object"
            f"{'s' if len(rows) != 1 else ''} ({names}) but no AirPlan catalog; it was left "
            "unchanged. Use another file for the catalog, or add the catalog to this one on "
            "purpose with Catalog.open(path, adopt=True) (aq.connect(path, adopt=True))")

    def _check_schema_read_only(self) -> None:
        try:
            current = self._current_version()
        except duckdb.Error as exc:
            raise CatalogError(
                f"cannot read catalog file {self.path}: {_strip(str(exc))}") from None
        if current is None:
            raise CatalogError(
                f"{self.path} is a DuckDB database but holds no AirPlan catalog (no "
                "schema_version table); open it once read-write to create one")
        if current > SCHEMA_VERSION:
            raise self._newer_error(current)
        if current < SCHEMA_VERSION:
            raise CatalogError(
                f"catalog file {self.path} has schema version {current}, older than this "
                f"version's {SCHEMA_VERSION}; open it once read-write to migrate it")

    def _load_columns(self) -> None:
        rows = self._con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = ? AND schema_name = 'main' AND list_contains(?, table_name) "
            "ORDER BY table_name, column_index", [CATALOG_NAME, list(TABLES)]).fetchall()
        self._columns = {}
        for table, column, dtype in rows:
            self._columns.setdefault(table, {})[column] = dtype

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        return int(self._scalar(f"SELECT max(version) FROM {_Q}.schema_version"))

    def columns(self, table: str) -> list[str]:
        """The column names of catalog table ``table``, in table order."""
        return list(self._table_columns(table))

    # ---- plumbing ----------------------------------------------------------------------------

    @property
    def _live(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            if not self._released:
                raise CatalogError(f"catalog {self.path} is closed")
            self.reacquire()
        return self._con

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except duckdb.Error as exc:
            raise CatalogError(
                f"{what} failed in catalog {self.path}: {_strip(str(exc))}") from None

    def _writable(self, table: str) -> None:
        if self.read_only:
            raise CatalogError(f"catalog {self.path} is open read-only; cannot write to "
                               f"{CATALOG_NAME}.{table}")

    def _table_columns(self, table: str) -> dict[str, str]:
        cols = self._columns.get(table)
        if cols is None:
            close = difflib.get_close_matches(table, TABLES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValidationError(f"unknown catalog table {table!r}{hint}")
        return cols

    def _check_columns(self, table: str, names: Any) -> dict[str, str]:
        cols = self._table_columns(table)
        for name in names:
            if name not in cols:
                close = difflib.get_close_matches(name, list(cols), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValidationError(
                    f"table {CATALOG_NAME}.{table} has no column {name!r}{hint}")
        return cols

    def _scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        with self._errors("query"):
            rows = self._live.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def _registered(self, table: pa.Table) -> Iterator[str]:
        name = f"__airplan_arrow_{next(_arrow_names)}"
        self._live.register(name, table)
        try:
            yield name
        finally:
            self._live.unregister(name)

    def changes(self, tables: Iterable[str]) -> int:
        """A number that grows with every write this process makes to any of ``tables`` of this
        catalog's database, through any Catalog on it (writes of unknown tables count for
        every table); the Catalogs of other processes cannot write while this one holds the
        file, and :meth:`release` and :meth:`close` empty :attr:`memo`.

        A write counts when its statement runs and again when its transaction ends (COMMIT or
        ROLLBACK), so what a transaction that began after the number was read found in those
        tables is still what a new one would find while the number stays the same: the
        planner's cache of plans (:mod:`airplan_qo.planner.plan_cache`) is valid that long.
        """
        counts = _changes.get(self._changes_key)
        if not counts:
            return 0
        return counts.get(_ANY_TABLE, 0) + sum(counts.get(t, 0) for t in tables)

    def _changed(self, table: str) -> None:
        """Count a write to ``table`` (:data:`_ANY_TABLE`: a table not known), now and again when
        the transaction under way ends."""
        with _open_lock:
            counts = _changes.setdefault(self._changes_key, {})
            counts[table] = counts.get(table, 0) + 1
        if self._tx_depth:
            self._tx_changed.add(table)

    def _transaction_ended(self) -> None:
        """Count again the writes of the transaction that just ended (committed or undone)."""
        tables, self._tx_changed = self._tx_changed, set()
        for table in tables:
            self._changed(table)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Catalog]:
        """BEGIN ... COMMIT around the block; ROLLBACK and re-raise on any exception.

        Nested blocks join the outermost transaction (DuckDB has no savepoints), so an exception
        anywhere inside undoes the whole outer block.
        """
        con = self._live
        if self._tx_depth:
            self._tx_depth += 1
            try:
                yield self
            finally:
                self._tx_depth -= 1
            return
        with self._errors("BEGIN"):
            con.execute("BEGIN TRANSACTION")
        self._tx_depth = 1
        try:
            yield self
        except BaseException:
            self._tx_depth = 0
            self.memo.clear()
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            self._transaction_ended()
            raise
        self._tx_depth = 0
        try:
            con.execute("COMMIT")
        except duckdb.Error as exc:
            self.memo.clear()
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise CatalogError(
                f"COMMIT failed in catalog {self.path}: {_strip(str(exc))}") from None
        finally:
            self._transaction_ended()

    # ---- generic writes ----------------------------------------------------------------------

    def insert_arrow(self, table: str, data: pa.Table | Mapping[str, Any]) -> int:
        """Bulk-insert an Arrow table (or a dict of columns) into ``airplan.<table>`` by name.

        Columns are matched by name; missing ones take their defaults. Returns the row count.
        """
        self._writable(table)
        arrow = (data if isinstance(data, pa.Table)
                 else _to_arrow(table, data, self._table_columns(table)))
        self._check_columns(table, arrow.column_names)
        if arrow.num_rows == 0:
            return 0
        with self._errors(f"insert into {CATALOG_NAME}.{table}"), self._registered(arrow) as name:
            self._changed(table)
            self._live.execute(f"INSERT INTO {_Q}.{table} BY NAME SELECT * FROM {name}")
        return arrow.num_rows

    def insert_rows(self, table: str, columns: Mapping[str, Any]) -> np.ndarray | None:
        """Bulk-insert columns (equal-length sequences or numpy arrays) through Arrow.

        For tables with a generated id, the ids are drawn from the table's sequence first and
        returned in row order (int64 array); otherwise returns None.
        """
        self._writable(table)
        cols = self._check_columns(table, columns)
        arrow = _to_arrow(table, columns, cols)
        id_col = ID_COLUMNS.get(table)
        if id_col is None or id_col in columns:
            self.insert_arrow(table, arrow)
            return None if id_col is None else np.asarray(columns[id_col], dtype=np.int64)
        with self.transaction():
            id_array = self.next_ids(table, arrow.num_rows)
            self.insert_arrow(table, arrow.append_column(id_col, pa.array(id_array)))
        return id_array

    def arrow_rows(self, table: str, columns: Mapping[str, Any]) -> pa.Table:
        """Columns of ``table`` (equal-length sequences or numpy arrays) as the Arrow table
        :meth:`insert_numbered` takes, checked against the table's columns; JSON columns as
        canonical text."""
        return _to_arrow(table, columns, self._check_columns(table, columns))

    def insert_numbered(self, table: str, rows: pa.Table, *, key: str,
                        parent: str | None = None) -> tuple[np.ndarray, int | None]:
        """Insert ``rows`` (an Arrow table of columns of ``table``, e.g. from
        :meth:`arrow_rows`) in one statement, each row with a new id drawn from the table's
        sequence as it is inserted. ``key``: a column whose values tell the rows apart, by
        which the ids are matched to them. With ``parent`` (the generated id column of another
        table, e.g. ``planning_run_id``) the rows also all get one new id of that table's
        sequence in that column, for its row to be inserted after them (naming one of them).

        Returns the rows' ids in ``rows``' order and the parent id (None without ``parent``).
        """
        id_col, parent_table = self._numbering(table, parent)
        self._check_columns(table, [*rows.column_names, key])
        if id_col in rows.column_names or (parent and parent in rows.column_names):
            raise ValidationError(f"the rows for {CATALOG_NAME}.{table} already have the ids "
                                  "insert_numbered draws")
        keys = rows.column(key).to_numpy()
        if len(np.unique(keys)) != len(keys):
            raise ValidationError(f"column {key!r} does not tell the rows for "
                                  f"{CATALOG_NAME}.{table} apart")
        if rows.num_rows == 0:
            parent_id = (int(self.next_ids(parent_table, 1)[0]) if parent_table is not None
                         else None)
            return np.zeros(0, dtype=np.int64), parent_id
        with self._registered(rows) as name:
            return self._insert_drawing_ids(table, id_col, parent, parent_table, key, keys,
                                            f"* FROM {name}", [])

    def insert_copies(self, table: str, parent: str, parent_id: int, *, key: str,
                      keys: np.ndarray) -> tuple[np.ndarray, int]:
        """Insert in one statement a copy of each row of ``table`` whose ``parent`` column
        (the generated id of another table, e.g. ``planning_run_id``) is ``parent_id``, each
        with a new id of the table's sequence and all with one new id of the parent's
        sequence, for its row to be inserted after them: the rows a planning run served from
        the plan cache shares with the run it was first recorded by (``plans`` rows are never
        changed once inserted). ``keys``: the values of column ``key`` the copies must have,
        one each; anything else raises CatalogError (the caller's transaction undoes it).

        Returns the copies' ids in the order of ``keys`` and the new parent id."""
        id_col, parent_table = self._numbering(table, parent)
        if parent_table is None:
            raise ValidationError("insert_copies needs the parent id column of the rows")
        cols = [c for c in self._check_columns(table, [key]) if c not in (id_col, parent)]
        source = (", ".join(f'"{c}"' for c in cols)
                  + f" FROM {_Q}.{table} WHERE {parent} = ?")
        keys = np.asarray(keys)
        ids, new_parent = self._insert_drawing_ids(table, id_col, parent, parent_table, key,
                                                   keys, source, [int(parent_id)])
        return ids, int(new_parent)

    def _numbering(self, table: str, parent: str | None) -> tuple[str, str | None]:
        """The id column of ``table`` and the table whose generated id ``parent`` is."""
        self._writable(table)
        id_col = ID_COLUMNS.get(table)
        if id_col is None:
            raise ValidationError(f"table {CATALOG_NAME}.{table} has no generated id")
        parent_table = next((t for t, c in ID_COLUMNS.items() if c == parent), None)
        if parent is not None and (parent_table is None or parent == id_col
                                   or parent not in self._table_columns(table)):
            raise ValidationError(f"{parent!r} is not the generated id of a catalog table "
                                  f"that {CATALOG_NAME}.{table} names")
        return id_col, parent_table

    def _insert_drawing_ids(self, table: str, id_col: str, parent: str | None,
                            parent_table: str | None, key: str, keys: np.ndarray, source: str,
                            params: list[Any]) -> tuple[np.ndarray, int | None]:
        """``INSERT ... SELECT`` of ``source`` (what follows the drawn ids in the SELECT list)
        with the ids drawn in the statement; the ids matched to ``keys`` through ``key``."""
        parent_sql = (f", (SELECT nextval('{_Q}.{SEQUENCES[parent_table]}')) AS {parent}"
                      if parent_table is not None else "")
        with self._errors(f"insert into {CATALOG_NAME}.{table}"):
            self._changed(table)
            out = self._live.execute(
                f"INSERT INTO {_Q}.{table} BY NAME SELECT nextval('{_Q}.{SEQUENCES[table]}') "
                f"AS {id_col}{parent_sql}, {source} "
                f"RETURNING {id_col}, \"{key}\"{', ' + parent if parent_table else ''}",
                params).fetchnumpy()
        # matched by key: the order DuckDB returns the rows in is not relied upon
        got = np.asarray(out[key])
        order = np.argsort(got, kind="stable")
        if len(got) != len(keys) or not np.array_equal(got[order], np.sort(keys)):
            raise CatalogError(f"insert into {CATALOG_NAME}.{table} in catalog {self.path} "
                               f"wrote {len(got)} rows whose {key} values are not the "
                               f"{len(keys)} expected")
        ids = np.asarray(out[id_col], dtype=np.int64)[order][np.searchsorted(got[order], keys)]
        parent_id = None
        if parent_table is not None:
            drawn = np.unique(out[parent])
            if len(drawn) != 1:
                raise CatalogError(f"insert into {CATALOG_NAME}.{table} drew {len(drawn)} "
                                   f"values of {parent} for one batch in catalog {self.path}")
            parent_id = int(drawn[0])
        return ids, parent_id

    def next_ids(self, table: str, n: int) -> np.ndarray:
        """Draw ``n`` ids from the sequence of ``table``'s generated id (int64 array), for rows
        that are inserted with them (e.g. one that must name another before both exist)."""
        self._writable(table)
        if table not in SEQUENCES:
            raise ValidationError(f"table {CATALOG_NAME}.{table} has no generated id")
        with self._errors(f"id allocation for {CATALOG_NAME}.{table}"):
            ids = self._live.execute(f"SELECT nextval('{_Q}.{SEQUENCES[table]}') FROM range(?)",
                                     [int(n)]).fetchnumpy()
        return np.asarray(next(iter(ids.values())), dtype=np.int64)

    def insert_row(self, table: str, row: Mapping[str, Any]) -> int | None:
        """Insert one row (a dict of column values) and return its generated id (None if none).

        Dict or list values of JSON columns are stored as canonical JSON; numpy arrays go to list
        columns without a Python loop.
        """
        self._writable(table)
        cols = self._check_columns(table, row)
        id_col = ID_COLUMNS.get(table)
        returning = f" RETURNING {id_col}" if id_col else ""
        if row and not any(isinstance(v, np.ndarray) for v in row.values()):
            # plain values bind as parameters: half the cost of registering a one-row Arrow table
            names = ", ".join(f'"{k}"' for k in row)
            marks = ", ".join("?" * len(row))
            with self._errors(f"insert into {CATALOG_NAME}.{table}"):
                self._changed(table)
                result = self._live.execute(
                    f"INSERT INTO {_Q}.{table} ({names}) VALUES ({marks}){returning}",
                    [_parameter(v, cols[k]) for k, v in row.items()]).fetchall()
            return None if not id_col else int(result[0][0])
        arrow = _to_arrow(table, {k: [v] for k, v in row.items()}, cols, one_row=row)
        with self._errors(f"insert into {CATALOG_NAME}.{table}"), self._registered(arrow) as name:
            if arrow.num_columns:
                sql = f"INSERT INTO {_Q}.{table} BY NAME SELECT * FROM {name}{returning}"
            else:
                sql = f"INSERT INTO {_Q}.{table} DEFAULT VALUES{returning}"
            self._changed(table)
            result = self._live.execute(sql).fetchall()
        return None if not id_col else int(result[0][0])

    def update_row(self, table: str, row_id: int, values: Mapping[str, Any]) -> None:
        """Set columns of the row of ``table`` whose generated id is ``row_id``.

        Calibration rows are versioned and never updated here: use :meth:`supersede_calibration`.
        """
        self._writable(table)
        if table == "calibration":
            raise ValidationError("calibration rows are never overwritten; record new values "
                                  "with supersede_calibration()")
        id_col = ID_COLUMNS.get(table)
        if id_col is None:
            raise ValidationError(f"table {CATALOG_NAME}.{table} has no generated id; update_row "
                                  f"works on {', '.join(sorted(ID_COLUMNS))}")
        cols = self._check_columns(table, values)
        if not values:
            return
        names = list(values)
        params = [_param(values[n], cols[n]) for n in names]
        assign = ", ".join(f'"{n}" = ?' for n in names)
        with self._errors(f"update of {CATALOG_NAME}.{table}"):
            self._changed(table)
            found = self._live.execute(
                f"UPDATE {_Q}.{table} SET {assign} WHERE {id_col} = ? RETURNING {id_col}",
                [*params, int(row_id)]).fetchall()
        if not found:
            raise CatalogError(f"no row with {id_col} = {row_id} in {CATALOG_NAME}.{table} of "
                               f"catalog {self.path}")

    # ---- generic reads -----------------------------------------------------------------------

    def query(self, sql: str, params: list[Any] | Mapping[str, Any] | None = None
              ) -> list[dict[str, Any]]:
        """Run a read query and return its rows as dicts (for small results). A statement
        that is not a SELECT (an UPDATE ... RETURNING) counts as a write of every table
        (:meth:`changes`)."""
        if not _is_select(sql):
            self._changed(_ANY_TABLE)
        with self._errors("query"):
            cur = self._live.execute(sql, params if params is not None else [])
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def query_arrow(self, sql: str, params: list[Any] | Mapping[str, Any] | None = None
                    ) -> pa.Table:
        """Run a read query and return an Arrow table (for bulk results)."""
        with self._errors("query"):
            rel = self._live.sql(sql, params=params)
            if rel is None:
                raise CatalogError(f"query_arrow needs a statement that returns rows: {sql!r}")
            return rel.to_arrow_table()

    def execute_user_sql(self, sql: str, *, timeout: float | None = SESSION_DEFAULT,
                         types: bool = False) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a user's query on the catalog connection; return (column names, rows), and with
        ``types`` the columns' DuckDB types as a third item.

        Only one read-only query is run (checked by DuckDB's parser), inside a transaction that
        is always rolled back, so user SQL can never change the catalog (the engine is its only
        writer). It runs under :attr:`limits` and a time limit of ``timeout`` seconds (default
        :attr:`timeout`; None or 0: none). Reaching outside the catalog raises SandboxError,
        a limit StatementTimeoutError or MemoryLimitError; other DuckDB errors (syntax, unknown
        tables) become CatalogError carrying DuckDB's message, positions included.
        """
        con = self._live
        seconds = self.timeout if timeout is SESSION_DEFAULT else check_timeout(timeout)
        with self._errors("SQL"):
            con.execute("BEGIN TRANSACTION")
            try:
                return run_query(con, sql, limits=self.limits, timeout=seconds, types=types)
            finally:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")

    # ---- workloads and sketches --------------------------------------------------------------

    def find_workload(self, fingerprint: str) -> dict[str, Any] | None:
        """The ``workloads`` row with this fingerprint, or None."""
        rows = self.query(f"SELECT * FROM {_Q}.workloads WHERE fingerprint = ?", [fingerprint])
        return rows[0] if rows else None

    def next_stats_version(self, workload_id: int) -> int:
        """One more than the highest statistics version recorded for the workload (1 if none)."""
        return int(self._scalar(
            f"SELECT coalesce(max(v), 0) + 1 FROM ("
            f"SELECT max(stats_version) AS v FROM {_Q}.workload_stats WHERE workload_id = ? "
            f"UNION ALL SELECT max(stats_version) FROM {_Q}.client_sketches "
            f"WHERE workload_id = ?)", [int(workload_id), int(workload_id)]))

    def write_sketches(self, workload_id: int, stats_version: int, counts: np.ndarray,
                       n_records: np.ndarray, hash_seed: int, noise_sigma: float = 0.0, *,
                       kind: str = COUNT_MIN) -> int:
        """Store one label release per client (``counts`` shape (n_clients, depth, width)).

        ``kind`` is ``count_min`` (Count-Min sketches hashed with ``hash_seed``) or ``histogram``
        (depth 1, one cell per class). Each release becomes one row with a flat row-major
        INTEGER[]; the whole batch is a single Arrow insert. Returns the number of clients
        written.
        """
        self._writable("client_sketches")
        if kind not in RELEASE_KINDS:
            raise ValidationError(f"release kind must be one of {', '.join(RELEASE_KINDS)}, "
                                  f"got {kind!r}")
        counts = np.asarray(counts)
        n_records = np.asarray(n_records)
        if counts.ndim != 3:
            raise ValidationError(f"sketch counts must have shape (n_clients, depth, width), "
                                  f"got shape {counts.shape}")
        n, depth, width = counts.shape
        if n == 0 or depth == 0 or width == 0:
            raise ValidationError(f"sketch counts must be non-empty, got shape {counts.shape}")
        if kind == HISTOGRAM and depth != 1:
            raise ValidationError(f"a histogram release has depth 1, got shape {counts.shape}")
        if not np.issubdtype(counts.dtype, np.integer):
            raise ValidationError(f"sketch counts must be integers, got dtype {counts.dtype}")
        if counts.size and (counts.max() > _INT32_MAX or counts.min() < _INT32_MIN):
            raise ValidationError("sketch counts do not fit the catalog's INTEGER cells "
                                  f"(range {counts.min()}..{counts.max()})")
        if n_records.shape != (n,) or not np.issubdtype(n_records.dtype, np.integer):
            raise ValidationError(f"n_records must be an integer array of shape ({n},), got "
                                  f"{n_records.dtype} {n_records.shape}")
        if not noise_sigma >= 0:
            raise ValidationError(f"noise_sigma must be >= 0, got {noise_sigma}")
        if not _INT64_MIN <= int(hash_seed) <= _INT64_MAX:
            raise ValidationError(f"hash_seed {hash_seed} does not fit the catalog's BIGINT")
        cells = depth * width
        flat = np.ascontiguousarray(counts, dtype=np.int32).reshape(-1)
        offsets = np.arange(n + 1, dtype=np.int64) * cells
        offset_type = pa.int32() if offsets[-1] <= _INT32_MAX else pa.int64()
        list_cls = pa.ListArray if offset_type == pa.int32() else pa.LargeListArray
        sketch_list = list_cls.from_arrays(pa.array(offsets, type=offset_type), pa.array(flat))
        table = pa.table({
            "workload_id": pa.array(np.full(n, int(workload_id), dtype=np.int64)),
            "stats_version": pa.array(np.full(n, int(stats_version), dtype=np.int32)),
            "client": pa.array(np.arange(n, dtype=np.int32)),
            "release_kind": pa.array([kind] * n, type=pa.string()),
            "n_records": pa.array(n_records.astype(np.int64, copy=False)),
            "depth": pa.array(np.full(n, depth, dtype=np.int32)),
            "width": pa.array(np.full(n, width, dtype=np.int32)),
            "hash_seed": pa.array(np.full(n, int(hash_seed), dtype=np.int64)),
            "counts": sketch_list,
            "noise_sigma": pa.array(np.full(n, float(noise_sigma), dtype=np.float64)),
        })
        with self.transaction():
            self.insert_arrow("client_sketches", table)
        return n

    def read_sketches(self, workload_id: int, stats_version: int) -> Sketches:
        """Load the sketches written by :meth:`write_sketches` as numpy arrays (no Python loop).

        Returns ``(counts (n_clients, depth, width) int32, n_records int64, hash_seed,
        noise_sigma, kind)``; raises CatalogError when there are none or they are inconsistent.
        """
        where = f"{_Q}.client_sketches WHERE workload_id = $w AND stats_version = $v"
        params = {"w": int(workload_id), "v": int(stats_version)}
        meta = self.query(
            f"SELECT count(*) AS n, min(client) AS lo, max(client) AS hi, "
            f"count(DISTINCT (depth, width, hash_seed, noise_sigma, release_kind)) AS kinds, "
            f"any_value(depth) AS depth, any_value(width) AS width, "
            f"any_value(hash_seed) AS hash_seed, any_value(noise_sigma) AS noise_sigma, "
            f"any_value(release_kind) AS kind "
            f"FROM {where}", params)[0]
        label = f"workload {workload_id}, stats version {stats_version}"
        if meta["n"] == 0:
            raise CatalogError(f"catalog {self.path} has no client sketches for {label}")
        n = int(meta["n"])
        if meta["kinds"] != 1 or meta["lo"] != 0 or meta["hi"] != n - 1:
            raise CatalogError(f"client sketches for {label} in catalog {self.path} are "
                               "inconsistent (clients not 0..n-1, or mixed depth/width/seed/kind)")
        depth, width = int(meta["depth"]), int(meta["width"])
        table = self.query_arrow(
            f"SELECT n_records, counts FROM {where} ORDER BY client", params)
        lists = table.column("counts").combine_chunks()
        values = lists.flatten().to_numpy(zero_copy_only=False)
        if values.size != n * depth * width:
            raise CatalogError(f"client sketches for {label} in catalog {self.path} have the "
                               f"wrong number of cells ({values.size}, expected "
                               f"{n} x {depth} x {width})")
        # copies: arrays viewing Arrow buffers would be read-only
        counts = np.array(values, dtype=np.int32).reshape(n, depth, width)
        n_records = np.array(table.column("n_records").to_numpy(), dtype=np.int64)
        return Sketches(counts, n_records, int(meta["hash_seed"]), float(meta["noise_sigma"]),
                        str(meta["kind"]))

    # ---- calibration -------------------------------------------------------------------------

    def supersede_calibration(self, estimator: str, scope: str, scope_key: str,
                              values: Mapping[str, float], *, n_obs: int | Mapping[str, int],
                              source: str,
                              fit_error: float | Mapping[str, float] | None = None
                              ) -> dict[str, int]:
        """Record new versions of calibration constants and retire the current ones.

        For each constant a new ``calibration`` row is inserted; the rows it replaces (same
        estimator, scope, scope_key and constant_name, not yet superseded) get ``superseded_by``
        set to it. All in one transaction. Returns ``{constant_name: new calibration_id}``.
        """
        self._writable("calibration")
        if not values:
            return {}
        names = list(values)

        def per_name(v: Any) -> list[Any]:
            return [v.get(k) for k in names] if isinstance(v, Mapping) else [v] * len(names)

        with self.transaction():
            ids = self.insert_rows("calibration", {
                "estimator": [estimator] * len(names),
                "scope": [scope] * len(names),
                "scope_key": [scope_key] * len(names),
                "constant_name": names,
                "value": [float(values[k]) for k in names],
                "n_obs": per_name(n_obs),
                "fit_error": per_name(fit_error),
                "source": [source] * len(names),
            })
            new = pa.table({"constant_name": names, "new_id": pa.array(ids)})
            with self._errors("superseding calibration"), self._registered(new) as reg:
                self._changed("calibration")
                self._live.execute(
                    f"UPDATE {_Q}.calibration AS c SET superseded_by = r.new_id "
                    f"FROM {reg} AS r WHERE c.constant_name = r.constant_name "
                    f"AND c.estimator = ? AND c.scope = ? AND c.scope_key = ? "
                    f"AND c.superseded_by IS NULL AND c.calibration_id < r.new_id",
                    [estimator, scope, scope_key])
        return dict(zip(names, (int(i) for i in ids)))

    def current_calibration(self, estimator: str, scope: str | None = None,
                            scope_key: str | None = None) -> list[dict[str, Any]]:
        """Current (not superseded) calibration rows of an estimator, optionally of one scope."""
        sql = f"SELECT * FROM {_Q}.v_current_calibration WHERE estimator = ?"
        params: list[Any] = [estimator]
        if scope is not None:
            sql += " AND scope = ?"
            params.append(scope)
        if scope_key is not None:
            sql += " AND scope_key = ?"
            params.append(scope_key)
        return self.query(sql + " ORDER BY scope, scope_key, constant_name", params)


def now_utc():
    """The current UTC wall-clock time as a naive datetime (how the catalog stores instants)."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _locked(message: str, exe: str, pid: int) -> CatalogLockedError:
    """A CatalogLockedError that also carries the holder as ``holder_exe`` and ``holder_pid``."""
    err = CatalogLockedError(message)
    err.holder_exe, err.holder_pid = exe, pid  # type: ignore[attr-defined]
    return err


@functools.lru_cache(maxsize=512)       # the catalog's own queries are a few fixed texts
def _is_select(sql: str) -> bool:
    """Whether ``sql`` only reads: every statement a SELECT (``WITH ... SELECT`` included) by
    DuckDB's own parser, and no keyword of a write in it (a ``WITH`` may hold a ``DELETE ...
    RETURNING``, which DuckDB runs and still calls a SELECT). Text DuckDB cannot parse counts
    as a write (it fails when run, and counting it only empties caches)."""
    try:
        statements = duckdb.extract_statements(sql)
        tokens = duckdb.tokenize(sql)
    except duckdb.Error:
        return False
    if not statements or any(st.type != duckdb.StatementType.SELECT for st in statements):
        return False
    for start, kind in tokens:
        if kind == duckdb.token_type.keyword:
            word = _WORD_RE.match(sql, start)
            if word is not None and word.group(0).upper() in _WRITE_KEYWORDS:
                return False
    return True


#: Keywords of the statements that write, which a read-only query never holds.
_WRITE_KEYWORDS = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "TRUNCATE"})
_WORD_RE = re.compile(r"[A-Za-z_]+")


def _strip(msg: str) -> str:
    """DuckDB's message without its trailing documentation link."""
    return re.sub(r"\s*See also https?://\S+\s*$", "", msg).strip()


def _param(value: Any, dtype: str) -> Any:
    """A Python value ready to bind to a column of DuckDB type ``dtype``."""
    if dtype == "JSON" and value is not None and not isinstance(value, str):
        return canonical_json(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _to_arrow(table: str, columns: Mapping[str, Any], types: Mapping[str, str],
              one_row: Mapping[str, Any] | None = None) -> pa.Table:
    """Columns (sequences or numpy arrays) as an Arrow table; JSON columns as canonical text."""
    arrays: dict[str, pa.Array] = {}
    length = None
    for name, data in columns.items():
        try:
            arrays[name] = _column_array(data, types.get(name, ""),
                                         None if one_row is None else (one_row[name],))
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            raise ValidationError(f"cannot convert column {name!r} of {CATALOG_NAME}.{table}: "
                                  f"{exc}") from None
        if length is None:
            length = len(arrays[name])
        elif len(arrays[name]) != length:
            raise ValidationError(f"column {name!r} of {CATALOG_NAME}.{table} has "
                                  f"{len(arrays[name])} values, expected {length} like the "
                                  "columns before it")
    return pa.table(arrays)


def _parameter(value: Any, dtype: str) -> Any:
    """One value bound as a statement parameter: JSON columns as canonical text, numpy scalars
    as Python ones."""
    if dtype == "JSON" and value is not None and not isinstance(value, str):
        return canonical_json(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _column_array(data: Any, dtype: str, one: tuple[Any] | None) -> pa.Array:
    """One column as an Arrow array; ``one`` holds the value when building a single row."""
    if one is not None:
        return _one_value_array(one[0], dtype)
    if dtype == "JSON":
        return pa.array([v if v is None or isinstance(v, str) else canonical_json(v)
                         for v in data], type=pa.string())
    if isinstance(data, np.ndarray) and data.ndim == 1:
        return pa.array(data)
    if isinstance(data, np.ndarray) and data.ndim == 2:
        rows, per = data.shape
        offsets = np.arange(rows + 1, dtype=np.int64) * per
        return pa.LargeListArray.from_arrays(pa.array(offsets),
                                             pa.array(np.ascontiguousarray(data).reshape(-1)))
    return pa.array(list(data), type=_arrow_type(dtype))


def _arrow_type(dtype: str) -> pa.DataType | None:
    """The Arrow type of a catalog column type; a typed ``pa.array`` also skips pyarrow's
    per-call attempt to import pandas, which dominated small inserts."""
    if dtype.endswith("[]"):
        inner = _ARROW_SCALARS.get(dtype[:-2])
        return None if inner is None else pa.list_(inner)
    return _ARROW_SCALARS.get(dtype)


def _one_value_array(value: Any, dtype: str) -> pa.Array:
    """A one-element Arrow array holding ``value`` (numpy arrays become one list, no loop)."""
    if dtype == "JSON" and value is not None and not isinstance(value, str):
        return pa.array([canonical_json(value)], type=pa.string())
    if isinstance(value, np.ndarray):
        flat = np.ascontiguousarray(value).reshape(-1)
        return pa.LargeListArray.from_arrays(pa.array(np.array([0, flat.size], dtype=np.int64)),
                                             pa.array(flat))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)) and len(value) == 0:
        inner = dtype[:-2] if dtype.endswith("[]") else "VARCHAR"
        return pa.array([[]], type=pa.list_(_ARROW_SCALARS.get(inner, pa.string())))
    return pa.array([value], type=_arrow_type(dtype))


_ARROW_SCALARS = {
    "INTEGER": pa.int32(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(), "JSON": pa.string(),
}
