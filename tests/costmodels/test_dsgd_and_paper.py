import math

import attrs

import pytest

from airplan_qo.costmodels import ESTIMATORS, EstimationContext
from airplan_qo.costmodels.dsgd import DSGDEstimator
from airplan_qo.costmodels.features import channel_noise, heterogeneity
from airplan_qo.costmodels.paper import PaperEstimator
from airplan_qo.plans.channel_config import ChannelConfig
from airplan_qo.plans.plan import PhysicalPlan, round_cost
from airplan_qo.plans.spectra import SpectralStats
from airplan_qo.plans.topology import TopologySpec, TopologyStats, describe


def _stats(p=0.5, n=50, edges=150, lam2=1.0, mean_degree=6.0, slots=10):
    spec = TopologySpec.create("small_world", n)
    gap = 1 - math.sqrt(1 - p)
    s = SpectralStats(n_nodes=n, n_edges=edges, max_degree=8, mean_degree=mean_degree,
                      lambda2_laplacian=lam2, lambda2_normalized=lam2 / 8, mixing_rho=1 - gap,
                      mixing_gap=gap, mixing_p=p, method="test")
    return TopologyStats(spec, s, slots, 9, 0.0)


def _ctx(est, **over):
    base = dict(n_classes=10, d=10_000, alpha=0.5, alpha_source="test", round_budget=200,
                constants=dict(est.priors))
    base.update(over)
    return EstimationContext(**base)


def _plan(k=1.0, snr=10.0, kind="ota", g_th=0.1):
    return PhysicalPlan(TopologySpec.create("small_world", 50), k,
                        ChannelConfig(kind=kind, snr_db=snr, g_th=g_th))


def test_registry_has_both_and_suggests():
    assert {"dsgd", "paper"} <= set(ESTIMATORS.names())
    with pytest.raises(Exception, match="did you mean 'paper'"):
        ESTIMATORS.get("papr")


def test_paper_matches_hand_calculation():
    est = PaperEstimator()
    ctx = _ctx(est)
    stats = _stats(lam2=2.5, edges=150)
    plan = _plan(k=0.1, snr=10.0)
    t = est.terms(ctx, plan, stats)
    kappa, a_r, b_r = 220.0, 1.0, 0.2
    t_g = kappa / 2.5
    r = 1 + a_r * math.exp(-b_r * 10.0)
    c_struct = 2 * 150 * math.ceil(0.1 * 10_000)
    assert t["t_g"] == pytest.approx(t_g)
    assert t["reliability"] == pytest.approx(r)
    assert t["c_struct"] == pytest.approx(c_struct)
    assert t["c_ours"] == pytest.approx(t_g * r * c_struct)
    assert t["eps_eff"] == pytest.approx(math.sqrt(0.9) / 3.0)
    e = est.estimate(ctx, plan, stats, target_accuracy=0.5)
    assert e.rounds == math.ceil(t_g * r)
    assert e.model_term == pytest.approx(1 / 2.5)


def test_paper_eps_eff_constraint_reported():
    est = PaperEstimator()
    e = est.estimate(_ctx(est), _plan(k=0.01), _stats(lam2=0.01), target_accuracy=0.1)
    assert dict(e.extra_constraints)["eps_eff"] is (math.sqrt(0.99) / 0.51 <= 1.0)


@pytest.mark.parametrize("k", [1.0, 0.1])
def test_dsgd_monotone_in_p(k):
    est = DSGDEstimator()
    ctx = _ctx(est)
    rounds = [est.estimate(ctx, _plan(k=k), _stats(p=p), 0.85).rounds
              for p in (0.2, 0.4, 0.6, 0.8, 1.0)]
    assert all(r is not None for r in rounds)
    assert rounds == sorted(rounds, reverse=True)
    accs = [est.accuracy_at(ctx, _plan(k=k), _stats(p=p), 100) for p in (0.2, 0.5, 1.0)]
    assert accs == sorted(accs)


def test_dsgd_monotone_in_snr():
    est = DSGDEstimator()
    ctx = _ctx(est)
    accs = [est.accuracy_at(ctx, _plan(snr=s), _stats(p=0.3), 100) for s in (0, 5, 10, 20)]
    assert accs == sorted(accs) and accs[0] < accs[-1]
    floors = [est.terms(ctx, _plan(snr=s), _stats(p=0.3))["error_floor"] for s in (0, 10, 20)]
    assert floors == sorted(floors, reverse=True)
    ideal = est.terms(ctx, _plan(kind="ideal"), _stats(p=0.3))
    assert ideal["sigma_c2"] == 0.0


def test_dsgd_never_above_floor():
    est = DSGDEstimator()
    ctx = _ctx(est)
    stats = _stats(p=0.01)
    floor = est.terms(ctx, _plan(), stats)["error_floor"]
    never = est.estimate(ctx, _plan(), stats, target_accuracy=1 - floor + 1e-3)
    assert never.rounds is None and never.model_term is None
    reach = est.estimate(ctx, _plan(), stats, target_accuracy=1 - floor - 0.05)
    assert reach.rounds is not None and reach.rounds >= 1
    assert reach.rounds_lo < reach.rounds < reach.rounds_hi


def test_dsgd_heterogeneity_hurts():
    est = DSGDEstimator()
    iid = est.terms(_ctx(est, alpha=math.inf), _plan(), _stats(p=0.1))["error_floor"]
    skew = est.terms(_ctx(est, alpha=0.1), _plan(), _stats(p=0.1))["error_floor"]
    assert skew > iid
    assert heterogeneity(math.inf, 10) == 0
    assert heterogeneity(1e-9, 10) == pytest.approx(0.9, rel=1e-6)


def test_channel_noise_formula_by_monte_carlo():
    import numpy as np

    plan = _plan(snr=10.0, g_th=0.2)
    stats = _stats(mean_degree=4.0)
    rng = np.random.default_rng(0)
    m = 4.0 * math.exp(-0.2)
    x = 0.2 + rng.exponential(1 / m, size=400_000)
    mc = np.mean(1 / x) / (2 * 10.0) / 5.0 ** 2         # W_ij^2 ~ 1 / (degree + 1)^2
    assert channel_noise(plan, stats) == pytest.approx(mc, rel=0.02)


def test_calibration_ids_recorded():
    est = DSGDEstimator()
    e = est.estimate(_ctx(est, calibration_ids=(3, 7)), _plan(), _stats(), 0.8)
    assert e.calibration_ids == (3, 7)


def test_round_cost_arithmetic():
    _, st = describe(TopologySpec.create("ring", 10))
    plan = PhysicalPlan(st.spec, 0.1, ChannelConfig(snr_db=10, g_th=0.1, tx_power_dbm=30,
                                                    bandwidth_hz=1e6))
    rc = round_cost(plan, st, d=1001)
    coords = math.ceil(0.1 * 1001)  # 101
    assert rc.coords == coords
    # nothing is re-sent; a slot costs nothing only when all its receivers are silent
    a = math.exp(-0.1)
    live = 1 - ((1 - a) ** 2) ** (10 / st.slots_per_round)
    assert rc.channel_uses == pytest.approx(st.slots_per_round * math.ceil(coords / 2) * live)
    assert rc.airtime_s == pytest.approx(rc.channel_uses / 1e6)
    symbols = 2 * 10 * a * math.ceil(coords / 2)
    assert rc.energy_j == pytest.approx(1.0 * 1e-6 * symbols)
    # with dropout a link needs both ends online
    drop = round_cost(attrs.evolve(plan, channel=attrs.evolve(plan.channel, dropout=0.2)),
                      st, d=1001)
    assert drop.energy_j == pytest.approx(1e-6 * symbols * 0.8 ** 2)
    # bits: delivered links only; the shared rand-k mask needs no index bits, top-k does
    assert rc.bits == pytest.approx(2 * 10 * a * coords * 32)
    topk = round_cost(attrs.evolve(plan, mask="topk"), st, d=1001)
    assert topk.bits == pytest.approx(2 * 10 * a * coords * (32 + math.ceil(math.log2(1001))))
    dense = round_cost(attrs.evolve(plan, k_ratio=1.0), st, d=1001)
    assert dense.channel_uses == pytest.approx(st.slots_per_round * math.ceil(1001 / 2) * live)


def test_p_random_is_p_without_losses_and_per_topology_under_dropout():
    """p_eff uses p of the random mixing matrix (dropout and truncation), not a common factor."""
    from airplan_qo.costmodels.features import approximate_survival_factor, survival_factor

    est = DSGDEstimator()
    ctx = _ctx(est)
    ideal = PhysicalPlan(TopologySpec.create("small_world", 50), 1.0, ChannelConfig(kind="ideal"))
    t = est.terms(ctx, ideal, _stats(p=0.4))
    assert t["p_random"] == pytest.approx(0.4) and t["p_eff"] == pytest.approx(0.4)
    factors = {}
    for fam in ("ring", "small_world", "complete"):
        topo, stats = describe(TopologySpec.create(fam, 30))
        plan = PhysicalPlan(topo.spec, 1.0, ChannelConfig(g_th=0.1, dropout=0.2))
        factors[fam] = survival_factor(plan, stats)
        s = stats.spectra
        approx = approximate_survival_factor(s.mixing_gap, s.mean_degree, 0.2, math.exp(-0.1))
        assert approx == pytest.approx(factors[fam], rel=0.06)
        t = est.terms(ctx, plan, stats)
        assert t["p_random"] == pytest.approx(s.mixing_p * factors[fam])
    # sparse graphs with large edge weights lose more than dense ones
    assert factors["ring"] < factors["small_world"] < factors["complete"]
    assert factors["complete"] < 1.0
