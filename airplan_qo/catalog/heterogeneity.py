"""Label-heterogeneity estimates from per-client class-count vectors.

The workload model is the usual Dirichlet partition: client ``i`` draws class proportions
``p_i ~ Dir(alpha * 1_C)`` and then ``n_i`` labels, so its count vector is Dirichlet-multinomial.
:func:`dirichlet_alpha` estimates ``alpha`` by maximum likelihood under exactly that model (Minka's
fixed point), which accounts for the multinomial sampling noise of small clients.
:func:`paper_alpha` is the paper's ``1 / mean pairwise KL``: a biased proxy that is not on the
scale of ``alpha`` and saturates for strongly skewed data; it is kept for comparison.

Inputs are ``N x C`` arrays of non-negative counts; they may be real-valued estimates recovered
from (noised) sketches.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import digamma, entr

from ..errors import ValidationError

__all__ = [
    "check_counts",
    "kl_matrix",
    "paper_alpha",
    "dirichlet_alpha_moments",
    "dirichlet_alpha",
    "label_entropy",
]


def check_counts(counts, *, min_clients: int = 1) -> np.ndarray:
    """Validate an ``N x C`` array of non-negative, finite counts with no empty client row."""
    arr = np.asarray(counts)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise ValidationError(f"counts must be numeric, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValidationError(
            f"counts must be a 2-D (clients x classes) array, got shape {arr.shape}")
    n, c = arr.shape
    if n < min_clients:
        raise ValidationError(f"need at least {min_clients} clients, got {n}")
    if c < 2:
        raise ValidationError(f"need at least 2 classes, got {c}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValidationError("counts must be finite")
    if np.any(arr < 0):
        i, k = np.argwhere(arr < 0)[0]
        raise ValidationError(f"counts must be non-negative, got {arr[i, k]!r} at client {i}, "
                              f"class {k}")
    empty = arr.sum(axis=1) <= 0
    if np.any(empty):
        raise ValidationError(f"empty client: row {int(np.argmax(empty))} has no counts")
    return arr


def kl_matrix(dists, smoothing: float = 1e-3) -> np.ndarray:
    """``K[i, j] = KL(p_i || p_j)`` in nats for smoothed, normalised rows of ``dists``.

    ``KL(p_i || p_j) = -H(p_i) - sum_k p_ik log p_jk``: the entropies come from
    ``scipy.special.entr`` and the cross terms of all pairs from one matrix product, so the
    work is ``N C`` logarithms plus a BLAS product. (Summing ``scipy.special.rel_entr`` over
    every pair gives the same matrix to float precision but needs ``N^2 C`` logarithms.)
    """
    p = _smoothed(check_counts(dists), smoothing)
    neg_entropy = -entr(p).sum(axis=1)
    return neg_entropy[:, None] - p @ np.log(p).T


def _smoothed(arr: np.ndarray, smoothing) -> np.ndarray:
    try:
        s = float(smoothing)
    except (TypeError, ValueError):
        raise ValidationError(f"smoothing must be a number, got {smoothing!r}") from None
    if not math.isfinite(s) or s <= 0:
        raise ValidationError(f"smoothing must be finite and > 0, got {smoothing!r}")
    q = arr / arr.sum(axis=1, keepdims=True)
    q = q + s
    return q / q.sum(axis=1, keepdims=True)


def paper_alpha(dists, smoothing: float = 1e-3) -> float:
    """The paper's alpha_hat = 1 / (sum_{i<j} KL(p_i || p_j) / C(N, 2)): a biased proxy.

    Rows are normalised to distributions, ``smoothing`` is added to every entry and rows are
    renormalised (KL is infinite otherwise). Only the ordered pairs ``i < j`` enter, as in the
    paper, so the result depends on client order. It is not an estimate of the Dirichlet
    parameter: it saturates for skewed data (the smoothing caps the divergence) and it reads
    multinomial sampling noise as heterogeneity. Returns ``inf`` for identical rows.
    """
    arr = check_counts(dists, min_clients=2)
    kl = kl_matrix(arr, smoothing)
    n = arr.shape[0]
    mean_kl = float(kl[np.triu_indices(n, k=1)].sum()) / (n * (n - 1) / 2)
    if mean_kl <= 0:
        return math.inf
    return 1.0 / mean_kl


def _intra_class_correlation(arr: np.ndarray) -> float:
    """Moment estimate of rho = 1/(C*alpha + 1), the overdispersion of the Polya model."""
    n_i = arr.sum(axis=1)
    c = arr.shape[1]
    if np.all(n_i <= 1):
        raise ValidationError("cannot estimate heterogeneity: every client holds at most 1 sample")
    m = 1.0 / c  # symmetric Dirichlet: every class has mean proportion 1/C
    b = 1.0 - c * m * m
    s_i = np.sum((arr / n_i[:, None] - m) ** 2, axis=1)
    # E[S_i] = b/n_i + b*rho*(1 - 1/n_i); average over clients and solve for rho.
    inv_n = np.mean(1.0 / n_i)
    return (np.mean(s_i) / b - inv_n) / (1.0 - inv_n)


def dirichlet_alpha_moments(counts) -> float:
    """Method-of-moments estimate of a symmetric Dirichlet alpha from Polya count vectors.

    Matches the mean squared deviation of the clients' proportions from 1/C to its expectation
    ``(1 - 1/C) * (1/n_i + rho * (1 - 1/n_i))`` with ``rho = 1/(C alpha + 1)``. Returns ``inf``
    when the data show no overdispersion (rho <= 0: IID-looking) and 0.0 when rho >= 1.
    """
    arr = check_counts(counts, min_clients=2)
    rho = _intra_class_correlation(arr)
    c = arr.shape[1]
    if rho <= 0:
        return math.inf
    if rho >= 1.0 - 1e-12:  # every client holds a single class (up to rounding)
        return 0.0
    return (1.0 / rho - 1.0) / c


def _polya_score(a: float, arr: np.ndarray, n_i: np.ndarray) -> float:
    """d/d(alpha) of the symmetric Dirichlet-multinomial log-likelihood."""
    c = arr.shape[1]
    return float(np.sum(digamma(arr + a) - digamma(a))
                 - c * np.sum(digamma(n_i + c * a) - digamma(c * a)))


def _score_root(arr: np.ndarray, n_i: np.ndarray, a: float, alpha_min: float,
                alpha_max: float) -> float:
    """Zero of the Polya score near ``a`` by bracketing in log alpha (inf/alpha_min at the caps)."""
    def f(t: float) -> float:
        return _polya_score(math.exp(t), arr, n_i)

    t = math.log(a)
    lo_cap, hi_cap = math.log(alpha_min), math.log(alpha_max)
    if f(t) > 0:
        lo, hi = t, t + 0.5
        while f(hi) > 0:
            if hi >= hi_cap:
                return math.inf
            lo, hi = hi, min(hi + 1.0, hi_cap)
    else:
        lo, hi = t - 0.5, t
        while f(lo) <= 0:
            if lo <= lo_cap:
                return alpha_min
            lo, hi = max(lo - 1.0, lo_cap), lo
    return math.exp(brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))


def dirichlet_alpha(counts, *, fixed_point_iter: int = 200, tol: float = 1e-9,
                    alpha_min: float = 1e-6, alpha_max: float = 1e6) -> float:
    """Maximum-likelihood symmetric Dirichlet alpha from client count vectors (Polya model).

    Minka's (2000) fixed point for the Dirichlet-multinomial,
    ``a <- a * sum_ik [psi(n_ik + a) - psi(a)] / (C * sum_i [psi(n_i + C a) - psi(C a)])``,
    started from :func:`dirichlet_alpha_moments`; each step increases the likelihood. Its
    convergence is linear and slows as alpha grows, so after ``fixed_point_iter`` steps the same
    stationarity condition (score = 0) is finished by bracketed root finding. Returns ``inf`` when
    the data look IID (no overdispersion by moments, or the likelihood still increases at
    ``alpha_max``) and ``alpha_min`` when the maximiser lies below it. Real-valued counts (from
    sketches) are accepted.
    """
    arr = check_counts(counts, min_clients=2)
    if fixed_point_iter < 0 or not (tol > 0) or not (0 < alpha_min < alpha_max):
        raise ValidationError("need fixed_point_iter >= 0, tol > 0 and 0 < alpha_min < alpha_max")
    start = dirichlet_alpha_moments(arr)
    if math.isinf(start):
        return math.inf
    c = arr.shape[1]
    n_i = arr.sum(axis=1)
    a = min(max(start, alpha_min), alpha_max)
    for _ in range(fixed_point_iter):
        num = float(np.sum(digamma(arr + a) - digamma(a)))
        den = c * float(np.sum(digamma(n_i + c * a) - digamma(c * a)))
        if not (num > 0 and den > 0):
            break
        new = min(max(a * num / den, alpha_min), alpha_max)
        if abs(new - a) <= tol * a:
            return float(new)
        a = new
    return float(_score_root(arr, n_i, a, alpha_min, alpha_max))


def label_entropy(counts) -> float:
    """Mean per-client label entropy in nats (0 log 0 = 0); log C for uniform clients."""
    arr = check_counts(counts)
    p = arr / arr.sum(axis=1, keepdims=True)
    return float(entr(p).sum(axis=1).mean())
