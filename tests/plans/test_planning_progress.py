"""Progress of long planning calls: the steps reach a callback (Python) or stderr (CLI), only
once planning has run a while; here the waiting times are forced to 0 on a small workload."""

import re
import sys
import threading

import pytest

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.planner import progress
from airplan_qo.planner.progress import PlanningProgress


@pytest.fixture
def at_once(monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)


def test_plan_reports_every_step_to_its_callback(at_once):
    messages = []
    with aq.connect(":memory:") as db:
        result = db.plan(aq.Workload(dataset="digits", clients=8), progress=messages.append,
                         transports=["ota"], algorithms=["auto"], fallback="complete",
                         mix_rounds="off")
        sparsity = len({c.plan.k_ratio for c in result.candidates})
        building = [m for m in messages if m.startswith("building topology ")]
        costing = [m for m in messages if m.startswith("costing ")]
        n_build, n_cost = len(building), len(costing)
        # every topology x k once (one transport, the default rule)
        assert n_build >= 2 and n_cost * sparsity == len(result.candidates)
        assert [re.match(r"building topology (\d+)/(\d+): ", m).groups() for m in building] == \
            [(str(i), str(n_build)) for i in range(1, n_build + 1)]
        assert "ring on 8 clients" in building[0]
        assert [re.match(r"costing (\d+)/(\d+): ", m).groups() for m in costing] == \
            [(str(i), str(n_cost)) for i in range(1, n_cost + 1)]
        assert messages == building + costing + [
            f"recording {len(result.candidates)} candidates in the catalog"]
        # the topologies are cached now: a second call only costs and records
        again = []
        db.plan(aq.Workload(dataset="digits", clients=8), progress=again.append,
                transports=["ota"], algorithms=["auto"], fallback="complete", mix_rounds="off")
        assert again == costing + messages[-1:]


def test_no_callback_reports_nothing_and_nothing_comes_after_close():
    got = []
    p = PlanningProgress(got.append, after=0, every=3600)
    p.step("first")
    p.step("second")          # within the hour after the first line: held back
    p.close()
    p.step("third")
    assert got == ["first"]
    PlanningProgress(None, after=0, every=0).step("nobody listens")


def test_a_long_step_is_reported_while_it_runs():
    seen = threading.Event()
    got = []

    def callback(message):
        got.append(message)
        seen.set()

    p = PlanningProgress(callback, after=0.05, every=0.05)
    p.step("building topology 1/1: a big graph")   # started before the wait was over
    try:
        assert seen.wait(60)
    finally:
        p.close()
    assert got[0] == "building topology 1/1: a big graph"


def _planning_lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("planning: ")]


def test_cli_shows_planning_steps_on_request_or_on_a_terminal(at_once, tmp_path, capsys,
                                                              monkeypatch):
    catalog = str(tmp_path / "c.duckdb")
    statement = "EXPLAIN TRAIN digits ON 8 CLIENTS"
    assert main(["sql", "--catalog", catalog, statement]) == 0
    assert _planning_lines(capsys.readouterr().err) == []     # stderr is no terminal here
    assert main(["sql", "--progress", "--catalog", catalog, statement]) == 0
    out, err = capsys.readouterr()
    lines = _planning_lines(err)
    assert lines[0].startswith("planning: costing 1/") and "Plan" in out
    assert lines[-1].startswith("planning: recording ")
    assert main(["explain", "--progress", "--catalog", catalog, "--clients", "9"]) == 0
    assert _planning_lines(capsys.readouterr().err)[0].startswith(
        "planning: building topology 1/")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(["explain", "--catalog", catalog, "TRAIN digits ON 10 CLIENTS"]) == 0
    assert _planning_lines(capsys.readouterr().err)
    assert main(["sql", "--quiet", "--catalog", catalog, statement]) == 0
    assert _planning_lines(capsys.readouterr().err) == []
