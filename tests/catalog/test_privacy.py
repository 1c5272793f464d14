"""Gaussian mechanism for sketches: closed form vs integration, calibration, composition, refs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from airplan_qo.catalog.privacy import (
    GaussianAccountant,
    calibrate_sigma,
    calibrate_sketch_sigma,
    choose_release,
    classical_gaussian_sigma,
    compose_sigmas,
    gaussian_delta,
    gaussian_epsilon,
    histogram_sensitivity,
    label_release,
    paper_epsilon,
    privatize_sketch,
    release_generator,
    sketch_sensitivity,
)
from airplan_qo.catalog.sketch import CountMinSketch
from airplan_qo.errors import ValidationError


def delta_by_integration(epsilon, sigma, sensitivity):
    """delta(eps) = E_{x~N(0,s^2)}[max(0, 1 - exp(eps - L(x)))], L the Gaussian privacy loss.

    Neighbouring outputs are N(0, s^2) and N(D, s^2); L(x) = (D^2 - 2 x D) / (2 s^2) exceeds eps
    exactly for x < x_star, so the positive part is integrated over (-inf, x_star).
    """
    def loss(x):
        return (sensitivity ** 2 - 2.0 * x * sensitivity) / (2.0 * sigma ** 2)

    x_star = (sensitivity ** 2 / 2.0 - epsilon * sigma ** 2) / sensitivity

    def integrand(x):
        return stats.norm.pdf(x, scale=sigma) * -math.expm1(epsilon - loss(x))

    value, _ = integrate.quad(integrand, -np.inf, x_star, epsabs=0, epsrel=1e-11, limit=200)
    return value


@pytest.mark.parametrize("epsilon, sigma, sensitivity", [
    (0.5, 1.0, 1.0), (1.0, 2.0, 1.0), (2.0, 0.7, 1.0), (0.1, 5.0, 1.0), (3.0, 1.0, math.sqrt(5)),
    (1.0, 8.34, math.sqrt(5)), (0.0, 1.0, 1.0), (6.0, 0.5, 1.0),
])
def test_closed_form_matches_privacy_loss_integration(epsilon, sigma, sensitivity):
    expected = delta_by_integration(epsilon, sigma, sensitivity)
    assert gaussian_delta(epsilon, sigma, sensitivity) == pytest.approx(expected, rel=1e-7)


def test_delta_at_zero_is_total_variation():
    mu = 0.8
    assert gaussian_delta(0.0, 1.0 / mu) == pytest.approx(2 * stats.norm.cdf(mu / 2) - 1, rel=1e-12)


def test_depends_only_on_sensitivity_over_sigma():
    assert gaussian_delta(1.0, 3.0, 2.0) == pytest.approx(gaussian_delta(1.0, 1.5, 1.0), rel=1e-12)
    assert gaussian_epsilon(1e-5, 3.0, 2.0) == pytest.approx(gaussian_epsilon(1e-5, 1.5), rel=1e-10)


def test_large_epsilon_is_finite():
    d = gaussian_delta(400.0, 0.05)
    assert 0.0 < d < 1e-10 and math.isfinite(d)
    assert gaussian_delta(2000.0, 1.0) == 0.0  # underflows to 0 cleanly, no nan
    eps = gaussian_epsilon(1e-12, 0.01)
    assert math.isfinite(eps) and eps > 1000
    assert gaussian_delta(eps, 0.01) == pytest.approx(1e-12, rel=1e-6)


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 4.0, 20.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_calibrate_sigma_inverts_gaussian_epsilon(epsilon, delta):
    sigma = calibrate_sigma(epsilon, delta)
    assert gaussian_delta(epsilon, sigma) <= delta * (1 + 1e-9)
    assert gaussian_delta(epsilon, sigma * (1 - 1e-6)) > delta  # smallest such sigma
    assert gaussian_epsilon(delta, sigma) == pytest.approx(epsilon, rel=1e-8)
    assert calibrate_sigma(epsilon, delta, 3.0) == pytest.approx(3.0 * sigma, rel=1e-10)


def test_analytic_beats_classical_calibration():
    for eps in (0.1, 0.5, 0.9):
        assert calibrate_sigma(eps, 1e-5) < classical_gaussian_sigma(eps, 1e-5)
    with pytest.raises(ValidationError, match="epsilon < 1"):
        classical_gaussian_sigma(2.0, 1e-5)


def test_monotonicity():
    sigmas = np.geomspace(0.1, 15, 25)
    deltas = [gaussian_delta(1.0, s) for s in sigmas]
    assert np.all(np.diff(deltas) < 0)
    epsilons = [gaussian_epsilon(1e-5, s) for s in sigmas]
    assert np.all(np.diff(epsilons) < 0)
    by_eps = [gaussian_delta(e, 2.0) for e in np.linspace(0, 5, 21)]
    assert np.all(np.diff(by_eps) < 0)
    by_delta = [gaussian_epsilon(d, 2.0) for d in (1e-9, 1e-7, 1e-5, 1e-3, 1e-1)]
    assert np.all(np.diff(by_delta) < 0)
    cal = [calibrate_sigma(e, 1e-5) for e in (0.1, 0.5, 1, 2, 8)]
    assert np.all(np.diff(cal) < 0)


def test_epsilon_zero_when_delta_already_met():
    assert gaussian_epsilon(0.5, 100.0) == 0.0


# ---- composition --------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 5, 50])
def test_k_equal_releases_equal_one_at_sigma_over_sqrt_k(k):
    sigma = 4.0
    assert compose_sigmas([sigma] * k) == pytest.approx(sigma / math.sqrt(k), rel=1e-12)
    acc = GaussianAccountant(1e-5).record(sigma, count=k)
    assert acc.effective_sigma() == pytest.approx(sigma / math.sqrt(k), rel=1e-12)
    assert acc.epsilon() == pytest.approx(gaussian_epsilon(1e-5, sigma / math.sqrt(k)), rel=1e-12)
    assert acc.spent() == (acc.epsilon(), 1e-5)


def test_accountant_mixed_releases():
    acc = GaussianAccountant(1e-6)
    assert acc.epsilon() == 0.0 and acc.delta(1.0) == 0.0 and acc.effective_sigma() == math.inf
    acc2 = acc.record(2.0).record(3.0, sensitivity=math.sqrt(5)).record(6.0)
    assert acc.releases == ()  # records return new accountants
    assert len(acc2.releases) == 3
    mu = math.sqrt((1 / 2) ** 2 + (math.sqrt(5) / 3) ** 2 + (1 / 6) ** 2)
    assert acc2.mu == pytest.approx(mu, rel=1e-12)
    assert acc2.epsilon() == pytest.approx(gaussian_epsilon(1e-6, 1 / mu), rel=1e-12)
    assert acc2.delta(acc2.epsilon()) == pytest.approx(1e-6, rel=1e-6)
    same_sens = GaussianAccountant(1e-6).record(2.0).record(6.0)
    assert same_sens.effective_sigma() == pytest.approx(compose_sigmas([2.0, 6.0]), rel=1e-12)


# Reference values from Google's dp-accounting 0.6.0 PLD accountant
# (pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-5), composing
# dp_event.GaussianDpEvent(noise_multiplier=sigma) K times, then get_epsilon(delta)).
DP_ACCOUNTING_PLD = [
    # (sigma, K, delta, epsilon)
    (1.0, 1, 1e-5, 4.377178095869925),
    (2.0, 5, 1e-5, 4.983306406190732),
    (5.0, 10, 1e-6, 2.921600590497392),
    (0.8, 3, 1e-3, 8.418376394556383),
    (10.0, 100, 1e-5, 4.377178095869925),
]


@pytest.mark.parametrize("sigma, k, delta, reference", DP_ACCOUNTING_PLD)
def test_agrees_with_dp_accounting_pld(sigma, k, delta, reference):
    ours = GaussianAccountant(delta).record(sigma, count=k).epsilon()
    assert ours == pytest.approx(reference, rel=1e-6)
    assert ours <= reference * (1 + 1e-9)  # PLD discretisation is pessimistic, never tighter


def test_dp_accounting_calibration_reference():
    # dp-accounting 0.6.0: one Gaussian release at sigma = calibrate_sigma(1, 1e-5) = 3.7306316...
    # gives epsilon 0.9999999999934298 at delta 1e-5.
    assert calibrate_sigma(1.0, 1e-5) == pytest.approx(3.730631634816428, rel=1e-9)


# ---- sketches -----------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 5, 12])
def test_sketch_sensitivity_is_sqrt_depth_by_brute_force(depth):
    rng = np.random.default_rng(depth)
    base = rng.integers(0, 50, size=300)
    s = CountMinSketch(depth, 55, 3).update(base)
    for key in range(0, 200, 7):
        added = s.copy().update([key])
        diff = (added.counts - s.counts).astype(float)
        assert np.linalg.norm(diff) == pytest.approx(sketch_sensitivity(depth))
        swapped = s.copy().update([key])
        gone = np.array(swapped.counts)
        gone[np.arange(depth), swapped.columns([base[0]])[:, 0]] -= 1  # replace base[0] by key
        assert np.linalg.norm((gone - s.counts).astype(float)) <= \
            sketch_sensitivity(depth, replace_one=True) + 1e-12
    assert sketch_sensitivity(5) == pytest.approx(math.sqrt(5))
    assert calibrate_sketch_sigma(1.0, 1e-5, 5) == pytest.approx(
        calibrate_sigma(1.0, 1e-5, math.sqrt(5)), rel=1e-12)


def test_privatize_sketch_arrays_and_sketches():
    counts = np.zeros((200, 500), dtype=np.int64)
    noisy = privatize_sketch(counts, 3.0)
    assert noisy.dtype == np.int64 and noisy.shape == counts.shape
    # rounded N(0, 9): std sqrt(9 + 1/12) and mean 0, within ~5 standard errors
    assert np.std(noisy) == pytest.approx(math.sqrt(9 + 1 / 12), abs=5 * 3 / math.sqrt(2e5))
    assert abs(np.mean(noisy)) < 5 * 3 / math.sqrt(1e5)
    # the exact law of a rounded N(0, 9): P(k) = Phi((k + 1/2)/3) - Phi((k - 1/2)/3)
    edges = np.arange(-12.5, 13.0)
    observed = np.histogram(noisy, bins=np.concatenate([[-np.inf], edges, [np.inf]]))[0]
    expected = np.diff(stats.norm.cdf(np.concatenate([[-np.inf], edges, [np.inf]]), scale=3.0))
    assert stats.chisquare(observed, expected * noisy.size).pvalue > 1e-6
    # every call draws fresh noise: two releases of the same cells are independent
    again = privatize_sketch(counts, 3.0)
    assert (noisy != again).mean() > 0.8
    assert abs(np.corrcoef(noisy.ravel(), again.ravel())[0, 1]) < 5 / math.sqrt(noisy.size)
    # a caller-supplied Generator is for simulations only
    sim = privatize_sketch(counts, 3.0, np.random.default_rng(0))
    np.testing.assert_array_equal(sim, privatize_sketch(counts, 3.0, np.random.default_rng(0)))
    s = CountMinSketch(5, 55, 2).update(np.arange(30))
    ns = privatize_sketch(s, 2.0)
    assert isinstance(ns, CountMinSketch) and (ns.depth, ns.width, ns.seed) == (5, 55, 2)
    assert s.total == 30 and not np.array_equal(ns.counts, s.counts)


def test_release_generator_is_seeded_from_os_entropy():
    a, b = release_generator(), release_generator()
    assert a.bit_generator.state != b.bit_generator.state
    draws = [release_generator().integers(0, 2**63) for _ in range(50)]
    assert len(set(draws)) == 50


@pytest.mark.parametrize("seed", [0, 7, np.int64(3), "seed"])
def test_privatize_refuses_seeds(seed):
    with pytest.raises(ValidationError, match="rng must be None"):
        privatize_sketch(np.zeros(3), 1.0, seed)


# ---- histogram or sketch ------------------------------------------------------------------------

def test_histogram_sensitivity_by_brute_force():
    base = np.bincount(np.random.default_rng(0).integers(0, 10, 300), minlength=10)
    for c in range(10):
        added = base.copy()
        added[c] += 1
        assert np.linalg.norm(added - base) == histogram_sensitivity()
        for d in range(10):
            moved = base.copy()
            moved[c] += 1
            moved[d] -= 1
            assert np.linalg.norm(moved - base) <= histogram_sensitivity(replace_one=True) + 1e-12


def test_choice_picks_the_histogram_for_10_classes_and_the_sketch_for_1000():
    few = choose_release(10, 5, 55, 1.0, 1e-5)
    assert (few.kind, few.depth, few.width, few.sensitivity) == ("histogram", 1, 10, 1.0)
    assert few.sigma == pytest.approx(3.730631634816428, rel=1e-9)  # dp-accounting reference
    many = choose_release(1000, 5, 55, 1.0, 1e-5)
    assert (many.kind, many.depth, many.width) == ("count_min", 5, 55)
    assert many.sensitivity == pytest.approx(math.sqrt(5))
    assert many.sigma == pytest.approx(calibrate_sketch_sigma(1.0, 1e-5, 5), rel=1e-12)
    # the sketch's best per-count noise (mean of its 5 cells) ties the histogram's
    assert many.count_variance == pytest.approx(few.count_variance, rel=1e-12)
    assert few.cells == 10 and many.cells == 275
    # the size decides: up to 5 x 55 = 275 classes a histogram is no larger
    assert choose_release(275, 5, 55, 1.0, 1e-5).kind == "histogram"
    assert choose_release(276, 5, 55, 1.0, 1e-5).kind == "count_min"
    # without privacy the exact histogram wins the same way
    exact = choose_release(10, 5, 55)
    assert exact.kind == "histogram" and exact.sigma == 0.0
    assert choose_release(1000, 5, 55).kind == "count_min"


def test_label_release_calibrates_each_kind():
    hist = label_release("histogram", 10, 5, 55, 0.5, 1e-6)
    sketch = label_release("count_min", 10, 5, 55, 0.5, 1e-6)
    assert hist.sigma == pytest.approx(calibrate_sigma(0.5, 1e-6, 1.0), rel=1e-12)
    assert sketch.sigma == pytest.approx(calibrate_sigma(0.5, 1e-6, math.sqrt(5)), rel=1e-12)
    assert gaussian_epsilon(1e-6, hist.sigma, hist.sensitivity) == pytest.approx(0.5, rel=1e-8)
    assert gaussian_epsilon(1e-6, sketch.sigma, sketch.sensitivity) == pytest.approx(0.5,
                                                                                   rel=1e-8)
    with pytest.raises(ValidationError, match="release kind"):
        label_release("bloom", 10, 5, 55)
    with pytest.raises(ValidationError, match="n_classes"):
        label_release("histogram", 0, 5, 55)
    with pytest.raises(ValidationError, match="without delta"):
        label_release("histogram", 10, 5, 55, 1.0)


def test_paper_formula_is_reproduced_and_labelled():
    # The paper's remark: eps_s = 0.01, delta_s = 1e-5, sigma_c = 0.1, n_min = 500.
    value = paper_epsilon(0.01, 1e-5, 0.1, 500)
    assert value == pytest.approx(0.01 * math.sqrt(2 * math.log(1.25e5)) / 50, rel=1e-12)
    assert value == pytest.approx(9.6896e-4, rel=1e-4)
    assert "claim" in paper_epsilon.__doc__


# ---- bad inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda: calibrate_sigma(0.0, 1e-5), "epsilon"),
    (lambda: calibrate_sigma(-1.0, 1e-5), "epsilon"),
    (lambda: calibrate_sigma(1.0, 0.0), "delta"),
    (lambda: calibrate_sigma(1.0, 1.0), "delta"),
    (lambda: calibrate_sigma(1.0, 1e-5, 0.0), "sensitivity"),
    (lambda: calibrate_sigma(float("inf"), 1e-5), "epsilon"),
    (lambda: gaussian_delta(-0.1, 1.0), "epsilon"),
    (lambda: gaussian_delta(1.0, 0.0), "sigma"),
    (lambda: gaussian_delta(1.0, -2.0), "sigma"),
    (lambda: gaussian_delta(1.0, float("nan")), "sigma"),
    (lambda: gaussian_epsilon(1.5, 1.0), "delta"),
    (lambda: gaussian_epsilon(1e-5, 0.0), "sigma"),
    (lambda: gaussian_epsilon("x", 1.0), "delta"),
    (lambda: compose_sigmas([1.0, 0.0]), "sigma"),
    (lambda: compose_sigmas([]), "sigmas"),
    (lambda: GaussianAccountant(0.0), "target_delta"),
    (lambda: GaussianAccountant(1e-5).record(-1.0), "sigma"),
    (lambda: GaussianAccountant(1e-5).record(1.0, count=0), "count"),
    (lambda: GaussianAccountant(1e-5).epsilon(2.0), "delta"),
    (lambda: privatize_sketch(np.zeros(3), 0.0), "sigma"),
    (lambda: privatize_sketch(np.zeros(3), 1.0, "seed"), "rng"),
    (lambda: sketch_sensitivity(0), "depth"),
    (lambda: paper_epsilon(0.01, 1e-5, 0.0, 500), "sigma_c"),
])
def test_bad_inputs(call, name):
    with pytest.raises(ValidationError, match=name):
        call()
