"""The catalog store: opening (paths, locks, corrupt files, read-only), transactions, Arrow bulk
I/O of sketches, and the row helpers the engine uses."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import attrs
import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airplan_qo.catalog.store import Catalog, canonical_json, resolve_path
from airplan_qo.errors import CatalogError, CatalogLockedError, ValidationError


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _count(cat: Catalog, table: str) -> int:
    return cat.query(f"SELECT count(*) AS n FROM airplan.{table}")[0]["n"]


def _workload(cat: Catalog, fingerprint: str = "fp", **extra) -> int:
    row = {"dataset": "digits", "n_clients": 8, "partition_scheme": "dirichlet", "alpha": 0.5,
           "partition_seed": 1, "data_seed": 2, "fingerprint": fingerprint, **extra}
    return cat.insert_row("workloads", row)


# ---- opening ---------------------------------------------------------------------------------

def test_memory_catalogs_work_and_are_independent():
    with Catalog.open(":memory:") as a, Catalog.open(":memory:") as b:
        assert a.path == ":memory:"
        _workload(a)
        assert _count(a, "workloads") == 1
        assert _count(b, "workloads") == 0


def test_memory_catalog_cannot_be_read_only():
    with pytest.raises(CatalogError, match="in-memory"):
        Catalog.open(":memory:", read_only=True)


def test_env_var_is_honoured_and_explicit_path_wins(tmp_path, monkeypatch):
    from_env = tmp_path / "env.duckdb"
    monkeypatch.setenv("AIRPLAN_CATALOG", str(from_env))
    with Catalog.open() as cat:
        assert cat.path == str(from_env)
    assert from_env.exists()
    explicit = tmp_path / "explicit.duckdb"
    with Catalog.connect(explicit) as cat:
        assert cat.path == str(explicit)


def test_default_path_is_airplan_duckdb_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRPLAN_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_path() == str(tmp_path / "airplan.duckdb")
    with Catalog.open():
        pass
    assert (tmp_path / "airplan.duckdb").exists()


@pytest.mark.parametrize("read_only", [False, True])
def test_garbage_file_is_a_catalog_error_and_left_unchanged(tmp_path, read_only):
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(np.random.default_rng(7).integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    before = _digest(path)
    with pytest.raises(CatalogError, match="not a DuckDB database or is corrupt") as info:
        Catalog.open(path, read_only=read_only)
    assert str(path) in str(info.value)
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.duckdb"]


def test_damaged_blocks_are_a_catalog_error_and_left_unchanged(tmp_path):
    path = tmp_path / "damaged.duckdb"
    with Catalog.open(path) as cat:
        _workload(cat)
    data = bytearray(path.read_bytes())
    noise = np.random.default_rng(3)
    for offset in range(8192, len(data) - 600, 4096):
        data[offset + 100:offset + 600] = noise.integers(0, 256, 500, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    before = _digest(path)
    with pytest.raises(CatalogError, match="corrupt") as info:
        Catalog.open(path)
    assert str(path) in str(info.value)
    assert _digest(path) == before


def test_read_only_open_of_missing_file(tmp_path):
    path = tmp_path / "missing.duckdb"
    with pytest.raises(CatalogError, match="does not exist") as info:
        Catalog.open(path, read_only=True)
    assert str(path) in str(info.value)
    assert not path.exists()


def test_read_only_open_of_foreign_duckdb_file(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (a INTEGER)")
    con.close()
    with pytest.raises(CatalogError, match="no AirPlan catalog") as info:
        Catalog.open(path, read_only=True)
    assert str(path) in str(info.value)


def test_writer_adds_the_catalog_to_an_existing_duckdb_file_when_asked(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (42)")
    con.close()
    with pytest.raises(CatalogError, match="but no AirPlan catalog"):
        Catalog.open(path)
    with Catalog.open(path, adopt=True) as cat:
        assert cat.query("SELECT a FROM main.t") == [{"a": 42}]
        assert cat.schema_version >= 1


def test_missing_directory_is_a_catalog_error(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "c.duckdb"
    with pytest.raises(CatalogError) as info:
        Catalog.open(path)
    assert str(path) in str(info.value)


_HOLDER = textwrap.dedent("""
    import sys
    import duckdb
    con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
    print("ready", flush=True)
    sys.stdin.read()
    con.close()
""")


@contextlib.contextmanager
def _held(path, mode: str):
    """A separate process holding ``path`` open ("rw" or "ro") until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_lock_held_by_writer_process_names_file_and_pid(tmp_path):
    path = tmp_path / "locked.duckdb"
    Catalog.open(path).close()
    with _held(path, "rw") as proc:
        for read_only in (False, True):
            with pytest.raises(CatalogLockedError) as info:
                Catalog.open(path, read_only=read_only)
            message = str(info.value)
            assert str(path) in message
            assert f"PID {proc.pid}" in message
            assert "--read-only" in message
            assert info.value.holder_pid == proc.pid
            assert "python" in info.value.holder_exe
    with Catalog.open(path) as cat:
        assert cat.schema_version >= 1


def test_lock_held_by_reader_process_allows_readers(tmp_path):
    path = tmp_path / "shared.duckdb"
    with Catalog.open(path) as cat:
        _workload(cat)
    with _held(path, "ro") as proc:
        with pytest.raises(CatalogLockedError, match="open it read-only too") as info:
            Catalog.open(path)
        assert info.value.holder_pid == proc.pid
        with Catalog.open(path, read_only=True) as cat:
            assert _count(cat, "workloads") == 1


_BRIEF_HOLDER = textwrap.dedent("""
    import sys, time
    import duckdb
    con = duckdb.connect(sys.argv[1])
    print("ready", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
""")


def test_open_waits_for_a_lock_that_is_released_within_the_wait(tmp_path, caplog):
    path = tmp_path / "brief.duckdb"
    Catalog.open(path).close()
    proc = subprocess.Popen([sys.executable, "-c", _BRIEF_HOLDER, str(path), "1.5"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        start = time.monotonic()
        with caplog.at_level("WARNING", logger="airplan_qo.catalog"):
            with Catalog.open(path, wait=30) as cat:
                waited = time.monotonic() - start
                assert cat.wait == 30 and cat.schema_version >= 1
        assert 0.5 < waited < 20
        notes = [r.getMessage() for r in caplog.records if "waiting up to 30 s" in
                 r.getMessage()]
        assert len(notes) == 1 and f"PID {proc.pid}" in notes[0] and str(path) in notes[0]
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()


def test_open_gives_up_after_the_wait_and_zero_fails_at_once(tmp_path):
    path = tmp_path / "held.duckdb"
    Catalog.open(path).close()
    with _held(path, "rw") as proc:
        start = time.monotonic()
        with pytest.raises(CatalogLockedError, match=r"Waited 0\.6 s for it \(--wait") as info:
            Catalog.open(path, read_only=True, wait=0.6)
        assert 0.6 <= time.monotonic() - start < 10
        assert info.value.holder_pid == proc.pid
        start = time.monotonic()
        with pytest.raises(CatalogLockedError) as info:
            Catalog.open(path, wait=0)
        assert "Waited" not in str(info.value) and time.monotonic() - start < 0.5


@pytest.mark.parametrize("bad", [-1, "soon", float("nan"), float("inf")])
def test_a_bad_lock_wait_is_a_validation_error(tmp_path, bad):
    with pytest.raises(ValidationError, match="lock wait must be a number of seconds >= 0"):
        Catalog.open(tmp_path / "x.duckdb", wait=bad)


def test_a_conflict_inside_this_process_never_waits(tmp_path):
    path = tmp_path / "own.duckdb"
    with Catalog.open(path):
        start = time.monotonic()
        with pytest.raises(CatalogLockedError, match="already open read-write"):
            Catalog.open(path, read_only=True, wait=30)
        assert time.monotonic() - start < 1


def test_close_releases_the_lock_for_other_processes(tmp_path):
    path = tmp_path / "released.duckdb"
    with Catalog.open(path) as cat:
        _workload(cat)
    assert cat.closed
    code = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); c.close()"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    with pytest.raises(CatalogError, match="closed"):
        cat.query("SELECT 1")
    cat.close()


def test_release_gives_the_file_to_other_processes_until_the_next_use(tmp_path):
    path = tmp_path / "released.duckdb"
    cat = Catalog.open(path)
    _workload(cat, "mine")
    with cat.transaction():
        with pytest.raises(CatalogError, match="cannot be released inside a transaction"):
            cat.release()
    cat.release()
    assert cat.released and not cat.closed
    code = ("import sys; from airplan_qo.catalog.store import Catalog\n"
            "with Catalog(sys.argv[1]) as c:\n"
            "    c.insert_row('workloads', {'dataset': 'digits', 'n_clients': 8, "
            "'partition_scheme': 'iid', 'partition_seed': 1, 'data_seed': 2, "
            "'fingerprint': 'theirs'})")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    # the next use reopens the file and sees what the other process wrote
    assert cat.find_workload("theirs") is not None and not cat.released
    cat.release()
    with _held(path, "rw") as proc:
        with pytest.raises(CatalogLockedError) as info:
            cat.reacquire(0)
        assert info.value.holder_pid == proc.pid and cat.released
    cat.reacquire(0)
    assert _count(cat, "workloads") == 2
    cat.release()
    cat.close()
    assert cat.closed and not cat.released
    with pytest.raises(CatalogError, match="closed"):
        cat.query("SELECT 1")


def test_a_released_catalog_refuses_a_file_migrated_meanwhile(tmp_path, monkeypatch):
    from airplan_qo.catalog import store as store_mod

    path = tmp_path / "migrated.duckdb"
    cat = Catalog.open(path)
    cat.release()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version (version, description) VALUES (?, 'later')",
                [store_mod.SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(CatalogError, match="changed schema version .* while this process had "
                                           "it released"):
        cat.query("SELECT 1")
    cat.close()


def _catalog_id(path):
    with Catalog.open(path) as cat:
        return cat.catalog_id, cat.ancestors


def test_a_copied_catalog_gets_its_own_id_and_the_original_keeps_its_own(tmp_path, caplog):
    import shutil

    original = tmp_path / "a.duckdb"
    first, _ = _catalog_id(original)
    shutil.copyfile(original, tmp_path / "b.duckdb")
    with caplog.at_level("WARNING", logger="airplan_qo.catalog"):
        copy, ancestors = _catalog_id(tmp_path / "b.duckdb")
    assert copy != first and ancestors == (first,)
    assert f"{tmp_path / 'b.duckdb'} is a copy of {original}" in caplog.text
    assert _catalog_id(original) == (first, ())
    assert _catalog_id(tmp_path / "b.duckdb") == (copy, (first,))   # stable from now on
    # a copy of the copy remembers both
    shutil.copyfile(tmp_path / "b.duckdb", tmp_path / "c.duckdb")
    third, ancestors = _catalog_id(tmp_path / "c.duckdb")
    assert third not in (first, copy) and ancestors == (copy, first)
    # read-only opens see the file as it is and change nothing
    shutil.copyfile(original, tmp_path / "d.duckdb")
    with Catalog.open(tmp_path / "d.duckdb", read_only=True) as cat:
        assert cat.catalog_id == first


def test_a_moved_or_restored_catalog_keeps_its_id(tmp_path):
    import shutil

    path = tmp_path / "a.duckdb"
    first, _ = _catalog_id(path)
    moved = tmp_path / "moved.duckdb"
    os.rename(path, moved)
    assert _catalog_id(moved) == (first, ())
    # restored from a backup at its own path: a new file (inode) where it was
    shutil.copyfile(moved, tmp_path / "backup.duckdb")
    os.remove(moved)
    os.rename(tmp_path / "backup.duckdb", moved)
    assert _catalog_id(moved) == (first, ())


def test_catalogs_in_one_process_share_the_file(tmp_path):
    path = tmp_path / "twice.duckdb"
    with Catalog.open(path) as first, Catalog.open(path) as second:
        _workload(first, "from-first")
        assert second.find_workload("from-first") is not None
        with pytest.raises(CatalogLockedError, match="already open read-write") as info:
            Catalog.open(path, read_only=True)
        assert info.value.holder_pid == os.getpid()
    with Catalog.open(path, read_only=True) as a, Catalog.open(path, read_only=True) as b:
        assert _count(a, "workloads") == _count(b, "workloads") == 1
        with pytest.raises(CatalogLockedError, match="already open read-only"):
            Catalog.open(path)
    with Catalog.open(path) as cat:
        assert cat.schema_version >= 1


def test_default_file_name_does_not_make_names_ambiguous(tmp_path):
    path = tmp_path / "airplan.duckdb"
    with Catalog.open(path) as cat:
        _workload(cat)
        assert cat.execute_user_sql("SELECT dataset FROM airplan.workloads") == (
            ["dataset"], [("digits",)])
        assert cat.execute_user_sql("SELECT count(*) AS n FROM workloads") == (["n"], [(1,)])


def test_forgotten_catalog_releases_the_file_when_collected(tmp_path):
    path = tmp_path / "forgotten.duckdb"
    cat = Catalog.open(path)
    _workload(cat)
    del cat
    gc.collect()
    code = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); c.close()"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


# ---- read-only mode --------------------------------------------------------------------------

def test_read_only_rejects_writes_cleanly(tmp_path):
    path = tmp_path / "ro.duckdb"
    with Catalog.open(path) as cat:
        wid = _workload(cat)
    before = _digest(path)
    with Catalog.open(path, read_only=True) as cat:
        assert cat.read_only
        assert cat.find_workload("fp")["workload_id"] == wid
        with pytest.raises(CatalogError, match="read-only"):
            _workload(cat, "fp2")
        with pytest.raises(CatalogError, match="read-only"):
            cat.write_sketches(wid, 1, np.ones((2, 2, 3), dtype=np.int32), np.ones(2, int), 0)
        with pytest.raises(CatalogError, match="read-only"):
            cat.execute_user_sql("INSERT INTO airplan.calibration (estimator, scope, "
                                 "constant_name, value, n_obs, source) "
                                 "VALUES ('e', 'global', 'c', 1, 1, 's')")
        with pytest.raises(CatalogError, match="read-only"):
            cat.execute_user_sql("DROP TABLE airplan.plans")
        names, rows = cat.execute_user_sql("SELECT count(*) AS n FROM airplan.workloads")
        assert (names, rows) == (["n"], [(1,)])
    assert _digest(path) == before


# ---- transactions ----------------------------------------------------------------------------

def test_exception_half_way_through_a_multi_table_write_leaves_nothing():
    with Catalog.open(":memory:") as cat:
        counts = np.arange(4 * 2 * 3, dtype=np.int32).reshape(4, 2, 3)
        with pytest.raises(RuntimeError, match="boom"):
            with cat.transaction():
                wid = _workload(cat)
                cat.write_sketches(wid, 1, counts, np.full(4, 10), hash_seed=5)
                cat.insert_row("planning_runs", {"workload_id": wid, "statement": "s",
                                                 "estimator": "e", "objective": "o",
                                                 "n_candidates": 0})
                raise RuntimeError("boom")
        for table in ("workloads", "client_sketches", "planning_runs"):
            assert _count(cat, table) == 0


def test_database_error_inside_a_transaction_rolls_back_earlier_rows():
    with Catalog.open(":memory:") as cat:
        with pytest.raises(CatalogError, match="airplan.plans"):
            with cat.transaction():
                run = cat.insert_row("planning_runs", {"statement": "s", "estimator": "e",
                                                       "objective": "o", "n_candidates": 2})
                cat.insert_rows("plans", {"planning_run_id": [run, run], "family": ["a", "b"],
                                          "weights_rule": ["m", "m"], "k_ratio": [0.5, 7.0],
                                          "algorithm": ["d", "d"],
                                          "reaches_target": [True, True]})
        assert _count(cat, "planning_runs") == 0
        assert _count(cat, "plans") == 0
        # the connection is usable afterwards
        assert _workload(cat) >= 1


def test_nested_transactions_join_the_outer_one():
    with Catalog.open(":memory:") as cat:
        with pytest.raises(ValueError):
            with cat.transaction():
                _workload(cat, "a")
                with cat.transaction():
                    _workload(cat, "b")
                raise ValueError("outer fails after inner finished")
        assert _count(cat, "workloads") == 0
        with cat.transaction():
            with cat.transaction():
                _workload(cat, "c")
        assert _count(cat, "workloads") == 1


# ---- sketches --------------------------------------------------------------------------------

def test_sketches_round_trip_exactly_for_2000_clients(tmp_path):
    rng = np.random.default_rng(2024)
    counts = rng.integers(-50, 2**31 - 1, size=(2000, 5, 55), dtype=np.int64)
    counts[0, 0, 0] = -(2**31)
    n_records = rng.integers(0, 10**9, size=2000)
    path = tmp_path / "sketch.duckdb"
    with Catalog.open(path) as cat:
        wid = _workload(cat)
        assert cat.next_stats_version(wid) == 1
        assert cat.write_sketches(wid, 1, counts, n_records, hash_seed=2**62 + 3,
                                  noise_sigma=1.25) == 2000
        assert cat.next_stats_version(wid) == 2
        cat.write_sketches(wid, 2, counts[:10, :2, :7], n_records[:10], hash_seed=1)
    with Catalog.open(path, read_only=True) as cat:
        got = cat.read_sketches(wid, 1)
        assert got.counts.shape == (2000, 5, 55) and got.counts.flags.writeable
        assert np.array_equal(got.counts, counts)
        assert np.array_equal(got.n_records, n_records)
        assert got.hash_seed == 2**62 + 3 and got.noise_sigma == 1.25
        small = cat.read_sketches(wid, 2)
        assert np.array_equal(small.counts, counts[:10, :2, :7])
        assert small.noise_sigma == 0.0
        flat = cat.query("SELECT counts FROM airplan.client_sketches WHERE workload_id = ? "
                         "AND stats_version = 1 AND client = 7", [wid])[0]["counts"]
        assert flat == counts[7].reshape(-1).tolist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 30), depth=st.integers(1, 6), width=st.integers(1, 70),
       seed=st.integers(0, 2**63 - 1), data=st.data())
def test_sketch_round_trip_any_shape(n, depth, width, seed, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    counts = rng.integers(-(2**31), 2**31, size=(n, depth, width))
    n_records = rng.integers(0, 2**40, size=n)
    with Catalog.open(":memory:") as cat:
        cat.write_sketches(3, 4, counts, n_records, hash_seed=seed)
        got = cat.read_sketches(3, 4)
    assert np.array_equal(got.counts, counts)
    assert np.array_equal(got.n_records, n_records)
    assert got.hash_seed == seed


def test_sketch_input_is_validated():
    with Catalog.open(":memory:") as cat:
        with pytest.raises(ValidationError, match="shape"):
            cat.write_sketches(1, 1, np.zeros((3, 4)), np.zeros(3, int), 0)
        with pytest.raises(ValidationError, match="integers"):
            cat.write_sketches(1, 1, np.zeros((3, 4, 5)), np.zeros(3, int), 0)
        with pytest.raises(ValidationError, match="INTEGER"):
            cat.write_sketches(1, 1, np.full((1, 1, 1), 2**40), np.zeros(1, int), 0)
        with pytest.raises(ValidationError, match="BIGINT"):
            cat.write_sketches(1, 1, np.zeros((3, 4, 5), int), np.zeros(3, int), 2**64 - 1)
        with pytest.raises(ValidationError, match="n_records"):
            cat.write_sketches(1, 1, np.zeros((3, 4, 5), int), np.zeros(2, int), 0)
        with pytest.raises(CatalogError, match="no client sketches"):
            cat.read_sketches(1, 1)
        with pytest.raises(ValidationError, match="release kind"):
            cat.write_sketches(1, 1, np.zeros((3, 1, 5), int), np.zeros(3, int), 0, kind="cms")
        with pytest.raises(ValidationError, match="depth 1"):
            cat.write_sketches(1, 1, np.zeros((3, 2, 5), int), np.zeros(3, int), 0,
                               kind="histogram")


def test_histogram_releases_round_trip_with_their_kind():
    counts = np.arange(4 * 10).reshape(4, 1, 10)
    with Catalog.open(":memory:") as cat:
        cat.write_sketches(1, 1, counts, counts.sum(axis=(1, 2)), 0, 2.5, kind="histogram")
        cat.write_sketches(1, 2, np.ones((4, 5, 3), int), np.full(4, 3), 7)
        got = cat.read_sketches(1, 1)
        assert got.kind == "histogram" and got.noise_sigma == 2.5
        np.testing.assert_array_equal(got.counts, counts)
        assert cat.read_sketches(1, 2).kind == "count_min"
        assert {r["release_kind"] for r in cat.query(
            "SELECT release_kind FROM airplan.client_sketches WHERE stats_version = 1")} == \
            {"histogram"}
        # one version holds one kind: a mix is reported as inconsistent
        cat.query("UPDATE airplan.client_sketches SET release_kind = 'count_min', depth = 1 "
                  "WHERE stats_version = 1 AND client = 0")
        with pytest.raises(CatalogError, match="inconsistent"):
            cat.read_sketches(1, 1)


def test_writing_the_same_sketch_version_twice_fails_without_partial_rows():
    with Catalog.open(":memory:") as cat:
        counts = np.ones((5, 2, 3), dtype=np.int32)
        cat.write_sketches(1, 1, counts, np.ones(5, int), 0)
        with pytest.raises(CatalogError, match="client_sketches"):
            cat.write_sketches(1, 1, np.ones((8, 2, 3), dtype=np.int32), np.ones(8, int), 0)
        assert _count(cat, "client_sketches") == 5


# ---- row helpers -----------------------------------------------------------------------------

def test_insert_row_returns_ids_and_canonical_json():
    with Catalog.open(":memory:") as cat:
        first = _workload(cat, "a", options={"b": 1, "a": [1, 2]})
        second = _workload(cat, "b")
        assert second == first + 1
        row = cat.find_workload("a")
        assert row["options"] == '{"a":[1,2],"b":1}'
        assert cat.find_workload("zzz") is None
        assert cat.insert_row("round_stats", {"exec_id": 1, "round": 0}) is None


def test_insert_row_binds_plain_values_and_converts_them_like_arrow():
    with Catalog.open(":memory:") as cat:
        wid = _workload(cat, "a")
        run = cat.insert_row("planning_runs", {
            "workload_id": np.int64(wid), "statement": "s", "estimator": "e",
            "objective": "o", "sla": "x", "n_candidates": np.int32(3), "fallback": False,
            "warnings": [], "planning_time_ms": np.float64(1.5), "chosen_plan_id": None})
        other = cat.insert_row("planning_runs", {
            "workload_id": wid, "statement": "s", "estimator": "e", "objective": "o",
            "sla": "x", "n_candidates": 1, "fallback": True, "warnings": ["w1", "w2"],
            "planning_time_ms": 2.0})
        rows = cat.query("SELECT * FROM airplan.planning_runs ORDER BY planning_run_id")
        assert [r["planning_run_id"] for r in rows] == [run, other] and other == run + 1
        assert rows[0]["warnings"] == [] and rows[1]["warnings"] == ["w1", "w2"]
        assert rows[0]["n_candidates"] == 3 and rows[0]["planning_time_ms"] == 1.5
        assert rows[0]["chosen_plan_id"] is None
        with pytest.raises(CatalogError, match="planning_runs"):
            cat.insert_row("planning_runs", {"workload_id": "not a number"})


def test_next_ids_draws_from_the_tables_sequence():
    with Catalog.open(":memory:") as cat:
        ids = cat.next_ids("feedback", 3)
        assert ids.dtype == np.int64 and list(np.diff(ids)) == [1, 1]
        row = {"exec_id": [1], "plan_id": [10], "estimator": ["e"], "metric": ["rounds"],
               "estimated": [1.0], "actual": [2.0]}
        # rows inserted with drawn ids keep them; the sequence goes on after them
        cat.insert_rows("feedback", {**{k: v * 3 for k, v in row.items()}, "feedback_id": ids})
        assert cat.insert_rows("feedback", row)[0] == ids[-1] + 1
        with pytest.raises(ValidationError, match="no generated id"):
            cat.next_ids("round_stats", 1)


def test_insert_rows_returns_ids_in_row_order():
    with Catalog.open(":memory:") as cat:
        ids = cat.insert_rows("feedback", {
            "exec_id": np.array([1, 1, 2]), "plan_id": [10, 10, 20], "estimator": ["e"] * 3,
            "metric": ["rounds", "accuracy", "rounds"], "estimated": [1.0, 2.0, 3.0],
            "actual": np.array([1.5, 2.5, 3.5])})
        assert ids.dtype == np.int64 and len(set(ids.tolist())) == 3
        got = cat.query("SELECT feedback_id, estimated FROM airplan.feedback ORDER BY estimated")
        assert [r["feedback_id"] for r in got] == ids.tolist()
        assert cat.insert_rows("round_stats", {"exec_id": np.ones(3, int),
                                               "round": np.arange(3)}) is None
        assert _count(cat, "round_stats") == 3


def test_insert_numbered_draws_ids_and_one_parent_id_in_the_statement():
    with Catalog.open(":memory:") as cat:
        cat.next_ids("plans", 5)   # the sequence does not start at 1
        rows = cat.arrow_rows("plans", {
            "rank": [3, 1, 2], "family": ["ring"] * 3, "weights_rule": ["w"] * 3,
            "k_ratio": [0.1, 0.5, 1.0], "algorithm": ["dsgd"] * 3,
            "reaches_target": [True, False, True], "terms": [{"b": 1, "a": 2}, "{}", "{}"]})
        ids, run = cat.insert_numbered("plans", rows, key="rank", parent="planning_run_id")
        assert ids.dtype == np.int64 and len(set(ids.tolist())) == 3 and min(ids) > 5
        got = {r["rank"]: r for r in cat.query("SELECT * FROM airplan.plans")}
        assert [got[k]["plan_id"] for k in (3, 1, 2)] == ids.tolist()
        assert {r["planning_run_id"] for r in got.values()} == {run}
        assert got[3]["terms"] == '{"a":2,"b":1}' and got[1]["terms"] == "{}"
        # the parent's sequence moved on: its row takes the drawn id, the next one another
        assert cat.insert_row("planning_runs", {"planning_run_id": run, "statement": "s",
                                                "estimator": "e", "objective": "o",
                                                "n_candidates": 3}) == run
        assert cat.next_ids("planning_runs", 1)[0] == run + 1
        empty, parent = cat.insert_numbered("plans", rows.slice(0, 0), key="rank",
                                            parent="planning_run_id")
        assert len(empty) == 0 and parent == run + 2
        with pytest.raises(ValidationError, match="does not tell the rows"):
            cat.insert_numbered("plans", cat.arrow_rows("plans", {
                "rank": [1, 1], "family": ["r"] * 2, "weights_rule": ["w"] * 2,
                "k_ratio": [1.0] * 2, "algorithm": ["a"] * 2, "reaches_target": [True] * 2}),
                key="rank")
        with pytest.raises(ValidationError, match="not the generated id"):
            cat.insert_numbered("plans", rows, key="rank", parent="rank")
        with pytest.raises(ValidationError, match="no generated id"):
            cat.insert_numbered("round_stats", rows, key="rank")
        assert _count(cat, "plans") == 3


def test_insert_copies_copies_a_parents_rows_with_new_ids():
    with Catalog.open(":memory:") as cat:
        rows = cat.arrow_rows("plans", {
            "rank": [2, 1], "family": ["ring", "complete"], "weights_rule": ["w"] * 2,
            "k_ratio": [0.1, 1.0], "algorithm": ["dsgd"] * 2, "reaches_target": [False, True],
            "calibration_ids": [[4, 5], []], "terms": ['{"a":1}', "{}"]})
        first, run = cat.insert_numbered("plans", rows, key="rank", parent="planning_run_id")
        ids, run2 = cat.insert_copies("plans", "planning_run_id", run, key="rank",
                                      keys=np.array([1, 2]))
        assert run2 != run and not set(ids.tolist()) & set(first.tolist())
        cols = "rank, family, weights_rule, k_ratio, algorithm, reaches_target, " \
               "calibration_ids, terms"
        got = [cat.query(f"SELECT {cols} FROM airplan.plans WHERE planning_run_id = ? "
                         "ORDER BY rank", [r]) for r in (run, run2)]
        assert got[0] == got[1] and len(got[0]) == 2
        by_rank = {r["rank"]: r["plan_id"] for r in cat.query(
            "SELECT rank, plan_id FROM airplan.plans WHERE planning_run_id = ?", [run2])}
        assert ids.tolist() == [by_rank[1], by_rank[2]]
        # copies that are not the rows expected raise: the caller's transaction undoes them
        with pytest.raises(CatalogError, match="not the 3 expected"), cat.transaction():
            cat.insert_copies("plans", "planning_run_id", run, key="rank", keys=[1, 2, 3])
        with pytest.raises(CatalogError, match="2 rows"), cat.transaction():
            cat.insert_copies("plans", "planning_run_id", run, key="rank", keys=[1, 3])
        assert _count(cat, "plans") == 4
        with pytest.raises(ValidationError, match="not the generated id"):
            cat.insert_copies("plans", "plan_id", run, key="rank", keys=[1, 2])


def test_changes_count_writes_per_table_across_connections_and_transactions(tmp_path):
    path = tmp_path / "c.duckdb"
    with Catalog.open(path) as cat, Catalog.open(path) as other:
        watched = ("workloads", "calibration")
        start = cat.changes(watched)
        assert other.changes(watched) == start   # one count per file in the process
        cat.query("SELECT * FROM airplan.workloads")
        cat.query("  -- a read\n select 1 AS x")
        cat.query("WITH w AS (SELECT 1 AS x) SELECT x FROM w")
        cat.insert_row("feedback", {"exec_id": 1, "plan_id": 1, "estimator": "e",
                                    "metric": "m", "estimated": 1.0, "actual": 1.0})
        assert cat.changes(watched) == start     # reads and other tables do not count
        _workload(other)                          # another connection's write counts
        assert cat.changes(watched) > start
        # a write counts when it runs and again when its transaction ends
        now = cat.changes(watched)
        with other.transaction():
            other.supersede_calibration("ttt", "global", "", {"x": 1.0}, n_obs=1, source="t")
            during = cat.changes(watched)
            assert during > now
        assert cat.changes(watched) > during
        # a rolled back write counts as well
        now = cat.changes(watched)
        with pytest.raises(RuntimeError), other.transaction():
            _workload(other, "fp2")
            raise RuntimeError("undo")
        assert cat.changes(watched) >= now + 2
        # a statement that is not a SELECT counts for every table
        now = cat.changes(["topologies"])
        cat.query("UPDATE airplan.executions SET reason = 'r' WHERE exec_id = -1 "
                  "RETURNING exec_id")
        assert cat.changes(["topologies"]) > now
        now = cat.changes(["topologies"])      # so does a SELECT followed by a write
        cat.query("SELECT 1; DELETE FROM airplan.feedback WHERE exec_id = -1")
        assert cat.changes(["topologies"]) > now
        now = cat.changes(["topologies"])      # and a write inside a WITH
        cat.query("WITH gone AS (DELETE FROM airplan.feedback WHERE exec_id = -1 RETURNING "
                  "exec_id) SELECT count(*) AS n FROM gone")
        assert cat.changes(["topologies"]) > now
        now = cat.changes(["topologies"])      # a word in a string or a quoted name is not
        cat.query("SELECT 'delete' AS \"update\" FROM airplan.feedback WHERE metric = 'insert'")
        assert cat.changes(["topologies"]) == now
    with Catalog.open(":memory:") as a, Catalog.open(":memory:") as b:
        before_a, before_b = a.changes(["workloads"]), b.changes(["workloads"])
        _workload(a)   # each in-memory catalog is a database of its own
        assert b.changes(["workloads"]) == before_b and a.changes(["workloads"]) > before_a


def test_insert_arrow_matches_columns_by_name_and_fills_defaults():
    with Catalog.open(":memory:") as cat:
        table = pa.table({"round": pa.array([1, 2], pa.int32()), "exec_id": [9, 9],
                          "train_loss": [0.5, 0.25]})
        assert cat.insert_arrow("round_stats", table) == 2
        rows = cat.query("SELECT * FROM airplan.round_stats ORDER BY round")
        assert [r["train_loss"] for r in rows] == [0.5, 0.25]
        assert rows[0]["test_accuracy"] is None
        assert cat.insert_arrow("round_stats", {"exec_id": [], "round": []}) == 0


def test_unknown_table_or_column_is_a_validation_error():
    with Catalog.open(":memory:") as cat:
        with pytest.raises(ValidationError, match="did you mean 'workloads'"):
            cat.insert_row("workload", {"dataset": "x"})
        with pytest.raises(ValidationError, match="did you mean 'dataset'"):
            cat.insert_row("workloads", {"datasets": "x"})
        with pytest.raises(ValidationError, match="expected 2"):
            cat.insert_rows("round_stats", {"exec_id": [1, 1], "round": [1, 2, 3]})


def test_update_row_and_its_guards():
    with Catalog.open(":memory:") as cat:
        exec_id = cat.insert_row("executions", {"plan_id": 1, "data_seed": 1, "train_seed": 2,
                                                "channel_seed": 3, "options": {"lr": 0.1}})
        assert cat.query("SELECT status FROM airplan.executions")[0]["status"] == "running"
        cat.update_row("executions", exec_id, {"status": "failed", "reason": "diverged",
                                               "actual_rounds": np.int64(12),
                                               "options": {"lr": 0.2}})
        row = cat.query("SELECT * FROM airplan.executions")[0]
        assert (row["status"], row["reason"], row["actual_rounds"]) == ("failed", "diverged", 12)
        assert row["options"] == '{"lr":0.2}'
        with pytest.raises(CatalogError, match="CHECK"):
            cat.update_row("executions", exec_id, {"status": "finished"})
        with pytest.raises(CatalogError, match="no row"):
            cat.update_row("executions", exec_id + 100, {"status": "failed"})
        with pytest.raises(ValidationError, match="supersede_calibration"):
            cat.update_row("calibration", 1, {"value": 2.0})
        with pytest.raises(ValidationError, match="no generated id"):
            cat.update_row("round_stats", 1, {"train_loss": 2.0})


def test_supersede_calibration_versions_rows_without_overwriting():
    with Catalog.open(":memory:") as cat:
        first = cat.supersede_calibration("dsgd", "dataset", "digits", {"f0": 0.1, "f1": 2.0},
                                          n_obs=0, source="default")
        other = cat.supersede_calibration("dsgd", "dataset", "mnist", {"f0": 0.3}, n_obs=0,
                                          source="default")
        second = cat.supersede_calibration("dsgd", "dataset", "digits", {"f0": 0.15},
                                           n_obs={"f0": 6}, fit_error={"f0": 0.02},
                                           source="fit")
        rows = {r["calibration_id"]: r for r in cat.query("SELECT * FROM airplan.calibration")}
        assert len(rows) == 4
        assert rows[first["f0"]]["superseded_by"] == second["f0"]
        assert rows[first["f0"]]["value"] == 0.1
        assert rows[first["f1"]]["superseded_by"] is None
        assert rows[other["f0"]]["superseded_by"] is None
        assert (rows[second["f0"]]["n_obs"], rows[second["f0"]]["fit_error"]) == (6, 0.02)
        current = cat.current_calibration("dsgd", "dataset", "digits")
        assert {r["constant_name"]: r["value"] for r in current} == {"f0": 0.15, "f1": 2.0}
        assert cat.supersede_calibration("dsgd", "global", "", {}, n_obs=0, source="x") == {}


def test_the_topology_cache_is_the_optimizers():
    """Topologies are cached in the catalog through ``Optimizer.topology_stats`` only: a miss is
    built and stored with its edges and weights, a later call (its memory of the rows cleared)
    reads the row back, another seed is another row, and the table refuses a duplicate."""
    from airplan_qo.planner.optimizer import Optimizer
    from airplan_qo.plans.topology import TopologySpec

    spec = TopologySpec.create("small_world", 6, seed=11, weights="metropolis_hastings",
                               k=4, beta=0.1)
    with Catalog.open(":memory:") as cat:
        (built,), (tid,) = Optimizer(cat).topology_stats([spec])
        assert built.spectra.method != "cached" and isinstance(tid, int)
        (row,) = cat.query("SELECT * FROM airplan.topologies")
        assert row["topology_id"] == tid and json.loads(row["params"]) == {"k": 4, "beta": 0.1}
        assert len(row["edges_src"]) == len(row["edges_dst"]) == len(row["weights"]) \
            == row["n_edges"] == built.spectra.n_edges
        assert len(row["self_weights"]) == 6 and row["slots_per_round"] == built.slots_per_round
        cat.memo.clear()
        (again,), (same,) = Optimizer(cat).topology_stats([spec])
        assert same == tid and again.spectra.method == "cached"
        assert again.spectra.mixing_p == pytest.approx(built.spectra.mixing_p)
        (_,), (other,) = Optimizer(cat).topology_stats([attrs.evolve(spec, seed=12)])
        assert other not in (None, tid)
        with pytest.raises(CatalogError, match="airplan.topologies"):
            cat.insert_row("topologies", {k: v for k, v in row.items()
                                          if k not in ("topology_id", "created_at")})


def test_query_and_user_sql():
    with Catalog.open(":memory:") as cat:
        _workload(cat)
        assert cat.query("SELECT dataset FROM airplan.workloads WHERE n_clients = $n",
                         {"n": 8}) == [{"dataset": "digits"}]
        assert cat.query_arrow("SELECT n_clients FROM airplan.workloads").num_rows == 1
        names, rows = cat.execute_user_sql("SELECT dataset, n_clients FROM airplan.workloads")
        assert names == ["dataset", "n_clients"] and rows == [("digits", 8)]
        with pytest.raises(CatalogError, match="airplan.nope"):
            cat.execute_user_sql("SELECT * FROM airplan.nope")
        with pytest.raises(CatalogError, match="[Ss]yntax"):
            cat.execute_user_sql("SELEC 1")
        with pytest.raises(CatalogError, match=":memory:"):
            cat.query("SELECT * FROM missing_table")
        assert cat.columns("round_stats")[:2] == ["exec_id", "round"]


def test_catalog_is_usable_after_a_failed_statement(tmp_path):
    with Catalog.open(tmp_path / "c.duckdb") as cat:
        _workload(cat, "dup")
        with pytest.raises(CatalogError, match="Duplicate key"):
            _workload(cat, "dup")
        assert _workload(cat, "fresh") > 0
        assert os.path.exists(cat.path)
