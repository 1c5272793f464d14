"""The CLI after Ctrl-C and on a closed pipe, and execution ids in training output."""

import json
import os
import signal
import subprocess
import sys

import pytest

from airplan_qo.cli import main
from airplan_qo.runtime.engine import Trainer

TRAIN = ("TRAIN digits ON 6 CLIENTS WITH (alpha = 1.0, rounds = 12, seed = 3) "
         "USING TOPOLOGY small_world(k = 2) USING SPARSITY 1 FALLBACK COMPLETE")


def _interrupt_at(monkeypatch, at_round):
    original = Trainer.step

    def step(self):
        row = original(self)
        if self.round == at_round:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    monkeypatch.setattr(Trainer, "step", step)


@pytest.mark.parametrize("statement", [TRAIN, "EXPLAIN ANALYZE " + TRAIN])
def test_ctrl_c_exits_130_and_says_how_to_resume(tmp_path, monkeypatch, capsys, statement):
    catalog = str(tmp_path / "c.duckdb")
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)
        assert main(["sql", "--catalog", catalog, statement + "; SELECT 1 AS never"]) == 130
    out, err = capsys.readouterr()
    assert "never" not in out   # the rest of the script is not run
    assert ("airplan: execution 1 aborted (interrupted after round 3; checkpoint at "
            in err) and err.rstrip().endswith("resume with: airplan resume 1")
    assert main(["resume", "1", "--catalog", catalog]) == 0
    assert "execution 1: succeeded" in capsys.readouterr().out


def test_resume_interrupted_again_exits_130(tmp_path, monkeypatch, capsys):
    catalog = str(tmp_path / "c.duckdb")
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)
        assert main(["sql", "--catalog", catalog, TRAIN]) == 130
        capsys.readouterr()
        # the resumed run continues from the checkpoint of round 3: stop it at round 5
        _interrupt_at(m, 5)
        assert main(["resume", "1", "--catalog", catalog]) == 130
    out, err = capsys.readouterr()
    assert "execution 1: aborted after 5 rounds" in out
    assert "resume with: airplan resume 1" in err


def test_sigterm_stops_a_run_like_ctrl_c(tmp_path):
    """``kill`` (SIGTERM, as ``timeout`` and batch schedulers send) to ``airplan sql "TRAIN
    ..."``: the run stops at the end of its round with a checkpoint, is recorded ``aborted``, the
    command exits 130 naming the resume, and ``airplan resume`` finishes it."""
    import time
    from pathlib import Path

    from airplan_qo.catalog.store import Catalog
    from airplan_qo.runtime.checkpoint import read

    catalog, mark = tmp_path / "c.duckdb", tmp_path / "mark"
    hook = Path(__file__).parent / "fixtures" / "mark_round"
    env = dict(os.environ, AIRPLAN_TEST_MARK_AT="4", AIRPLAN_TEST_MARK_FILE=str(mark),
               OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "airplan_qo", "sql", "--catalog", str(catalog), "--quiet",
         TRAIN.replace("rounds = 12", "rounds = 400")], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mark.exists(), "the run never trained round 4"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "resume with: airplan resume 1" in err
    with Catalog.open(catalog, read_only=True) as cat:
        [row] = cat.query("SELECT status, actual_rounds, checkpoint_path FROM "
                          "airplan.executions")
    assert row["status"] == "aborted" and 4 <= row["actual_rounds"] < 400
    assert read(row["checkpoint_path"])["round"] == row["actual_rounds"]
    done = subprocess.run([sys.executable, "-m", "airplan_qo", "resume", "1", "--catalog",
                           str(catalog)], cwd=tmp_path, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "execution 1: succeeded" in done.stdout, done.stderr


def test_sigterm_ends_the_shell_after_the_statement_it_stopped(tmp_path):
    """SIGTERM to ``airplan shell`` while it trains: the run is recorded ``aborted`` and the shell
    ends (exit 130) instead of reading the next statement, as it would after a Ctrl-C."""
    import time
    from pathlib import Path

    mark = tmp_path / "mark"
    hook = Path(__file__).parent / "fixtures" / "mark_round"
    env = dict(os.environ, AIRPLAN_TEST_MARK_AT="4", AIRPLAN_TEST_MARK_FILE=str(mark),
               OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "airplan_qo", "shell", "--catalog", str(tmp_path / "c.duckdb")],
        cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    proc.stdin.write(TRAIN.replace("rounds = 12", "rounds = 400") + ";\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mark.exists(), "the run never trained round 4"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate("SELECT 'not_read' AS said;\n", timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "aborted" in out and "not_read" not in out


def test_explain_analyze_names_its_execution(tmp_path, capsys):
    catalog = str(tmp_path / "c.duckdb")
    assert main(["sql", "--catalog", catalog, "EXPLAIN ANALYZE " + TRAIN]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Execution: "))
    assert lines[at].startswith("Execution: exec_id=1 status=succeeded rounds_run=")
    assert ' reason="target accuracy' in lines[at]
    assert lines[at + 1].startswith("Execution Time: ")
    assert main(["sql", "--catalog", catalog, "--format", "json",
                 "EXPLAIN ANALYZE " + TRAIN]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc[0]["execution"]["exec_id"] == 2 and doc[0]["execution"]["status"] == "succeeded"


def test_closed_pipe_exits_quietly(tmp_path):
    catalog = str(tmp_path / "c.duckdb")
    proc = subprocess.run(
        f"{sys.executable} -m airplan_qo.cli sql --catalog {catalog} "
        "'SELECT range AS i FROM range(200000)' | head -1",
        shell=True, capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["i"]
    assert proc.stderr == ""
