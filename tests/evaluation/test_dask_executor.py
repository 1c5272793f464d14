"""Evaluation runs trained on a Dask cluster: the catalog records the same results as a serial
evaluation; one torch thread per task; the dataset loaded on the worker; clear errors for a
missing package, a bad address and an unreachable scheduler."""

import contextlib
import pickle
import socket
import sys

import pytest

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import ValidationError
from airplan_qo.evaluation import executors, parse_grid, run_evaluation

# 2 workloads (one with client dropout) x 2 seeds x (ring, complete) x k in (0.1, 1): 16 runs
GRID = """
name = "dask"
estimator = "dsgd"
seeds = 2
folds = 2
scalability_clients = [6, 8]
[defaults]
clients = 6
rounds = 4
local_steps = 1
topologies = ["ring", "complete"]
sparsity = [0.1, 1.0]
[[workloads]]
alpha = 0.1
snr_db = 10
[[workloads]]
alpha = 1.0
snr_db = 0
dropout = 0.2
"""


def _recorded(cat):
    """Every recorded result of a catalog's runs (wall times left out): executions, their
    per-round curves and costs, feedback, and the advisor's scores."""
    execs = cat.query(
        "SELECT exec_id, plan_id, status, reason, actual_rounds, final_accuracy, final_loss, "
        "client_acc_mean, client_acc_var, jain_fairness, data_seed, train_seed, channel_seed, "
        "options->>'$.evaluation.cache_key' AS cache_key, "
        "options->'$.evaluation.client_accuracies' AS client_accuracies "
        "FROM airplan.executions ORDER BY exec_id")
    rounds = cat.query(
        "SELECT exec_id, round, test_accuracy, client_acc_mean, client_acc_min, train_loss, "
        "consensus_distance, channel_uses, slots, energy_j, bits, link_drop_rate, dropout_rate "
        "FROM airplan.round_stats ORDER BY exec_id, round")
    feedback = cat.query("SELECT exec_id, plan_id, metric, estimated, actual, model_term, "
                         "censored FROM airplan.feedback ORDER BY exec_id, metric")
    results = cat.query(
        "SELECT workload_key, calibrated, advisor_plan, oracle_plan, match, regret_acc_pts, "
        "regret_cost_pct, predicted_rounds, actual_rounds FROM airplan.evaluation_results "
        "ORDER BY workload_key, calibrated")
    return execs, rounds, feedback, results


@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes on loopback whose environment would give torch
    two threads (the nanny's default environment sets one; a worker started otherwise may
    not), so a task that did not set one thread itself would show it."""
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    with _two_torch_threads(), LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                            host="127.0.0.1", dashboard_address=":0") as c:
        yield c


@contextlib.contextmanager
def _two_torch_threads():
    """Worker processes started inside get an environment in which torch uses two threads
    (the variables the nanny would set only where they are unset)."""
    import dask

    with pytest.MonkeyPatch.context() as mp, dask.config.set(
            {"distributed.nanny.pre-spawn-environ": {}}):
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            mp.setenv(var, "2")
        yield


def test_a_dask_cluster_records_the_same_results_as_a_serial_evaluation(cluster, tmp_path):
    from distributed import Client

    grid = parse_grid(GRID, source="dask.toml")
    assert grid.n_runs == 16
    recorded, lines = {}, []
    for name, executor in (("serial", None), ("dask", cluster.scheduler_address)):
        with aq.connect(str(tmp_path / f"{name}.duckdb")) as db:
            rep = run_evaluation(db, grid, out_dir=tmp_path / name, figures=False,
                                 scalability=False, executor=executor,
                                 progress=lines.append if executor else None)
            assert rep.summary["trained"] == 16
            recorded[name] = _recorded(db.catalog)
    execs, rounds, feedback, results = recorded["dask"]
    assert len(execs) == 16 and {e["status"] for e in execs} == {"succeeded"}
    assert len(rounds) == 16 * 4 and len(results) == 4
    assert recorded["dask"] == recorded["serial"]     # ids, accuracies, rounds, costs, picks
    assert lines[0] == (f"runs that are not cached train on the Dask scheduler at "
                        f"{cluster.scheduler_address} (2 at once)")
    # the connection is closed at the end: the scheduler has no client of this evaluation
    assert not [k for k in cluster.scheduler.clients if k != "fire-and-forget"]

    # an executor of the caller's (left open) and a re-run from the cache, which trains nothing
    with Client(cluster) as client, aq.connect(str(tmp_path / "dask.duckdb")) as db:
        ex = client.get_executor()
        again = run_evaluation(db, grid, out_dir=tmp_path / "again", figures=False,
                               scalability=False, executor=ex)
        assert again.summary["trained"] == 0 and again.summary["cached"] == 16
        assert ex.submit(sum, [1, 2]).result() == 3


def test_each_task_trains_with_one_torch_thread():
    pytest.importorskip("distributed")
    import torch
    from distributed import Client, LocalCluster

    with _two_torch_threads(), LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                            host="127.0.0.1", dashboard_address=":0") as c, \
            Client(c) as client:
        ex = client.get_executor(pure=False)
        assert ex.submit(torch.get_num_threads).result() == 2     # the worker's default
        assert ex.submit(executors.on_worker, torch.get_num_threads).result() == 1


def test_the_dataset_is_loaded_on_the_worker_once_not_shipped_with_each_run(monkeypatch):
    from airplan_qo.data import load
    from airplan_qo.runtime import execution

    with aq.connect(":memory:") as db:
        w = aq.Workload("digits", clients=6, rounds=2, alpha=0.5)
        result = db.plan(w, topologies=["ring"], sparsity=[1.0], fallback="complete")
        job, _, _ = execution.prepare(db.catalog, result, stop_at_target=False,
                                      reoptimize=False)
    dataset = load("digits", seed=w.seed)
    assert len(pickle.dumps(job)) < dataset.x_train.nbytes / 10   # parameters, not data
    calls = []

    def counting_load(name, **kw):
        calls.append(name)
        return load(name, **kw)

    reference, _ = execution.train(job)       # the worker-process path of --workers
    monkeypatch.setattr("airplan_qo.data.load", counting_load)   # what the worker's cache calls
    executors._DATASETS.clear()
    first, _ = executors.train_cached(job)
    second, _ = executors.train_cached(job)
    assert calls == ["digits"]
    for run in (first, second):               # bit for bit the same run
        for field in ("status", "rounds", "final_accuracy", "client_accuracies",
                      "total_channel_uses", "total_energy_j"):
            assert getattr(run, field) == getattr(reference, field), field


def test_dask_executor_without_distributed_says_what_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)      # import distributed fails
    assert main(["evaluate", "--quick", "--no-figures", "--executor", "dask://127.0.0.1:8786",
                 "--catalog", str(tmp_path / "c.duckdb"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "needs dask.distributed" in err and "pip install 'airplan-qo[dask]'" in err
    with aq.connect(str(tmp_path / "c.duckdb")) as db:       # nothing was recorded
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.evaluations")[0]["n"] == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_fails_with_one_line_naming_it(monkeypatch, capsys, tmp_path):
    pytest.importorskip("distributed")
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 1.0)
    port = _free_port()
    assert main(["evaluate", "--quick", "--no-figures", "--executor", f"dask://127.0.0.1:{port}",
                 "--catalog", str(tmp_path / "c.duckdb"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 1 s" in err
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.evaluations")[0]["n"] == 0


@pytest.mark.parametrize("argv, message", [
    (["--executor", "dask://127.0.0.1:notaport"], "is not a Dask scheduler address"),
    (["--executor", "spark://h:1"], "unknown executor 'spark://h:1'"),
    (["--executor", "dask://127.0.0.1:8786", "--workers", "2"], "drop --workers"),
])
def test_cli_executor_errors_exit_2(argv, message, capsys):
    assert main(["evaluate", "--quick", "--no-figures", "--catalog", ":memory:", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_python_executor_argument_is_checked(tmp_path):
    grid = parse_grid(GRID)
    with aq.connect(":memory:") as db:
        with pytest.raises(ValidationError, match="got int"):
            run_evaluation(db, grid, out_dir=tmp_path, figures=False, executor=42)
        with pytest.raises(ValidationError, match="leave workers at 1"):
            run_evaluation(db, grid, out_dir=tmp_path, figures=False, workers=2,
                           executor="dask://127.0.0.1:8786")
    assert executors.dask_address("dask://example.org") == "tcp://example.org:8786"
    assert executors.dask_address("tls://10.0.0.1:9000") == "tls://10.0.0.1:9000"
