"""Messages and precedence a user acts on: planner fallback warnings, parameter ranges, catalog
locations, foreign DuckDB files, and which accuracy target a plan is held to."""

import hashlib

import duckdb
import pytest

import airplan_qo as aq
from airplan_qo.errors import BindError, CatalogError, ValidationError


def test_fallback_warning_lists_rejected_candidates_with_their_reasons():
    with aq.connect(":memory:") as db:
        [res] = db.sql("EXPLAIN TRAIN digits ON 12 CLIENTS WITH (mix_rounds = 'off') USING "
                       "TOPOLOGY ring SLA accuracy >= 0.999 FALLBACK COMPLETE")
    [warning] = [ln for ln in res.text.splitlines() if "Nearest candidates" in ln]
    assert "None" not in warning
    near = warning.split("Nearest candidates: ", 1)[1].split("; ring")
    assert len(near) == 3 and all("(sla: never reaches the accuracy target" in n for n in near)


def test_an_unbounded_range_excludes_infinity_in_its_message():
    with aq.connect(":memory:") as db, pytest.raises(BindError) as err:
        db.sql("EXPLAIN TRAIN digits ON 20 CLIENTS WITH (alpha = inf)")
    assert str(err.value).startswith("parameter 'alpha' must be a finite number in (0, inf), "
                                     "got inf")
    with pytest.raises(ValidationError, match=r"must be in \[-30, 60\], got 61"):
        aq.Workload(dataset="digits", clients=4, snr_db=61)


def test_a_missing_catalog_folder_is_named(tmp_path):
    path = tmp_path / "no" / "such" / "c.duckdb"
    with pytest.raises(CatalogError) as err:
        aq.connect(path)
    assert str(err.value) == (f"cannot open catalog file {path}: its folder {path.parent} does "
                              f"not exist; create it first (mkdir -p {path.parent})")
    with pytest.raises(CatalogError, match="its folder .* does not exist$"):
        aq.connect(path, read_only=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(CatalogError, match="its folder .*file is not a directory$"):
        aq.connect(tmp_path / "file" / "c.duckdb")


def test_a_foreign_duckdb_file_is_refused_unless_adopted(tmp_path):
    path = tmp_path / "mine.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE measurements (x INTEGER)")
    con.execute("INSERT INTO measurements VALUES (1), (2)")
    con.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(CatalogError) as err:
        aq.connect(path)
    assert str(err.value).startswith(
        f"{path} is a DuckDB database with 1 object (main.measurements) but no AirPlan catalog; "
        "it was left unchanged.")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    with aq.connect(path, adopt=True) as db:
        assert db.catalog.query("SELECT count(*) AS n FROM measurements")[0]["n"] == 2
    with aq.connect(path) as db:   # an AirPlan catalog from now on
        assert db.catalog.catalog_id
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    aq.connect(empty).close()      # an empty DuckDB file simply becomes a catalog


def test_target_accuracy_replaces_the_default_sla_and_conflicts_with_an_accuracy_bound():
    with aq.connect(":memory:") as db:
        [res] = db.sql("EXPLAIN (FORMAT JSON) TRAIN digits ON 12 CLIENTS WITH "
                       "(target_accuracy = 0.8) USING TOPOLOGY ring")
        sla = res.document[0]["sla"]
        assert sla["text"] == "accuracy >= 0.8" and sla["accuracy_threshold"] == 0.8
        [res] = db.sql("EXPLAIN (FORMAT JSON) TRAIN digits ON 12 CLIENTS WITH "
                       "(target_accuracy = 0.8) USING TOPOLOGY ring SLA rounds <= 300")
        assert res.document[0]["sla"]["accuracy_threshold"] == 0.8
        with pytest.raises(BindError, match=r"target_accuracy = 0.8 and the SLA's accuracy bound "
                                            r"\(accuracy >= 0.9\) both set"):
            db.sql("EXPLAIN TRAIN digits ON 12 CLIENTS WITH (target_accuracy = 0.8) "
                   "SLA accuracy >= 0.9")
        w = aq.Workload(dataset="digits", clients=12, target_accuracy=0.8)
        assert db.plan(w, topologies=["ring"]).target_accuracy == 0.8
        with pytest.raises(ValidationError, match="both set the accuracy target"):
            db.plan(w, sla="accuracy >= 0.95 * fc")


def test_a_budget_too_short_to_learn_anything_is_named():
    """After 1 round at a tiny learning rate the predicted fc is below chance: an SLA of
    0.95 * fc would be met by an untrained model, and the planner says so; 40 rounds do not."""
    with aq.connect(":memory:") as db:
        [short] = db.sql("EXPLAIN TRAIN digits ON 10 CLIENTS WITH (rounds = 1, lr = 0.001)")
        [enough] = db.sql("EXPLAIN TRAIN digits ON 10 CLIENTS WITH (rounds = 40)")
        [absolute] = db.sql("EXPLAIN TRAIN digits ON 10 CLIENTS WITH (rounds = 1, lr = 0.001) "
                            "SLA accuracy >= 0.5")
    [warning] = [ln for ln in short.text.splitlines() if "near or below chance" in ln]
    assert "1-round budget" in warning and "10 classes (0.1)" in warning
    assert "pilot = 'fc'" in warning
    assert "near or below chance" not in enough.text
    assert "near or below chance" not in absolute.text   # an absolute target means what it says
