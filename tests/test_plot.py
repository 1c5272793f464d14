"""Execution curves beside their predictions (`Session.plot`, `airplan plot`)."""

import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError


def test_plot_writes_a_png_of_executions(tmp_path):
    pytest.importorskip("matplotlib")
    with aq.connect(tmp_path / "c.duckdb") as db:
        db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 6) USING TOPOLOGY ring")
        db.sql("TRAIN digits ON 6 CLIENTS WITH (rounds = 6, seed = 1) USING TOPOLOGY complete")
        out = db.plot([1, 2], tmp_path / "curves.png")
        assert out.exists() and out.stat().st_size > 5000
        with pytest.raises(ValidationError, match="no execution 9"):
            db.plot([9], tmp_path / "none.png")
        with pytest.raises(ValidationError, match="at least one execution"):
            db.plot([], tmp_path / "none.png")
