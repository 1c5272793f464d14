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
