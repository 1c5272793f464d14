"""Calibration of the cost estimators from feedback: synthetic refits, censoring, versioning."""

import json
import math

import attrs
import numpy as np
import pytest

from airplan_qo.catalog.store import Catalog
from airplan_qo.errors import ValidationError
from airplan_qo.costmodels.calibration import calibrate, current_constants, evaluate
from airplan_qo.costmodels.cross_validation import leave_one_group_out
from airplan_qo.costmodels.dsgd_fit import fit_dsgd
from airplan_qo.costmodels.observation_loader import load_observations
from airplan_qo.costmodels.observations import Observation
from airplan_qo.costmodels.paper_fit import fit_paper
from airplan_qo.costmodels import ESTIMATORS, resolve_constants

PRIORS = dict(ESTIMATORS.get("dsgd").priors)
# "true" constants of the synthetic runs: every term a few times its prior
TRUE = dict(PRIORS, f0=0.08, f1=2e-3, f2=3e-4, f3=0.3, tau0=15.0, tau1=0.4)
FITTED = ("f0", "f1", "f2", "f3", "tau0", "tau1")
FAMILIES = ("ring", "erdos_renyi", "small_world", "complete")
E0 = 0.9


def _floor_tau(c, p_eff, zeta2, sigma_c2):
    inv = 1 / p_eff - 1
    floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1 / p_eff**2 - 1)
             + c["f3"] * sigma_c2 / p_eff)
    return floor, c["tau0"] + c["tau1"] * inv


def _exact_rounds(c, p_eff, zeta2, sigma_c2, eps):
    floor, tau = _floor_tau(c, p_eff, zeta2, sigma_c2)
    return max(1, math.ceil(tau * math.log((E0 - floor) / (eps - floor))))


def synthetic(n=12, *, seed=0, noise=0.03, budget=300, eps=0.25, constants=TRUE):
    """Runs whose error curves follow the dsgd model with multiplicative log-normal noise."""
    rng = np.random.default_rng(seed)
    ps, zetas, sigmas = (0.05, 0.1, 0.2, 0.4, 0.7, 1.0), (0.0, 0.05, 0.2, 0.45), (0.0, 0.01, 0.03)
    out = []
    for i in range(n):
        p, z, s = ps[i % 6], zetas[(i // 2) % 4], sigmas[(i // 3) % 3]
        floor, tau = _floor_tau(constants, p, z, s)
        t = np.arange(budget + 1.0)
        fl = min(floor, E0)
        err = (fl + (E0 - fl) * np.exp(-t / tau)) * np.exp(noise * rng.standard_normal(t.size))
        hit = np.nonzero(err <= eps)[0]
        out.append(Observation(
            "dsgd", FAMILIES[i % 4], eps, budget if hit.size == 0 else hit[0], hit.size == 0,
            t, err, p=p, p_eff=p, zeta2=z, sigma_c2=s, e0=E0, dataset="digits", exec_id=i,
            snr_db=10.0, g_th=0.0))
    return out


# ---- (a) synthetic refit -----------------------------------------------------------------

def test_refit_recovers_known_constants_and_beats_the_priors():
    obs = synthetic()
    assert any(o.censored for o in obs) and sum(not o.censored for o in obs) >= 8
    fit = fit_dsgd(obs, PRIORS)
    assert fit.fitted == FITTED and fit.n_obs == 12 and fit.success
    for name in FITTED:
        assert fit.constants[name] == pytest.approx(TRUE[name], rel=0.2), name
    assert fit.constants["beta_k"] == PRIORS["beta_k"]  # fixed by default
    before = evaluate(obs, PRIORS)
    assert fit.rounds_mape < 5.0 < 40.0 < before.rounds_mape
    assert fit.curve_log_rmse == pytest.approx(0.03, abs=0.01)  # the noise level
    assert fit.curve_log_rmse < before.curve_log_rmse / 10
    assert all(s < 0.5 for s in fit.prior_share.values())
    assert len(fit.predictions) == 12


def test_beta_k_is_recovered_when_k_varies_and_held_by_the_prior_when_not():
    rng = np.random.default_rng(1)
    truth = dict(TRUE, beta_k=0.3)
    obs = []
    for i, (p, k) in enumerate([(p, k) for p in (0.05, 0.2, 0.5, 1.0) for k in (1.0, 0.1, 0.01)]):
        q = 0.9
        pe = p * k ** truth["beta_k"] * q
        floor, tau = _floor_tau(truth, pe, 0.05, 0.0)
        t = np.arange(301.0)
        err = (floor + (E0 - floor) * np.exp(-t / tau)) * np.exp(0.03 * rng.standard_normal(301))
        obs.append(Observation("dsgd", "ring", 0.3, 50, False, t, err, p=p, k_ratio=k,
                               link_survival=q, p_eff=p * k ** 0.5 * q, zeta2=0.05, e0=E0,
                               exec_id=i))
    fit = fit_dsgd(obs, PRIORS, fixed=())
    assert "beta_k" in fit.fitted
    assert fit.constants["beta_k"] == pytest.approx(0.3, rel=0.1)
    same_k = synthetic(6)
    fit2 = fit_dsgd(same_k, PRIORS, fixed=("f2",))
    assert fit2.constants["f2"] == PRIORS["f2"] and "f2" not in fit2.fitted
    assert fit2.prior_share["beta_k"] > 0.99  # k = 1 everywhere: beta_k has no effect
    assert fit2.constants["beta_k"] == pytest.approx(PRIORS["beta_k"])
    assert any("same k_ratio" in n for n in fit2.notes)


def test_few_runs_stay_near_the_priors_in_unidentified_directions():
    # three iid, noiseless-channel runs: zeta2 = sigma_c2 = 0, so f2 and f3 are not observed
    obs = [o for o in synthetic(12) if o.zeta2 == 0 and o.sigma_c2 == 0][:3]
    assert len(obs) == 3
    fit = fit_dsgd(obs, PRIORS)
    assert fit.constants["f2"] == pytest.approx(PRIORS["f2"], rel=1e-3)
    assert fit.constants["f3"] == pytest.approx(PRIORS["f3"], rel=1e-3)
    assert fit.prior_share["f2"] > 0.99 and fit.prior_share["f3"] > 0.99
    assert any("prior" in n for n in fit.notes)


# ---- (b) censoring -----------------------------------------------------------------------

def _rounds_only(c=TRUE, eps=0.25):
    cases = [(0.05, 0.0, 0.0), (0.1, 0.2, 0.0), (0.3, 0.05, 0.01), (0.5, 0.45, 0.0),
             (1.0, 0.0, 0.03), (0.2, 0.2, 0.01), (0.7, 0.05, 0.03)]
    return [Observation("dsgd", "ring", eps, _exact_rounds(c, p, z, s, eps), p=p, p_eff=p,
                        zeta2=z, sigma_c2=s, e0=E0, exec_id=i)
            for i, (p, z, s) in enumerate(cases)]


def test_censored_bound_already_exceeded_adds_no_residual():
    obs = _rounds_only()
    base = fit_dsgd(obs, TRUE)
    predicted = evaluate([obs[0]], base.constants).predictions[0].predicted_rounds
    harmless = Observation("dsgd", "ring", 0.25, 0.5 * predicted, True, p=0.05, p_eff=0.05,
                           e0=E0, exec_id=99)
    again = fit_dsgd(obs + [harmless], TRUE)
    for name in FITTED:
        assert again.constants[name] == pytest.approx(base.constants[name], rel=1e-9)
    assert again.rounds_mape == pytest.approx(base.rounds_mape)  # censored: not in the MAPE
    assert any("rounds to target only" in n for n in base.notes)


def test_violated_censored_bound_pulls_the_prediction_up():
    obs = _rounds_only()
    base = fit_dsgd(obs, TRUE)
    probe = Observation("dsgd", "ring", 0.25, 1.0, True, p=0.05, p_eff=0.05, e0=E0,
                        zeta2=0.45, exec_id=99)
    before = evaluate([probe], base.constants).predictions[0].predicted_rounds
    bound = 3.0 * before
    violated = Observation("dsgd", "ring", 0.25, bound, True, p=0.05, p_eff=0.05, e0=E0,
                           zeta2=0.45, exec_id=99)
    pulled = fit_dsgd(obs + [violated], TRUE)
    after = evaluate([violated], pulled.constants).predictions[0]
    assert after.predicted_rounds is None or after.predicted_rounds > 1.5 * before
    assert after.ape is None  # censored rows never enter the MAPE


# ---- (c) too few observations ------------------------------------------------------------

def test_too_few_observations_is_a_clear_error():
    with pytest.raises(ValidationError, match=r"at least 3 observations.*only 2 available"):
        fit_dsgd(synthetic(2), PRIORS)
    with pytest.raises(ValidationError, match=r"at least 5 observations.*only 4"):
        fit_dsgd(synthetic(4), PRIORS, min_obs=5)
    with pytest.raises(ValidationError, match="cannot fix 'u'"):
        fit_dsgd(synthetic(4), PRIORS, fixed=("u",))
    with pytest.raises(ValidationError, match="target error"):
        Observation("dsgd", "ring", 1.5, 10)


# ---- catalog helpers ---------------------------------------------------------------------

def _populate(cat, observations, *, dataset="digits", estimator="dsgd", terms_of=None,
              via_options=False, calibration_ids=()):
    """Write workloads, planning runs, plans, executions, round_stats and feedback rows.

    ``via_options``: no workload row; the dataset only in the execution's options."""
    wid = None if via_options else cat.insert_row("workloads", {
        "dataset": dataset, "n_clients": 50, "partition_scheme": "dirichlet", "alpha": 0.5,
        "partition_seed": 0, "data_seed": 0, "fingerprint": f"{dataset}-{estimator}-test"})
    for o in observations:
        run = cat.insert_row("planning_runs", {
            "workload_id": wid, "statement": "TRAIN ...", "estimator": estimator,
            "objective": "channel_uses", "sla_threshold": 1.0 - o.target_error,
            "n_candidates": 1})
        terms = terms_of(o) if terms_of else {
            "p": o.p, "p_eff": o.p_eff, "zeta2": o.zeta2, "sigma_c2": o.sigma_c2, "e0": o.e0,
            "tau": 0.0, "error_floor": 0.0}
        plan = cat.insert_row("plans", {
            "planning_run_id": run, "chosen": True, "rank": 1, "family": o.family,
            "weights_rule": "metropolis_hastings", "k_ratio": o.k_ratio, "algorithm": "dsgd",
            "snr_db": o.snr_db, "g_th": o.g_th, "est_rounds": 10.0, "reaches_target": True,
            "terms": json.dumps(terms), "calibration_ids": list(calibration_ids)})
        ex = cat.insert_row("executions", {
            "plan_id": plan, "status": "succeeded", "actual_rounds": int(o.rounds_actual),
            "data_seed": 0, "train_seed": 0, "channel_seed": 0,
            "options": {"dataset": dataset} if via_options else {}})
        if o.rounds.size:
            drop = np.full(o.rounds.size, np.nan if o.link_drop_rate is None
                           else o.link_drop_rate)
            cat.insert_rows("round_stats", {
                "exec_id": np.full(o.rounds.size, ex, dtype=np.int64),
                "round": o.rounds.astype(np.int32), "client_acc_mean": 1.0 - o.errors,
                "link_drop_rate": drop})
        cat.insert_rows("feedback", {
            "exec_id": [ex] * 4, "plan_id": [plan] * 4, "estimator": [estimator] * 4,
            "metric": ["rounds", "accuracy", "channel_uses", "energy_j"],
            "estimated": [10.0, 0.8, 1e5, 1.0], "actual": [o.rounds_actual, 0.8, 1e5, 1.0],
            "model_term": [1.0] * 4, "censored": [o.censored, False, False, False]})


# ---- (d) versioning ----------------------------------------------------------------------

def test_calibration_rows_are_versioned_never_overwritten():
    with Catalog(":memory:") as cat:
        _populate(cat, synthetic(8))
        first = calibrate(cat, "dsgd")
        second = calibrate(cat, "dsgd")
        assert set(first.calibration_ids) == set(FITTED)
        old = {r["calibration_id"]: r for r in cat.query("SELECT * FROM airplan.calibration")}
        assert len(old) == 2 * len(FITTED)
        for name, cid in first.calibration_ids.items():
            assert old[cid]["superseded_by"] == second.calibration_ids[name]
            assert old[cid]["value"] == pytest.approx(first.after[name])
            assert old[cid]["n_obs"] == 8 and old[cid]["source"].startswith("fit:")
        current = cat.query("SELECT calibration_id FROM airplan.v_current_calibration")
        assert sorted(r["calibration_id"] for r in current) == sorted(
            second.calibration_ids.values())
        # the second fit starts from the first one's constants
        assert second.before == pytest.approx(first.after)
        history = cat.query("SELECT calibration_id, value, superseded_by FROM airplan.calibration"
                            " WHERE estimator = 'dsgd' AND constant_name = 'f0'"
                            " ORDER BY calibration_id")
        assert [h["superseded_by"] for h in history] == [history[1]["calibration_id"], None]


def test_calibrate_report_and_errors():
    with Catalog(":memory:") as cat:
        _populate(cat, synthetic(12))
        report = calibrate(cat, "dsgd")
        assert report.n_obs == 12 and report.mape_after < report.mape_before
        text = report.render()
        assert "constant" in text and "f0" in text and "->" in text and "rounds MAPE" in text
        for name in FITTED:
            assert f"{report.before[name]:.6g} -> {report.after[name]:.6g}" in text
        with pytest.raises(ValidationError, match=r"at least 3 observations.*only 0"):
            calibrate(cat, "dsgd", scope="dataset", scope_key="cifar10")
        with pytest.raises(ValidationError, match="unknown calibration scope"):
            calibrate(cat, "dsgd", scope="family")
        with pytest.raises(ValidationError, match="dataset:family"):
            calibrate(cat, "dsgd", scope="dataset_family", scope_key="digits")


def test_load_observations_reads_the_feedback_contract_and_scopes():
    obs = synthetic(8)
    with Catalog(":memory:") as cat:
        _populate(cat, obs, dataset="digits")
        _populate(cat, synthetic(3, seed=5), dataset="mnist")
        got = load_observations(cat, "dsgd")
        assert len(got) == 11
        digits = load_observations(cat, "dsgd", scope="dataset", scope_key="digits")
        assert len(digits) == 8 and {o.dataset for o in digits} == {"digits"}
        ring = load_observations(cat, "dsgd", scope="dataset_family", scope_key="digits:ring")
        assert {o.family for o in ring} == {"ring"} and len(ring) == 2
        first = digits[0]
        assert first.target_error == pytest.approx(obs[0].target_error)
        assert first.rounds_actual == obs[0].rounds_actual
        assert first.censored == obs[0].censored
        np.testing.assert_allclose(first.errors, obs[0].errors, rtol=1e-9)
        assert first.p == obs[0].p and first.e0 == E0 and first.link_survival == 1.0
        assert load_observations(cat, "paper") == []


def test_executions_judged_on_the_average_model_are_left_out_of_the_fits():
    from airplan_qo.costmodels.observation_loader import load

    with Catalog(":memory:") as cat:
        _populate(cat, synthetic(4), dataset="digits")
        ex = cat.query("SELECT min(exec_id) AS e FROM airplan.executions")[0]["e"]
        cat.update_row("executions", ex, {"options": {
            "dataset": "digits", "run_config": {"target_metric": "avg_model_accuracy"}}})
        got, skipped = load(cat, "dsgd", "global", "")
    assert len(got) == 3 and ex not in {o.exec_id for o in got}
    assert skipped == [f"execution {ex}: its SLA bounds avg_model_accuracy, and the "
                       "estimators are fitted on the clients' accuracy"]


def test_load_recovers_link_survival_and_dataset_from_execution_options():
    p, k, q, beta = 0.2, 0.1, 0.9, 0.7
    o = Observation("dsgd", "ring", 0.3, 40, p=p, k_ratio=k, p_eff=p * k**beta * q, e0=E0,
                    zeta2=0.1, rounds=np.arange(5.0), errors=np.linspace(0.9, 0.3, 5),
                    link_drop_rate=0.095, g_th=0.1, snr_db=10.0)
    with Catalog(":memory:") as cat:
        # the plan was costed with beta_k = 0.7 from an earlier calibration row
        ids = cat.supersede_calibration("dsgd", "global", "", {"beta_k": beta}, n_obs=0,
                                        source="manual")
        _populate(cat, [o], dataset="cifar10", via_options=True,
                  calibration_ids=[ids["beta_k"]])
        (got,) = load_observations(cat, "dsgd", scope="dataset", scope_key="cifar10")
    assert got.dataset == "cifar10"
    assert got.link_survival == pytest.approx(q)
    assert got.p_eff_at(beta) == pytest.approx(o.p_eff)
    assert got.link_drop_rate == pytest.approx(0.095)
    assert got.has_curve and got.errors[-1] == pytest.approx(0.3)


# ---- (e) paper ---------------------------------------------------------------------------

def _paper_obs(family, rounds, lam2, snr=10.0, drop=None, censored=False, i=0):
    return Observation("paper", family, 0.2, rounds, censored, lambda2=lam2, snr_db=snr,
                       link_drop_rate=drop, exec_id=i)


def test_paper_kappa_from_one_erdos_renyi_run():
    obs = [_paper_obs("erdos_renyi", 70, 3.15), _paper_obs("ring", 180, 0.016, i=1)]
    fit = fit_paper(obs)
    assert fit.constants["kappa"] == pytest.approx(70 * 3.15)
    assert fit.fitted == ("kappa",)
    assert fit.constants["alpha_r"] == ESTIMATORS.get("paper").priors["alpha_r"]
    ring = next(p for p in fit.predictions if p.family == "ring")
    r = 1 + fit.constants["alpha_r"] * math.exp(-fit.constants["beta_r"] * 10.0)
    assert ring.predicted_rounds == math.ceil(70 * 3.15 / 0.016 * r)
    several = fit_paper(obs + [_paper_obs("erdos_renyi", 90, 3.0, i=2),
                               _paper_obs("erdos_renyi", 60, 3.5, i=3),
                               _paper_obs("erdos_renyi", 500, 3.0, censored=True, i=4)])
    assert several.constants["kappa"] == pytest.approx(np.median([70 * 3.15, 270, 210]))
    with pytest.raises(ValidationError, match="Erdos-Renyi"):
        fit_paper([_paper_obs("ring", 180, 0.016)])
    with pytest.raises(ValidationError, match="censored"):
        fit_paper([_paper_obs("erdos_renyi", 500, 3.0, censored=True)])


def test_paper_reliability_recovered_from_drop_rates():
    rng = np.random.default_rng(3)
    snrs = np.repeat([0.0, 5.0, 10.0, 15.0, 20.0, 25.0], 2)
    drops = 0.8 * np.exp(-0.15 * snrs) + 0.002 * rng.standard_normal(snrs.size)
    obs = [_paper_obs("erdos_renyi", 70, 3.15, s, max(d, 0.0), i=i)
           for i, (s, d) in enumerate(zip(snrs, drops))]
    fit = fit_paper(obs)
    assert fit.fitted == ("kappa", "alpha_r", "beta_r")
    assert fit.constants["alpha_r"] == pytest.approx(0.8, rel=0.05)
    assert fit.constants["beta_r"] == pytest.approx(0.15, rel=0.05)
    flat = fit_paper([_paper_obs("erdos_renyi", 70, 3.15, 10.0, 0.1)])
    assert flat.fitted == ("kappa", "alpha_r")
    assert flat.constants["alpha_r"] == pytest.approx(0.1 * math.exp(0.2 * 10.0))


def test_paper_calibrate_through_the_catalog():
    obs = [_paper_obs("erdos_renyi", 70, 3.15, 5.0, 0.3, i=0),
           _paper_obs("ring", 180, 0.016, 15.0, 0.05, i=1),
           _paper_obs("complete", 40, 50.0, 25.0, 0.01, i=2)]
    with Catalog(":memory:") as cat:
        _populate(cat, obs, estimator="paper",
                  terms_of=lambda o: {"lambda2": o.lambda2, "t_g": 1.0, "reliability": 1.0})
        report = calibrate(cat, "paper", min_obs=1)
        assert report.after["kappa"] == pytest.approx(70 * 3.15)
        constants, ids = resolve_constants(ESTIMATORS.get("paper"),
                                           cat.current_calibration("paper"), "digits")
        assert constants["kappa"] == pytest.approx(70 * 3.15)
        assert ids == tuple(sorted(report.calibration_ids.values()))


# ---- (f) end to end: the planner's resolve_constants sees the new rows -------------------

def test_resolve_constants_picks_up_calibrated_rows():
    with Catalog(":memory:") as cat:
        _populate(cat, synthetic(12))
        report = calibrate(cat, "dsgd")
        constants, ids = resolve_constants(ESTIMATORS.get("dsgd"),
                                           cat.current_calibration("dsgd"), "digits")
        for name in FITTED:
            assert constants[name] == pytest.approx(report.after[name])
            assert constants[name] == pytest.approx(TRUE[name], rel=0.2)
        assert constants["beta_k"] == PRIORS["beta_k"] and constants["u"] == PRIORS["u"]
        assert ids == tuple(sorted(report.calibration_ids.values()))
        # a dataset-scoped calibration wins over the global one for that dataset only
        local = calibrate(cat, "dsgd", scope="dataset", scope_key="digits", prior_weight=1.0)
        c_digits, ids_digits = resolve_constants(
            ESTIMATORS.get("dsgd"), cat.current_calibration("dsgd"), "digits")
        c_other, ids_other = resolve_constants(
            ESTIMATORS.get("dsgd"), cat.current_calibration("dsgd"), "mnist")
        assert ids_digits == tuple(sorted(local.calibration_ids.values()))
        assert ids_other == ids
        assert current_constants(cat, "dsgd", "dataset", "digits")[0] == c_digits


# ---- hold-out ----------------------------------------------------------------------------

def test_leave_one_family_out():
    obs = synthetic(16)
    report = leave_one_group_out(obs, "family")
    assert set(report.per_group) == set(FAMILIES)
    assert all(m is not None and m < 15.0 for m in report.per_group.values())
    assert report.mape < 10.0 and "ring" in report.render()
    paper = [_paper_obs("erdos_renyi", 70, 3.15), _paper_obs("ring", 180, 0.016, i=1),
             _paper_obs("complete", 40, 50.0, i=2)]
    held = leave_one_group_out(paper, estimator="paper", min_obs=1)
    assert held.per_group["erdos_renyi"] is None  # nothing left to take kappa from
    # kappa / lambda2 misses badly: 6 rounds predicted for 40, 15647 for 180
    assert held.per_group["complete"] == pytest.approx(85.0)
    assert held.per_group["ring"] > 1000.0
    with pytest.raises(ValidationError, match="two groups"):
        leave_one_group_out(synthetic(3), "dataset")


def test_softplus_is_a_smooth_overflow_free_max():
    from airplan_qo.costmodels.dsgd_fit import _softplus

    x = np.array([-1e4, -30.0, -1.0, 0.0, 1.0, 30.0, 1e4])
    scale = np.array(2.0)
    out = _softplus(x, scale)
    assert np.all(np.isfinite(out)) and np.all(out >= 0) and np.all(np.diff(out) > 0)
    assert out[3] == pytest.approx(2.0 * math.log(2.0), rel=1e-15)
    assert out[[2, 4]] == pytest.approx(2.0 * np.log1p(np.exp(x[[2, 4]] / 2.0)), rel=1e-15)
    assert out[-1] == pytest.approx(1e4, rel=1e-15) and out[0] < 1e-300


def _assert_jacobian_matches(problem, theta):
    """The problem's closed-form Jacobian at theta against central differences; returns it."""
    jac = problem.jacobian(theta)
    assert jac.shape == (problem.residuals(theta).size, len(problem.names))
    h = 1e-6
    for j, name in enumerate(problem.names):
        step = np.zeros(len(problem.names))
        step[j] = h
        numeric = (problem.residuals(theta + step) - problem.residuals(theta - step)) / (2 * h)
        assert np.allclose(jac[:, j], numeric, rtol=1e-4, atol=1e-6), name
    return jac


def test_dsgd_jacobian_matches_finite_differences():
    """The closed-form Jacobian of the dsgd fit's residuals (curves, rounds-only runs with a
    violated and a satisfied censored bound, a floor above e0, the prior) against central
    differences at a few points."""
    from airplan_qo.costmodels.dsgd_fit import _DSGDProblem

    obs = synthetic(12, budget=60) + _rounds_only()
    obs.append(Observation("dsgd", "ring", 0.25, 40, True, p=0.1, p_eff=0.1, zeta2=0.2,
                           sigma_c2=0.0, e0=E0, exec_id=98))
    obs.append(Observation("dsgd", "ring", 0.25, 3, True, p=0.5, p_eff=0.5, zeta2=0.0,
                           sigma_c2=0.0, e0=E0, exec_id=99))
    problem = _DSGDProblem(obs, dict(PRIORS), FITTED, 1e-3, 50, 1.0)
    rng = np.random.default_rng(0)
    for theta in (problem.theta0, np.log([TRUE[n] for n in FITTED]),
                  np.log([TRUE[n] for n in FITTED]) + rng.normal(0, 0.5, len(FITTED)),
                  np.log([0.3, 2e-3, 3e-4, 0.3, 15.0, 0.4]),      # every floor above eps
                  np.log([0.95, 2e-3, 3e-4, 0.3, 15.0, 0.4])):    # every floor above e0
        _assert_jacobian_matches(problem, theta)


def test_dsgd_jacobian_with_beta_k_matches_finite_differences():
    """With beta_k fitted (runs at several k, some with link losses and one without p, whose
    p_eff stays put) the closed form moves p_eff = p k^beta_k q too."""
    from airplan_qo.costmodels.dsgd_fit import _DSGDProblem

    obs = []
    for i, o in enumerate(synthetic(12, budget=60) + _rounds_only()):
        k = (0.1, 0.3, 1.0)[i % 3]
        obs.append(attrs.evolve(o, k_ratio=k, link_survival=(1.0, 0.8)[i % 2],
                                p_eff=o.p * k ** PRIORS["beta_k"] * (1.0, 0.8)[i % 2]))
    obs.append(Observation("dsgd", "ring", 0.25, 30, False, p=None, p_eff=0.2, k_ratio=0.3,
                           zeta2=0.1, sigma_c2=0.0, e0=E0, exec_id=97))
    names = FITTED + ("beta_k",)
    problem = _DSGDProblem(obs, dict(PRIORS), names, 1e-3, 50, 1.0)
    rng = np.random.default_rng(1)
    for theta in (problem.theta0,
                  np.log([TRUE[n] for n in FITTED] + [0.7]),
                  problem.theta0 + rng.normal(0, 0.3, len(names))):
        assert np.any(_assert_jacobian_matches(problem, theta)[:, -1] != 0.0)
