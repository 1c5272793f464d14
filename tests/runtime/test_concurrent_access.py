"""Concurrent access to one catalog file by several processes: training releases the file
between its writes, so a reader sees the rounds as they come and two trainings run side by side.
Real subprocesses; small runs."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from airplan_qo.catalog.store import Catalog
from airplan_qo.errors import CatalogError

# Trains one whole-budget run (no early stop) on the catalog; writes happen every 0.2 s so a
# short run shows several of them. One torch thread: two of these share two cores.
TRAINER = textwrap.dedent("""
    import sys
    import torch
    import airplan_qo as aq
    from airplan_qo.runtime import execution

    torch.set_num_threads(1)
    execution.FLUSH_SECONDS = 0.2
    path, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with aq.connect(path, wait=60) as db:
        plan = db.plan(aq.Workload(dataset="digits", clients=6, rounds=rounds, seed=seed,
                                   model="logistic"),
                       topologies=["ring"], sparsity=[1.0], estimator="dsgd")
        report = db.execute(plan, stop_at_target=False)
        assert report.result.status == "succeeded", report.result.reason
        print(report.exec_id, report.result.rounds)
""")


def _train(path, rounds, seed):
    return subprocess.Popen([sys.executable, "-c", TRAINER, str(path), str(rounds), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(child, timeout=240):
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 0, err[-3000:]
    exec_id, rounds = out.split()
    return int(exec_id), int(rounds)


def _count_rows(path):
    """Rows of round_stats seen by a read-only open (None while the file is not a catalog
    yet); the open waits for a writer's short transaction."""
    try:
        with Catalog(path, read_only=True, wait=30) as cat:
            return cat.query("SELECT count(*) AS n FROM airplan.round_stats")[0]["n"]
    except CatalogError as exc:
        if "does not exist" in str(exc) or "no AirPlan catalog" in str(exc) or \
                "older" in str(exc):
            return None
        raise


def test_a_reader_sees_round_stats_grow_while_another_process_trains(tmp_path):
    path = tmp_path / "c.duckdb"
    rounds = 300
    child = _train(path, rounds, seed=1)
    seen = []
    try:
        while child.poll() is None:
            n = _count_rows(path)
            if n is not None:
                seen.append(n)
            time.sleep(0.05)
        exec_id, ran = _finish(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert ran == rounds
    assert seen == sorted(seen)                      # never shrinks
    partial = sorted({n for n in seen if 0 < n < rounds})
    assert len(partial) >= 2, seen                   # opened between writes, more each time
    assert _count_rows(path) == rounds


def test_two_trainings_on_one_catalog_run_side_by_side_and_both_complete(tmp_path):
    path = tmp_path / "c.duckdb"
    rounds = 200
    children = [_train(path, rounds, seed=s) for s in (1, 2)]
    try:
        results = [_finish(c) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    assert sorted(r[0] for r in results) == [1, 2] and {r[1] for r in results} == {rounds}
    with Catalog(path, read_only=True) as cat:
        rows = cat.query("SELECT exec_id, status, actual_rounds, started_at, finished_at "
                         "FROM airplan.executions ORDER BY exec_id")
        assert [(r["status"], r["actual_rounds"]) for r in rows] == [("succeeded", rounds)] * 2
        for r in rows:
            got = cat.query("SELECT round FROM airplan.round_stats WHERE exec_id = ? "
                            "ORDER BY round", [r["exec_id"]])
            assert [g["round"] for g in got] == list(range(1, rounds + 1))
            assert len(cat.query("SELECT * FROM airplan.feedback WHERE exec_id = ?",
                                 [r["exec_id"]])) == 4
    # each started before the other finished: they trained at the same time, not in turn
    assert max(r["started_at"] for r in rows) < min(r["finished_at"] for r in rows)
