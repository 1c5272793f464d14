"""Hostile catalog SQL: nothing outside the catalog is reachable, runaway queries are stopped.

Each hostile query is refused or stopped with a one-line AirPlanError (CLI: exit 2, no
traceback), the catalog's row counts stay as they were, and the session goes on working. The
opt-in (allow_external_access) is checked too, so every refusal is shown to come from the fence.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import airplan_qo as aq
from airplan_qo.catalog.sandbox import (DEFAULT_MEMORY_LIMIT, DEFAULT_TIMEOUT, Watchdog,
                                     parse_memory_limit)
from airplan_qo.catalog.schema import TABLES
from airplan_qo.cli import build_parser, main
from airplan_qo.errors import (
    CatalogError,
    MemoryLimitError,
    ParseError,
    SandboxError,
    StatementTimeoutError,
    ValidationError,
)

SECRET = "hunter2-7f3a"
RUNAWAY = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"


def _row_counts(path) -> dict[str, int]:
    """Row counts of every catalog table, read with plain DuckDB (the catalog must be closed)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in TABLES}
    finally:
        con.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Readable files holding a secret, one per format a table function reads."""
    root = tmp_path_factory.mktemp("outside")
    (root / "secret.csv").write_text(f"name,token\nadmin,{SECRET}\n")
    (root / "secret.txt").write_text(f"token={SECRET}\n")
    (root / "secret.json").write_text(json.dumps({"token": SECRET}) + "\n")
    pq.write_table(pa.table({"token": [SECRET]}), root / "secret.parquet")
    return root


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    path = tmp_path_factory.mktemp("cat") / "cat.duckdb"
    with aq.connect(path) as s:
        s.sql("ANALYZE WORKLOAD digits ON 6 CLIENTS WITH (alpha = 0.5); "
              "EXPLAIN TRAIN digits ON 6 CLIENTS USING TOPOLOGY ring USING SPARSITY 1")
    return path


@pytest.fixture()
def counts(catalog):
    """The row counts before the test; the test's end checks that they did not change."""
    before = _row_counts(catalog)
    assert before["plans"] > 0 and before["client_sketches"] > 0
    yield before
    assert _row_counts(catalog) == before


def _cli_refuses(argv, capsys, needle, *, excerpt=False):
    """Exit 2 with one line (a refused statement's ParseError adds its caret excerpt)."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert needle in lines[0], err
    assert "Traceback" not in err and len(lines) == (3 if excerpt else 1), err
    if excerpt:
        assert lines[2].strip() == "^"
    assert SECRET not in out + err
    return err


# ---- files, globs, URLs ------------------------------------------------------------------------

# (query template, file): {d} is the directory holding the secret files
FILE_READS = [
    ("SELECT * FROM read_csv('{d}/secret.csv')", "csv"),
    ("SELECT * FROM read_csv('{d}/secret.csv', header = false)", "csv"),
    ("SELECT * FROM read_csv_auto('{d}/secret.csv')", "csv"),
    ("SELECT * FROM read_csv(['{d}/secret.csv'])", "csv"),
    ("SELECT * FROM sniff_csv('{d}/secret.csv')", "csv"),
    ("SELECT content FROM read_text('{d}/secret.txt')", "txt"),
    ("SELECT content::VARCHAR FROM read_blob('{d}/secret.txt')", "txt"),
    ("SELECT * FROM read_json('{d}/secret.json')", "json"),
    ("SELECT * FROM read_json_auto('{d}/secret.json')", "json"),
    ("SELECT * FROM read_ndjson('{d}/secret.json')", "json"),
    ("SELECT * FROM read_ndjson_auto('{d}/secret.json')", "json"),
    ("SELECT * FROM read_json_objects('{d}/secret.json')", "json"),
    ("SELECT * FROM read_parquet('{d}/secret.parquet')", "parquet"),
    ("SELECT * FROM parquet_scan('{d}/secret.parquet')", "parquet"),
    ("SELECT * FROM parquet_metadata('{d}/secret.parquet')", "parquet"),
    ("SELECT * FROM parquet_schema('{d}/secret.parquet')", "parquet"),
    ("SELECT * FROM parquet_file_metadata('{d}/secret.parquet')", "parquet"),
    ("SELECT * FROM read_csv('{d}/*.csv')", "csv"),
    ("SELECT * FROM glob('{d}/*')", "glob"),
    ("SELECT * FROM query('SELECT * FROM read_text(''{d}/secret.txt'')')", "txt"),
]


def _ids(reads):
    """read_csv, read_csv-2, ...: the table function of each query, numbered when repeated."""
    seen: dict[str, int] = {}
    out = []
    for sql, _ in reads:
        name = re.search(r"FROM (\w+)\(", sql).group(1)
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


@pytest.mark.parametrize("template,kind", FILE_READS, ids=_ids(FILE_READS))
def test_file_reading_table_functions_are_refused(template, kind, files, catalog, counts, capsys):
    sql = template.format(d=files)
    with aq.connect(catalog) as s:
        with pytest.raises(SandboxError, match="external access is off") as err:
            s.sql(sql)
        assert SECRET not in str(err.value) and "\n" not in str(err.value)
        assert s.sql("SELECT count(*) FROM airplan.plans")[0].rows[0][0] == counts["plans"]
    _cli_refuses(["sql", "--catalog", str(catalog), sql], capsys, "external access is off")


@pytest.mark.parametrize("template,kind", FILE_READS, ids=_ids(FILE_READS))
def test_the_same_reads_work_with_the_opt_in(template, kind, files, tmp_path):
    """Without the fence each hostile read above does reach the file."""
    with aq.connect(tmp_path / "trusted.duckdb", allow_external_access=True) as s:
        [res] = s.sql(template.format(d=files))
    assert res.rows
    if kind in ("csv", "txt", "json") and "sniff" not in template:
        assert SECRET in repr(res.rows)


def test_etc_passwd_by_the_cli_in_a_fresh_process(catalog):
    proc = subprocess.run(
        [sys.executable, "-m", "airplan_qo.cli", "sql", "--catalog", str(catalog),
         "SELECT * FROM read_csv('/etc/passwd', header = false)"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == "" and "root:" not in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "external access is off" in proc.stderr and "--allow-external-access" in proc.stderr


@pytest.mark.parametrize("sql", [
    "SELECT * FROM glob('/**')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT count(*) FROM read_text('/etc/*')",
])
def test_globbing_the_file_system_is_refused(sql, catalog, counts):
    with aq.connect(catalog) as s:
        with pytest.raises(SandboxError, match="external access is off"):
            s.sql(sql)


def test_a_file_path_as_a_table_name_is_not_read(files, catalog, counts, tmp_path):
    sql = f"FROM '{files}/secret.csv'"
    with aq.connect(catalog) as s:
        with pytest.raises(CatalogError) as err:
            s.sql(sql)
    assert SECRET not in str(err.value)
    with aq.connect(tmp_path / "trusted.duckdb", allow_external_access=True) as s:
        assert SECRET in repr(s.sql(sql)[0].rows)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/secret.csv",
    "https://example.com/secret.csv",
    "s3://some-bucket/secret.parquet",
    "hf://datasets/some/secret.csv",
])
def test_remote_urls_are_refused_without_touching_the_network(url, catalog, counts, capsys):
    function = "read_parquet" if url.endswith(".parquet") else "read_csv"
    sql = f"SELECT * FROM {function}('{url}')"
    started = time.monotonic()
    with aq.connect(catalog) as s:
        with pytest.raises(SandboxError, match="external access is off") as err:
            s.sql(sql)
    assert url in str(err.value)
    assert time.monotonic() - started < 10
    _cli_refuses(["sql", "--catalog", str(catalog), sql], capsys, "external access is off")


# ---- extensions and settings -------------------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "LOAD httpfs",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs FROM core",
    "SET enable_external_access = true",
    "SET GLOBAL enable_external_access = true",
    "/* comment */ SET autoload_known_extensions = true",
    "RESET enable_external_access",
    "RESET GLOBAL threads",
    "PRAGMA enable_external_access",
    "CALL pragma_version()",
    "ATTACH '/tmp/other.duckdb' AS other",
    "COPY airplan.plans TO '/tmp/plans.csv'",
    "EXPLAIN ANALYZE SET enable_external_access = true",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '/tmp/x.csv'",
    "EXPLAIN (ANALYZE) LOAD httpfs",
])
def test_extension_loads_and_setting_changes_are_refused(sql, catalog, counts, capsys):
    with aq.connect(catalog) as s:
        with pytest.raises(ParseError, match="not run on the catalog"):
            s.sql(sql)
        # the catalog's own entry point, below the statement filter, refuses them too
        with pytest.raises(SandboxError):
            s.catalog.execute_user_sql(sql)
        [res] = s.sql("SELECT current_setting('enable_external_access') AS on_, "
                      "current_setting('autoload_known_extensions') AS autoload, "
                      "current_setting('autoinstall_known_extensions') AS autoinstall, "
                      "current_setting('lock_configuration') AS locked")
        assert res.rows == ((False, False, False, True),)
    _cli_refuses(["sql", "--catalog", str(catalog), sql], capsys, "not run on the catalog",
                 excerpt=True)


@pytest.mark.parametrize("sql,reason", [
    ("INSTALL httpfs", "cannot install or load DuckDB extensions"),
    ("LOAD httpfs", "cannot install or load DuckDB extensions"),
    ("UPDATE EXTENSIONS", "cannot install or load DuckDB extensions"),
    ("SET threads = 1", "cannot change settings; its limits are set when the catalog is opened"),
    ("RESET threads", "cannot change settings"),
    ("ATTACH '/tmp/other.duckdb' AS other", "reads only the catalog, not other databases"),
    ("BEGIN TRANSACTION", "needs no transaction"),
    ("PRAGMA version", "duckdb_tables() or duckdb_columns()"),
    ("CALL pragma_version()", "SELECT * FROM name(...)"),
    ("DELETE FROM airplan.plans", "the engine is its only writer"),
    ("CREATE TABLE x (a INT)", "the engine is its only writer"),
])
def test_each_refused_statement_gets_the_reason_that_fits_it(sql, reason, catalog, counts):
    with aq.connect(catalog) as s:
        with pytest.raises(ParseError, match="not run on the catalog") as err:
            s.sql(sql)
        assert reason in str(err.value)
        if not sql.startswith(("INSTALL", "LOAD", "UPDATE", "SET", "RESET", "ATTACH",
                               "BEGIN", "PRAGMA", "CALL")):
            assert "only writer" in str(err.value)
        else:
            assert "only writer" not in str(err.value)
        with pytest.raises(SandboxError) as below:     # the catalog's own check says the same
            s.catalog.execute_user_sql(sql)
        if not sql.startswith("UPDATE EXTENSIONS"):
            assert reason in str(below.value)


def test_explain_analyze_cannot_write_a_file(catalog, counts, tmp_path):
    target = tmp_path / "leak.csv"
    with aq.connect(catalog) as s:
        with pytest.raises(SandboxError):
            s.catalog.execute_user_sql(f"EXPLAIN ANALYZE COPY airplan.plans TO '{target}'")
    with aq.connect(tmp_path / "trusted.duckdb", allow_external_access=True) as s:
        with pytest.raises(ParseError, match="EXPLAIN of a 'COPY'"):
            s.sql(f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'")
        with pytest.raises(SandboxError, match="EXPLAIN only a query"):
            s.catalog.execute_user_sql(f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'")
    assert not target.exists()


@pytest.mark.parametrize("sql", [
    "SELECT set_config('enable_external_access', 'true', false)",
    "SELECT * FROM query('SET enable_external_access = true')",
    "SELECT * FROM query_table('SET enable_external_access = true')",
    "SELECT 1; SET enable_external_access = true",
])
def test_functions_cannot_turn_access_back_on(sql, files, catalog, counts):
    with aq.connect(catalog) as s:
        with pytest.raises(CatalogError):
            s.catalog.execute_user_sql(sql)
        with pytest.raises(aq.AirPlanError):
            s.sql(sql)
        with pytest.raises(SandboxError, match="external access is off"):
            s.sql(f"SELECT * FROM read_text('{files}/secret.txt')")


def test_the_engine_connection_itself_is_locked(catalog, counts):
    with aq.connect(catalog) as s:
        with pytest.raises(CatalogError, match="locked"):
            s.catalog.query("SET enable_external_access = true")
        with pytest.raises(CatalogError, match="locked"):
            s.catalog.query("SET memory_limit = '100GB'")
        with pytest.raises(CatalogError, match="disabled"):
            s.catalog.query("SELECT * FROM read_text('/etc/hostname')")


def test_extensions_are_not_autoloaded(catalog, counts):
    with aq.connect(catalog) as s:
        for sql in ["SELECT * FROM read_xlsx('/tmp/x.xlsx')", "SELECT * FROM sqlite_scan('x', 't')",
                    "SELECT * FROM delta_scan('/tmp')"]:
            with pytest.raises(CatalogError, match="extension"):
                s.sql(sql)
        [res] = s.sql("SELECT current_setting('autoload_known_extensions'), "
                      "current_setting('autoinstall_known_extensions')")
        assert res.rows == ((False, False),)


# ---- time and memory ---------------------------------------------------------------------------

def test_runaway_recursive_cte_is_stopped_at_the_time_limit(catalog, counts, capsys):
    with aq.connect(catalog, timeout=1) as s:
        started = time.monotonic()
        with pytest.raises(StatementTimeoutError, match="time limit of 1 s") as err:
            s.sql(RUNAWAY)
        assert time.monotonic() - started < 10
        assert "\n" not in str(err.value) and "line 1, column 1" in str(err.value)
        # a per-call limit overrides the session's
        with pytest.raises(StatementTimeoutError, match="time limit of 0.5 s"):
            s.sql("SELECT 1 AS ok;\n" + RUNAWAY, timeout=0.5)
        # and the session goes on
        assert s.sql("SELECT count(*) FROM airplan.plans")[0].rows[0][0] == counts["plans"]
        assert s.sql("SELECT 42")[0].rows == ((42,),)
    started = time.monotonic()
    err = _cli_refuses(["sql", "--catalog", str(catalog), "--timeout", "1", RUNAWAY], capsys,
                       "statement time limit of 1 s")
    assert time.monotonic() - started < 10 and "--timeout" in err


def test_a_statement_that_starts_after_the_deadline_is_still_stopped():
    """DuckDB clears an interrupt that arrives before a statement starts; on a busy machine the
    deadline can pass before the statement begins, so the watchdog repeats its interrupt."""
    con = duckdb.connect()
    safety = threading.Timer(20, con.interrupt)  # ends the statement if the watchdog does not
    safety.daemon = True
    safety.start()
    try:
        with Watchdog(con, 0.05) as watchdog:
            time.sleep(0.3)  # the deadline passes before the statement starts
            started = time.monotonic()
            with pytest.raises(duckdb.InterruptException):
                con.execute(RUNAWAY).fetchall()
        assert watchdog.fired and time.monotonic() - started < 5
    finally:
        safety.cancel()
        con.close()


def test_the_time_limit_covers_fetching_a_long_result(catalog, counts):
    with aq.connect(catalog) as s:
        started = time.monotonic()
        with pytest.raises((StatementTimeoutError, MemoryLimitError)):
            s.sql("SELECT a.range AS a, b.range AS b FROM range(100000) a, range(100000) b",
                  timeout=1)
        assert time.monotonic() - started < 15


def test_default_limits():
    assert DEFAULT_TIMEOUT == 30
    args = build_parser().parse_args(["sql", "SELECT 1"])
    assert (args.timeout, args.memory_limit, args.threads, args.allow_external_access) == (
        30.0, None, None, False)
    with aq.connect(":memory:") as s:
        assert s.catalog.timeout == 30
        assert s.catalog.limits.memory_limit == DEFAULT_MEMORY_LIMIT
        [res] = s.sql("SELECT current_setting('memory_limit'), current_setting('threads'), "
                      "current_setting('temp_directory')")
        # DuckDB gets 80% of the limit (docs/sql.md, What the memory limit covers)
        assert res.rows[0][0] == "819.1 MiB" and res.rows[0][1] == s.catalog.limits.threads
        assert res.rows[0][2] == ""  # no spilling: the memory limit is a bound
    with aq.connect(":memory:", timeout=None) as s:
        assert s.catalog.timeout is None


@pytest.mark.parametrize("sql", [
    # sorting a cross join needs its whole input in memory
    "SELECT a.range AS a, b.range AS b FROM range(100000) a, range(100000) b ORDER BY b, a DESC",
    "SELECT string_agg(range::VARCHAR, ',') FROM range(100000000)",
    "SELECT list(range) FROM range(100000000)",
    # a streamed result is bounded as it reaches Python
    "SELECT a.range AS a, b.range AS b FROM range(100000) a, range(100000) b",
])
def test_memory_hungry_queries_are_stopped_at_the_memory_limit(sql, catalog, counts, capsys):
    with aq.connect(catalog, memory_limit="64MB", timeout=60) as s:
        started = time.monotonic()
        with pytest.raises(MemoryLimitError, match="memory limit of 61 MiB") as err:
            s.sql(sql)
        assert time.monotonic() - started < 30
        assert "\n" not in str(err.value)
        assert s.sql("SELECT count(*) FROM airplan.plans")[0].rows[0][0] == counts["plans"]
    _cli_refuses(["sql", "--catalog", str(catalog), "--memory-limit", "64MB", "--timeout", "60",
                  sql], capsys, "memory limit of 61 MiB")


def test_threads_and_memory_limit_are_configurable(catalog, counts, capsys):
    with aq.connect(catalog, memory_limit="256MiB", threads=1) as s:
        [res] = s.sql("SELECT current_setting('memory_limit'), current_setting('threads')")
        # DuckDB gets 80% of the limit: the rest is headroom for the values it builds on top
        assert res.rows == (("204.7 MiB", 1),)
        assert s.catalog.limits.duckdb_memory_limit == int(0.8 * (256 << 20))
    assert main(["sql", "--catalog", str(catalog), "--memory-limit", "2GB", "--threads", "2",
                 "--format", "json", "SELECT current_setting('memory_limit') AS m, "
                 "current_setting('threads') AS t"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"m": "1.4 GiB", "t": 2}]


@pytest.mark.parametrize("argv,needle", [
    (["--timeout", "-1"], "timeout"),
    (["--timeout", "nan"], "timeout"),
    (["--memory-limit", "lots"], "memory limit"),
    (["--memory-limit", "1KB"], "at least 32 MiB"),
    (["--threads", "0"], "threads"),
])
def test_bad_limits_are_one_line_errors(argv, needle, catalog, capsys):
    _cli_refuses(["sql", "--catalog", str(catalog), *argv, "SELECT 1"], capsys, needle)


def test_limit_values():
    assert parse_memory_limit("2GiB") == 2 << 30
    assert parse_memory_limit("1.5GB") == 1_500_000_000
    assert parse_memory_limit(64 << 20) == 64 << 20
    for bad in ["", "-1GB", "2 parsecs", True, "10MB"]:
        with pytest.raises(ValidationError):
            parse_memory_limit(bad)
    for bad in [{"timeout": -1}, {"timeout": "soon"}, {"threads": 0}, {"threads": 1.5}]:
        with pytest.raises(ValidationError):
            aq.connect(":memory:", **bad)


# ---- the engine and the catalog's own objects under the fence ----------------------------------

def test_the_engine_works_under_the_fence(tmp_path):
    path = tmp_path / "engine.duckdb"
    with aq.connect(path) as s:
        s.sql("ANALYZE WORKLOAD digits ON 4 CLIENTS WITH (alpha = 0.5)")
        [res] = s.sql("TRAIN digits ON 4 CLIENTS WITH (rounds = 2) USING TOPOLOGY ring "
                      "USING SPARSITY 1 FALLBACK COMPLETE")
        row = dict(zip(res.columns, res.rows[0]))
        assert row["status"] == "succeeded" and row["rounds"] == 2
        with pytest.raises(SandboxError):
            s.sql("SELECT * FROM read_text('/etc/hostname')")
    counts = _row_counts(path)
    assert counts["executions"] == 1 and counts["round_stats"] == 2 and counts["feedback"] > 0


def test_catalog_views_and_macros_work_fenced_and_from_plain_duckdb(catalog, counts):
    queries = [
        "SELECT airplan.ape(90, 100) AS a, airplan.rel_err(90, 100) AS r, "
        "airplan.within(5, 1, 10) AS w",
        "SELECT count(*) FROM airplan.last_candidates()",
        "SELECT count(*) FROM airplan.candidates((SELECT max(planning_run_id) "
        "FROM airplan.planning_runs))",
        "SELECT count(*) FROM airplan.curve(1)",
        "SELECT count(*) FROM airplan.v_estimate_vs_actual",
        "SELECT count(*) FROM airplan.v_current_calibration",
    ]
    with aq.connect(catalog) as s:
        fenced = [s.sql(q)[0].rows for q in queries]
    assert fenced[0] == ((10.0, -0.1, True),)
    assert fenced[1] == fenced[2] == ((counts["plans"],),)
    con = duckdb.connect(str(catalog), read_only=True)
    try:
        plain = [tuple(con.execute(q.replace("airplan.", "")).fetchall()) for q in queries]
    finally:
        con.close()
    assert plain == fenced


# ---- the opt-in, sharing, the shell ------------------------------------------------------------

def test_opt_in_restores_access_but_keeps_the_limits(files, tmp_path, capsys):
    path = tmp_path / "trusted.duckdb"
    with aq.connect(path, allow_external_access=True, timeout=1) as s:
        [res] = s.sql("SELECT current_setting('enable_external_access'), "
                      "current_setting('lock_configuration')")
        assert res.rows == ((True, False),)
        with pytest.raises(StatementTimeoutError):
            s.sql(RUNAWAY)
        with pytest.raises(ParseError, match="not run on the catalog"):
            s.sql("COPY (SELECT 1) TO 'x.csv'")
    assert main(["sql", "--catalog", str(path), "--allow-external-access", "--format", "csv",
                 f"SELECT token FROM read_csv('{files}/secret.csv')"]) == 0
    assert capsys.readouterr().out.strip() == f"token\n{SECRET}"


def test_one_file_in_one_process_keeps_one_set_of_settings(tmp_path):
    path = tmp_path / "shared.duckdb"
    with aq.connect(path) as first:
        with aq.connect(path, timeout=5) as second:  # the time limit is per session
            assert second.catalog.timeout == 5 and first.catalog.timeout == 30
        with pytest.raises(CatalogError, match="already open in this process with external "
                                               "access off"):
            aq.connect(path, allow_external_access=True)
        with pytest.raises(CatalogError, match="memory limit"):
            aq.connect(path, memory_limit="2GB")
        assert first.sql("SELECT 1")[0].rows == ((1,),)
    with aq.connect(path, allow_external_access=True) as s:
        assert s.catalog.limits.allow_external_access


def test_shell_reports_hostile_queries_and_goes_on(files, catalog, counts):
    import io

    from airplan_qo.shell import Shell

    out = io.StringIO()
    script = io.StringIO(f"SELECT * FROM read_csv('{files}/secret.csv');\n{RUNAWAY};\n"
                         "SET enable_external_access = true;\nSELECT 7 AS seven;\n.quit\n")
    assert Shell(str(catalog), stdin=script, stdout=out, timeout=1).run() == 0
    text = out.getvalue()
    assert SECRET not in text
    assert "error: external access is off" in text
    assert "error: query stopped at the statement time limit of 1 s" in text
    assert "error: 'SET' statements are not run" in text
    assert "seven" in text and "7" in text
