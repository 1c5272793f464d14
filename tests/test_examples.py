"""Smoke tests: every script in examples/ runs and prints what it promises."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(script: str, *args: str, cwd: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_plan_and_run(tmp_path):
    out = _run("plan_and_run.py", str(tmp_path / "c.duckdb"), cwd=tmp_path)
    assert out.startswith("Decentralized Train")
    assert "execution 1:" in out and "estimated" in out


def test_explain_analyze_sql(tmp_path):
    out = _run("explain_analyze_sql.py", cwd=tmp_path)
    assert "(actual status=" in out and "Execution Time:" in out


def test_inspect_catalog(tmp_path):
    out = _run("inspect_catalog.py", str(tmp_path / "c.duckdb"), cwd=tmp_path)
    assert "estimated vs actual:" in out and "per-round curve" in out
    assert "('rounds'," in out


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_has_a_docstring(script):
    text = (EXAMPLES / script).read_text()
    assert text.startswith('"""'), f"{script} should say what it shows"


def test_dropout_reoptimization(tmp_path):
    out = _run("dropout_reoptimization.py", cwd=tmp_path)
    assert "Event: round" in out and "rewired" in out


def test_neighbourhood_heterogeneity(tmp_path):
    out = _run("neighbourhood_heterogeneity.py", cwd=tmp_path)
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    complete = next(v for k, v in rows.items() if k.startswith("complete"))
    assert float(complete[-2]) == 30.0 and float(complete[-1]) == 0.0
    cliques = [v for k, v in rows.items() if k.startswith("d_cliques")]
    assert cliques and all(float(v[-1]) < 0.05 for v in cliques)     # what the cliques leave
