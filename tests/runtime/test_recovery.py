"""Recovery from a training process killed with SIGKILL: the next read-write open marks the
execution ``interrupted``, ``resume`` continues it (from round 0 when it has no checkpoint) to
the same result as an uninterrupted run, and ``abandon`` gives it up."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

import airplan_qo as aq
from airplan_qo.catalog.store import now_utc
from airplan_qo.cli import main

# dsgd keeps this run going past its checkpoint at round 10 (its target is out of reach in 12
# rounds), so "final_commit" has a checkpoint to resume from
TRAIN = ("TRAIN digits ON 6 CLIENTS WITH (alpha = 1.0, rounds = 12, seed = 3) "
         "USING TOPOLOGY small_world(k = 2) USING SPARSITY 1 COST MODEL dsgd")

# The child trains TRAIN and, at the chosen point, creates the marker file and sleeps until it
# is killed. Patching happens in the child only; the parent sees a plain killed process.
CHILD = textwrap.dedent("""
    import sys, time
    import airplan_qo as aq
    from airplan_qo.catalog.store import Catalog
    from airplan_qo.runtime import execution
    from airplan_qo.runtime.engine import Trainer

    path, point, marker, statement = sys.argv[1:5]

    def hang():
        open(marker, "w").close()
        time.sleep(600)

    def hang_at(at_round):
        step = Trainer.step
        def patched(self):
            row = step(self)
            if self.round == at_round:
                hang()
            return row
        Trainer.step = patched

    if point == "before_checkpoint":
        hang_at(2)
    elif point == "mid_run":
        execution.CHECKPOINT_EVERY = 4
        hang_at(6)
    elif point == "final_commit":   # inside the transaction that records the outcome
        insert_rows = Catalog.insert_rows
        def patched(self, table, columns):
            if table == "feedback":
                hang()
            return insert_rows(self, table, columns)
        Catalog.insert_rows = patched
    with aq.connect(path) as db:
        db.sql(statement)
""")


def _start_until(point, tmp_path, args, script=CHILD):
    """A child running ``script`` with ``args``, once it has reached ``point`` (and hangs)."""
    marker = tmp_path / f"{point}.marker"
    child = subprocess.Popen([sys.executable, "-c", script, args[0], point, str(marker),
                              *args[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            if child.poll() is not None:
                pytest.fail(f"child exited early: {child.communicate()[1].decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("child never reached the kill point")
            time.sleep(0.05)
    except BaseException:
        child.kill()
        child.wait()
        raise
    return child


def _kill(child):
    try:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    return child.pid


def _kill_during(path, point, tmp_path, statement=TRAIN):
    return _kill(_start_until(point, tmp_path, [str(path), statement]))


def _raw(path, sql):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _raw_statuses(path):
    return _raw(path, "SELECT exec_id, status, owner_pid, checkpoint_path "
                      "FROM executions ORDER BY exec_id")


def _curve(db, exec_id):
    return db.catalog.query("SELECT round, test_accuracy, client_acc_mean, train_loss, "
                            "consensus_distance FROM airplan.round_stats WHERE exec_id = ? "
                            "ORDER BY round", [exec_id])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.duckdb"
    with aq.connect(path) as db:
        [res] = db.sql(TRAIN)
        row = dict(zip(res.columns, res.rows[0]))
        return row, _curve(db, row["exec_id"])


@pytest.mark.parametrize("point, has_checkpoint", [
    ("before_checkpoint", False), ("mid_run", True), ("final_commit", True)])
def test_killed_run_is_marked_interrupted_and_resumes_to_the_same_result(
        tmp_path, reference, point, has_checkpoint, caplog):
    path = tmp_path / "c.duckdb"
    pid = _kill_during(path, point, tmp_path)
    [(exec_id, status, owner_pid, ckpt)] = _raw_statuses(path)
    assert (status, owner_pid) == ("running", pid)   # nothing recorded the death
    assert bool(ckpt) == has_checkpoint

    with caplog.at_level("WARNING", logger="airplan_qo"):
        db = aq.connect(path)
    with db:
        assert [r["exec_id"] for r in db.catalog.recovered] == [exec_id]
        assert f"execution {exec_id} was left running" in caplog.text
        assert f"airplan resume {exec_id}" in caplog.text
        ex = db.catalog.query("SELECT status, reason FROM airplan.executions")[0]
        assert ex["status"] == "interrupted"
        assert f"PID {pid}" in ex["reason"] and "killed or crashed" in ex["reason"]
        report = db.resume(exec_id)
        ref_row, ref_curve = reference
        assert report.result.status == "succeeded"
        assert report.result.final_accuracy == ref_row["final_accuracy"]
        assert _curve(db, exec_id) == ref_curve
        ex = db.catalog.query("SELECT status, owner_pid FROM airplan.executions")[0]
        assert ex == {"status": "succeeded", "owner_pid": os.getpid()}
        assert len(db.catalog.query("SELECT * FROM airplan.feedback")) == 4
    # a second open finds nothing to recover
    with aq.connect(path) as db:
        assert db.catalog.recovered == ()


def test_running_row_of_this_process_is_not_recovered_by_a_second_open(tmp_path, monkeypatch):
    from airplan_qo.runtime.engine import Trainer

    path = tmp_path / "c.duckdb"
    seen = []
    step = Trainer.step

    def patched(self):
        row = step(self)
        with aq.connect(path) as other:   # same process, same database: the run is alive
            seen.append((other.catalog.recovered, other.catalog.query(
                "SELECT status FROM airplan.executions")[0]["status"]))
        return row

    with aq.connect(path) as db:
        plan = db.plan(aq.Workload(dataset="digits", clients=6, rounds=2))
        monkeypatch.setattr(Trainer, "step", patched)
        assert db.execute(plan, stop_at_target=False).result.status == "succeeded"
    assert seen == [((), "running")] * 2


def test_a_live_training_in_another_process_is_left_running_and_a_killed_one_recovered(
        tmp_path, caplog):
    path = tmp_path / "c.duckdb"
    child = _start_until("mid_run", tmp_path, [str(path), TRAIN])
    try:
        # the child is alive, between writes: the file is free, and its run is not touched
        with aq.connect(path, wait=30) as db:
            assert db.catalog.recovered == ()
            ex = db.catalog.query("SELECT exec_id, status, owner_pid FROM airplan.executions")
            assert ex == [{"exec_id": 1, "status": "running", "owner_pid": child.pid}]
            with pytest.raises(aq.ExecutionError, match=f"running in the process PID "
                                                        f"{child.pid}"):
                db.resume(1)
            with pytest.raises(aq.ExecutionError, match="running in the process PID"):
                db.abandon(1)
    finally:
        pid = _kill(child)
    with caplog.at_level("WARNING", logger="airplan_qo"), aq.connect(path) as db:
        assert [r["exec_id"] for r in db.catalog.recovered] == [1]
        ex = db.catalog.query("SELECT status, reason FROM airplan.executions")[0]
        assert ex["status"] == "interrupted" and f"PID {pid}" in ex["reason"]
        assert db.resume(1).result.status == "succeeded"


def test_a_row_whose_pid_now_names_another_process_is_recovered(tmp_path):
    """A PID reused by a later process (a sleeping child here) is not the row's owner: the
    recorded start time differs."""
    from airplan_qo.catalog.owners import pid_alive, process_started

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(other.pid) and pid_alive(other.pid, process_started(other.pid))
        if process_started(other.pid) is None:
            pytest.skip("this system does not tell when a process started")
        with aq.connect(tmp_path / "c.duckdb") as db:
            db.catalog.insert_row("executions", {
                "plan_id": 1, "status": "running", "data_seed": 1, "train_seed": 1,
                "channel_seed": 1, "owner_pid": other.pid, "owner_host": socket.gethostname(),
                "owner_started": "an earlier process", "heartbeat_at": now_utc()})
            db.catalog.insert_row("executions", {
                "plan_id": 1, "status": "running", "data_seed": 1, "train_seed": 1,
                "channel_seed": 1, "owner_pid": other.pid, "owner_host": socket.gethostname(),
                "owner_started": process_started(other.pid), "heartbeat_at": now_utc()})
        with aq.connect(tmp_path / "c.duckdb") as db:
            assert [r["exec_id"] for r in db.catalog.recovered] == [1]
            assert [r["status"] for r in db.catalog.query(
                "SELECT status FROM airplan.executions ORDER BY exec_id")] == \
                ["interrupted", "running"]
    finally:
        other.kill()
        other.wait()


def test_a_row_of_another_host_is_recovered_only_when_its_heartbeat_is_stale(tmp_path):
    import datetime as dt

    from airplan_qo.catalog import owners

    path = tmp_path / "c.duckdb"
    fresh = now_utc()
    stale = fresh - dt.timedelta(seconds=owners.STALE_AFTER_S + 60)
    with aq.connect(path) as db:
        for beat in (fresh, stale, None):
            db.catalog.insert_row("executions", {
                "plan_id": 1, "status": "running", "data_seed": 1, "train_seed": 1,
                "channel_seed": 1, "owner_pid": os.getpid(), "owner_host": "elsewhere.invalid",
                "heartbeat_at": beat})
    with aq.connect(path) as db:
        assert [r["exec_id"] for r in db.catalog.recovered] == [2, 3]
        assert [r["status"] for r in db.catalog.query(
            "SELECT status FROM airplan.executions ORDER BY exec_id")] == \
            ["running", "interrupted", "interrupted"]


EVALUATE = textwrap.dedent("""
    import sys, time
    import airplan_qo as aq
    from airplan_qo.evaluation import harness, load_grid

    path, point, marker, out = sys.argv[1:5]

    def hang(*args, **kwargs):
        open(marker, "w").close()
        time.sleep(600)

    harness.measure = hang
    with aq.connect(path) as db:
        harness.run_evaluation(db, load_grid("quick"), out_dir=out, figures=False)
""")


def test_a_killed_evaluation_is_marked_interrupted(tmp_path, caplog):
    path = tmp_path / "c.duckdb"
    pid = _kill(_start_until("measuring", tmp_path, [str(path), str(tmp_path / "out")],
                             script=EVALUATE))
    raw = _raw(path, "SELECT evaluation_id, status, owner_pid FROM evaluations")
    assert raw == [(1, "running", pid)]   # nothing recorded the death
    with caplog.at_level("WARNING", logger="airplan_qo"), aq.connect(path) as db:
        assert [r["evaluation_id"] for r in db.catalog.recovered_evaluations] == [1]
        assert db.catalog.recovered == ()
        row = db.catalog.query("SELECT status, reason, finished_at FROM airplan.evaluations")[0]
        assert row["status"] == "interrupted" and row["finished_at"] is None
        assert f"PID {pid}" in row["reason"] and "killed or crashed" in row["reason"]
        assert "evaluation 1 was left running" in caplog.text
        assert "airplan evaluate again" in caplog.text
    with aq.connect(path) as db:
        assert db.catalog.recovered_evaluations == ()


def test_abandon_and_cli(tmp_path, capsys):
    path = tmp_path / "c.duckdb"
    _kill_during(path, "mid_run", tmp_path)
    [(exec_id, _, _, ckpt)] = _raw_statuses(path)
    assert os.path.exists(ckpt)
    assert main(["abandon", str(exec_id), "--catalog", str(path), "--reason", "bad lr"]) == 0
    out, err = capsys.readouterr()
    assert f"note: execution {exec_id} was left running" in err
    assert f"execution {exec_id}: abandoned (was interrupted); deleted checkpoint" in out
    assert not os.path.exists(ckpt)
    with aq.connect(path) as db:
        ex = db.catalog.query("SELECT status, reason, finished_at, checkpoint_path "
                              "FROM airplan.executions")[0]
        assert ex["status"] == "abandoned" and ex["reason"].startswith("abandoned: bad lr (was "
                                                                       "interrupted: ")
        assert ex["finished_at"] is not None and ex["checkpoint_path"] is None
    assert main(["resume", str(exec_id), "--catalog", str(path)]) == 2
    assert "was abandoned and cannot be resumed" in capsys.readouterr().err
    assert main(["abandon", str(exec_id), "--catalog", str(path)]) == 2
    assert "already abandoned" in capsys.readouterr().err
    assert main(["abandon", "42", "--catalog", str(path)]) == 2
    assert "no execution 42" in capsys.readouterr().err


def test_abandon_refuses_a_succeeded_execution(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql(TRAIN)
        with pytest.raises(aq.ExecutionError, match="succeeded; only an unfinished"):
            db.abandon(res.rows[0][0])


# ---- checkpoint placement and ownership ------------------------------------------------------

def _trained(path, monkeypatch, statement=TRAIN):
    from airplan_qo.runtime import execution

    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 2)
    db = aq.connect(path)
    [res] = db.sql(statement)
    exec_id = res.rows[0][0]
    ckpt = db.catalog.query("SELECT checkpoint_path FROM airplan.executions WHERE exec_id = ?",
                            [exec_id])[0]["checkpoint_path"]
    return db, exec_id, ckpt


def _set(db, exec_id, **values):
    db.catalog.update_row("executions", exec_id, {"status": "aborted", **values})


def test_catalogs_in_one_folder_keep_their_own_checkpoints(tmp_path, monkeypatch):
    a, a_id, a_ckpt = _trained(tmp_path / "a.duckdb", monkeypatch)
    b, b_id, b_ckpt = _trained(tmp_path / "b.duckdb",  monkeypatch,
                               TRAIN.replace("seed = 3", "seed = 4"))
    with a, b:
        assert a_id == b_id == 1
        assert a.catalog.catalog_id != b.catalog.catalog_id
        for db, ckpt in ((a, a_ckpt), (b, b_ckpt)):
            assert ckpt == str(tmp_path / "airplan-checkpoints" / db.catalog.catalog_id /
                               "exec-1.pt")
            assert os.path.exists(ckpt)
        assert not [p for p in (tmp_path / "airplan-checkpoints").rglob("*") if
                    p.name.endswith(".tmp")]
        # catalog a's execution pointed at b's checkpoint: refused, and the row is unchanged
        _set(a, a_id, checkpoint_path=b_ckpt)
        with pytest.raises(aq.ExecutionError, match=f"belongs to catalog {b.catalog.catalog_id}"
                                                    f", not catalog {a.catalog.catalog_id}"):
            a.resume(a_id)
        assert a.catalog.query("SELECT status FROM airplan.executions")[0]["status"] == "aborted"


def test_a_copied_catalog_resumes_from_the_originals_checkpoint_and_writes_its_own(
        tmp_path, monkeypatch, reference):
    import hashlib
    import shutil

    from airplan_qo.runtime import execution
    from airplan_qo.runtime.engine import Trainer

    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 2)
    step = Trainer.step

    def interrupted_at_5(self):
        row = step(self)
        if self.round == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    original = tmp_path / "a.duckdb"
    with monkeypatch.context() as m, aq.connect(original) as db:
        m.setattr(Trainer, "step", interrupted_at_5)
        [res] = db.sql(TRAIN)
        assert dict(zip(res.columns, res.rows[0]))["status"] == "aborted"
        first = db.catalog.catalog_id
        [(ckpt,)] = [tuple(r.values()) for r in db.catalog.query(
            "SELECT checkpoint_path FROM airplan.executions")]
    digest = hashlib.sha256(open(ckpt, "rb").read()).hexdigest()
    shutil.copyfile(original, tmp_path / "b.duckdb")
    with aq.connect(tmp_path / "b.duckdb") as db:
        assert db.catalog.catalog_id != first and db.catalog.ancestors == (first,)
        report = db.resume(1)   # from the original's checkpoint of this very run
        ref_row, ref_curve = reference
        assert report.result.final_accuracy == ref_row["final_accuracy"]
        assert _curve(db, 1) == ref_curve
        own = db.catalog.query("SELECT checkpoint_path FROM airplan.executions")[0]
        assert own["checkpoint_path"] == str(tmp_path / "airplan-checkpoints" /
                                             db.catalog.catalog_id / "exec-1.pt")
    # the original's checkpoint is untouched, and the original still resumes from it
    assert hashlib.sha256(open(ckpt, "rb").read()).hexdigest() == digest
    with aq.connect(original) as db:
        assert db.catalog.catalog_id == first
        assert db.resume(1).result.final_accuracy == reference[0]["final_accuracy"]


def test_resume_refuses_another_executions_or_configurations_checkpoint(tmp_path, monkeypatch):
    import json

    db, first, ckpt = _trained(tmp_path / "a.duckdb", monkeypatch)
    with db:
        [res] = db.sql(TRAIN.replace("seed = 3", "seed = 5"))
        second = res.rows[0][0]
        _set(db, second, checkpoint_path=ckpt)
        with pytest.raises(aq.ExecutionError, match="belongs to execution 1, not execution 2"):
            db.resume(second)
        options = json.loads(db.catalog.query(
            "SELECT options FROM airplan.executions WHERE exec_id = ?", [first])[0]["options"])
        options["run_config"]["lr"] = 0.5
        _set(db, first, options=json.dumps(options))
        with pytest.raises(aq.ExecutionError, match=r"different configuration \(lr: "):
            db.resume(first)


def test_resume_refuses_a_checkpoint_without_an_owner_and_explains_a_corrupt_one(
        tmp_path, monkeypatch):
    import torch

    db, exec_id, ckpt = _trained(tmp_path / "a.duckdb", monkeypatch)
    with db:
        _set(db, exec_id)
        state = torch.load(ckpt, weights_only=True)
        state.pop("owner", None)
        torch.save(state, ckpt)
        with pytest.raises(aq.ExecutionError, match="does not record which catalog"):
            db.resume(exec_id)
        with open(ckpt, "wb") as fh:
            fh.write(b"not a checkpoint")
        with pytest.raises(aq.ExecutionError) as err:
            db.resume(exec_id)
        message = str(err.value)
        assert "is corrupt or not an AirPlan checkpoint" in message
        assert "weights_only" not in message and "\n" not in message
        os.remove(ckpt)   # without its checkpoint, the execution starts again from round 0
        assert db.resume(exec_id).result.status == "succeeded"


def test_checkpoint_temporary_files_have_unique_names(tmp_path, digits, digits_iid, ring10):
    from airplan_qo.runtime.engine import RunConfig, Trainer

    trainer = Trainer(RunConfig(model="logistic", rounds=2), digits, digits_iid, ring10)
    trainer.step()
    target = tmp_path / "exec-1.pt"
    (tmp_path / "exec-1.pt.tmp").mkdir()   # another writer's temporary name: left alone
    trainer.save(target)
    trainer.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exec-1.pt", "exec-1.pt.tmp"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask   # usual permissions
