"""Datasets as plain numpy arrays, and a registry of loaders that never download.

A :class:`Dataset` is an immutable value holding a train and a test split: features as float32
arrays of shape ``(n, *input_shape)`` and labels as int64 arrays in ``[0, n_classes)``. Loaders
are registered by name in :data:`DATASETS` and called through :func:`load`; each takes an explicit
seed, so every split and subsample is reproducible. Files are read from a local directory only
(``root=`` or the ``AIRPLAN_DATA_DIR`` environment variable); a missing dataset raises
:class:`~airplan_qo.errors.DataError` that names the paths looked at and how to provide them.

This module imports numpy (and scikit-learn for the bundled digits) but never torch.
"""

from __future__ import annotations

import inspect
import os
import pickle
import posixpath
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

import attrs
import numpy as np

from ..errors import DataError, ValidationError
from ..registry import Registry, user_key

__all__ = [
    "DATA_DIR_ENV",
    "DATASETS",
    "Dataset",
    "load",
    "register_dataset",
    "safe_extract",
]

#: Environment variable naming the directory that holds downloaded dataset files.
DATA_DIR_ENV = "AIRPLAN_DATA_DIR"

#: Registry of dataset loaders: ``fn(*, root, seed, **options) -> Dataset``.
DATASETS: Registry[Callable[..., "Dataset"]] = Registry("dataset")


# --------------------------------------------------------------------------------------------
# the value type


def _readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view, so a Dataset cannot be changed through its attributes."""
    view = array.view()
    view.setflags(write=False)
    return view


def _features(value: Any) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DataError(f"features must be numeric arrays: {exc}") from None
    return _readonly(array)


def _labels(value: Any) -> np.ndarray:
    raw = np.asarray(value)
    if raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
            raise DataError("labels must be whole numbers (class indices), got non-integer floats")
    elif raw.dtype.kind not in "iub":
        raise DataError(f"labels must be integer class indices, got dtype {raw.dtype}")
    return _readonly(raw.astype(np.int64, copy=False))


def _groups(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    raw = np.asarray(value)
    if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu") or (raw.size and raw.min() < 0):
        raise DataError("groups must be a 1-D array of non-negative integer user ids, one per "
                        "train sample")
    return _readonly(raw.astype(np.int64, copy=False))


@attrs.frozen(eq=False)
class Dataset:
    """An immutable train/test pair of float32 features and int64 labels.

    Arrays are stored as read-only views. ``input_shape`` is the shape of one sample (e.g.
    ``(3, 32, 32)``, channel first for images); labels lie in ``[0, n_classes)``.
    ``groups`` (optional) names the user each train sample came from, for datasets with a
    natural per-user split (``leaf_synthetic``); the ``natural`` partition follows it.
    """

    name: str
    x_train: np.ndarray = attrs.field(converter=_features, repr=False)
    y_train: np.ndarray = attrs.field(converter=_labels, repr=False)
    x_test: np.ndarray = attrs.field(converter=_features, repr=False)
    y_test: np.ndarray = attrs.field(converter=_labels, repr=False)
    n_classes: int = attrs.field(converter=int)
    input_shape: tuple[int, ...] = attrs.field(converter=lambda s: tuple(int(d) for d in s))
    class_names: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    source: str = ""
    groups: np.ndarray | None = attrs.field(default=None, converter=lambda g: _groups(g),
                                            repr=False)

    def __attrs_post_init__(self) -> None:
        if self.groups is not None and self.groups.shape != self.y_train.shape:
            raise DataError(
                f"dataset '{self.name}': groups has shape {self.groups.shape}, expected one "
                f"user id per train sample {self.y_train.shape}"
            )
        if self.n_classes < 1:
            raise DataError(f"dataset '{self.name}': n_classes must be >= 1, got {self.n_classes}")
        for split, x, y in (("train", self.x_train, self.y_train),
                            ("test", self.x_test, self.y_test)):
            if y.ndim != 1:
                raise DataError(
                    f"dataset '{self.name}': y_{split} must be 1-D, got shape {y.shape}"
                )
            if x.ndim < 1 or x.shape[0] != y.shape[0]:
                raise DataError(
                    f"dataset '{self.name}': x_{split} has {x.shape[0] if x.ndim else 0} samples "
                    f"but y_{split} has {y.shape[0]}"
                )
            if tuple(x.shape[1:]) != self.input_shape:
                raise DataError(
                    f"dataset '{self.name}': x_{split} samples have shape {tuple(x.shape[1:])}, "
                    f"expected input_shape {self.input_shape}"
                )
            if y.size and (y.min() < 0 or y.max() >= self.n_classes):
                raise DataError(
                    f"dataset '{self.name}': y_{split} has labels in [{y.min()}, {y.max()}], "
                    f"outside [0, {self.n_classes})"
                )
        if self.x_train.shape[0] == 0:
            raise DataError(f"dataset '{self.name}' has an empty train split")
        if self.class_names and len(self.class_names) != self.n_classes:
            raise DataError(
                f"dataset '{self.name}': {len(self.class_names)} class names for "
                f"{self.n_classes} classes"
            )

    @classmethod
    def from_arrays(cls, name: str, x_train: Any, y_train: Any, x_test: Any, y_test: Any, *,
                    n_classes: int | None = None, class_names: tuple[str, ...] = (),
                    source: str = "arrays", groups: Any = None) -> "Dataset":
        """Wrap user-supplied numpy arrays (features ``(n, *shape)``, integer labels).

        ``n_classes`` defaults to the largest label + 1 over both splits. Features must be
        finite; they are converted to float32 and labels to int64 (no copy when already so).
        ``groups``: the user id of each train sample, when the data has a natural per-user
        split (then ``partition = 'natural'`` gives each client whole users).
        """
        x_tr, x_te = _features(x_train), _features(x_test)
        y_tr, y_te = _labels(y_train), _labels(y_test)
        if x_tr.ndim < 2:
            raise DataError(
                f"dataset '{name}': x_train must have shape (n_samples, *sample_shape), "
                f"got {x_tr.shape}"
            )
        for split, x in (("x_train", x_tr), ("x_test", x_te)):
            if not np.all(np.isfinite(x)):
                raise DataError(f"dataset '{name}': {split} contains NaN or infinite values")
        for split, y in (("y_train", y_tr), ("y_test", y_te)):
            if y.size and y.min() < 0:
                raise DataError(f"dataset '{name}': {split} has negative labels")
        if n_classes is None:
            n_classes = int(max(y_tr.max(initial=-1), y_te.max(initial=-1))) + 1
        return cls(name=name, x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   n_classes=n_classes, input_shape=x_tr.shape[1:], class_names=class_names,
                   source=source, groups=groups)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    def class_counts(self, split: str = "train") -> np.ndarray:
        """Number of samples per class in ``split`` ('train' or 'test'), shape (n_classes,)."""
        if split not in ("train", "test"):
            raise ValidationError(f"split must be 'train' or 'test', got {split!r}")
        y = self.y_train if split == "train" else self.y_test
        return np.bincount(y, minlength=self.n_classes)

    def describe(self) -> str:
        """One line: name, split sizes, classes, sample shape, value range."""
        lo = float(self.x_train.min())
        hi = float(self.x_train.max())
        text = (f"{self.name}: {self.n_train} train / {self.n_test} test samples, "
                f"{self.n_classes} classes, input {self.input_shape}, float32 in "
                f"[{lo:.3g}, {hi:.3g}]")
        return f"{text} ({self.source})" if self.source else text


# --------------------------------------------------------------------------------------------
# the loader entry point


def load(name: str, *, root: str | os.PathLike | None = None, seed: int = 0,
         **options: Any) -> Dataset:
    """Load dataset ``name`` from the registry; ``options`` are passed to its loader.

    ``root`` (or ``$AIRPLAN_DATA_DIR``) is where file-based datasets are looked for; ``seed``
    fixes every random split or subsample the loader makes. Unknown options are rejected.
    """
    loader = DATASETS.get(name)
    accepted = [p for p in inspect.signature(loader).parameters if p not in ("root", "seed")]
    for option in options:
        if option not in accepted:
            raise ValidationError(
                f"dataset '{name}' has no option '{option}'; "
                f"its options are: {', '.join(accepted) or '(none)'}"
            )
    return loader(root=root, seed=_check_seed(seed), **options)


#: The datasets that ship with the package (a user's own cannot take these names).
BUILTIN_DATASETS = ("digits", "synthetic", "mnist1d", "leaf_synthetic", "cifar10", "cifar100",
                    "tiny_imagenet")


def register_dataset(name: str, data: Any, *, replace: bool = False) -> None:
    """Make your own data plannable and trainable as dataset ``name`` (``TRAIN name ON ...``).

    ``data`` is one of:

    - a :class:`Dataset` (e.g. from :meth:`Dataset.from_arrays`), used as it is;
    - a tuple ``(x_train, y_train, x_test, y_test)`` of arrays (features ``(n, *shape)``,
      integer labels), wrapped with :meth:`Dataset.from_arrays`;
    - a loader, called as ``loader(seed=..., **options)`` when it takes a ``seed`` (and
      ``root=`` when it takes one), else as ``loader()``, returning either of the above. The
      workload's seed reaches it, so a loader that draws or splits at random can follow it.

    The registration lasts for this process (register again in each process that plans or
    trains it). Built-in names cannot be replaced; your own can with ``replace=True``.
    """
    key = user_key("dataset", name, BUILTIN_DATASETS, DATASETS, replace)
    if isinstance(data, Dataset) or isinstance(data, (tuple, list)):
        fixed = _as_dataset(key, data)

        def fixed_loader(*, root: Any = None, seed: int = 0) -> Dataset:
            return fixed

        loader = fixed_loader
    elif callable(data):
        loader = _wrap_loader(key, data)
    else:
        raise ValidationError(
            f"dataset '{key}': expected a Dataset, a tuple (x_train, y_train, x_test, y_test) "
            f"or a loader function, got {type(data).__name__}")
    DATASETS.register(key, loader, replace=True)


def _as_dataset(name: str, value: Any) -> Dataset:
    if isinstance(value, Dataset):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 4:
        return Dataset.from_arrays(name, *value, source="register_dataset")
    raise DataError(f"dataset '{name}': expected a Dataset or a tuple (x_train, y_train, "
                    f"x_test, y_test), got {type(value).__name__}"
                    + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""))


def _wrap_loader(name: str, fn: Callable[..., Any]) -> Callable[..., Dataset]:
    """A registry loader ``(*, root, seed, **options) -> Dataset`` around a user's function."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes = {p for p in ("root", "seed") if p in params}
    extra = [p for p in params.values()
             if p.name not in ("root", "seed") and p.kind in (p.KEYWORD_ONLY,
                                                              p.POSITIONAL_OR_KEYWORD)]

    # a signature load() can inspect: the user's options, then root and seed
    options = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
               for p in extra]

    def loader(*, root: Any = None, seed: int = 0, **options_given: Any) -> Dataset:
        kwargs = dict(options_given)
        if "root" in takes:
            kwargs["root"] = root
        if "seed" in takes:
            kwargs["seed"] = seed
        return _as_dataset(name, fn(**kwargs))

    loader.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("root", inspect.Parameter.KEYWORD_ONLY, default=None),
         inspect.Parameter("seed", inspect.Parameter.KEYWORD_ONLY, default=0), *options])
    loader.__doc__ = fn.__doc__
    return loader


# (input_shape, n_classes) of each registered dataset, known without reading any data, so the
# planner can size a model (d parameters) cheaply; synthetic's depend on its options.
_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "mnist1d": ((1, 40), 10),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
    "tiny_imagenet": ((3, 64, 64), 200),
}


def dataset_info(name: str, **options: Any) -> tuple[tuple[int, ...], int]:
    """(input_shape, n_classes) of a dataset without loading it."""
    key = DATASETS.get(name) and name.lower()
    if key == "synthetic":
        return (int(options.get("n_features", 60)),), int(options.get("n_classes", 10))
    if key == "leaf_synthetic":
        return (int(options.get("n_features", 60)),), int(options.get("n_classes", 10))
    if key in _SHAPES:
        if key == "cifar100" and options.get("label_mode") == "coarse":
            return _SHAPES[key][0], 20
        return _SHAPES[key]
    data = load(name, **options)
    return tuple(data.input_shape), data.n_classes


def _check_seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValidationError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_fraction(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValidationError(f"{name} must be in (0, 1), got {value}")
    return value


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _stratified_split(y: np.ndarray, test_fraction: float,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split: about ``test_fraction`` of each class goes to the test side."""
    train, test = [], []
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        n_test = int(round(test_fraction * members.size))
        if members.size >= 2:
            n_test = min(max(n_test, 1), members.size - 1)
        else:
            n_test = 0
        test.append(members[:n_test])
        train.append(members[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _subsample_per_class(y: np.ndarray, max_per_class: int | None,
                         rng: np.random.Generator) -> np.ndarray:
    """Indices keeping at most ``max_per_class`` samples of each class (seeded, order kept)."""
    if max_per_class is None:
        return np.arange(y.size)
    max_per_class = _check_positive_int("max_per_class", max_per_class)
    keep = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        if members.size > max_per_class:
            members = np.sort(rng.choice(members, size=max_per_class, replace=False))
        keep.append(members)
    return np.sort(np.concatenate(keep))


# --------------------------------------------------------------------------------------------
# in-memory datasets


def _digits_table() -> np.ndarray:
    """scikit-learn's digits as its (1797, 65) table (64 pixels, then the label), read from the
    file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) as its ``load_digits``
    reads it, without importing scikit-learn (a second of imports in every process that loads
    digits, the evaluation's workers among them); through ``load_digits`` where that file is
    not where this scikit-learn keeps it."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise DataError("dataset 'digits' ships with scikit-learn, which is not installed: "
                        "pip install scikit-learn")
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, mode="rt", encoding="utf-8") as f:
                return np.loadtxt(f, delimiter=",")
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    return np.column_stack([bunch.data, bunch.target])


@DATASETS.register("digits")
def load_digits(*, root: Any = None, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes), offline.

    Pixels (0..16) are scaled to [0, 1] and shaped (1, 8, 8); the train/test split is
    stratified and seeded. ``root`` is ignored: the data ships with scikit-learn.
    """
    test_fraction = _check_fraction("test_fraction", test_fraction)
    table = _digits_table()
    x = (np.asarray(table[:, :-1], dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = np.asarray(table[:, -1], dtype=np.int64)
    rng = np.random.default_rng(seed)
    train, test = _stratified_split(y, test_fraction, rng)
    return Dataset(name="digits", x_train=x[train], y_train=y[train], x_test=x[test],
                   y_test=y[test], n_classes=10, input_shape=(1, 8, 8),
                   class_names=tuple(str(d) for d in range(10)),
                   source=f"scikit-learn digits, seed={seed}")


@DATASETS.register("synthetic")
def load_synthetic(*, root: Any = None, seed: int = 0, n_samples: int = 6000,
                   n_classes: int = 10, n_features: int = 60, class_sep: float = 1.0,
                   clusters_per_class: int = 2, test_fraction: float = 0.2) -> Dataset:
    """A seeded Gaussian-mixture classification set of any size.

    Generator (``d = n_features``, ``s = class_sep * 2 / sqrt(d)``): each class gets a centre
    ``s * N(0, I_d)`` and ``clusters_per_class`` cluster centres at that centre plus
    ``s * N(0, I_d)``; a sample is a uniformly chosen cluster centre of its class plus
    ``N(0, I_d)`` noise. All samples then go through one random linear map (correlated, unequally
    scaled features) and are standardised with the train split's mean and standard deviation.
    Classes are balanced. Centres lie about ``2.8 * class_sep`` apart whatever ``d``, and the
    split clusters make classes non-convex: with the defaults a logistic regression reaches
    about 75% test accuracy (chance is 10%); larger ``class_sep`` makes the task easier.
    """
    n_samples = _check_positive_int("n_samples", n_samples, 2)
    n_classes = _check_positive_int("n_classes", n_classes, 2)
    n_features = _check_positive_int("n_features", n_features, 1)
    clusters_per_class = _check_positive_int("clusters_per_class", clusters_per_class, 1)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    class_sep = float(class_sep)
    if not class_sep > 0 or not np.isfinite(class_sep):
        raise ValidationError(f"class_sep must be a positive number, got {class_sep}")
    if n_samples < 2 * n_classes:
        raise ValidationError(
            f"n_samples={n_samples} is too small for {n_classes} classes "
            f"(need at least 2 per class for a train/test split)"
        )

    rng = np.random.default_rng(seed)
    d = n_features
    unit = 2.0 / np.sqrt(d)
    class_centres = class_sep * unit * rng.standard_normal((n_classes, d))
    offsets = class_sep * unit * rng.standard_normal((n_classes, clusters_per_class, d))
    centres = class_centres[:, None, :] + offsets
    mixing = rng.standard_normal((d, d)) / np.sqrt(d) * rng.uniform(0.5, 2.0, size=d)

    y = rng.permutation(np.arange(n_samples) % n_classes).astype(np.int64)
    cluster = rng.integers(0, clusters_per_class, size=n_samples)
    x = centres[y, cluster] + rng.standard_normal((n_samples, d))
    x = x @ mixing

    train, test = _stratified_split(y, test_fraction, rng)
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    return Dataset(name="synthetic", x_train=x[train], y_train=y[train], x_test=x[test],
                   y_test=y[test], n_classes=n_classes, input_shape=(d,),
                   source=(f"gaussian mixture, class_sep={class_sep}, "
                           f"clusters_per_class={clusters_per_class}, seed={seed}"))


# --------------------------------------------------------------------------------------------
# file-based datasets: locating files and safe archive extraction


def _data_root(dataset: str, root: str | os.PathLike | None, expected: str) -> Path:
    """Resolve ``root`` or ``$AIRPLAN_DATA_DIR``; explain how to provide it when neither is set."""
    if root is None:
        env = os.environ.get(DATA_DIR_ENV)
        if not env:
            raise DataError(
                f"dataset '{dataset}' is read from local files and no data directory was given. "
                f"Pass root=PATH to load(), or set the environment variable {DATA_DIR_ENV}=PATH, "
                f"where PATH contains {expected}. Nothing is ever downloaded."
            )
        root = env
    path = Path(root).expanduser()
    if not path.is_dir():
        raise DataError(f"dataset '{dataset}': data directory {path} does not exist")
    return path


def _unsafe_member_reason(member: tarfile.TarInfo) -> str | None:
    """Why extracting ``member`` could write outside the target or create a special file."""
    name = member.name.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in posixpath.normpath(name).split("/") or ".." in name.split("/"):
        return "path with '..'"
    if member.issym() or member.islnk():
        return "link"
    if not (member.isfile() or member.isdir()):
        return "device, fifo or other special file"
    return None


def safe_extract(archive: str | os.PathLike, destination: str | os.PathLike) -> list[str]:
    """Extract a tar archive into ``destination``, refusing any unsafe member.

    Every member is checked first (no absolute paths, no ``..``, no links, devices or fifos);
    one bad member rejects the whole archive with a DataError and nothing is written. Where
    Python's tarfile supports it, the ``'data'`` extraction filter is applied as well.
    Returns the extracted member names.
    """
    archive = Path(archive)
    destination = Path(destination)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            base = destination.resolve()
            for member in members:
                reason = _unsafe_member_reason(member)
                if reason is None:
                    target = (base / member.name).resolve()
                    if target != base and base not in target.parents:
                        reason = "path outside the destination"
                if reason is not None:
                    raise DataError(
                        f"refusing to extract {archive}: member {member.name!r} is unsafe "
                        f"({reason}); extract it yourself if you trust it"
                    )
            destination.mkdir(parents=True, exist_ok=True)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(destination, members=members, filter="data")
            else:
                tar.extractall(destination, members=members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"cannot extract archive {archive}: {exc}") from None
    return [m.name for m in members]


def _find_folder(dataset: str, base: Path, folder: str, archive: str | None, marker: str,
                 expected: str) -> Path:
    """Find ``base/folder`` (or ``base`` itself), extracting ``base/archive`` once if needed."""
    if (base / marker).exists():
        return base
    candidate = base / folder
    if (candidate / marker).exists():
        return candidate
    if archive is not None and (base / archive).is_file():
        try:
            with tempfile.TemporaryDirectory(prefix=f".{folder}-", dir=base) as tmp:
                safe_extract(base / archive, tmp)
                extracted = Path(tmp) / folder
                if not (extracted / marker).exists():
                    raise DataError(
                        f"dataset '{dataset}': archive {base / archive} does not contain "
                        f"{folder}/{marker}; expected {expected}"
                    )
                if not candidate.exists():
                    shutil.move(str(extracted), str(candidate))
        except OSError as exc:
            raise DataError(
                f"dataset '{dataset}': cannot extract {base / archive} into {base} ({exc}); "
                f"extract it yourself so that {candidate} exists"
            ) from None
        if (candidate / marker).exists():
            return candidate
    looked = [str(base / marker), str(candidate / marker)]
    if archive is not None:
        looked.append(str(base / archive))
    raise DataError(
        f"dataset '{dataset}' not found. Looked for: {', '.join(looked)}. Expected {expected}. "
        f"Put the files under a directory and pass root=PATH or set {DATA_DIR_ENV}=PATH. "
        f"Nothing is ever downloaded."
    )


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds only numpy arrays: CIFAR files are pickles, and an arbitrary
    pickle can run code when loaded."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = {
            ("numpy", "ndarray"): np.ndarray,
            ("numpy", "dtype"): np.dtype,
        }
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name in (
                "_reconstruct", "scalar"):
            return getattr(_numpy_multiarray(), name)
        if module in ("numpy.core.numeric", "numpy._core.numeric") and name == "_frombuffer":
            return _numpy_numeric()._frombuffer
        if module in ("copy_reg", "copyreg") and name == "_reconstructor":
            import copyreg
            return copyreg._reconstructor
        if module == "_codecs" and name == "encode":  # how protocol 2 stores bytes
            import codecs
            return codecs.encode
        raise pickle.UnpicklingError(f"disallowed object {module}.{name}")


def _numpy_multiarray() -> Any:
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    return multiarray


def _numpy_numeric() -> Any:
    try:
        from numpy._core import numeric
    except ImportError:  # numpy < 2
        from numpy.core import numeric
    return numeric


def _read_pickle(path: Path, dataset: str) -> dict[str, Any]:
    """Read one CIFAR pickle into a dict with str keys (the originals use bytes keys)."""
    if not path.is_file():
        raise DataError(f"dataset '{dataset}': missing file {path}")
    try:
        with open(path, "rb") as handle:
            obj = _ArrayUnpickler(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError) as exc:
        raise DataError(
            f"dataset '{dataset}': cannot read {path} as a CIFAR pickle: {exc}"
        ) from None
    if not isinstance(obj, dict):
        raise DataError(
            f"dataset '{dataset}': {path} holds a {type(obj).__name__}, expected a dict"
        )
    return {(k.decode("latin1") if isinstance(k, bytes) else str(k)): v for k, v in obj.items()}


def _cifar_arrays(batch: dict[str, Any], label_key: str, path: Path, dataset: str,
                  n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate one CIFAR batch and return (uint8 data (n, 3072), int64 labels (n,))."""
    if "data" not in batch or label_key not in batch:
        raise DataError(
            f"dataset '{dataset}': {path} lacks the keys 'data' and '{label_key}' "
            f"(found {sorted(batch)})"
        )
    data = np.asarray(batch["data"])
    labels = np.asarray(batch[label_key])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
        raise DataError(
            f"dataset '{dataset}': {path} 'data' must be a uint8 array of shape (n, 3072), "
            f"got {data.dtype} {data.shape}"
        )
    if labels.ndim != 1 or labels.shape[0] != data.shape[0] or labels.dtype.kind not in "iu":
        raise DataError(
            f"dataset '{dataset}': {path} '{label_key}' must be {data.shape[0]} integer labels, "
            f"got {labels.dtype} {labels.shape}"
        )
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise DataError(
            f"dataset '{dataset}': {path} has labels outside [0, {n_classes})"
        )
    return data, labels


def _cifar_images(data: np.ndarray) -> np.ndarray:
    """(n, 3072) uint8 in CIFAR's plane order -> (n, 3, 32, 32) float32 in [0, 1]."""
    return data.reshape(-1, 3, 32, 32).astype(np.float32) / np.float32(255.0)


def _names(meta: dict[str, Any] | None, key: str, n: int) -> tuple[str, ...]:
    if not meta or key not in meta:
        return ()
    names = tuple(v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in meta[key])
    return names if len(names) == n else ()


_CIFAR10_EXPECTED = ("the CIFAR-10 python version: a folder cifar-10-batches-py/ with the pickle "
                     "files data_batch_1 ... data_batch_5 and test_batch (or the archive "
                     "cifar-10-python.tar.gz, which is extracted next to itself)")
_CIFAR100_EXPECTED = ("the CIFAR-100 python version: a folder cifar-100-python/ with the pickle "
                      "files train and test (keys data, fine_labels, coarse_labels), or the "
                      "archive cifar-100-python.tar.gz, which is extracted next to itself")


@DATASETS.register("cifar10")
def load_cifar10(*, root: str | os.PathLike | None = None, seed: int = 0,
                 max_per_class: int | None = None) -> Dataset:
    """CIFAR-10 from the standard python-pickle files (50000 train / 10000 test, 3x32x32).

    Looks in ``root`` (or ``$AIRPLAN_DATA_DIR``) for ``cifar-10-batches-py/`` or the
    ``cifar-10-python.tar.gz`` archive. ``max_per_class`` keeps a seeded subset of the train
    split. Pixels are returned channel first, float32 in [0, 1].
    """
    base = _data_root("cifar10", root, _CIFAR10_EXPECTED)
    folder = _find_folder("cifar10", base, "cifar-10-batches-py", "cifar-10-python.tar.gz",
                          "test_batch", _CIFAR10_EXPECTED)
    xs, ys = [], []
    for i in range(1, 6):
        path = folder / f"data_batch_{i}"
        data, labels = _cifar_arrays(_read_pickle(path, "cifar10"), "labels", path, "cifar10", 10)
        xs.append(data)
        ys.append(labels)
    x_train, y_train = np.concatenate(xs), np.concatenate(ys)
    path = folder / "test_batch"
    x_test, y_test = _cifar_arrays(_read_pickle(path, "cifar10"), "labels", path, "cifar10", 10)
    meta_path = folder / "batches.meta"
    meta = _read_pickle(meta_path, "cifar10") if meta_path.is_file() else None
    keep = _subsample_per_class(y_train, max_per_class, np.random.default_rng(seed))
    return Dataset(name="cifar10", x_train=_cifar_images(x_train[keep]), y_train=y_train[keep],
                   x_test=_cifar_images(x_test), y_test=y_test, n_classes=10,
                   input_shape=(3, 32, 32), class_names=_names(meta, "label_names", 10),
                   source=str(folder))


@DATASETS.register("cifar100")
def load_cifar100(*, root: str | os.PathLike | None = None, seed: int = 0,
                  label_mode: str = "fine", max_per_class: int | None = None) -> Dataset:
    """CIFAR-100 from the standard python-pickle files (50000 train / 10000 test, 3x32x32).

    Looks in ``root`` (or ``$AIRPLAN_DATA_DIR``) for ``cifar-100-python/`` or the
    ``cifar-100-python.tar.gz`` archive. ``label_mode`` is ``'fine'`` (100 classes, default) or
    ``'coarse'`` (20 superclasses); ``max_per_class`` keeps a seeded subset of the train split.
    """
    if label_mode not in ("fine", "coarse"):
        raise ValidationError(f"label_mode must be 'fine' or 'coarse', got {label_mode!r}")
    n_classes = 100 if label_mode == "fine" else 20
    key = f"{label_mode}_labels"
    base = _data_root("cifar100", root, _CIFAR100_EXPECTED)
    folder = _find_folder("cifar100", base, "cifar-100-python", "cifar-100-python.tar.gz",
                          "test", _CIFAR100_EXPECTED)
    splits = {}
    for split in ("train", "test"):
        path = folder / split
        splits[split] = _cifar_arrays(_read_pickle(path, "cifar100"), key, path, "cifar100",
                                      n_classes)
    meta_path = folder / "meta"
    meta = _read_pickle(meta_path, "cifar100") if meta_path.is_file() else None
    (x_train, y_train), (x_test, y_test) = splits["train"], splits["test"]
    keep = _subsample_per_class(y_train, max_per_class, np.random.default_rng(seed))
    return Dataset(name="cifar100", x_train=_cifar_images(x_train[keep]), y_train=y_train[keep],
                   x_test=_cifar_images(x_test), y_test=y_test, n_classes=n_classes,
                   input_shape=(3, 32, 32),
                   class_names=_names(meta, f"{label_mode}_label_names", n_classes),
                   source=f"{folder} ({label_mode} labels)")


_TINY_EXPECTED = ("the Tiny ImageNet layout: a folder tiny-imagenet-200/ with wnids.txt, "
                  "train/<wnid>/images/*.JPEG and val/images/*.JPEG with "
                  "val/val_annotations.txt")


def _decode_images(paths: list[Path], dataset: str) -> np.ndarray:
    """Decode JPEG files into (n, 3, 64, 64) float32 in [0, 1] with Pillow."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError(
            f"dataset '{dataset}' needs Pillow to decode its JPEG files, and Pillow is not "
            f"installed; install it with `pip install Pillow`"
        ) from None
    out = np.empty((len(paths), 3, 64, 64), dtype=np.float32)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as image:
                rgb = image.convert("RGB")
                if rgb.size != (64, 64):
                    rgb = rgb.resize((64, 64))
                pixels = np.asarray(rgb, dtype=np.float32)
        except OSError as exc:
            raise DataError(f"dataset '{dataset}': cannot decode image {path}: {exc}") from None
        out[i] = pixels.transpose(2, 0, 1) / np.float32(255.0)
    return out


@DATASETS.register("tiny_imagenet")
def load_tiny_imagenet(*, root: str | os.PathLike | None = None, seed: int = 0,
                       max_per_class: int | None = None) -> Dataset:
    """Tiny ImageNet (200 classes, 3x64x64) from the standard ``tiny-imagenet-200/`` folder.

    The labelled ``val`` split serves as the test set (the official test split has no labels).
    Classes follow the order of ``wnids.txt``. ``max_per_class`` keeps a seeded subset of each
    class's train images, which bounds memory (the full train split is about 2.5 GB as
    float32). JPEG decoding needs Pillow.
    """
    base = _data_root("tiny_imagenet", root, _TINY_EXPECTED)
    folder = _find_folder("tiny_imagenet", base, "tiny-imagenet-200", None, "wnids.txt",
                          _TINY_EXPECTED)
    wnids = [line.strip() for line in (folder / "wnids.txt").read_text().splitlines()
             if line.strip()]
    if not wnids:
        raise DataError(f"dataset 'tiny_imagenet': {folder / 'wnids.txt'} lists no classes")
    index = {wnid: i for i, wnid in enumerate(wnids)}
    rng = np.random.default_rng(seed)
    if max_per_class is not None:
        max_per_class = _check_positive_int("max_per_class", max_per_class)

    train_paths: list[Path] = []
    train_labels: list[int] = []
    for wnid, label in index.items():
        images = folder / "train" / wnid / "images"
        if not images.is_dir():
            raise DataError(f"dataset 'tiny_imagenet': missing folder {images}; expected "
                            f"{_TINY_EXPECTED}")
        files = sorted(p for p in images.iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
        if max_per_class is not None and len(files) > max_per_class:
            chosen = np.sort(rng.choice(len(files), size=max_per_class, replace=False))
            files = [files[i] for i in chosen]
        train_paths.extend(files)
        train_labels.extend([label] * len(files))

    annotations = folder / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise DataError(f"dataset 'tiny_imagenet': missing file {annotations}; expected "
                        f"{_TINY_EXPECTED}")
    test_paths: list[Path] = []
    test_labels: list[int] = []
    for number, line in enumerate(annotations.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise DataError(f"dataset 'tiny_imagenet': {annotations} line {number} does not "
                            f"name an image and a class from wnids.txt: {line!r}")
        test_paths.append(folder / "val" / "images" / fields[0])
        test_labels.append(index[fields[1]])
    if not train_paths:
        raise DataError(f"dataset 'tiny_imagenet': no train images found under {folder / 'train'}")

    return Dataset(name="tiny_imagenet",
                   x_train=_decode_images(train_paths, "tiny_imagenet"),
                   y_train=np.asarray(train_labels, dtype=np.int64),
                   x_test=_decode_images(test_paths, "tiny_imagenet"),
                   y_test=np.asarray(test_labels, dtype=np.int64),
                   n_classes=len(wnids), input_shape=(3, 64, 64), class_names=tuple(wnids),
                   source=str(folder))

