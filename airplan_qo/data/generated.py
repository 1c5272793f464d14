"""Generated benchmarks that need many samples (numpy only, seeded, nothing downloaded).

- ``mnist1d``: the MNIST-1D recipe (Greydanus 2020, "Scaling down deep learning"): ten 1-D
  templates, each turned into a 40-step signal by random padding, dilation, scaling,
  translation, correlated and iid noise and shear. Small models separate it only partly and
  accuracy keeps growing with the number of samples, so a group of clients holding a fraction
  of the data falls short of what all clients reach together.
- ``leaf_synthetic``: the Synthetic(alpha, beta) generator of FedProx / LEAF (Li et al. 2020):
  every user has its own softmax model (``alpha``: how far the users' models differ) and its
  own feature distribution (``beta``: how far the users' inputs differ), and user sizes follow
  a power law. Each train sample records its user in :attr:`Dataset.groups`, which the
  ``natural`` partition follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ValidationError
from .datasets import (DATASETS, Dataset, _check_fraction, _check_positive_int,
                       _stratified_split)

__all__ = ["MNIST1D_TEMPLATES", "load_leaf_synthetic", "load_mnist1d"]

# Ten stroke profiles of twelve points each, one per digit (0: a rounded hump, 1: a sharp dip
# and a slow climb, 3: two humps, 8: two valleys, ...). Only their shapes matter: each is
# standardised, shifted to start at 0 and scaled to a standard deviation of 1/6 below, which
# sets how loud the signal is against the noise and shear of the recipe.
_RAW_TEMPLATES = np.array([
    [5.0, 6.2, 6.8, 7.0, 7.1, 7.1, 7.0, 6.9, 6.7, 6.3, 5.8, 5.0],   # 0
    [5.0, 2.8, 3.0, 3.4, 3.8, 4.3, 4.7, 5.1, 5.5, 5.9, 5.2, 5.0],   # 1
    [5.0, 6.1, 6.6, 6.4, 5.9, 5.2, 4.6, 3.9, 3.4, 3.5, 4.1, 5.0],   # 2
    [5.0, 6.1, 6.6, 6.3, 5.6, 5.0, 5.1, 5.9, 6.5, 6.4, 5.9, 5.0],   # 3
    [5.0, 4.3, 3.7, 3.1, 2.5, 2.6, 5.1, 5.0, 5.0, 5.0, 5.0, 5.0],   # 4
    [5.0, 3.1, 3.0, 3.1, 3.2, 4.9, 6.1, 6.5, 6.4, 5.9, 4.6, 5.0],   # 5
    [5.0, 4.1, 3.6, 3.2, 3.0, 2.9, 2.9, 3.0, 3.2, 3.6, 4.1, 5.0],   # 6
    [5.0, 7.1, 6.9, 6.5, 6.1, 5.7, 5.3, 4.9, 4.5, 4.1, 4.9, 5.0],   # 7
    [5.0, 4.0, 3.4, 3.5, 4.1, 5.0, 4.9, 4.0, 3.4, 3.5, 4.1, 5.0],   # 8
    [5.0, 4.0, 3.4, 3.6, 4.1, 5.0, 5.0, 5.1, 5.0, 4.8, 4.4, 5.0],   # 9
])


def _templates() -> np.ndarray:
    t = _RAW_TEMPLATES - _RAW_TEMPLATES.mean(axis=1, keepdims=True)
    t = t / t.std(axis=1, keepdims=True)
    return (t - t[:, :1]) / 6.0


#: The ten MNIST-1D templates (10 x 12): standard deviation 1/6, each starting at 0.
MNIST1D_TEMPLATES = _templates()
MNIST1D_TEMPLATES.setflags(write=False)


def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix of linear interpolation from n_in to n_out evenly spaced points."""
    pos = np.linspace(0.0, n_in - 1.0, n_out)
    lo = np.minimum(np.floor(pos).astype(int), n_in - 2)
    frac = pos - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] = 1.0 - frac
    m[np.arange(n_out), lo + 1] += frac
    return m


def _gaussian_smooth(x: np.ndarray, sigma: float) -> np.ndarray:
    """Each row of ``x`` convolved with a normalised Gaussian of width ``sigma`` (reflect)."""
    radius = int(4 * sigma + 0.5)
    k = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    k /= k.sum()
    padded = np.pad(x, ((0, 0), (radius, radius)), mode="symmetric")
    windows = np.lib.stride_tricks.sliding_window_view(padded, k.size, axis=1)
    return windows @ k


def mnist1d_signals(y: np.ndarray, rng: np.random.Generator, *, length: int = 40,
                    padding: tuple[int, int] = (36, 60), scale_coeff: float = 0.4,
                    max_translation: int = 48, corr_noise_scale: float = 0.25,
                    iid_noise_scale: float = 2e-2, shear_scale: float = 0.75) -> np.ndarray:
    """One MNIST-1D signal per label in ``y``, shape (n, length), following the recipe:

    1. append ``p ~ U{padding}`` zeros (both ends included) to the label's 12-point template
       and resample the padded signal to 12 + max(padding) points (so the template is dilated
       by a random factor);
    2. scale by ``1 + scale_coeff * U(-1/2, 1/2)``, translate circularly to the right by
       ``U{0, .., max_translation - 1}`` steps;
    3. fill the zero background with correlated noise (Gaussian noise of scale
       ``corr_noise_scale`` smoothed by a Gaussian of width 2), add iid noise of scale
       ``iid_noise_scale`` everywhere, and shear by ``-c * linspace(-1/2, 1/2)`` with
       ``c = shear_scale * U(-1/2, 1/2)``;
    4. resample to ``length`` points.
    """
    t = MNIST1D_TEMPLATES
    n, width = y.size, t.shape[1]
    wide = width + padding[1]
    pad = rng.integers(padding[0], padding[1] + 1, size=n)
    # step 1: the padded signal of sample i has width + pad[i] points, the template first
    canvas = np.zeros((n, wide + 1))
    canvas[:, :width] = t[y] + 1e-8      # +eps: the template is never 0
    pos = np.linspace(0.0, 1.0, wide)[None, :] * (width + pad - 1)[:, None]
    lo = np.floor(pos).astype(int)
    frac = pos - lo
    rows = np.arange(n)[:, None]
    x = (1.0 - frac) * canvas[rows, lo] + frac * canvas[rows, lo + 1]
    # step 2
    x *= 1.0 + scale_coeff * (rng.random(n) - 0.5)[:, None]
    shift = rng.integers(0, max_translation, size=n)
    x = x[rows, (np.arange(wide)[None, :] - shift[:, None]) % wide]
    # step 3
    corr = _gaussian_smooth(corr_noise_scale * rng.standard_normal((n, wide)), 2.0)
    x = np.where(x != 0.0, x, corr)
    x = x + iid_noise_scale * rng.standard_normal((n, wide))
    coeff = shear_scale * (rng.random(n) - 0.5)
    x = x - coeff[:, None] * np.linspace(-0.5, 0.5, wide)[None, :]
    # step 4
    return x @ _resample_matrix(wide, length).T


@DATASETS.register("mnist1d")
def load_mnist1d(*, root: Any = None, seed: int = 0, num_samples: int = 24000,
                 test_fraction: float = 1 / 6) -> Dataset:
    """MNIST-1D (Greydanus 2020): 10 classes of 40-step 1-D signals, shaped (1, 40).

    ``num_samples`` signals (default 24000: 20000 train, 4000 test) with balanced labels, from
    the recipe of :func:`mnist1d_signals`, deterministic in ``seed``; the split is stratified
    and the signals are standardised by one mean and standard deviation of the train split.
    The published reference accuracies at 4000 training samples (logistic ~32%, MLP ~68%,
    CNN ~94%) still grow with more data. ``root`` is ignored: nothing is read from disk.
    """
    num_samples = _check_positive_int("num_samples", num_samples, 20)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(num_samples) % 10).astype(np.int64)
    x = mnist1d_signals(y, rng)
    train, test = _stratified_split(y, test_fraction, rng)
    x = ((x - x[train].mean()) / x[train].std()).astype(np.float32)[:, None, :]
    return Dataset(name="mnist1d", x_train=x[train], y_train=y[train], x_test=x[test],
                   y_test=y[test], n_classes=10, input_shape=(1, 40),
                   class_names=tuple(str(d) for d in range(10)),
                   source=f"MNIST-1D recipe, num_samples={num_samples}, seed={seed}")


@DATASETS.register("leaf_synthetic")
def load_leaf_synthetic(*, root: Any = None, seed: int = 0, alpha: float = 1.0,
                        beta: float = 1.0, n_users: int = 100, n_features: int = 60,
                        n_classes: int = 10, min_per_user: int = 50,
                        max_per_user: int = 1000, test_fraction: float = 0.2) -> Dataset:
    """Synthetic(alpha, beta) of FedProx / LEAF (Li et al. 2020), ``n_users`` users.

    User k draws ``u_k ~ N(0, alpha)``, ``B_k ~ N(0, beta)``; its model ``W_k ~ N(u_k, 1)``
    (``n_classes x n_features``), ``b_k ~ N(u_k, 1)``; its inputs ``x ~ N(v_k, Sigma)`` with
    ``v_k ~ N(B_k, 1)`` and ``Sigma = diag(j^-1.2)``; labels ``y = argmax(W_k x + b_k)``.
    User sizes follow the power law of the reference code, ``floor(LogNormal(4, 2)) +
    min_per_user``, capped at ``max_per_user``. Each user's samples are split into train and
    test (``test_fraction``); the test set is the union of the users' test samples, and
    :attr:`Dataset.groups` records each train sample's user (the ``natural`` partition).
    Features are standardised with the train split's mean and standard deviation.
    ``alpha = beta = 0`` still leaves users different (their models and means are drawn around
    a shared centre); larger values make them more different.
    """
    n_users = _check_positive_int("n_users", n_users, 2)
    n_features = _check_positive_int("n_features", n_features, 1)
    n_classes = _check_positive_int("n_classes", n_classes, 2)
    min_per_user = _check_positive_int("min_per_user", min_per_user, 2)
    max_per_user = _check_positive_int("max_per_user", max_per_user, min_per_user)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not np.isfinite(value) or value < 0:
            raise ValidationError(f"{name} must be a finite number >= 0, got {value!r}")
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.lognormal(4.0, 2.0, size=n_users).astype(np.int64) + min_per_user,
                       max_per_user)
    sigma = np.arange(1, n_features + 1, dtype=np.float64) ** -1.2
    xs, ys, users, is_test = [], [], [], []
    for k in range(n_users):
        u = rng.normal(0.0, np.sqrt(alpha))
        big_b = rng.normal(0.0, np.sqrt(beta))
        w = rng.normal(u, 1.0, size=(n_classes, n_features))
        b = rng.normal(u, 1.0, size=n_classes)
        v = rng.normal(big_b, 1.0, size=n_features)
        x = v + np.sqrt(sigma) * rng.standard_normal((int(sizes[k]), n_features))
        y = np.argmax(x @ w.T + b, axis=1)
        n_test = max(1, int(round(test_fraction * sizes[k])))
        flag = np.zeros(int(sizes[k]), dtype=bool)
        flag[rng.permutation(int(sizes[k]))[:n_test]] = True
        xs.append(x)
        ys.append(y)
        users.append(np.full(int(sizes[k]), k))
        is_test.append(flag)
    x, y = np.concatenate(xs), np.concatenate(ys).astype(np.int64)
    user, test = np.concatenate(users), np.concatenate(is_test)
    train_idx, test_idx = np.flatnonzero(~test), np.flatnonzero(test)
    mean, std = x[train_idx].mean(axis=0), x[train_idx].std(axis=0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    return Dataset(name="leaf_synthetic", x_train=x[train_idx], y_train=y[train_idx],
                   x_test=x[test_idx], y_test=y[test_idx], n_classes=n_classes,
                   input_shape=(n_features,), groups=user[train_idx],
                   source=(f"Synthetic(alpha={alpha:g}, beta={beta:g}), {n_users} users, "
                           f"seed={seed}"))
