"""Differential privacy for released label counts: Gaussian noise, exact accounting.

A client releases its labels either as an exact class histogram or as a Count-Min sketch
(:func:`choose_release` picks the cheaper). Adding or removing one record changes one histogram
cell by 1 (L2 sensitivity 1) and one cell per row of a depth-``r`` sketch (``sqrt(r)``); under
replace-one adjacency these are ``sqrt(2)`` and ``sqrt(2 r)``. A release adds N(0, sigma^2) to
every cell, drawn from a generator seeded with fresh OS entropy (:func:`release_generator`) so
nothing stored anywhere reproduces the noise. For the Gaussian mechanism the whole
(epsilon, delta) curve has a closed form (Balle & Wang 2018, "analytic Gaussian mechanism"); it
depends only on ``mu = sensitivity/sigma``, and K Gaussian releases compose exactly into one
with ``mu = sqrt(sum mu_i^2)`` (Gaussian DP, Dong, Roth & Su 2019). Rounding or any other
post-processing of a release costs no privacy.

Channel noise of an over-the-air round is not a DP mechanism by itself (its scale depends on fading
and power control, is not calibrated to any sensitivity, and the receiver may know it), so no
privacy is credited to it here. :func:`paper_epsilon` reproduces the paper's claim for comparison.
"""

from __future__ import annotations

import math
import secrets

import attrs
import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

from ..errors import ValidationError
from .schema import COUNT_MIN, HISTOGRAM, RELEASE_KINDS
from .sketch import CountMinSketch

__all__ = [
    "COUNT_MIN",
    "HISTOGRAM",
    "RELEASE_KINDS",
    "sketch_sensitivity",
    "histogram_sensitivity",
    "LabelRelease",
    "label_release",
    "choose_release",
    "gaussian_delta",
    "gaussian_epsilon",
    "calibrate_sigma",
    "calibrate_sketch_sigma",
    "compose_sigmas",
    "GaussianAccountant",
    "release_generator",
    "privatize_sketch",
    "classical_gaussian_sigma",
    "paper_epsilon",
]


# ---- validation ---------------------------------------------------------------------------------

def _number(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise ValidationError(f"{name} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValidationError(f"{name} must be finite, got {value!r}")
    return x


def _positive(name: str, value) -> float:
    x = _number(name, value)
    if x <= 0:
        raise ValidationError(f"{name} must be > 0, got {value!r}")
    return x


def _non_negative(name: str, value) -> float:
    x = _number(name, value)
    if x < 0:
        raise ValidationError(f"{name} must be >= 0, got {value!r}")
    return x


def _unit_open(name: str, value) -> float:
    x = _number(name, value)
    if not (0.0 < x < 1.0):
        raise ValidationError(f"{name} must be in (0, 1), got {value!r}")
    return x


# ---- the Gaussian mechanism ---------------------------------------------------------------------

def sketch_sensitivity(depth: int, *, replace_one: bool = False) -> float:
    """L2 sensitivity of a depth-``depth`` Count-Min sketch to one record: sqrt(depth).

    Add/remove adjacency changes one cell per row by 1; replace-one changes two, giving
    sqrt(2 * depth). Weighted updates scale it by the largest weight one record may carry.
    """
    if isinstance(depth, (bool, np.bool_)) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValidationError(f"depth must be a positive integer, got {depth!r}")
    return math.sqrt((2 if replace_one else 1) * int(depth))


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x <= 0, accurate near 0 and for very negative x."""
    if x >= 0:
        return -math.inf
    if x > -math.log(2.0):
        return math.log(-math.expm1(x))
    return math.log1p(-math.exp(x))


def _log_delta(epsilon: float, mu: float) -> float:
    """log delta(epsilon) of the Gaussian mechanism with mu = sensitivity / sigma."""
    a = mu / 2.0 - epsilon / mu
    b = -mu / 2.0 - epsilon / mu
    la = float(log_ndtr(a))
    lb = epsilon + float(log_ndtr(b))
    if not math.isfinite(la):
        return -math.inf
    return la + _log1mexp(lb - la)


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8).

    delta = Phi(D/(2s) - e s/D) - exp(e) Phi(-D/(2s) - e s/D) for epsilon e >= 0, noise s and
    sensitivity D; evaluated in log space so large epsilon does not overflow.
    """
    epsilon = _non_negative("epsilon", epsilon)
    sigma = _positive("sigma", sigma)
    sensitivity = _positive("sensitivity", sensitivity)
    return math.exp(_log_delta(epsilon, sensitivity / sigma))


def _epsilon_for_mu(delta: float, mu: float) -> float:
    target = math.log(delta)
    if _log_delta(0.0, mu) <= target:
        return 0.0
    hi = 1.0
    while _log_delta(hi, mu) > target:
        hi *= 2.0
    lo = hi / 2.0 if hi > 1.0 else 0.0
    return brentq(lambda e: _log_delta(e, mu) - target, lo, hi, xtol=1e-14, rtol=1e-13)


def gaussian_epsilon(delta: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Smallest epsilon >= 0 with delta(epsilon) <= ``delta`` for the Gaussian mechanism."""
    delta = _unit_open("delta", delta)
    sigma = _positive("sigma", sigma)
    sensitivity = _positive("sensitivity", sensitivity)
    return _epsilon_for_mu(delta, sensitivity / sigma)


def calibrate_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise sigma for which the Gaussian mechanism is (epsilon, delta)-DP.

    delta(epsilon) increases with mu = sensitivity / sigma, so the largest admissible mu is found
    by bracketing and root finding on log mu.
    """
    epsilon = _positive("epsilon", epsilon)
    delta = _unit_open("delta", delta)
    sensitivity = _positive("sensitivity", sensitivity)
    target = math.log(delta)

    def g(t: float) -> float:
        # clamp log(0) so the root finder only ever sees finite values
        return max(_log_delta(epsilon, math.exp(t)), -1e300) - target

    lo, hi = -1.0, 1.0
    while g(lo) > 0:
        lo -= 2.0
    while g(hi) <= 0:
        hi += 2.0
    t = brentq(g, lo, hi, xtol=1e-14, rtol=1e-14)
    while g(t) > 0:  # land on the feasible side of the root
        t -= 1e-13 * max(1.0, abs(t))
    return sensitivity / math.exp(t)


def calibrate_sketch_sigma(epsilon: float, delta: float, depth: int) -> float:
    """Noise per cell making one release of a depth-``depth`` sketch (epsilon, delta)-DP."""
    return calibrate_sigma(epsilon, delta, sketch_sensitivity(depth))


def histogram_sensitivity(*, replace_one: bool = False) -> float:
    """L2 sensitivity of an exact class histogram to one record: 1 (sqrt(2) under replace-one).

    Adding or removing a record changes its class's cell by 1; replacing it moves 1 from one
    class to another.
    """
    return math.sqrt(2.0) if replace_one else 1.0


@attrs.frozen
class LabelRelease:
    """How each client releases its label counts: kind, shape, sensitivity and noise.

    ``depth x width`` cells per client (``1 x n_classes`` for a histogram); ``sigma`` is the noise
    standard deviation per cell, 0.0 for an exact (non-private) release.
    """

    kind: str
    depth: int
    width: int
    sensitivity: float
    sigma: float

    @property
    def cells(self) -> int:
        """Cells one client sends."""
        return self.depth * self.width

    @property
    def count_variance(self) -> float:
        """Noise variance of one class count estimated from the release, at best.

        A histogram releases each count once (``sigma^2``). A sketch holds each class in one
        cell per row; the best estimate from ``depth`` independently noised cells is their mean
        (``sigma^2 / depth``), and hash collisions only add to that.
        """
        return self.sigma ** 2 / self.depth


def label_release(kind: str, n_classes: int, depth: int, width: int,
                  epsilon: float | None = None, delta: float | None = None) -> LabelRelease:
    """The release of ``kind`` for ``n_classes`` labels; noised for (epsilon, delta) if given.

    ``depth x width`` are the Count-Min dimensions (used by ``count_min`` only). Add/remove
    adjacency: sensitivity ``sqrt(depth)`` for a sketch, 1 for a histogram.
    """
    if kind not in RELEASE_KINDS:
        raise ValidationError(f"release kind must be one of {', '.join(RELEASE_KINDS)}, "
                              f"got {kind!r}")
    for name, value in (("n_classes", n_classes), ("depth", depth), ("width", width)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or value < 1:
            raise ValidationError(f"{name} must be a positive integer, got {value!r}")
    if kind == HISTOGRAM:
        shape, sens = (1, int(n_classes)), histogram_sensitivity()
    else:
        shape, sens = (int(depth), int(width)), sketch_sensitivity(int(depth))
    if epsilon is None:
        if delta is not None:
            raise ValidationError("delta given without epsilon: a private release needs both")
        sigma = 0.0
    else:
        if delta is None:
            raise ValidationError("epsilon given without delta: a private release needs both")
        sigma = calibrate_sigma(epsilon, delta, sens)
    return LabelRelease(kind, shape[0], shape[1], sens, sigma)


def choose_release(n_classes: int, depth: int, width: int, epsilon: float | None = None,
                   delta: float | None = None) -> LabelRelease:
    """The cheaper way to release ``n_classes`` labels: exact histogram or ``depth x width`` sketch.

    The histogram is chosen when it is at least as good on both counts: no more cells than the
    sketch and no more noise variance per class count (:attr:`LabelRelease.count_variance`).
    Under add/remove adjacency the noise per count ties (``sigma_sketch^2 / depth`` equals
    ``sigma_histogram^2``, since sigma scales with the sensitivity) and the histogram has no
    hash collisions, so the size decides: a histogram for ``n_classes <= depth * width`` (275
    for the default 5 x 55 sketch), a sketch above. Without privacy the same rule applies.
    """
    hist = label_release(HISTOGRAM, n_classes, depth, width, epsilon, delta)
    sketch = label_release(COUNT_MIN, n_classes, depth, width, epsilon, delta)
    # sigma is linear in the sensitivity, so the tie is exact up to the last bits of a double
    no_noisier = hist.count_variance <= sketch.count_variance * (1.0 + 1e-12)
    return hist if hist.cells <= sketch.cells and no_noisier else sketch


def compose_sigmas(sigmas) -> float:
    """Effective sigma of K Gaussian releases with the same sensitivity: (sum s_i^-2)^(-1/2)."""
    arr = np.atleast_1d(np.asarray(sigmas, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValidationError("sigmas must be a non-empty 1-D sequence")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValidationError(f"every sigma must be finite and > 0, got {sigmas!r}")
    return float(np.sum(arr ** -2.0) ** -0.5)


@attrs.frozen
class GaussianAccountant:
    """Exact privacy ledger for Gaussian releases without subsampling.

    Each release is ``(sigma, sensitivity)``; together they are one Gaussian mechanism with
    ``mu = sqrt(sum (sensitivity_i / sigma_i)^2)``, whose curve gives the cumulative epsilon at
    ``target_delta``. ``record`` returns a new accountant.
    """

    target_delta: float = attrs.field(converter=float)
    releases: tuple[tuple[float, float], ...] = attrs.field(default=(), converter=tuple)

    @target_delta.validator
    def _check_delta(self, attribute, value):
        _unit_open("target_delta", value)

    @releases.validator
    def _check_releases(self, attribute, value):
        for item in value:
            if len(item) != 2:
                raise ValidationError(f"a release is (sigma, sensitivity), got {item!r}")
            _positive("sigma", item[0])
            _positive("sensitivity", item[1])

    def record(self, sigma: float, *, sensitivity: float = 1.0,
               count: int = 1) -> GaussianAccountant:
        """Accountant with ``count`` more releases at noise ``sigma`` and ``sensitivity``."""
        sigma = _positive("sigma", sigma)
        sensitivity = _positive("sensitivity", sensitivity)
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)) \
                or count < 1:
            raise ValidationError(f"count must be a positive integer, got {count!r}")
        return attrs.evolve(self, releases=self.releases + ((sigma, sensitivity),) * int(count))

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter of all releases together (0 when nothing was released)."""
        return math.sqrt(sum((d / s) ** 2 for s, d in self.releases))

    def effective_sigma(self, sensitivity: float = 1.0) -> float:
        """Noise of the single equivalent release at ``sensitivity`` (inf when nothing released)."""
        sensitivity = _positive("sensitivity", sensitivity)
        mu = self.mu
        return math.inf if mu == 0 else sensitivity / mu

    def epsilon(self, delta: float | None = None) -> float:
        """Cumulative epsilon at ``delta`` (default: ``target_delta``)."""
        delta = self.target_delta if delta is None else _unit_open("delta", delta)
        mu = self.mu
        return 0.0 if mu == 0 else _epsilon_for_mu(delta, mu)

    def delta(self, epsilon: float) -> float:
        """Cumulative delta at ``epsilon``."""
        epsilon = _non_negative("epsilon", epsilon)
        mu = self.mu
        return 0.0 if mu == 0 else math.exp(_log_delta(epsilon, mu))

    def spent(self) -> tuple[float, float]:
        """``(epsilon, target_delta)`` spent so far."""
        return self.epsilon(), self.target_delta


def release_generator() -> np.random.Generator:
    """A generator for release noise, seeded with 256 bits of fresh OS entropy (``secrets``).

    The seed is drawn for this call and kept nowhere: neither the catalog nor anything derived
    from the workload (seeds, versions, ids) can regenerate the noise.
    """
    return np.random.default_rng(secrets.randbits(256))


def _generator(rng) -> np.random.Generator:
    if rng is None:
        return release_generator()
    if isinstance(rng, np.random.Generator):
        return rng
    raise ValidationError(
        f"rng must be None (fresh OS entropy, for releases) or a numpy Generator (simulations); "
        f"a seed would make the noise reproducible from it, got {rng!r}")


def privatize_sketch(sketch_counts, sigma: float, rng=None):
    """Add N(0, sigma^2) to every cell and round to integers (rounding is free post-processing).

    Accepts a count array of any shape, a histogram included (returns an int64 array of the same
    shape), or a :class:`~airplan_qo.catalog.sketch.CountMinSketch` (returns a new sketch).
    Calibrate sigma with :func:`calibrate_sigma` at the release's sensitivity
    (:func:`label_release`). ``rng=None``, the default and the only choice for a real release,
    draws the noise from :func:`release_generator`; pass a Generator only to simulate releases.
    """
    sigma = _positive("sigma", sigma)
    gen = _generator(rng)
    if isinstance(sketch_counts, CountMinSketch):
        noisy = privatize_sketch(np.asarray(sketch_counts.counts), sigma, gen)
        return CountMinSketch(sketch_counts.depth, sketch_counts.width, sketch_counts.seed, noisy)
    arr = np.asarray(sketch_counts)
    if arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr)):
        raise ValidationError("sketch counts must be a finite numeric array")
    noisy = arr.astype(np.float64) + gen.normal(0.0, sigma, size=arr.shape)
    return np.rint(noisy).astype(np.int64)


# ---- reference formulas -------------------------------------------------------------------------

def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Dwork & Roth's sigma = sensitivity * sqrt(2 ln(1.25/delta)) / epsilon (proven for eps < 1).

    Looser than :func:`calibrate_sigma`; kept for comparison.
    """
    epsilon = _positive("epsilon", epsilon)
    delta = _unit_open("delta", delta)
    sensitivity = _positive("sensitivity", sensitivity)
    if epsilon >= 1:
        raise ValidationError(f"the classical Gaussian bound needs epsilon < 1, got {epsilon!r}")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def paper_epsilon(eps_s: float, delta_s: float, sigma_c: float, n_min: float) -> float:
    """The paper's claimed bound eps_DP = eps_s * sqrt(2 ln(1.25/delta_s)) / (sigma_c * n_min).

    The paper's claim, not a valid guarantee: it takes the sketch's error parameter eps_s as the
    sensitivity (it is sqrt(depth)) and credits uncalibrated channel noise sigma_c as a Gaussian
    mechanism. For documentation and comparison only.
    """
    eps_s = _unit_open("eps_s", eps_s)
    delta_s = _unit_open("delta_s", delta_s)
    sigma_c = _positive("sigma_c", sigma_c)
    n_min = _positive("n_min", n_min)
    return eps_s * math.sqrt(2.0 * math.log(1.25 / delta_s)) / (sigma_c * n_min)
