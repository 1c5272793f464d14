"""The tails' level model (costmodels/tail_level.py): the average model's accuracy at the end of
training over fc, fitted on measured runs and used to cost mixing-only tails."""

import math

import attrs
import numpy as np
import pytest
from scipy.special import stdtr

import airplan_qo as aq
from airplan_qo.costmodels.tail_level import (MAX_SPREAD, LevelInputs, end_level, fit_level,
                                              level_above, level_features, progress)
from airplan_qo.costmodels.time_to_target import AVERAGE_MODEL_FILE, load_reference
from airplan_qo.evaluation.grid import parse_grid
from airplan_qo.evaluation.runner import measure
from airplan_qo.evaluation.tail_level_fit import (cross_validated, grid_workload_keys,
                                                  level_fit_in_use, level_rows)


def _inputs(dataset, p, n, zeta2, steps=5, rounds=98.0, median=60.0):
    return LevelInputs(dataset=dataset, train_rounds=rounds, average_median=median,
                       p_random=p, n=n, zeta2=zeta2, averaged=False, local_steps=steps)


def _synthetic_rows(seed=0):
    """Rows whose log r is a known linear function of the features, Student-t noise whose
    scale grows with zeta^2: dataset 'a' levels 2% above fc, 'b' 8% below, both falling with
    log 1/p."""
    rng = np.random.default_rng(seed)
    rows = []
    for dataset, level, slope in (("a", 0.02, -0.01), ("b", -0.08, -0.03)):
        for _ in range(1500):
            v = _inputs(dataset, p=float(rng.uniform(0.05, 1.0)), n=int(rng.integers(10, 100)),
                        zeta2=float(rng.uniform(0.05, 0.5)), steps=int(rng.choice([1, 5])),
                        median=float(rng.uniform(20, 200)))
            x, _ = level_features(v)
            mean = level + slope * x["log_inv_p"] + 0.3 * x["progress"]
            scale = math.exp(-4.0 + 3.0 * v.zeta2)
            rows.append({"inputs": v, "r": math.exp(mean + scale * rng.standard_t(4)),
                         "workload": f"{dataset}{len(rows) // 10}"})
    return rows


def test_the_fit_recovers_each_datasets_level_slope_and_spread():
    c = fit_level(_synthetic_rows())
    assert c["level.const.dataset:a"] == pytest.approx(0.02, abs=0.01)
    assert c["level.const.dataset:b"] == pytest.approx(-0.08, abs=0.01)
    assert c["level.log_inv_p.dataset:b"] == pytest.approx(-0.03, abs=0.01)
    assert c["level.progress"] == pytest.approx(0.3, abs=0.05)
    # the rows' level does not depend on N: no slope where there is none
    assert c["level.log_n.dataset:a"] == pytest.approx(0.0, abs=0.01)
    assert c["level.sd.zeta2.dataset:a"] == pytest.approx(3.0, abs=0.6)
    v = _inputs("b", p=0.1, n=50, zeta2=0.1)
    mean, sd, seen = end_level(c, v)
    x, _ = level_features(v)
    assert seen and mean == pytest.approx(-0.08 - 0.03 * x["log_inv_p"] + 0.3 * x["progress"],
                                          abs=0.02)
    assert sd == pytest.approx(math.exp(-4.0 + 0.3), rel=0.25)


def test_the_fit_separates_the_share_of_the_budget_trained_from_the_workloads_level():
    """Each run measured at two points of its budget (as the level rows are: B - 2 and 0.8 B):
    within a run the level rises with the share of the budget trained, while across workloads a
    longer budget comes with a lower level. The per-dataset share slope takes the first (a plain
    log t would have mixed in the second, its sign reversed)."""
    rng = np.random.default_rng(3)
    rows = []
    for w in range(300):
        budget = float(rng.choice([100, 200]))
        level = 0.02 - 0.04 * (budget == 200) + 0.01 * rng.standard_normal()
        for t in (budget - 2, round(0.8 * budget)):
            v = LevelInputs(dataset="a", train_rounds=float(t), average_median=10.0,
                            p_random=0.1, n=40, zeta2=0.2, averaged=False,
                            budget_rounds=budget)
            r = math.exp(level + 0.1 * math.log(t / budget) + 0.005 * rng.standard_normal())
            rows.append({"inputs": v, "r": r, "workload": f"w{w}"})
    c = fit_level(rows)
    assert c["level.log_train_share.dataset:a"] == pytest.approx(0.1, abs=0.02)
    x, _ = level_features(attrs.evolve(rows[0]["inputs"], budget_rounds=0.0))
    assert x["log_train_share"] == 0.0   # a budget not given: the whole of it trained


def test_an_unseen_dataset_takes_the_mean_level_and_a_wider_spread():
    c = fit_level(_synthetic_rows())
    ma, sa, _ = end_level(c, _inputs("a", 0.2, 40, 0.2))
    mb, sb, _ = end_level(c, _inputs("b", 0.2, 40, 0.2))
    mu, su, seen = end_level(c, _inputs("wine", 0.2, 40, 0.2))
    assert not seen
    assert mu == pytest.approx((ma + mb) / 2)
    assert su >= (sa + sb) / 2 and su >= abs(ma - mb) / math.sqrt(2) - 1e-12
    # never wider than MAX_SPREAD, however far outside the fitted features (zeta^2 = 3, where
    # the fit saw 0.05-0.5)
    assert end_level(c, _inputs("a", 0.2, 40, 3.0))[1] == MAX_SPREAD
    assert end_level(c, _inputs("wine", 0.2, 40, 3.0))[1] == MAX_SPREAD
    assert end_level({}, _inputs("a", 0.2, 40, 0.2)) is None


def test_level_above_is_the_student_t_tail():
    c = {"level.dof": 4.0}
    assert level_above(c, 0.0, 0.05, 1.0) == pytest.approx(0.5)
    assert level_above(c, 0.0, 0.05, 0.9) == pytest.approx(stdtr(4.0, -math.log(0.9) / 0.05))
    assert level_above(c, -0.2, 0.05, 0.95) < 0.05 < 0.95 < level_above(c, 0.05, 0.02, 0.95)
    assert level_above(c, -5.0, 0.05, 0.0) == 1.0


def test_progress_is_the_log_share_of_the_plateau_the_curve_has_reached():
    assert progress(60.0, 60.0) == pytest.approx(math.log(0.95))
    assert progress(600.0, 60.0) == pytest.approx(0.0, abs=1e-9)
    assert progress(0.0, 60.0) == pytest.approx(math.log(1e-3))


def test_the_shipped_average_model_fit_has_a_level_per_fitted_dataset():
    c = load_reference(AVERAGE_MODEL_FILE)["constants"]
    for dataset in ("mnist1d", "leaf_synthetic", "digits", "synthetic"):
        mean, sd, seen = end_level(c, _inputs(dataset, 0.12, 60, 0.1))
        assert seen and math.isfinite(mean) and 0.0 < sd < 1.0
    # leaf_synthetic's sparse plans level off far below fc, mnist1d's near it (measured: the
    # one-peer exponential graph's average model at 0.84-0.92 of fc on leaf_synthetic and
    # 0.96-1.0 on mnist1d with 5 local steps)
    leaf, _, _ = end_level(c, _inputs("leaf_synthetic", 0.14, 40, 0.15))
    mnist, _, _ = end_level(c, _inputs("mnist1d", 0.14, 40, 0.15))
    assert leaf < math.log(0.93) < math.log(0.95) < mnist


TINY = """
name = "tiny_level"
seeds = 2
estimator = "ttt"
scalability_clients = [8]
[[workloads]]
dataset = "digits"
clients = 8
rounds = 12
local_steps = 1
alpha = 0.5
snr_db = 10
topologies = ["ring", "complete"]
sparsity = [1.0]
transports = ["ota"]
algorithms = ["dsgd"]
"""


def test_rows_are_measured_from_an_evaluation_catalog(tmp_path):
    grid = parse_grid(TINY, source="tiny.toml")
    catalog = str(tmp_path / "c.duckdb")
    with aq.connect(catalog) as db:
        measured = measure(db, grid)
        runs = {(r.plan, r.seed): r for r in measured[0].runs}
        ring = next(r for (p, s), r in runs.items() if p.startswith("ring") and s == 0)
        average = [a for (a,) in db.sql(f"SELECT test_accuracy FROM airplan.round_stats "
                                        f"WHERE exec_id = {ring.exec_id} ORDER BY round")[0].rows]
    rows = level_rows([catalog])
    # the ring's two seeds, each sampled where a complete-graph tail and an own tail start
    assert len(rows) == 4 and {r["family"] for r in rows} == {"ring"}
    fc = np.mean([r.final_accuracy for (p, _), r in runs.items() if p.startswith("complete")])
    assert sorted(r["inputs"].train_rounds for r in rows) == [10.0, 10.0, 10.0, 10.0]
    # 0.8 x 12 rounds rounds to 10 as well; the centred average over rounds 9-11
    expect = np.mean(average[8:11]) / fc
    seed0 = [r for r in rows if r["seed"] == 0]
    assert seed0[0]["r"] == pytest.approx(expect)
    v = seed0[0]["inputs"]
    assert v.dataset == "digits" and v.n == 8 and v.local_steps == 1 and 0 < v.p_random < 1
    # the grid's workload is the one the rows belong to (what a leave-one-grid-out drops)
    assert {r["workload"] for r in rows} == grid_workload_keys(grid)
    with pytest.raises(FileNotFoundError):
        level_rows([str(tmp_path / "missing.duckdb")])


def test_cross_validation_reports_calibration_bins():
    rows = [dict(r, workload=f"{r['inputs'].dataset}{i % 4}") for i, r in
            enumerate(_synthetic_rows()[:600] + _synthetic_rows(1)[1500:2100])]
    out = cross_validated(rows, thresholds=(0.95,))
    bins = out["bins"]["all 0.95"]
    assert sum(b["n"] for b in bins) == len(rows)
    # calibrated on data drawn from the model's own family
    for b in bins:
        if b["n"] >= 50:
            assert abs(b["cleared"] - b["mean_p"]) < 0.12


def test_tails_are_costed_from_the_level_fit_in_use(tmp_path):
    w = aq.Workload.from_params("mnist1d", 40, {"alpha": 1.0, "rounds": 100, "snr_db": 10})

    def tail_terms(db):
        res = db.plan(w, topologies=["complete", "base_k(k=1)"], sparsity=[1.0],
                      transports=["ota"], algorithms=["auto"], fallback="complete",
                      mix_rounds="auto")
        return next(c.cost.estimate.terms for c in res.candidates
                    if c.plan.mix_rounds and c.plan.mix_on == "complete")

    shipped = load_reference(AVERAGE_MODEL_FILE)["constants"]
    low = {k: v for k, v in shipped.items() if k.startswith("level.")}
    low["level.const.dataset:mnist1d"] -= 0.5          # the average model 40% below fc
    with aq.connect(tmp_path / "c.duckdb") as db:
        before = tail_terms(db)
        with level_fit_in_use(low):
            lowered = tail_terms(db)
        after = tail_terms(db)
    assert before == after                            # restored on leaving the block
    assert 0.9 < before["average_model_level"] < 1.1 and before["p_meets_average_model"] > 0.5
    assert lowered["average_model_level"] == pytest.approx(
        before["average_model_level"] * math.exp(-0.5))
    assert lowered["p_meets_average_model"] < 1e-3


def test_the_fit_command_says_what_is_missing(tmp_path, capsys):
    from airplan_qo.evaluation.tail_level_fit import main

    assert main([str(tmp_path / "none.duckdb")]) == 2
    assert "no catalog at" in capsys.readouterr().err
    with aq.connect(tmp_path / "empty.duckdb"):
        pass
    assert main([str(tmp_path / "empty.duckdb"), "--no-cv"]) == 2
    assert "no run without a tail" in capsys.readouterr().err
