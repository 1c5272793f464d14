"""Seeded partitioners that split a train set's sample indices among federated clients.

Each partitioner returns a :class:`Partition`: one sorted index array per client into the train
set, disjoint by construction and checked on creation. Partitioners are registered by name in
:data:`PARTITIONERS` and called through :func:`partition`. Every random draw comes from a numpy
Generator built from the explicit ``seed``, so a partition is reproduced exactly from
``(scheme, labels, n_clients, seed, params)``.

Schemes: ``iid`` (uniform random split), ``dirichlet`` (label skew p_i ~ Dir(alpha * 1_C), the
model the heterogeneity estimators assume), ``shards`` (sort by label, deal out shards) and
``natural`` (whole users of a dataset that records which user each sample came from).
:func:`partition_dataset` partitions a :class:`~.datasets.Dataset` as a workload asks.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import attrs
import numpy as np

from ..errors import DataError, ValidationError
from ..registry import Registry

__all__ = [
    "PARTITIONERS",
    "Partition",
    "dirichlet",
    "iid",
    "natural",
    "partition",
    "partition_dataset",
    "shards",
]

#: Registry of partitioners: ``fn(y, n_clients, *, seed, **params) -> Partition``.
PARTITIONERS: Registry[Callable[..., "Partition"]] = Registry("partition scheme")


def _index_tuple(value: Any) -> tuple[np.ndarray, ...]:
    out = []
    for part in value:
        array = np.asarray(part)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise DataError(f"client indices must be 1-D integer arrays, got {array.dtype} "
                            f"{array.shape}")
        array = np.sort(array.astype(np.int64))
        array.setflags(write=False)
        out.append(array)
    return tuple(out)


@attrs.frozen(eq=False)
class Partition:
    """Which train samples each client holds: ``indices[i]`` is client i's sorted index array.

    ``n_samples`` is the size of the partitioned train set; ``alpha`` is the Dirichlet
    concentration (None for other schemes); ``seed`` is the integer seed used (None when a
    Generator was passed); ``params`` holds the scheme's other parameters; ``redrawn`` counts
    samples placed by the Dirichlet scheme's fallback after a class pool ran out (0 means the
    partition follows the Dirichlet-multinomial model exactly).
    Indices are checked on creation: in range and used by at most one client.
    """

    indices: tuple[np.ndarray, ...] = attrs.field(converter=_index_tuple, repr=False)
    n_samples: int = attrs.field(converter=int)
    scheme: str
    alpha: float | None = None
    seed: int | None = None
    params: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    redrawn: int = 0

    def __attrs_post_init__(self) -> None:
        if len(self.indices) < 1:
            raise DataError("a partition needs at least one client")
        self.assignment()  # raises on overlap or out-of-range indices

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return (self.scheme == other.scheme and self.n_samples == other.n_samples
                and self.alpha == other.alpha and self.seed == other.seed
                and self.params == other.params and self.redrawn == other.redrawn
                and len(self.indices) == len(other.indices)
                and all(np.array_equal(a, b) for a, b in zip(self.indices, other.indices)))

    def __repr__(self) -> str:
        sizes = self.sizes
        return (f"Partition(scheme={self.scheme!r}, n_clients={self.n_clients}, "
                f"n_samples={self.n_samples}, alpha={self.alpha}, seed={self.seed}, "
                f"sizes={int(sizes.min())}..{int(sizes.max())}, redrawn={self.redrawn})")

    @property
    def n_clients(self) -> int:
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """Samples per client, shape (n_clients,)."""
        return np.array([part.size for part in self.indices], dtype=np.int64)

    def assignment(self) -> np.ndarray:
        """Client id of every train sample, shape (n_samples,); -1 for samples no client holds."""
        owner = np.full(self.n_samples, -1, dtype=np.int64)
        for client, part in enumerate(self.indices):
            if part.size == 0:
                continue
            if part[0] < 0 or part[-1] >= self.n_samples:
                raise DataError(f"client {client} has indices outside [0, {self.n_samples})")
            if np.any(part[1:] == part[:-1]) or np.any(owner[part] != -1):
                raise DataError(f"client {client} holds a sample index that is already used")
            owner[part] = client
        return owner

    def unused(self) -> np.ndarray:
        """Indices of the train samples that no client holds (sorted)."""
        return np.flatnonzero(self.assignment() < 0)

    def label_counts(self, y: Any, n_classes: int | None = None) -> np.ndarray:
        """Per-client label histogram, an (n_clients, n_classes) int64 array."""
        labels = _check_labels(y)
        if labels.size != self.n_samples:
            raise DataError(f"got {labels.size} labels for a partition of {self.n_samples} "
                            f"samples")
        if n_classes is None:
            n_classes = int(labels.max()) + 1
        n_classes = int(n_classes)
        if labels.size and labels.max() >= n_classes:
            raise DataError(f"labels reach {int(labels.max())}, outside n_classes={n_classes}")
        counts = np.zeros((self.n_clients, n_classes), dtype=np.int64)
        for client, part in enumerate(self.indices):
            counts[client] = np.bincount(labels[part], minlength=n_classes)
        return counts


# --------------------------------------------------------------------------------------------
# validation helpers


def _check_labels(y: Any) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if labels.dtype.kind == "f":
        if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
            raise DataError("labels must be integer class indices, got non-integer floats")
    elif labels.dtype.kind not in "iu":
        raise DataError(f"labels must be integer class indices, got dtype {labels.dtype}")
    labels = labels.astype(np.int64, copy=False)
    if labels.min() < 0:
        raise DataError("labels must be non-negative class indices")
    return labels


def _check_clients(n_clients: Any, n_samples: int) -> int:
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)):
        raise ValidationError(f"n_clients must be an integer, got {n_clients!r}")
    if n_clients < 2:
        raise ValidationError(f"n_clients must be >= 2, got {n_clients}")
    if n_clients > n_samples:
        raise DataError(f"cannot split {n_samples} samples among n_clients={n_clients}: "
                        f"every client needs at least one sample")
    return int(n_clients)


def _rng(seed: Any) -> tuple[np.random.Generator, int | None]:
    """A Generator and the integer seed to record (None when a Generator was passed)."""
    if isinstance(seed, np.random.Generator):
        return seed, None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValidationError(f"seed must be a non-negative integer or a numpy Generator, "
                              f"got {seed!r}")
    return np.random.default_rng(int(seed)), int(seed)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------
# schemes


@PARTITIONERS.register("iid")
def iid(y: Any, n_clients: int, *, seed: int | np.random.Generator) -> Partition:
    """Uniform random split of all samples into ``n_clients`` parts of sizes differing by <= 1."""
    labels = _check_labels(y)
    n = labels.size
    n_clients = _check_clients(n_clients, n)
    rng, recorded = _rng(seed)
    parts = np.array_split(rng.permutation(n), n_clients)
    return Partition(indices=parts, n_samples=n, scheme="iid", seed=recorded)


@PARTITIONERS.register("shards")
def shards(y: Any, n_clients: int, shards_per_client: int = 2, *,
           seed: int | np.random.Generator) -> Partition:
    """Sort samples by label, cut into ``n_clients * shards_per_client`` equal shards, and give
    each client ``shards_per_client`` random shards (McMahan et al. 2017's pathological non-IID).

    Ties within a label are broken at random, so which samples share a shard depends on the seed.
    All samples are used; shard sizes differ by at most one.
    """
    labels = _check_labels(y)
    n = labels.size
    n_clients = _check_clients(n_clients, n)
    shards_per_client = _check_int("shards_per_client", shards_per_client, 1)
    n_shards = n_clients * shards_per_client
    if n_shards > n:
        raise DataError(f"cannot cut {n} samples into n_clients * shards_per_client = "
                        f"{n_shards} non-empty shards")
    rng, recorded = _rng(seed)
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(labels[shuffled], kind="stable")]
    pieces = np.array_split(order, n_shards)
    dealt = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
    parts = [np.concatenate([pieces[s] for s in row]) for row in dealt]
    return Partition(indices=parts, n_samples=n, scheme="shards", seed=recorded,
                     params={"shards_per_client": shards_per_client})


@PARTITIONERS.register("dirichlet")
def dirichlet(y: Any, n_clients: int, alpha: float, *, seed: int | np.random.Generator,
              min_per_client: int = 10, samples_per_client: int | None = None,
              n_classes: int | None = None) -> Partition:
    """Label skew with client label distributions p_i ~ Dir(alpha * 1_C).

    Every client gets the same size ``m`` (default ``n // n_clients``; so ``n mod n_clients``
    samples stay unused). Clients are filled in a random order: client i draws class counts
    from Multinomial(m, p_i) and takes them without replacement from per-class pools (shuffled
    once). If a pool runs short, the client's missing samples are drawn again from
    Multinomial(missing, p_i restricted to the classes still available, renormalised), and so
    on until the client is full; if p_i puts no mass on any available class, the remaining pool
    sizes are used as weights. ``Partition.redrawn`` counts the samples placed this way: when
    it is 0 the partition follows the Dirichlet-multinomial model exactly. A smaller
    ``samples_per_client`` makes pool exhaustion, and hence redraws, rarer.

    ``alpha`` > 0: small values give clients few classes, large values near-uniform labels.
    ``n_classes`` (default max label + 1) is C, the Dirichlet's dimension. Every client holds at
    least ``min_per_client`` samples, else DataError.
    """
    labels = _check_labels(y)
    n = labels.size
    n_clients = _check_clients(n_clients, n)
    try:
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise ValidationError(f"alpha must be a positive number, got {alpha!r}") from None
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValidationError(f"alpha must be a positive finite number, got {alpha}")
    min_per_client = _check_int("min_per_client", min_per_client, 0)
    if n_clients * min_per_client > n:
        raise DataError(
            f"cannot give each of {n_clients} clients at least min_per_client={min_per_client} "
            f"samples from {n} samples (needs {n_clients * min_per_client}); use fewer clients "
            f"or a smaller min_per_client"
        )
    if samples_per_client is None:
        size = n // n_clients
    else:
        size = _check_int("samples_per_client", samples_per_client, 1)
        if size * n_clients > n:
            raise DataError(f"samples_per_client={size} for {n_clients} clients needs "
                            f"{size * n_clients} samples, only {n} available")
    if size < min_per_client:
        raise ValidationError(f"samples_per_client={size} is below min_per_client="
                              f"{min_per_client}")
    max_label = int(labels.max())
    if n_classes is None:
        n_classes = max_label + 1
    n_classes = _check_int("n_classes", n_classes, 1)
    if max_label >= n_classes:
        raise DataError(f"labels reach {max_label}, outside n_classes={n_classes}")

    rng, recorded = _rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(n_classes)]
    available = np.array([pool.size for pool in pools], dtype=np.int64)
    taken_so_far = np.zeros(n_classes, dtype=np.int64)
    props = rng.dirichlet(np.full(n_classes, alpha), size=n_clients)
    parts: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * n_clients
    redrawn = 0
    for client in rng.permutation(n_clients):
        p = props[client]
        if not np.all(np.isfinite(p)) or p.sum() <= 0:
            # the alpha -> 0 limit: all mass on one class
            p = np.zeros(n_classes)
            p[rng.integers(n_classes)] = 1.0
        counts = rng.multinomial(size, p / p.sum())
        take = np.minimum(counts, available)
        missing = size - int(take.sum())
        redrawn += missing
        while missing > 0:
            left = available - take
            weights = np.where(left > 0, p, 0.0)
            if weights.sum() <= 0:
                weights = left.astype(np.float64)
            extra = rng.multinomial(missing, weights / weights.sum())
            take += np.minimum(extra, left)
            missing = size - int(take.sum())
        chosen = [pools[c][taken_so_far[c]:taken_so_far[c] + take[c]]
                  for c in np.flatnonzero(take)]
        taken_so_far += take
        available -= take
        parts[client] = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)
    params = {"min_per_client": min_per_client, "samples_per_client": size,
              "n_classes": n_classes}
    return Partition(indices=parts, n_samples=n, scheme="dirichlet", alpha=alpha,
                     seed=recorded, params=params, redrawn=redrawn)


@PARTITIONERS.register("natural")
def natural(y: Any, n_clients: int, *, seed: int | np.random.Generator,
            groups: Any) -> Partition:
    """Each client holds whole users: ``groups[j]`` is the user of sample j (a dataset's
    :attr:`~.datasets.Dataset.groups`, e.g. ``leaf_synthetic``'s users).

    With as many clients as users, client i is user i. With fewer clients, the users are
    shuffled and dealt out in turn (client i gets users ``perm[i::n_clients]``), so every
    sample is used and each client's data is a union of whole users. More clients than users
    is a DataError naming the number of users.
    """
    labels = _check_labels(y)
    n = labels.size
    n_clients = _check_clients(n_clients, n)
    if groups is None:
        raise DataError("partition scheme 'natural' needs the user of every sample (groups); "
                        "use a dataset with a natural per-user split, such as leaf_synthetic, "
                        "or Dataset.from_arrays(..., groups=...)")
    owner = np.asarray(groups)
    if owner.shape != (n,) or (owner.size and owner.dtype.kind not in "iu"):
        raise DataError(f"groups must hold one integer user id per sample ({n}), got "
                        f"{owner.dtype} {owner.shape}")
    users = np.unique(owner)
    if n_clients > users.size:
        raise DataError(f"partition 'natural' gives each client whole users, but the data has "
                        f"only {users.size} users for {n_clients} clients; use at most "
                        f"{users.size} clients or another partition")
    rng, recorded = _rng(seed)
    order = users if n_clients == users.size else rng.permutation(users)
    client_of_user = np.empty(int(users.max()) + 1, dtype=np.int64)
    client_of_user[order] = np.arange(order.size) % n_clients
    client = client_of_user[owner]
    parts = [np.flatnonzero(client == c) for c in range(n_clients)]
    return Partition(indices=parts, n_samples=n, scheme="natural", seed=recorded,
                     params={"users": int(users.size)})


def partition_dataset(dataset: Any, scheme: str, n_clients: int, *,
                      seed: int | np.random.Generator, alpha: float | None = None) -> Partition:
    """Partition ``dataset``'s train split as a workload asks: ``alpha`` goes to ``dirichlet``
    and the dataset's users (:attr:`~.datasets.Dataset.groups`) to ``natural``; other schemes
    take neither."""
    params: dict[str, Any] = {}
    if scheme == "dirichlet":
        params["alpha"] = alpha
    elif scheme == "natural":
        if dataset.groups is None:
            raise DataError(f"dataset '{dataset.name}' has no natural per-user split, so "
                            f"partition 'natural' cannot be used with it; use dirichlet, iid "
                            f"or shards, or a dataset that records its users (leaf_synthetic, "
                            f"Dataset.from_arrays(..., groups=...))")
        params["groups"] = dataset.groups
    return partition(scheme, dataset.y_train, n_clients, seed=seed, **params)


def partition(scheme: str, y: Any, n_clients: int, *, seed: int | np.random.Generator,
              **params: Any) -> Partition:
    """Partition labels ``y`` among ``n_clients`` with the registered ``scheme``.

    ``params`` go to the scheme (e.g. ``alpha`` for dirichlet, ``shards_per_client`` for
    shards); a parameter the scheme does not take is rejected with ValidationError.
    """
    fn = PARTITIONERS.get(scheme)
    accepted = [name for name, p in inspect.signature(fn).parameters.items()
                if name not in ("y", "n_clients", "seed")]
    for name in params:
        if name not in accepted:
            raise ValidationError(
                f"partition scheme '{scheme}' has no parameter '{name}'; "
                f"its parameters are: {', '.join(accepted) or '(none)'}"
            )
    required = [name for name, p in inspect.signature(fn).parameters.items()
                if name in accepted and p.default is inspect.Parameter.empty]
    for name in required:
        if name not in params:
            raise ValidationError(f"partition scheme '{scheme}' needs the parameter '{name}'")
    return fn(y, n_clients, seed=seed, **params)
