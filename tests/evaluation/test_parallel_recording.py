"""What ``airplan evaluate --workers`` does around the training: runs returned by workers are
recorded in batches with the rows of one-by-one recording, and the worker processes start (and
load the grid's datasets) before the first workload is planned."""

import math
import time

import attrs
import pytest

import airplan_qo as aq
from airplan_qo.errors import ExecutionError
from airplan_qo.evaluation import executors, parse_grid, runner
from airplan_qo.runtime import execution

#: Columns whose value is the time it was written (or the writing process's start).
_CLOCK = {"started_at", "finished_at", "heartbeat_at", "owner_started", "created_at"}


def _rows(cat):
    """Every column of every execution, round_stats and feedback row, the clock's aside."""
    return tuple([{k: v for k, v in r.items() if k not in _CLOCK} for r in cat.query(sql)]
                 for sql in ("SELECT * FROM airplan.executions ORDER BY exec_id",
                             "SELECT * FROM airplan.round_stats ORDER BY exec_id, round",
                             "SELECT * FROM airplan.feedback ORDER BY exec_id, metric"))


def _jobs(db, w):
    result = db.plan(w, topologies=["ring", "complete"], sparsity=[0.1, 1.0],
                     weights=["metropolis_hastings"], fallback="complete")
    out = []
    for cand in result.candidates[:3]:
        job, options, _ = execution.prepare(db.catalog, attrs.evolve(result, chosen=cand),
                                            stop_at_target=False, reoptimize=False)
        out.append((job, {**options, "evaluation": {"cache_key": str(cand.plan_id)}}))
    return out


def test_a_batch_records_the_rows_of_one_by_one_recording(tmp_path):
    w = aq.Workload("digits", clients=6, rounds=3, alpha=0.5, dropout=0.2)
    trained = None
    rows = {}
    for way in ("one_by_one", "batch"):
        with aq.connect(str(tmp_path / f"{way}.duckdb")) as db:
            jobs = _jobs(db, w)
            if trained is None:   # the same runs for both catalogs (the jobs are equal)
                trained = [execution.train(job) for job, _ in jobs]
            assert len(jobs) == 3
            if way == "one_by_one":
                reports = [execution.record_trained(db.catalog, job, options, run, wall)
                           for (job, options), (run, wall) in zip(jobs, trained)]
            else:
                reports = execution.record_trained_batch(
                    db.catalog, [(job, options, run, wall)
                                 for (job, options), (run, wall) in zip(jobs, trained)])
            assert [r.exec_id for r in reports] == [1, 2, 3]
            assert all(len(r.feedback) == 4 for r in reports)
            rows[way] = _rows(db.catalog)
    execs, rounds, feedback = rows["batch"]
    assert [e["status"] for e in execs] == ["succeeded"] * 3
    assert len(rounds) == sum(len(run.history) for run, _ in trained) and len(feedback) == 12
    assert all(e["final_accuracy"] is not None and math.isfinite(e["final_accuracy"])
               for e in execs)
    assert rows["batch"] == rows["one_by_one"]


def test_an_aborted_run_is_not_recorded_and_the_batch_leaves_nothing(tmp_path):
    w = aq.Workload("digits", clients=6, rounds=2, alpha=0.5)
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        (job, options), (job2, options2) = _jobs(db, w)[:2]
        run, wall = execution.train(job)
        aborted = attrs.evolve(run, status="aborted", reason="KeyboardInterrupt")
        with pytest.raises(ExecutionError, match="aborted run cannot be recorded"):
            execution.record_trained_batch(db.catalog, [(job, options, run, wall),
                                                        (job2, options2, aborted, wall)])
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.executions")[0]["n"] == 0
        assert execution.record_trained_batch(db.catalog, []) == []


GRID = """
name = "early"
estimator = "dsgd"
seeds = 2
folds = 2
[defaults]
dataset = "digits"
model = "logistic"
clients = 6
rounds = 3
local_steps = 1
topologies = ["ring", "complete"]
sparsity = [1.0]
[[workloads]]
alpha = 0.5
"""


def test_the_worker_processes_start_before_planning_and_not_for_a_cached_grid(tmp_path,
                                                                          monkeypatch):
    grid = parse_grid(GRID, source="early.toml")
    events = []
    start_pool, plan_seed = executors.start_pool, runner.plan_seed

    def starting(processes, warm=(), *, now=True):
        events.append(("start", processes, tuple((w.dataset, w.seed) for w in warm), now))
        return start_pool(processes, warm, now=now)

    monkeypatch.setattr(executors, "start_pool", starting)
    monkeypatch.setattr(runner, "plan_seed",
                        lambda *a: events.append(("plan", a[3])) or plan_seed(*a))
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        times: dict[str, float] = {}
        measured = runner.measure(db, grid, workers=2, times=times)
        assert sum(len(m.runs) for m in measured) == grid.n_runs == 4
        # one worker process (and this one), started before the first plan, loading the
        # datasets of both seeds
        w0, w1 = (grid.workloads[0].for_seed(s) for s in (0, 1))
        assert events == [("start", 1, (("digits", w0.seed), ("digits", w1.seed)), True),
                          ("plan", 0), ("plan", 1)]
        assert set(times) == {"plan_s", "train_s", "wait_s", "record_s", "read_s", "start_s",
                              "first_start_s", "submitted_s", "last_start_s", "busy_startup",
                              "busy_planning", "busy_queued", "busy_tail"}
        assert times["plan_s"] > 0 and times["record_s"] > 0
        assert 0 < times["first_start_s"] <= times["last_start_s"]
        assert all(0 <= times[f"busy_{p}"] <= 1.0 + 1e-9
                   for p in ("startup", "planning", "queued", "tail"))
        events.clear()
        runner.measure(db, grid, workers=2)          # every run cached: no worker process
        assert events == [("plan", 0), ("plan", 1)]
    with aq.connect(str(tmp_path / "c16.duckdb")) as db:
        events.clear()     # 16 workers for 4 runs: 3 processes and this one
        runner.measure(db, grid, workers=16)
        assert events[0][:2] == ("start", 3)
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        # the cache holds as many runs as the grid, yet one of the grid's (seed 1's last) is
        # not among them: a process starts when that run is submitted
        db.catalog.query("UPDATE airplan.executions SET options = json_object('evaluation', "
                         "json_object('cache_key', 'a run of another grid')) WHERE exec_id = 4")
        events.clear()
        measured = runner.measure(db, grid, workers=2)
        assert sum(not r.cached for m in measured for r in m.runs) == 1
        assert [e for e in events if e[0] == "start"] == [
            ("start", 1, (("digits", w1.seed),), False)]


def test_a_warm_worker_process_has_the_datasets_loaded(tmp_path):
    w = aq.Workload("digits", clients=6, rounds=2, alpha=0.5, seed=3)
    pool = executors.start_pool(1, (w,))
    try:
        # what the worker process holds: read in that process (eval of a module attribute)
        loaded = pool.submit(eval, "list(__import__('airplan_qo.evaluation.executors', "
                                   "fromlist=['_DATASETS'])._DATASETS)").result(timeout=120)
        threads = pool.submit(eval, "__import__('torch').get_num_threads()").result()
    finally:
        pool.shutdown()
    assert [k[:2] for k in loaded] == [("digits", 3)]
    assert threads == 1


def test_occupancy_splits_the_slots_busy_time_into_phases():
    # two slots; runs [1, 3], [2, 6] and [5, 7]; the last submitted at 4, the end at 8
    out = runner.occupancy([(1.0, 3.0), (2.0, 6.0), (5.0, 7.0)], 2, 4.0, 8.0)
    assert (out["first_start_s"], out["submitted_s"], out["last_start_s"]) == (1.0, 4.0, 5.0)
    assert out["busy_startup"] == 0.0                         # [0, 1]: nothing ran
    assert out["busy_planning"] == (2.0 + 2.0) / (2 * 3.0)    # [1, 4]
    assert out["busy_queued"] == 1.0 / (2 * 1.0)              # [4, 5]: one run
    assert out["busy_tail"] == (1.0 + 2.0) / (2 * 3.0)        # [5, 8]
    # every run submitted before the first started: the planning phase is empty
    assert runner.occupancy([(2.0, 3.0)], 1, 1.0, 3.0)["busy_planning"] == 0.0


def test_a_starting_pool_keeps_early_runs_in_order_and_lets_them_be_taken_back():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    up, hold = threading.Event(), threading.Event()
    order = []

    def make():
        up.wait(5)
        return ThreadPoolExecutor(1)

    def run(i):
        order.append(i)
        if i == 0:
            hold.wait(5)     # keeps the one worker busy: run 2 waits in the pool's queue
        return i * 10
    pool = executors.StartingPool(make)
    early = [pool.submit(run, i) for i in range(4)]      # the pool is not up yet
    assert not any(f.done() for f in early)
    assert early[1].cancel()                             # taken back before it was sent
    up.set()
    while early[2].inner is None:
        time.sleep(0.01)
    assert early[2].cancel()                             # sent, but no worker has it
    hold.set()
    assert early[0].result(5) == 0 and early[3].result(5) == 30
    assert pool.submit(run, 5).result(5) == 50           # up: straight to the pool
    pool.shutdown()
    assert order == [0, 3, 5] and early[1].cancelled() and early[2].cancelled()


def test_a_pool_that_cannot_start_fails_the_runs_that_wait_for_it():
    def make():
        raise OSError("no processes today")
    pool = executors.StartingPool(make)
    pool._thread.join(5)
    with pytest.raises(OSError, match="no processes today"):
        pool.submit(int)
    pool.shutdown()


def test_a_starting_pool_shut_down_while_starting_cancels_its_backlog():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    up = threading.Event()
    ran = []

    def make():
        up.wait(5)
        return ThreadPoolExecutor(1)
    pool = executors.StartingPool(make)
    early = [pool.submit(ran.append, i) for i in range(3)]
    stopping = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    stopping.start()                 # Ctrl-C before the processes were up
    time.sleep(0.1)
    up.set()
    stopping.join(5)
    assert not stopping.is_alive() and all(f.cancelled() for f in early) and ran == []


def test_airplan_evaluate_starts_the_fork_server_before_it_opens_the_catalog(tmp_path,
                                                                            monkeypatch):
    """The fork server imports the training code while the command opens the catalog and
    plans: started first with several workers, not at all with one."""
    import sys

    from airplan_qo import session
    from airplan_qo.cli import main

    events = []

    def opened(*a, **k):
        events.append("connect")
        raise aq.CatalogError("stop here")

    monkeypatch.setattr(executors, "start_fork_server", lambda: events.append("fork server"))
    monkeypatch.setattr(session, "connect", opened)
    catalog = str(tmp_path / "c.duckdb")
    assert main(["evaluate", "--quick", "--workers", "2", "--catalog", catalog]) != 0
    assert events == ["fork server", "connect"]
    events.clear()
    assert main(["evaluate", "--quick", "--workers", "1", "--catalog", catalog]) != 0
    assert events == ["connect"]
    if sys.platform.startswith("linux"):
        monkeypatch.undo()
        assert executors.start_fork_server() is True    # started (or running): pools fork
        pool = executors.start_pool(1)
        try:
            assert pool.submit(int, "7").result(timeout=120) == 7
        finally:
            pool.shutdown()
