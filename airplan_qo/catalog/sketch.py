"""Count-Min sketches of per-client label streams.

A Count-Min sketch (Cormode & Muthukrishnan 2005) with depth ``r = ceil(ln(1/delta))`` and width
``c = ceil(e/eps)`` answers a point query with an overestimate of at most ``eps * total`` with
probability at least ``1 - delta``. Sketches with the same shape and hash seed merge by element-wise
**sum** (the sketch of the concatenated stream); the element-wise maximum is not a sketch of
anything. Rows hash with seeded Carter-Wegman functions ``((a*x + b) mod p) mod c`` with the
Mersenne prime ``p = 2**31 - 1``, so keys are integers in ``[0, p)``.

A :class:`CountMinSketch` is a small value: ``update`` adds to it in place (the one mutating
method), ``merge`` and ``copy`` return new sketches, equality compares shape, seed and counts.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ValidationError

__all__ = [
    "MERSENNE_PRIME",
    "CountMinSketch",
    "dimensions",
    "sketch_labels",
    "estimate_counts",
    "estimate_distribution",
]

MERSENNE_PRIME = (1 << 31) - 1


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValidationError(f"{name} must be >= 1, got {value}")
    return int(value)


def _check_seed(seed) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValidationError(f"seed must be a non-negative integer, got {seed!r}")
    if seed < 0:
        raise ValidationError(f"seed must be a non-negative integer, got {seed}")
    return int(seed)


def _check_open_unit(name: str, value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not (0.0 < x < 1.0):
        raise ValidationError(f"{name} must be in (0, 1), got {value!r}")
    return x


def _as_int_array(values, what: str, *, upper: int | None = None) -> np.ndarray:
    """Validate non-negative integer values (ints or integral floats) and return them as int64."""
    arr = np.asarray(values)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise ValidationError(f"{what} must be non-negative integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            raise ValidationError(f"{what} must be finite, got {arr[bad].flat[0]!r}")
        frac = arr != np.floor(arr)
        if frac.any():
            raise ValidationError(f"{what} must be integers, got {arr[frac].flat[0]!r}")
        if arr.size and arr.max() >= 2.0**62:
            raise ValidationError(f"{what} too large: {arr.max()!r}")
    if arr.size:
        neg = arr < 0
        if neg.any():
            raise ValidationError(f"{what} must be non-negative, got {arr[neg].flat[0]!r}")
        if upper is not None:
            high = arr >= upper
            if high.any():
                raise ValidationError(f"{what} must be < {upper}, got {arr[high].flat[0]!r}")
    return arr.astype(np.int64)


class CountMinSketch:
    """A ``depth x width`` Count-Min sketch over integer keys in ``[0, 2**31 - 1)``.

    ``counts`` (optional) seeds the cells; it may hold negative values, as a differentially private
    release does. The hash functions are a pure function of ``(depth, seed)``, so two sketches built
    with the same parameters anywhere are mergeable.
    """

    __slots__ = ("depth", "width", "seed", "_a", "_b", "_counts")

    def __init__(self, depth: int, width: int, seed: int, counts=None):
        self.depth = _check_positive_int("depth", depth)
        self.width = _check_positive_int("width", width)
        self.seed = _check_seed(seed)
        rng = np.random.default_rng(self.seed)
        self._a = rng.integers(1, MERSENNE_PRIME, size=self.depth, dtype=np.int64)
        self._b = rng.integers(0, MERSENNE_PRIME, size=self.depth, dtype=np.int64)
        if counts is None:
            self._counts = np.zeros((self.depth, self.width), dtype=np.int64)
        else:
            arr = np.asarray(counts)
            if arr.shape != (self.depth, self.width):
                raise ValidationError(
                    f"counts must have shape ({self.depth}, {self.width}), got {arr.shape}")
            if arr.dtype.kind not in "iu":
                if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or \
                        np.any(arr != np.round(arr)):
                    raise ValidationError("counts must be finite integers")
            self._counts = arr.astype(np.int64, copy=True)

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_error(cls, eps: float, delta: float, *, seed: int) -> CountMinSketch:
        """Sketch erring by at most ``eps * total`` w.p. ``1 - delta`` (see :func:`dimensions`)."""
        depth, width = dimensions(eps, delta)
        return cls(depth, width, seed)

    @classmethod
    def from_flat(cls, flat, depth: int, width: int, seed: int) -> CountMinSketch:
        """Rebuild a sketch from :meth:`to_flat` output (a row-major flat count array)."""
        depth = _check_positive_int("depth", depth)
        width = _check_positive_int("width", width)
        arr = np.asarray(flat)
        if arr.ndim != 1 or arr.size != depth * width:
            raise ValidationError(
                f"flat counts must be 1-D of length depth*width = {depth * width}, got shape "
                f"{arr.shape}")
        return cls(depth, width, seed, arr.reshape(depth, width))

    def to_flat(self) -> tuple[np.ndarray, int, int, int]:
        """``(flat int64 counts, depth, width, seed)``: the catalog's storage form."""
        return self._counts.ravel().copy(), self.depth, self.width, self.seed

    def copy(self) -> CountMinSketch:
        return CountMinSketch(self.depth, self.width, self.seed, self._counts)

    # ---- hashing ------------------------------------------------------------------------------

    def columns(self, items) -> np.ndarray:
        """Column of each key in each row, shape ``(depth, n)``; validates the keys."""
        keys = _as_int_array(items, "sketch keys", upper=MERSENNE_PRIME).ravel()
        # a < 2**31 and key < 2**31, so a*key + b < 2**63: exact in int64.
        h = (self._a[:, None] * keys[None, :] + self._b[:, None]) % MERSENNE_PRIME
        return h % self.width

    # ---- operations ---------------------------------------------------------------------------

    def update(self, items, counts=None) -> CountMinSketch:
        """Add each key (with weight ``counts``, default 1) to the sketch in place; returns self."""
        cols = self.columns(items)
        n = cols.shape[1]
        flat_idx = (cols + (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]).ravel()
        size = self.depth * self.width
        if counts is None:
            add = np.bincount(flat_idx, minlength=size)
        else:
            w = _as_int_array(counts, "update counts")
            if w.ndim == 0:
                w = np.full(n, int(w), dtype=np.int64)
            else:
                w = w.ravel()
                if w.size != n:
                    raise ValidationError(
                        f"update counts must match the number of keys ({n}), got {w.size}")
            add = np.zeros(size, dtype=np.int64)
            np.add.at(add, flat_idx, np.tile(w, self.depth))
        self._counts += add.reshape(self.depth, self.width).astype(np.int64)
        return self

    def query(self, items) -> np.ndarray:
        """Point estimates (minimum over rows), same shape as ``items``; never below the truth."""
        shape = np.shape(items)
        cols = self.columns(items)
        est = self._counts[np.arange(self.depth)[:, None], cols].min(axis=0)
        return est.reshape(shape)

    def query_median(self, items) -> np.ndarray:
        """Median over rows: the better point estimate for noised sketches (min is biased low)."""
        shape = np.shape(items)
        cols = self.columns(items)
        est = np.median(self._counts[np.arange(self.depth)[:, None], cols], axis=0)
        return est.reshape(shape)

    def merge(self, other: CountMinSketch) -> CountMinSketch:
        """Sketch of the concatenated streams: the element-wise sum of the cells."""
        if not isinstance(other, CountMinSketch):
            raise ValidationError(f"can only merge a CountMinSketch, got {type(other).__name__}")
        for name in ("depth", "width", "seed"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                raise ValidationError(f"cannot merge sketches: {name} differs ({mine} vs {theirs})")
        return CountMinSketch(self.depth, self.width, self.seed, self._counts + other._counts)

    # ---- properties ---------------------------------------------------------------------------

    @property
    def counts(self) -> np.ndarray:
        """A read-only view of the ``(depth, width)`` cells."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    @property
    def total(self) -> int:
        """Total weight inserted: every row sums to it (median row sum for a noised sketch)."""
        sums = self._counts.sum(axis=1)
        if np.all(sums == sums[0]):
            return int(sums[0])
        return int(np.round(np.median(sums)))

    @property
    def nbytes(self) -> int:
        return int(self._counts.nbytes)

    @property
    def shape(self) -> tuple[int, int]:
        return self.depth, self.width

    def __eq__(self, other) -> bool:
        if not isinstance(other, CountMinSketch):
            return NotImplemented
        return (self.depth, self.width, self.seed) == (other.depth, other.width, other.seed) \
            and bool(np.array_equal(self._counts, other._counts))

    __hash__ = None  # mutable through update()

    def __repr__(self) -> str:
        return (f"CountMinSketch(depth={self.depth}, width={self.width}, seed={self.seed}, "
                f"total={self.total})")


def dimensions(eps: float, delta: float) -> tuple[int, int]:
    """``(depth, width) = (ceil(ln(1/delta)), ceil(e/eps))``; e.g. (0.05, 0.01) -> (5, 55)."""
    eps = _check_open_unit("eps", eps)
    delta = _check_open_unit("delta", delta)
    return math.ceil(math.log(1.0 / delta)), math.ceil(math.e / eps)


def sketch_labels(labels, n_classes: int, *, eps: float, delta: float, seed: int) -> CountMinSketch:
    """Sketch of one client's label array; labels must be integers in ``[0, n_classes)``."""
    n_classes = _check_positive_int("n_classes", n_classes)
    arr = np.asarray(labels)
    if arr.size == 0:
        raise ValidationError("empty client: a client must hold at least one label")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise ValidationError(f"labels must be integers, got dtype {arr.dtype}")
    flat = arr.ravel()
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(flat) | (flat != np.floor(flat))
        if bad.any():
            raise ValidationError(f"labels must be integers, got {flat[bad][0]!r}")
    out = (flat < 0) | (flat >= n_classes)
    if out.any():
        raise ValidationError(
            f"labels must be in [0, {n_classes}), got {flat[out][0]!r}")
    sketch = CountMinSketch.from_error(eps, delta, seed=seed)
    return sketch.update(flat.astype(np.int64))


def estimate_counts(sketch: CountMinSketch, n_classes: int, *,
                    estimator: str = "min") -> np.ndarray:
    """Per-class count estimates (float, clipped at 0) from point queries of classes 0..C-1.

    ``estimator="min"`` is the Count-Min estimate (an overestimate for a noise-free sketch);
    ``"median"`` (median over rows) suits sketches with added privacy noise, where the minimum of
    several noisy cells is biased low.
    """
    if not isinstance(sketch, CountMinSketch):
        raise ValidationError(f"expected a CountMinSketch, got {type(sketch).__name__}")
    n_classes = _check_positive_int("n_classes", n_classes)
    classes = np.arange(n_classes, dtype=np.int64)
    if estimator == "min":
        est = sketch.query(classes)
    elif estimator == "median":
        est = sketch.query_median(classes)
    else:
        raise ValidationError(f"estimator must be 'min' or 'median', got {estimator!r}")
    return np.clip(est.astype(np.float64), 0.0, None)


def estimate_distribution(sketch: CountMinSketch, n_classes: int, *,
                          estimator: str = "min") -> np.ndarray:
    """Class probability vector from a sketch: clipped point estimates, normalised to sum 1.

    When noise drives every estimate to zero the sketch carries no usable information and the
    uniform distribution is returned.
    """
    est = estimate_counts(sketch, n_classes, estimator=estimator)
    s = est.sum()
    if s <= 0:
        return np.full(est.shape, 1.0 / est.size)
    return est / s
