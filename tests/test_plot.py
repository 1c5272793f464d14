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


def test_the_round_axis_ends_at_the_run_and_the_chosen_plan_is_a_labelled_star(tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("matplotlib")
    from airplan_qo import figures

    made = []
    real = figures._figure
    monkeypatch.setattr(figures, "_figure", lambda *a, **k: made.append(real(*a, **k))
                        or made[-1])
    with aq.connect(tmp_path / "c.duckdb") as db:
        [run] = db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 60, target_accuracy = 0.3) "
                       "USING TOPOLOGY complete")
        assert run.rounds < 20                        # stopped at the target, far before 60
        db.plot([run.exec_id], tmp_path / "curves.png")
        top = made[-1].axes[0]
        assert top.get_xlim()[1] <= run.rounds * 1.05 + 1e-9
        result = db.plan(aq.Workload(dataset="digits", clients=10, rounds=30))
        db.plot_plan(result.planning_run_id, tmp_path / "plan.png")
        ax = made[-1].axes[0]
        texts = [t.get_text() for t in ax.texts]
        label = result.chosen.plan.topology.family
        assert any(t.startswith(f"chosen: {label} k=") for t in texts)
        assert "chosen plan" in [h.get_label() for h in ax.collections]
