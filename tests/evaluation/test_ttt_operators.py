"""The time-to-target model on runs of every transport and algorithm: the grid fit's plan
features are the estimator's, the fitted range records the operators it saw, and a refit
learns that coarse quantisers never reach the target."""

import math
from types import SimpleNamespace

import pytest

import airplan_qo as aq
from airplan_qo.costmodels.features import quantisation_omega
from airplan_qo.costmodels.time_to_target import (PLAN_FEATURES, TimeToTargetEstimator,
                                                  meets_probability, with_fc_error)
from airplan_qo.evaluation import parse_grid
from airplan_qo.evaluation import ttt_crossval
from airplan_qo.evaluation.runner import plan_seed

GRID = """
seeds = 1
[defaults]
dataset = "digits"
clients = 8
alpha = 0.5
snr_db = 10
local_steps = 1
access_point = true
topologies = ["ring", "small_world(k=4)", "complete"]
sparsity = [1.0]
transports = ["ota", "digital(bits=4)", "digital(bits=32)"]
algorithms = ["auto", "gradient_tracking", "push_sum", "matcha", "fedavg", "fedprox"]
[[workloads]]
"""


@pytest.fixture(scope="module")
def seed_plan(tmp_path_factory):
    grid = parse_grid(GRID, source="ops.toml")
    with aq.connect(str(tmp_path_factory.mktemp("ops") / "c.duckdb")) as db:
        yield grid, plan_seed(db, grid, grid.workloads[0], 0)


def test_the_fits_features_are_the_estimators_for_every_operator(seed_plan):
    _, sp = seed_plan
    ctx = sp.result.context
    est = TimeToTargetEstimator()
    kinds = set()
    for c in list(sp.candidates) + [sp.fc_candidate]:
        plan, stats = c.plan, c.stats
        kinds.add((plan.transport, plan.effective_algorithm))
        fc_error = est.reference_terms(ctx, stats.spectra.n_nodes, plan.channel).fc_error
        fit_x = with_fc_error(ttt_crossval._features(sp, c), fc_error)
        plan_x = est.features(ctx, plan, stats)
        assert set(fit_x) == set(plan_x) == set(PLAN_FEATURES)
        for name in PLAN_FEATURES:
            assert fit_x[name] == pytest.approx(plan_x[name], rel=1e-12, abs=1e-12), \
                (plan.label(), name)
    assert kinds >= {("ota", "dsgd"), ("digital", "dsgd"), ("digital", "gradient_tracking"),
                     ("ota", "push_sum"), ("ota", "matcha"), ("digital", "matcha"),
                     ("ota", "fedavg"), ("digital", "fedavg"), ("ota", "fedprox")}
    # the fully connected reference the estimator subtracts is the fit's reference run
    ref = est.reference_terms(ctx, sp.fc_candidate.stats.spectra.n_nodes,
                              sp.fc_candidate.plan.channel)
    fit_fc = with_fc_error(ttt_crossval._features(sp, sp.fc_candidate), ref.fc_error)
    for name in PLAN_FEATURES:
        assert fit_fc[name] == pytest.approx(ref.x_fc[name], rel=1e-6, abs=1e-9)
    # the digital quantiser of the model the workload trains (its dimension), not a default
    four = next(c for c in sp.candidates if c.plan.transport == "digital" and c.plan.bits == 4
                and c.plan.effective_algorithm == "dsgd")
    assert ttt_crossval._features(sp, four)["quant"] == pytest.approx(
        math.log1p(quantisation_omega(4, ctx.d)))


def test_the_fitted_range_records_transports_widths_and_algorithms(seed_plan):
    grid, sp = seed_plan
    m = SimpleNamespace(spec=grid.workloads[0], seeds={0: sp})
    rows = []
    for i, c in enumerate(list(sp.candidates) + [sp.fc_candidate]):
        x = ttt_crossval._features(sp, c)
        rows.append({"workload": "w", "plan": c.plan.label(), "seed": 0,
                     "family": c.plan.topology.family, "is_fc": c is sp.fc_candidate,
                     "x": x, "fc_row": {"dataset:digits": 1.0}, "log_t": 3.0 + 0.01 * i,
                     "censored": False, "final_accuracy": 0.9})
    ref = ttt_crossval.reference(ttt_crossval.fit(rows), [m], "test")
    r = ref["range"]
    assert r["transports"] == ["digital", "ota"] and r["bits"] == [4, 32]
    assert r["algorithms"] == sorted({"dsgd", "gradient_tracking", "push_sum", "matcha",
                                      "fedavg", "fedprox"})
    est = TimeToTargetEstimator(priors=ref["constants"], fitted_range=r)
    assert all(est.operators.fitted(c.plan) for c in sp.candidates)


def _quantiser_rows(bits_levels, d=4810, budget=60, workloads=6):
    """Synthetic runs of one plan per width on several workloads: the widths of 8 bits and more
    reach the target about when the exact plan does, coarser ones never within the budget
    (censored), as measured on digits."""
    rows = []
    for w in range(workloads):
        level = 3.0 + 0.1 * w
        for seed in range(3):
            noise = 0.05 * ((seed * 7 + w * 3) % 5 - 2)
            rows.append({"workload": f"w{w}", "plan": "fc", "seed": seed, "family": "complete",
                         "is_fc": True, "x": {}, "fc_row": {"dataset:digits": 1.0},
                         "log_t": level + noise, "censored": False, "final_accuracy": 0.93})
            for bits in bits_levels:
                quant = math.log1p(quantisation_omega(bits, d))
                reached = bits >= 8
                rows.append({"workload": f"w{w}", "plan": f"b{bits}", "seed": seed,
                             "family": "complete", "is_fc": False,
                             "x": {"quant": quant, "log_inv_p": 0.0},
                             "fc_row": {"dataset:digits": 1.0},
                             "log_t": (level + 0.1 + noise if reached else math.log(budget)),
                             "censored": not reached, "final_accuracy": 0.92 if reached
                             else 0.55})
    return rows


def test_a_refit_learns_that_coarse_quantisers_never_reach_the_target():
    budget = 60
    fits = ttt_crossval.fit(_quantiser_rows((2, 4, 8, 16, 32), budget=budget))
    plan, sd = fits["plan"], fits["joint"].sd
    assert plan.coef["quant"] > 0.5
    offset = fits["fc"].mean({"dataset:digits": 1.0})
    for bits, reachable in ((2, False), (4, False), (8, True), (16, True), (32, True)):
        x = {"quant": math.log1p(quantisation_omega(bits, 4810))}
        p = meets_probability(plan.mean(x, offset), sd, budget)
        assert (p >= 0.95) == reachable, (bits, p)


def test_a_fit_without_digital_runs_keeps_the_quantisers_prior():
    fits = ttt_crossval.fit(_quantiser_rows((32,)))
    # no run exercised the quantiser: its theory coefficient, not a fitted 0
    assert fits["plan"].coef["quant"] == 1.0


def test_a_barely_exercised_quantiser_keeps_its_theoretical_coefficient():
    """Runs of one fine width (a slowdown of about 0.01) cannot identify the quantiser's
    coefficient: the fit keeps it near the theory's 1 instead of shrinking it to 0, so a coarse
    quantiser is not called harmless."""
    import numpy as np

    from airplan_qo.costmodels.time_to_target import PLAN_FEATURES
    from airplan_qo.evaluation.ttt_crossval import fit

    rng = np.random.default_rng(0)
    rows = []
    for w in range(6):
        fc_row = {"zeta2": 0.1 * w, "log_n": 3.0, "noise": 0.0, "dropout": 0.0,
                  "dataset:digits": 1.0}
        base = 3.0 + 0.05 * w
        for seed in range(3):
            rows.append({"workload": f"w{w}", "is_fc": True, "fc_row": fc_row,
                         "x": {f: 0.0 for f in PLAN_FEATURES}, "log_t": base,
                         "censored": False, "final_accuracy": 0.9})
            for quant in (0.0, 0.01):
                x = {f: 0.0 for f in PLAN_FEATURES}
                x.update(quant=quant, log_inv_p=0.5 + 0.1 * seed)
                rows.append({"workload": f"w{w}", "is_fc": False, "fc_row": fc_row, "x": x,
                             "log_t": base + 0.3 * x["log_inv_p"] + rng.normal(0, 0.05),
                             "censored": False, "final_accuracy": 0.85})
    coef = fit(rows)["plan"].coef
    assert abs(coef["quant"] - 1.0) < 0.5
