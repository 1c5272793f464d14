"""The censored (Tobit) fit of log T and the chance-constrained choice."""

import math

import numpy as np
import pytest

from airplan_qo.costmodels.time_to_target import (ChooserPlan, choose, expected_rounds,
                                                  fit_target_shift, fit_tobit,
                                                  meets_probability, plan_features,
                                                  target_shift)
from airplan_qo.errors import ValidationError


def _synthetic(n=600, seed=0, budget=20.0):
    rng = np.random.default_rng(seed)
    rows = [{"a": float(a), "b": float(b)} for a, b in rng.normal(0, 1, (n, 2))]
    mu = np.array([2.5 + 0.6 * r["a"] - 0.3 * r["b"] for r in rows])
    log_t = mu + rng.normal(0, 0.3, n)
    cens = log_t > math.log(budget)
    y = np.where(cens, math.log(budget), log_t)
    return rows, y, cens


def test_tobit_recovers_the_coefficients_under_censoring():
    rows, y, cens = _synthetic()
    assert 0.1 < cens.mean() < 0.5                       # a real share is censored
    names = ["one", "a", "b"]
    rows1 = [dict(r, one=1.0) for r in rows]
    fit = fit_tobit(rows1, y, cens, names)
    assert fit.coef["one"] == pytest.approx(2.5, abs=0.05)
    assert fit.coef["a"] == pytest.approx(0.6, abs=0.05)
    assert fit.coef["b"] == pytest.approx(-0.3, abs=0.05)
    assert fit.sd == pytest.approx(0.3, abs=0.04)
    assert fit.n_censored == int(cens.sum())
    # least squares on the censored values (censored read as reached at the budget) is biased
    X = np.array([[1.0, r["a"], r["b"]] for r in rows])
    naive = np.linalg.lstsq(X, y, rcond=None)[0]
    assert abs(naive[1] - 0.6) > 3 * abs(fit.coef["a"] - 0.6)


def test_tobit_offset_and_ridge():
    rows, y, cens = _synthetic(seed=1)
    off = np.full(len(y), 2.5)
    fit = fit_tobit(rows, y, cens, ["a", "b"], offset=off)
    assert fit.coef["a"] == pytest.approx(0.6, abs=0.05)
    shrunk = fit_tobit(rows, y, cens, ["a", "b"], offset=off, penalty={"b": 1e4})
    assert abs(shrunk.coef["b"]) < 0.05 and shrunk.coef["a"] == pytest.approx(0.6, abs=0.08)
    with pytest.raises(ValidationError):
        fit_tobit(rows[:1], y[:1], cens[:1], ["a"])


def test_probability_and_expected_rounds():
    assert meets_probability(math.log(20), 0.3, 20) == pytest.approx(0.5)
    assert meets_probability(math.log(10), 0.3, 40) > 0.99
    # far below the budget: the lognormal mean; far above: the budget
    assert expected_rounds(math.log(5), 0.2, 1000) == pytest.approx(5 * math.exp(0.02), rel=1e-6)
    assert expected_rounds(math.log(5000), 0.2, 40) == pytest.approx(40, rel=1e-6)


def test_choose_is_the_cheapest_likely_plan():
    cands = [ChooserPlan("cheap but slow", math.log(38), 10.0),
             ChooserPlan("middle", math.log(15), 30.0),
             ChooserPlan("dear and fast", math.log(5), 200.0)]
    c, p, ok = choose(cands, 0.3, 40, 0.9)
    assert c.label == "middle" and ok and p > 0.9
    c, p, ok = choose(cands, 0.3, 40, 0.99999999)
    assert c.label == "dear and fast"
    c, p, ok = choose(cands[:1], 0.3, 20, 0.9)
    assert not ok and c.label == "cheap but slow"


def test_plan_features_vanish_for_the_reference():
    x = plan_features(1.0, 1.0, 0.4, 0.0, 0.0, 20)
    assert all(v == 0.0 for v in x.values())
    y = plan_features(0.1, 0.1, 0.4, 0.02, 0.2, 20)
    assert y["choco"] == 1.0 and y["log_inv_k"] == pytest.approx(math.log(10))
    assert y["zeta2_log_inv_p"] == pytest.approx(0.4 * math.log(10))


def test_the_ttt_estimator_plans_under_a_chance_constraint():
    import airplan_qo as aq

    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, snr_db=10, rounds=40)
    kw = dict(estimator="ttt", topologies=["ring", "small_world", "complete"],
              sparsity=[0.1, 1.0])
    loose = db.plan(w, confidence=0.5, **kw)
    strict = db.plan(w, confidence=0.99, **kw)
    for r, conf in ((loose, 0.5), (strict, 0.99)):
        for c in r.candidates:
            e = c.cost.estimate
            assert 0.0 <= e.p_meets <= 1.0 and e.rounds_lo <= e.rounds_hi
            if r.fallback and c is r.chosen:
                continue
            if c.feasible:
                assert e.p_meets >= conf
            elif c.pruned_reason.startswith("unlikely"):
                assert e.p_meets < conf
    # a stricter confidence never picks a cheaper plan
    assert strict.chosen.cost.total() >= loose.chosen.cost.total()
    text = strict.explain(alternatives=2)
    assert "p_meets_sla=" in text and "Why chosen:" in text and " lost: " in text
    with pytest.raises(ValidationError, match="confidence"):
        db.plan(w, confidence=1.0, **kw)


def test_the_ttt_estimate_flags_heterogeneity_and_dropout_outside_its_fitted_range():
    import airplan_qo as aq

    db = aq.connect(":memory:")
    kw = dict(estimator="ttt", topologies=["ring"], sparsity=[1.0], fallback="complete")
    inside = db.plan(aq.Workload(dataset="digits", clients=10, alpha=0.5, snr_db=10), **kw)
    assert not inside.candidates[0].cost.estimate.notes
    near_iid = db.plan(aq.Workload(dataset="digits", clients=10, alpha=3.0, snr_db=10,
                                   dropout=0.5), **kw)
    notes = near_iid.candidates[0].cost.estimate.notes
    assert any(n.startswith("alpha = 3 outside the fitted") for n in notes)
    assert any(n.startswith("dropout 0.5 outside the fitted 0..") for n in notes)
    iid = db.plan(aq.Workload(dataset="digits", clients=10, partition="iid", snr_db=10), **kw)
    assert any("alpha = inf (iid)" in n for n in iid.candidates[0].cost.estimate.notes)
    # a target far below fc: the level shift was measured between 0.8 and 0.97 of it
    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, snr_db=10)
    low = db.plan(w, sla="accuracy >= 0.3", **kw).candidates[0].cost.estimate.notes
    assert any(n.startswith("target at 0.3") and n.endswith("outside the fitted 0.8..0.97")
               for n in low)
    assert not db.plan(w, sla="accuracy >= 0.9 * fc", **kw).candidates[0].cost.estimate.notes


def test_a_size_outside_what_its_dataset_was_fitted_on_is_flagged():
    """mnist1d was fitted at N = 20..40, digits up to 100: N = 100 is inside the whole fit's
    range of clients but outside mnist1d's, and the note says so; N = 30 is inside both."""
    import airplan_qo as aq

    db = aq.connect(":memory:")
    kw = dict(estimator="ttt", topologies=["ring"], sparsity=[1.0], fallback="complete")

    def notes(dataset, n):
        w = aq.Workload(dataset=dataset, clients=n, alpha=0.5, snr_db=10)
        return db.plan(w, **kw).candidates[0].cost.estimate.notes
    assert "N = 100 outside the fitted 20..40 for mnist1d" in notes("mnist1d", 100)
    assert not any(n.startswith("N = ") for n in notes("mnist1d", 30))
    assert not any(n.startswith("N = ") for n in notes("digits", 100))


def test_calibrate_ttt_shifts_the_dataset_level_from_executions(tmp_path):
    import attrs

    import airplan_qo as aq

    db = aq.connect(tmp_path / "c.duckdb")
    w = aq.Workload(dataset="digits", clients=10, alpha=0.5, snr_db=20, rounds=30)
    for seed in range(3):
        r = db.plan(attrs.evolve(w, seed=seed), estimator="ttt", topologies=["complete"],
                    sparsity=[1.0], confidence=0.5)
        db.execute(r, stop_at_target=False)
    before = db.plan(w, estimator="ttt", topologies=["complete"], sparsity=[1.0])
    fb = db.catalog.query("SELECT actual, censored FROM airplan.feedback WHERE metric = 'rounds'")
    report = db.calibrate("ttt", scope="dataset", scope_key="digits")
    assert report.fitted == ("fc.dataset:digits",) and report.n_obs == 3
    if report.mape_before is not None:
        assert report.mape_after <= report.mape_before + 1e-9
    after = db.plan(w, estimator="ttt", topologies=["complete"], sparsity=[1.0])
    shift = report.after["fc.dataset:digits"] - report.before["fc.dataset:digits"]
    mu0 = before.chosen.cost.estimate.terms["mu"]
    observed = [math.log(r["actual"]) - mu0 for r in fb]
    if all(r["censored"] for r in fb):
        assert shift > 0                      # slower than predicted: the level moves up
    else:
        assert np.sign(shift) == np.sign(np.mean(observed))
    level_b = before.chosen.cost.estimate.terms["log_t_fc"]
    level_a = after.chosen.cost.estimate.terms["log_t_fc"]
    assert level_a - level_b == pytest.approx(shift, abs=1e-9)
    assert after.context.calibration_ids
    db.close()


def test_pilot_update_moves_the_prediction_with_the_early_curve():
    from airplan_qo.costmodels.time_to_target import pilot_update

    mu, sd, budget, ceiling = math.log(30.0), 0.4, 40, 0.9
    prior = meets_probability(mu, sd, budget)
    # reached already: settled
    assert pilot_update(mu, sd, budget, 10, 0.88, True, ceiling, 0.95)[2] == 1.0
    # far behind the curve (a(10) = 0.2 of a 0.9 ceiling): slower than predicted
    slow = pilot_update(mu, sd, budget, 10, 0.2, False, ceiling, 0.95)
    # ahead of it (0.85 of 0.9 at round 10): faster
    fast = pilot_update(mu, sd, budget, 10, 0.85, False, ceiling, 0.95)
    assert slow[0] > mu > fast[0]
    assert slow[2] < prior < fast[2]
    assert slow[1] < sd and fast[1] < sd            # a pilot narrows the distribution


def test_confidence_with_an_estimator_without_a_distribution_is_flagged():
    import airplan_qo as aq

    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=10, rounds=30)
    r = db.plan(w, estimator="dsgd", confidence=0.8)
    assert any("CONFIDENCE 0.8 has no effect with the dsgd estimator" in x for x in r.warnings)
    assert not any("CONFIDENCE" in x for x in db.plan(w, estimator="ttt",
                                                     confidence=0.8).warnings)
    assert not any("CONFIDENCE" in x for x in db.plan(w, estimator="dsgd").warnings)


def test_predictive_sd_is_fitted_end_to_end_not_added_in_quadrature():
    """Each workload's reference has its own seed noise; the plan model's sd, fitted about the
    measured reference, already holds it. The end-to-end sd must match the real spread of
    log T about the end-to-end prediction, below the quadrature sum of the two sds."""
    from airplan_qo.evaluation.ttt_crossval import fit

    rng = np.random.default_rng(3)
    rows = []
    for w in range(40):
        level = 2.5 + 0.5 * rng.normal()                 # the reference's true log T
        zeta2 = float(rng.uniform(0, 0.5))
        fc_row = {"dataset:d": 1.0, "zeta2": zeta2}
        for seed in range(6):
            fc_log_t = level + 0.25 * rng.normal() + 1.0 * zeta2
            rows.append({"workload": f"w{w}", "plan": "fc", "seed": seed, "family": "complete",
                         "is_fc": True, "x": {"log_inv_p": 0.0}, "fc_row": fc_row,
                         "log_t": fc_log_t, "censored": False, "final_accuracy": 0.9})
            for lp in (0.5, 1.0, 2.0):
                log_t = level + 1.0 * zeta2 + 0.4 * lp + 0.25 * rng.normal()
                rows.append({"workload": f"w{w}", "plan": f"p{lp}", "seed": seed,
                             "family": "ring", "is_fc": False, "x": {"log_inv_p": lp},
                             "fc_row": fc_row, "log_t": log_t, "censored": False,
                             "final_accuracy": 0.85})
    fits = fit(rows)
    quadrature = math.hypot(fits["plan"].sd, fits["fc"].sd)
    true_sd = math.hypot(0.5, 0.25)          # the reference's unexplained level + seed noise
    assert fits["joint"].sd == pytest.approx(true_sd, rel=0.15)
    assert fits["joint"].sd < quadrature


@pytest.mark.parametrize("x", [-60.0, -40.0, -37.5, -30.0, -10.0, -3.0, -0.5, 0.0, 0.7, 5.0,
                               9.0, 30.0])
def test_normal_functions_match_scipy_into_the_tails(x):
    from scipy import stats

    from airplan_qo.costmodels.time_to_target import norm_cdf, norm_logcdf, norm_sf

    assert norm_cdf(x) == pytest.approx(stats.norm.cdf(x), rel=1e-12, abs=1e-300)
    assert norm_sf(x) == pytest.approx(stats.norm.sf(x), rel=1e-12, abs=1e-300)
    # finite where the CDF underflows (x < -38), and accurate in the upper tail
    assert norm_logcdf(x) == pytest.approx(stats.norm.logcdf(x), rel=1e-9)


def test_target_shift_is_the_exponential_approach_until_fitted():
    # no fitted constants: a(t) = A (1 - exp(-t / tau)) reaches rho A at tau log 1/(1 - rho)
    assert target_shift(0.9, 2.0, {}) == pytest.approx(math.log(math.log(10) / math.log(20)))
    assert target_shift(0.95, 1.5, {"target.level": 1.3, "target.relative": 0.7}) == 0.0
    c = {"target.level": 1.2, "target.relative": 0.5, "target.base": 0.9}
    g = math.log(math.log(20) / math.log(10))
    assert target_shift(0.95, 1.0, c) == pytest.approx(g * (1.2 + 0.5))
    rng = np.random.default_rng(4)
    gv = rng.uniform(-0.7, 0.2, 500)
    rel = rng.uniform(0, 1.5, 500)
    fit = fit_target_shift(gv, rel, gv * (1.1 + 0.8 * rel) + rng.normal(0, 0.05, 500), 0.95)
    assert fit.coef["level"] == pytest.approx(1.1, abs=0.03)
    assert fit.coef["relative"] == pytest.approx(0.8, abs=0.03)
    assert fit.coef["base"] == 0.95 and fit.sd == pytest.approx(0.05, abs=0.01)
    with pytest.raises(ValidationError):
        fit_target_shift([0.1], [0.0], [0.1], 0.95)


def _measured(curve, taus, final=0.9, rounds=400):
    """Stand-ins for measured workloads: one FC run per seed and slower plans, their accuracy
    following ``curve(t, tau)`` towards ``final``."""
    from types import SimpleNamespace as NS

    fc_plan = NS(label=lambda: "fc")
    sp = NS(fc_candidate=NS(plan=fc_plan))
    out = []
    for w, tau_fc in enumerate(taus):
        runs = []
        for label, factor in (("fc", 1.0), ("slow", 2.0), ("slower", 3.5)):
            acc = [final * curve(t, tau_fc * factor) for t in range(1, rounds + 1)]
            runs.append(NS(plan=label, accuracy=acc, final_accuracy=final))
        out.append(NS(seeds={0: sp}, runs=runs, spec=NS(sla="accuracy >= 0.95 * fc")))
    return out


def test_target_shifts_are_measured_on_the_curves():
    from airplan_qo.evaluation.ttt_crossval import target_shifts

    exponential = target_shifts(_measured(lambda t, tau: 1 - math.exp(-t / tau), (8, 12, 20)))
    assert exponential.coef["level"] == pytest.approx(1.0, abs=0.06)
    assert abs(exponential.coef["relative"]) < 0.06 and exponential.coef["base"] == 0.95
    # a heavier tail (a power-law approach): lower targets come much earlier, slower plans more
    heavy = target_shifts(_measured(lambda t, tau: 1 - (1 + t / tau) ** -1.5, (3, 4, 6)))
    assert heavy.coef["level"] > 1.3
    assert target_shift(0.9, 1.0, {f"target.{k}": v for k, v in heavy.coef.items()}) < \
        target_shift(0.9, 0.0, {f"target.{k}": v for k, v in heavy.coef.items()})


def test_a_lower_sla_ratio_shortens_every_plan_and_slow_ones_most():
    import airplan_qo as aq

    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, rounds=40)
    kw = dict(estimator="ttt", topologies=["ring", "complete"], sparsity=[0.1, 1.0])
    at = {ratio: {c.plan.label(): c.cost.estimate.terms
                  for c in db.plan(w, sla=f"accuracy >= {ratio} * fc", **kw).candidates}
          for ratio in (0.9, 0.95)}
    drops = {}
    for label, t95 in at[0.95].items():
        t90 = at[0.9][label]
        assert t90["median_rounds"] < t95["median_rounds"]
        drops[t95["relative_log_t"]] = math.log(t95["median_rounds"] / t90["median_rounds"])
    ordered = [drops[r] for r in sorted(drops)]
    assert ordered == sorted(ordered) and ordered[-1] > ordered[0]


def test_difficulty_terms_scale_topology_and_compression_by_the_fc_error():
    from airplan_qo.costmodels.time_to_target import plan_features, with_fc_error

    easy = plan_features(0.05, 0.3, 0.2, 0.0, 0.0, 20, fc_error=0.07)
    hard = plan_features(0.05, 0.3, 0.2, 0.0, 0.0, 20, fc_error=0.35)
    assert hard["fc_error_log_inv_p"] == pytest.approx(0.35 * math.log(20.0))
    assert hard["fc_error_log_inv_k"] == pytest.approx(0.35 * math.log(1 / 0.3))
    assert easy["fc_error_log_inv_p"] == pytest.approx(0.07 * math.log(20.0))
    # every other feature is the task's alone
    assert {k: v for k, v in hard.items() if not k.startswith("fc_error")} == \
        {k: v for k, v in easy.items() if not k.startswith("fc_error")}
    # linear: set on features relative to the reference, they equal the difference of the
    # absolute ones (how the evaluation fits them)
    fc = plan_features(1.0, 1.0, 0.2, 0.0, 0.0, 20, fc_error=0.35)
    base = plan_features(0.05, 0.3, 0.2, 0.0, 0.0, 20)
    base_fc = plan_features(1.0, 1.0, 0.2, 0.0, 0.0, 20)
    relative = with_fc_error({f: base[f] - base_fc[f] for f in base}, 0.35)
    assert relative == pytest.approx({f: hard[f] - fc[f] for f in hard})


def test_an_unseen_dataset_widens_the_uncertainty_and_is_flagged(tmp_path):
    import airplan_qo as aq
    from airplan_qo.costmodels.time_to_target import ceiling_above, unseen_dataset_spread

    from airplan_qo.data import DATASETS, load

    # a user's own data, which the shipped fit has never seen (the digits arrays renamed)
    aq.register_dataset("my_digits", load("digits"))
    try:
        with aq.connect(tmp_path / "c.duckdb") as db:
            seen = db.plan(aq.Workload(dataset="digits", clients=20, alpha=0.3))
            unseen = db.plan(aq.Workload(dataset="my_digits", clients=20, alpha=0.3),
                             topologies=["complete"], fallback="complete")
    finally:
        DATASETS._items.pop("my_digits", None)
    e_seen, e_unseen = seen.chosen.cost.estimate, unseen.chosen.cost.estimate
    assert e_seen.p_meets > 0.95 and "unseen" not in seen.explain()
    assert e_unseen.p_meets < 0.9
    assert 0 < e_unseen.terms["p_ceiling_above_target"] < 1
    assert "dataset my_digits unseen" in unseen.explain()
    # the widening: the fitted datasets' spread of levels, at least each fit's residual sd
    constants = {"fc.dataset:a": 1.0, "fc.dataset:b": 3.0, "fc.sd": 0.5,
                 "ceil.dataset:a": 0.0, "ceil.dataset:b": 0.1, "ceil.sd": 0.4}
    fc_sd, ceil_sd = unseen_dataset_spread(constants, "new")
    assert fc_sd == pytest.approx(2 ** 0.5) and ceil_sd == 0.4
    assert unseen_dataset_spread(constants, "a") is None
    assert ceiling_above(0.8, 0.8, 1.0) == pytest.approx(0.5)
    assert ceiling_above(0.9, 0.5, 0.1) > 0.999 and ceiling_above(0.5, 0.9, 0.1) < 1e-3


def test_an_unseen_model_widens_the_uncertainty_and_is_flagged(tmp_path):
    import airplan_qo as aq
    from airplan_qo.costmodels.time_to_target import load_reference, unseen_model, unseen_task

    fitted = load_reference()["range"]
    assert fitted["models"] == ["cnn1d", "mlp"]
    assert unseen_model(fitted, "logistic") and not unseen_model(fitted, "mlp")
    assert not unseen_model(fitted, "cnn1d")
    assert not unseen_model({}, "logistic")        # a range that records no models
    with aq.connect(tmp_path / "c.duckdb") as db:
        seen = db.plan(aq.Workload(dataset="digits", clients=20, alpha=0.5))
        unseen = db.plan(aq.Workload(dataset="digits", clients=20, alpha=0.5, model="logistic"),
                         topologies=["complete"], fallback="complete")
    e_seen, e_unseen = seen.chosen.cost.estimate, unseen.chosen.cost.estimate
    assert e_seen.p_meets > 0.95 and "unseen" not in seen.explain()
    assert e_unseen.p_meets < 0.9
    assert 0 < e_unseen.terms["p_ceiling_above_target"] < 1
    assert e_unseen.terms["sd"] > e_seen.terms["sd"]
    text = unseen.explain()
    assert "model logistic not in the fitted grid" in text
    assert "model logistic unseen" in text and "CALIBRATE" not in text.split("unseen")[1]
    # a dataset and a model both unseen: one reference is unknown, widened once
    constants = load_reference()["constants"]
    spread, what = unseen_task(constants, fitted, "my_data", "logistic")
    assert what == ("dataset my_data", "model logistic")
    assert spread == unseen_task(constants, fitted, "my_data", "mlp")[0]
    assert unseen_task(constants, fitted, "digits", "mlp") == (None, ())
    assert unseen_task(constants, fitted, "mnist1d", "cnn1d") == (None, ())


def test_a_fitted_model_shifts_its_datasets_level():
    from airplan_qo.costmodels.time_to_target import model_features, task_level

    c = {"fc.dataset:a": 2.0, "fc.dataset:b": 3.0, "fc.model:cnn1d": -0.5}
    assert model_features("mlp") == {} and model_features("cnn1d") == {"model:cnn1d": 1.0}
    assert task_level(c, "fc", "a", "mlp") == 2.0
    assert task_level(c, "fc", "a", "cnn1d") == 1.5
    assert task_level(c, "fc", "unseen", "cnn1d") == 2.0          # mean level, then the shift
    assert task_level(c, "fc", "b", "resnet18") == 3.0           # an unseen model: no shift


def _operator_plans():
    from airplan_qo.plans.plan import ChannelConfig, PhysicalPlan
    from airplan_qo.plans.topology import TopologySpec

    sw = TopologySpec.create("small_world", 20, k=4)
    fc = TopologySpec.create("complete", 20)
    ch = ChannelConfig()
    return {"ota": PhysicalPlan(sw, 1.0, ch),
            "choco": PhysicalPlan(sw, 0.1, ch),
            "digital8": PhysicalPlan(sw, 1.0, ch, transport="digital", bits=8),
            "digital2": PhysicalPlan(sw, 1.0, ch, transport="digital", bits=2),
            "gt": PhysicalPlan(sw, 1.0, ch, transport="digital", bits=8,
                               algorithm="gradient_tracking"),
            "fedavg": PhysicalPlan(fc, 1.0, ch, algorithm="fedavg")}


def test_fitted_operators_come_from_the_range_else_ota_dsgd_and_choco():
    from airplan_qo.costmodels.time_to_target import (fitted_operators, load_reference,
                                                      operator_fitted)
    from airplan_qo.evaluation.baselines import fitted

    p = _operator_plans()
    # a range that lists no operators (a fit made before they were recorded)
    old = {"k": [0.1, 1.0], "families": ["small_world"]}
    assert [name for name, plan in p.items() if operator_fitted(old, plan)] == ["ota", "choco"]
    assert fitted_operators(old).transports_text() == "over the air only"
    new = {"transports": ["digital", "ota"], "bits": [8, 32],
           "algorithms": ["dsgd", "fedavg", "gradient_tracking"]}
    ops = fitted_operators(new)
    # a width outside the fitted ones is an unseen transport; choco is not among the fitted
    assert {n for n, plan in p.items() if ops.fitted(plan)} == {"ota", "digital8", "gt",
                                                                 "fedavg"}
    assert not ops.transport_fitted(p["digital2"]) and ops.algorithm_fitted(p["digital2"])
    assert ops.transports_text() == "digital (8..32 bits), ota"
    # the evaluation's baselines table follows the same rule, the shipped range by default
    assert all(fitted(plan, new) == ops.fitted(plan) for plan in p.values())
    shipped = load_reference().get("range", {})
    assert all(fitted(plan) == operator_fitted(shipped, plan) for plan in p.values())


def test_the_estimator_widens_only_plans_outside_the_fitted_operators():
    import airplan_qo as aq
    from airplan_qo.costmodels.time_to_target import TimeToTargetEstimator, load_reference

    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, local_steps=1,
                    access_point=True)
    r = db.plan(w, topologies=["ring", "complete"], sparsity=[1.0],
                weights=["metropolis_hastings"], transports=["ota", "digital(bits=8)"],
                algorithms=["auto", "gradient_tracking", "fedavg", "matcha"],
                fallback="complete")
    ctx, target = r.context, r.target_accuracy
    base = {k: v for k, v in load_reference().get("range", {}).items()
            if k not in ("transports", "bits", "algorithms")}
    old = TimeToTargetEstimator(fitted_range=base)
    broad = TimeToTargetEstimator(fitted_range={
        **base, "transports": ["digital", "ota"], "bits": [8, 32],
        "algorithms": ["dsgd", "fedavg", "gradient_tracking", "matcha"]})
    narrow = TimeToTargetEstimator(fitted_range={**base, "transports": ["digital", "ota"],
                                                 "bits": [16, 32], "algorithms": ["dsgd"]})
    kinds = set()
    for c in r.candidates:
        plan, stats = c.plan, c.stats
        alg = plan.effective_algorithm
        kinds.add((plan.transport, alg))
        e_old, e_broad = (m.estimate(ctx, plan, stats, target) for m in (old, broad))
        assert e_old.model_term == pytest.approx(e_broad.model_term)    # the same mean
        assert broad.operator_spread(ctx, plan, stats) == 0.0
        assert not any("not in the fitted runs" in n for n in e_broad.notes)
        inside_old = plan.transport == "ota" and alg in ("dsgd", "choco")
        assert (old.operator_spread(ctx, plan, stats) == 0.0) == inside_old
        if not inside_old:
            # widened: a wider interval, P(meets SLA) less sure either way
            assert (math.log(e_old.rounds_hi / e_old.rounds_lo)
                    > math.log(e_broad.rounds_hi / e_broad.rounds_lo))
            assert abs(e_old.p_meets - 0.5) <= abs(e_broad.p_meets - 0.5) + 1e-12
        notes = narrow.notes(ctx, plan, stats)
        if plan.transport == "digital":         # 8 bits, outside the fitted 16..32
            assert narrow.operator_spread(ctx, plan, stats) > 0
            assert any("not in the fitted runs (digital (16..32 bits), ota)" in n
                       for n in notes)
        if alg != "dsgd":
            assert any(f"algorithm {alg} not in the fitted runs (dsgd)" in n for n in notes)
    assert kinds >= {("ota", "dsgd"), ("digital", "dsgd"), ("digital", "gradient_tracking"),
                     ("ota", "fedavg"), ("ota", "matcha")}


def test_plan_inputs_per_operator():
    """The features every operator enters the model through: a server has no topology term,
    gradient tracking no heterogeneity, MATCHA's budget lowers p, a digital plan has no
    channel noise and its quantiser's slowdown (log(1 + omega) of the runtime's quantiser)."""
    import airplan_qo as aq
    from airplan_qo.costmodels.features import quantisation_omega
    from airplan_qo.costmodels.time_to_target import plan_inputs
    from airplan_qo.runtime.compression import quantization_omega

    for bits, d in ((2, 4810), (4, 4810), (8, 100), (32, 4810)):
        assert quantisation_omega(bits, d) == pytest.approx(quantization_omega(bits, d))
    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, local_steps=1,
                    access_point=True)
    r = db.plan(w, topologies=["ring", "complete"], sparsity=[1.0],
                weights=["metropolis_hastings"],
                transports=["ota", "digital(bits=4)", "digital(bits=32)"],
                algorithms=["auto", "gradient_tracking", "fedavg", "matcha"],
                fallback="complete")
    ctx = r.context
    got = {(c.plan.topology.family, c.plan.effective_algorithm, c.plan.transport, c.plan.bits):
           plan_inputs(c.plan, c.stats, ctx.alpha, ctx.n_classes, ctx.d) for c in r.candidates}
    omega4 = quantisation_omega(4, ctx.d)
    ring = got[("ring", "dsgd", "ota", 32)]
    assert ring.noise > 0 and ring.quant == 0 and ring.zeta2 > 0 and ring.p_random < 0.5
    assert got[("ring", "dsgd", "digital", 32)].noise == 0.0
    assert got[("ring", "dsgd", "digital", 32)].quant == 0.0
    assert got[("ring", "dsgd", "digital", 4)].quant == pytest.approx(math.log1p(omega4))
    assert got[("ring", "gradient_tracking", "digital", 4)].zeta2 == 0.0
    assert got[("ring", "matcha", "ota", 32)].p_random < ring.p_random
    fed = got[("complete", "fedavg", "digital", 4)]
    assert fed.p_random == 1.0 and fed.quant == pytest.approx(math.log1p(omega4 / 20))


def test_each_dataset_gets_its_own_spread_shrunk_towards_the_fits():
    """A dataset whose runs the model predicts poorly gets a wider spread than the whole fit's;
    one it predicts well, or with no reached run, keeps the whole fit's (never narrower)."""
    from airplan_qo.costmodels.time_to_target import (DATASET_SPREAD_PRIOR_RUNS,
                                                      dataset_spread, pooled_spread)
    from airplan_qo.evaluation.ttt_crossval import dataset_spreads

    rng = np.random.default_rng(0)
    rows, mu = [], []
    for dataset, noise, n in (("tight", 0.1, 400), ("loose", 0.8, 400), ("never", 0.3, 20)):
        for _ in range(n):
            log_t = 3.0 + noise * rng.normal()
            censored = dataset == "never"
            rows.append({"fc_row": {f"dataset:{dataset}": 1.0}, "censored": censored,
                         "log_t": math.log(20.0) if censored else log_t})
            mu.append(3.0)
    spreads = dataset_spreads(rows, mu, 0.3)
    assert spreads["tight"] == 0.3 < spreads["loose"]
    assert spreads["loose"] == pytest.approx(pooled_spread(0.8, 400, 0.3), rel=0.05)
    k = DATASET_SPREAD_PRIOR_RUNS
    assert pooled_spread(0.8, 400, 0.3) == pytest.approx(
        math.sqrt((400 * 0.64 + k * 0.09) / (400 + k)))
    assert spreads["never"] == pytest.approx(0.3)
    assert pooled_spread(1.0, DATASET_SPREAD_PRIOR_RUNS, 0.0) == pytest.approx(0.5 ** 0.5)
    c = {"joint.sd": 0.3, "joint.sd.dataset:loose": 0.6}
    assert dataset_spread(c, "joint", "loose") == 0.6
    assert dataset_spread(c, "joint", "other") == 0.3 == dataset_spread(c, "joint", None)
    assert dataset_spread(c, "plan", "loose", 0.25) == 0.25


def test_a_datasets_wider_spread_makes_its_sparse_plans_less_certain(monkeypatch):
    import airplan_qo as aq
    from airplan_qo.costmodels import ESTIMATORS

    ttt = ESTIMATORS.get("ttt")
    w = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10, rounds=40)
    kw = dict(estimator="ttt", topologies=["ring", "small_world", "complete"], sparsity=[1.0],
              fallback="complete", mix_rounds="off")   # a tail's P is the level model's

    def p_meets(db):
        r = db.plan(w, **kw)
        return {c.plan.label(): c.cost.estimate.p_meets for c in r.candidates}

    with aq.connect(":memory:") as db:
        before = p_meets(db)
    monkeypatch.setitem(ttt.priors, "joint.sd.dataset:digits", 3.0)
    with aq.connect(":memory:") as db:
        after = p_meets(db)
    assert before.keys() == after.keys()
    # a likely plan becomes less likely, an unlikely one more so: both move towards 1/2
    assert all(abs(after[k] - 0.5) < abs(before[k] - 0.5) for k in before
               if abs(before[k] - 0.5) > 0.05)
