"""Execution curves beside their predictions (`Session.plot`, `airplan plot`)."""

import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError


def test_plot_writes_a_png_of_executions(tmp_path):
    pytest.importorskip("matplotlib")
    with aq.connect(tmp_path / "c.duckdb") as db:
        db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 6) USING TOPOLOGY ring "
               "FALLBACK COMPLETE")
        db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 6, seed = 1) USING TOPOLOGY complete "
               "FALLBACK COMPLETE")
        out = db.plot([1, 2], tmp_path / "curves.png")
        assert out.exists() and out.stat().st_size > 5000
        with pytest.raises(ValidationError, match="no execution 9"):
            db.plot([9], tmp_path / "none.png")
        with pytest.raises(ValidationError, match="at least one execution"):
            db.plot([], tmp_path / "none.png")


def test_plot_plan_compares_the_candidates(tmp_path):
    pytest.importorskip("matplotlib")
    from airplan_qo.cli import main

    cat = tmp_path / "c.duckdb"
    with aq.connect(cat) as db:
        result = db.plan(aq.Workload(dataset="digits", clients=10, rounds=30))
        out = db.plot_plan(result.planning_run_id, tmp_path / "plan.png", confidence=0.9)
        assert out.exists() and out.stat().st_size > 5000
        with pytest.raises(ValidationError, match="no planning run 99"):
            db.plot_plan(99, tmp_path / "none.png")
    assert main(["plot", "--planning-run", "1", "--catalog", str(cat), "--out",
                 str(tmp_path / "cli.png")]) == 0
    assert main(["plot", "--catalog", str(cat)]) == 2          # neither ids nor a run
