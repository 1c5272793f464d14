"""The README's main job: every figure EXPLAIN ANALYZE prints agrees with the others and with
the catalog (one round count, one accuracy metric, prune counts, probabilities)."""

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _main_job_sql() -> str:
    command = re.search(r'airplan sql "(ANALYZE WORKLOAD [^"]+)"', README)
    assert command, "the README's main command was not found"
    return command.group(1)


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("main-job")
    proc = subprocess.run([sys.executable, "-m", "airplan_qo.cli", "sql", _main_job_sql()],
                          cwd=folder, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(folder / "airplan.duckdb"), read_only=True)
    stats = con.execute("SELECT count(*), min(round), max(round), sum(channel_uses) "
                        "FROM airplan.round_stats").fetchone()
    execution = con.execute("SELECT actual_rounds, client_acc_mean, final_accuracy "
                            "FROM airplan.executions").fetchone()
    con.close()
    return proc.stdout, stats, execution


def _field(text: str, pattern: str) -> str:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return found.group(1)


def test_one_round_count(main_job):
    text, (rows, first, last, uses), (rounds_run, *_) = main_job
    assert first == 1 and last == rows == rounds_run          # rounds count from 1
    assert "no round 0 is evaluated" in text
    header = _field(text, r"Decentralized Train .*\(actual [^)]*rounds=(\d+)")
    assert header == _field(text, r"Feedback: rounds estimated=\S+ actual=(\d+)")
    assert int(_field(text, r"Gossip Loop .*\(actual rounds_run=(\d+)")) == rows
    assert int(_field(text, r"Execution: .*rounds_run=(\d+)")) == rows
    assert int(header) <= rows
    loop_uses = float(_field(text, r"Gossip Loop .*channel_uses=([0-9.]+)\)"))
    assert loop_uses == pytest.approx(uses)
    assert float(_field(text, r"Feedback: channel_uses estimated=\S+ actual=([0-9.]+)")) \
        == pytest.approx(uses)


def test_one_accuracy_metric(main_job):
    text, _, (_, client_acc, avg_model) = main_job
    header = float(_field(text, r"Decentralized Train .*\(actual [^)]*accuracy=([0-9.]+)"))
    feedback = float(_field(text, r"Feedback: accuracy estimated=\S+ actual=([0-9.]+)"))
    execution = float(_field(text, r"Execution: .* accuracy=([0-9.]+) "
                                   r"\(executions.client_acc_mean\)"))
    assert header == feedback == execution == pytest.approx(client_acc, abs=5e-5)
    assert float(_field(text, r"avg_model_accuracy=([0-9.]+) \(executions.final_accuracy\)")) \
        == pytest.approx(avg_model, abs=5e-5)


def test_requested_alpha_beside_the_estimate(main_job):
    text = main_job[0]
    asked = _field(_main_job_sql(), r"alpha = ([0-9.]+)")
    line = _field(text, r"(Workload: .*)")
    assert f"alpha requested={asked}" in line and "estimated" in line


def test_prune_counts_agree(main_job):
    text = main_job[0]
    total = int(_field(text, r"Candidates: \d+ considered, (\d+) pruned"))
    by_reason = dict(re.findall(r"(\w+): (\d+)", _field(text, r"pruned \(([^)]*)\)")))
    assert sum(map(int, by_reason.values())) == total
    cheaper = re.search(r"(\d+) of the (\d+) pruned plans were cheaper \(([^)]*)\)", text)
    if cheaper:
        assert int(cheaper.group(2)) == total
        parts = dict(re.findall(r"(\w+): (\d+)", cheaper.group(3)))
        assert sum(map(int, parts.values())) == int(cheaper.group(1))
        assert all(int(v) <= int(by_reason[k]) for k, v in parts.items())


def test_probabilities_printed_one_way(main_job):
    text = main_job[0]
    assert "P(meets SLA)" not in text and not re.search(r"\(P \d", text)
    plan_line = _field(text, r"plan=.* p_meets_sla=(\S+)")
    why = _field(text, r"Why chosen: .*?p_meets_sla=(\S+) >=")
    assert plan_line == why
