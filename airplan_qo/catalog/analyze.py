"""ANALYZE WORKLOAD: per-client label releases and the statistics the planner reads.

For a workload (dataset, clients, partition, alpha, seed) this partitions the dataset exactly as
the runtime will, releases each client's labels as an exact class histogram or a Count-Min
sketch, whichever is cheaper (:func:`~airplan_qo.catalog.privacy.choose_release`), optionally
through the Gaussian mechanism (noise from fresh OS entropy, recorded in the privacy ledger),
estimates heterogeneity from the released cells (the paper's KL proxy and a Dirichlet-multinomial
MLE), and stores all of it in one transaction under a new ``stats_version``. A noised release
stores no exact record count: the per-client counts are derived from the noised cells.
Re-analysing with settings that give the same release (same kind, shape and privacy; a histogram
does not depend on the sketch's eps and delta) returns the stored statistics: no second release,
no new rows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import numpy as np

from ..data import load, partition_dataset
from ..errors import CatalogError, ValidationError
from .heterogeneity import dirichlet_alpha, label_entropy, paper_alpha
from .privacy import (
    COUNT_MIN,
    HISTOGRAM,
    GaussianAccountant,
    LabelRelease,
    choose_release,
    privatize_sketch,
)
from .sketch import CountMinSketch, dimensions, estimate_counts, sketch_labels
from .store import Catalog

BYTES_PER_CELL = 4
BYTES_PER_PARAM = 4


@attrs.frozen
class WorkloadStats:
    """The statistics of one analysed workload (one ``workload_stats`` row)."""

    workload_id: int
    stats_version: int
    n_clients: int
    n_classes: int
    n_records: int
    release_kind: str
    depth: int
    width: int
    alpha_paper: float | None
    alpha_dirichlet: float | None
    label_entropy: float | None
    sketch_bytes: int
    model_bytes: int
    stats_overhead: float | None
    dp_epsilon: float | None
    dp_delta: float | None
    reused: bool = False

    @classmethod
    def from_row(cls, row: dict[str, Any], *, reused: bool = False) -> "WorkloadStats":
        names = [f.name for f in attrs.fields(cls) if f.name != "reused"]
        return cls(**{k: row[k] for k in names}, reused=reused)


def workload_fingerprint(dataset: str, clients: int, scheme: str, alpha: float | None,
                         seed: int) -> str:
    """Identity of a partitioned dataset: equal fingerprints mean identical client data."""
    key = json.dumps({"dataset": dataset, "clients": clients, "partition": scheme,
                      "alpha": alpha if scheme == "dirichlet" else None, "seed": seed},
                     sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def register_workload(catalog: Catalog, workload: Any, *, options: dict | None = None) -> int:
    """The ``workloads`` row of this workload's data identity, inserted if missing."""
    alpha = workload.alpha if workload.partition == "dirichlet" else None
    fingerprint = workload_fingerprint(workload.dataset, workload.clients, workload.partition,
                                       alpha, workload.seed)
    found = catalog.find_workload(fingerprint)
    if found is not None:
        return int(found["workload_id"])
    return int(catalog.insert_row("workloads", {
        "dataset": workload.dataset, "n_clients": workload.clients,
        "partition_scheme": workload.partition, "alpha": alpha,
        "partition_seed": workload.seed, "data_seed": workload.seed,
        "options": options or {}, "fingerprint": fingerprint}))


def model_bytes(model: str, input_shape: tuple[int, ...], n_classes: int) -> int:
    """Bytes of one float32 model transmission (d parameters), computed without torch."""
    from ..model_size import parameter_count

    return BYTES_PER_PARAM * int(parameter_count(model, tuple(input_shape), n_classes))


def analyze_workload(catalog: Catalog, workload: Any) -> WorkloadStats:
    """Analyse ``workload`` (a :class:`~airplan_qo.plans.workload.Workload`) into the catalog."""
    dataset = load(workload.dataset, seed=workload.seed)
    part = partition_dataset(dataset, workload.partition, workload.clients, seed=workload.seed,
                             alpha=workload.alpha)
    alpha = workload.alpha if workload.partition == "dirichlet" else None
    fingerprint = workload_fingerprint(workload.dataset, workload.clients, workload.partition,
                                       alpha, workload.seed)
    depth, width = dimensions(workload.sketch_eps, workload.sketch_delta)
    dp_eps = workload.dp_epsilon
    dp_delta = workload.dp_delta if dp_eps is not None else None

    release = choose_release(dataset.n_classes, depth, width, dp_eps, dp_delta)

    existing = catalog.find_workload(fingerprint)
    if existing is not None:
        # the same release again: same kind, shape and privacy (a histogram does not depend
        # on the sketch's eps and delta)
        rows = catalog.query(
            "SELECT * FROM airplan.workload_stats WHERE workload_id = ? AND release_kind = ? "
            "AND depth = ? AND width = ? AND (release_kind = ? OR (sketch_eps = ? "
            "AND sketch_delta = ?)) AND dp_epsilon IS NOT DISTINCT FROM ? "
            "AND dp_delta IS NOT DISTINCT FROM ? ORDER BY stats_version DESC LIMIT 1",
            [existing["workload_id"], release.kind, release.depth, release.width, HISTOGRAM,
             workload.sketch_eps, workload.sketch_delta, dp_eps, dp_delta])
        if rows:
            return WorkloadStats.from_row(rows[0], reused=True)

    labels = [dataset.y_train[idx] for idx in part.indices]
    for client, y in enumerate(labels):
        if len(y) == 0:
            raise ValidationError(f"client {client} has no samples; cannot sketch an empty client")
    hash_seed = workload.seed if release.kind == COUNT_MIN else 0
    exact = exact_release(labels, dataset.n_classes, release, eps=workload.sketch_eps,
                          delta=workload.sketch_delta, seed=workload.seed)
    n_records = np.array([len(y) for y in labels], dtype=np.int64)
    released = exact
    if release.sigma > 0:
        released = privatize_sketch(exact, release.sigma)  # fresh OS entropy, never stored
        n_records = released_record_counts(released)  # the exact counts are never stored

    with catalog.transaction():
        workload_id = register_workload(
            catalog, workload,
            options={} if release.sigma > 0 else {"redrawn": int(getattr(part, "redrawn", 0))})
        version = catalog.next_stats_version(workload_id)
        catalog.write_sketches(workload_id, version, released, n_records, hash_seed,
                               release.sigma, kind=release.kind)
        counts = released_label_counts(released, release.kind, n_classes=dataset.n_classes,
                                       hash_seed=hash_seed, noisy=release.sigma > 0)
        a_paper, a_dir, entropy = _heterogeneity(counts)
        s_bytes = release.cells * BYTES_PER_CELL
        m_bytes = model_bytes(workload.model, dataset.input_shape, dataset.n_classes)
        if release.sigma > 0:
            _record_release(catalog, workload_id, version, release, dp_eps, dp_delta)
        row = {
            "workload_id": workload_id, "stats_version": version,
            "n_clients": workload.clients, "n_classes": dataset.n_classes,
            "n_records": int(n_records.sum()), "release_kind": release.kind,
            "sketch_eps": workload.sketch_eps, "sketch_delta": workload.sketch_delta,
            "depth": release.depth, "width": release.width,
            "alpha_paper": a_paper, "alpha_dirichlet": a_dir, "label_entropy": entropy,
            "sketch_bytes": s_bytes, "model_bytes": m_bytes,
            "stats_overhead": s_bytes / m_bytes if m_bytes else None,
            "dp_epsilon": dp_eps, "dp_delta": dp_delta,
        }
        catalog.insert_row("workload_stats", row)
    return WorkloadStats.from_row(row)


def exact_release(labels, n_classes: int, release: LabelRelease, *, eps: float, delta: float,
                  seed: int) -> np.ndarray:
    """Exact cells of every client's release, shape ``(n_clients, depth, width)``, int64.

    ``labels`` holds one label array per client. A histogram is ``bincount`` over the classes
    (depth 1); a sketch is the client's Count-Min sketch with hash seed ``seed``.
    """
    if release.kind == HISTOGRAM:
        return np.stack([np.bincount(np.asarray(y, dtype=np.int64), minlength=n_classes)
                         for y in labels])[:, None, :].astype(np.int64)
    return np.stack([sketch_labels(y, n_classes, eps=eps, delta=delta, seed=seed).counts
                     for y in labels]).astype(np.int64)


def released_record_counts(released: np.ndarray) -> np.ndarray:
    """Per-client record counts estimated from released cells ``(n_clients, depth, width)``.

    Every row of a client's release sums to its record count, so the mean row sum (the sum for a
    histogram) estimates it without bias; rounded and clipped at 0. Computed from the release
    alone, it is post-processing and costs no privacy.
    """
    arr = np.asarray(released, dtype=np.float64)
    if arr.ndim != 3:
        raise ValidationError(f"released cells must have shape (n_clients, depth, width), "
                              f"got {arr.shape}")
    mean_row = arr.sum(axis=2).mean(axis=1)
    return np.maximum(0.0, np.floor(mean_row + 0.5)).astype(np.int64)


def released_label_counts(released: np.ndarray, kind: str, *, n_classes: int, hash_seed: int,
                          noisy: bool) -> np.ndarray:
    """Per-client class counts ``(n_clients, n_classes)`` (float, >= 0) from released cells.

    A histogram's cells are the counts (noised ones clipped at 0). A sketch is queried for
    classes 0..C-1: minimum over rows when exact, median over rows when noised.
    """
    arr = np.asarray(released)
    if arr.ndim != 3:
        raise ValidationError(f"released cells must have shape (n_clients, depth, width), "
                              f"got {arr.shape}")
    if kind == HISTOGRAM:
        if arr.shape[1:] != (1, n_classes):
            raise ValidationError(f"a histogram release of {n_classes} classes has shape "
                                  f"(n_clients, 1, {n_classes}), got {arr.shape}")
        return np.clip(arr[:, 0, :].astype(np.float64), 0.0, None)
    if kind != COUNT_MIN:
        raise ValidationError(f"release kind must be '{COUNT_MIN}' or '{HISTOGRAM}', "
                              f"got {kind!r}")
    est = "median" if noisy else "min"
    _, depth, width = arr.shape
    return np.stack([estimate_counts(CountMinSketch(depth, width, hash_seed, counts=c),
                                     n_classes, estimator=est) for c in arr])


def read_label_counts(catalog: Catalog, workload_id: int, stats_version: int) -> np.ndarray:
    """Per-client class counts of one statistics version, whatever the release kind.

    The reader for anything that needs label counts from the catalog: it decodes sketches and
    histograms alike (see :func:`released_label_counts`).
    """
    stats = catalog.query("SELECT n_classes FROM airplan.workload_stats WHERE workload_id = ? "
                          "AND stats_version = ?", [int(workload_id), int(stats_version)])
    if not stats:
        raise CatalogError(f"catalog {catalog.path} has no statistics for workload "
                           f"{workload_id}, stats version {stats_version}")
    sk = catalog.read_sketches(workload_id, stats_version)
    return released_label_counts(sk.counts, sk.kind, n_classes=int(stats[0]["n_classes"]),
                                 hash_seed=sk.hash_seed, noisy=sk.noise_sigma > 0)


def _heterogeneity(counts: np.ndarray) -> tuple[float | None, float | None, float | None]:
    keep = counts.sum(axis=1) > 0
    if keep.sum() < 2:
        return None, None, None
    counts = counts[keep]
    a_dir = dirichlet_alpha(counts)
    return (float(paper_alpha(counts)), float(a_dir) if np.isfinite(a_dir) else None,
            float(label_entropy(counts)))


def _record_release(catalog: Catalog, workload_id: int, version: int, release: LabelRelease,
                    epsilon: float, delta: float) -> None:
    """Ledger row for this release; cumulative (eps, delta) over all of the workload's releases.

    Each record lives on one client, so the per-client releases of one version compose in
    parallel; releases of different versions of the same data compose sequentially (exactly, as
    one Gaussian mechanism at the combined noise).
    """
    previous = catalog.query("SELECT sigma, sensitivity FROM airplan.privacy_ledger "
                             "WHERE workload_id = ? ORDER BY release_id", [workload_id])
    acct = GaussianAccountant(target_delta=delta)
    for p in previous:
        acct = acct.record(p["sigma"], sensitivity=p["sensitivity"])
    acct = acct.record(release.sigma, sensitivity=release.sensitivity)
    cum_eps = float(acct.epsilon())
    if release.kind == HISTOGRAM:
        what = f"label histogram ({release.width} cells), L2 sensitivity 1 per record"
    else:
        what = (f"Count-Min sketch cells ({release.depth} x {release.width}), L2 sensitivity "
                f"sqrt({release.depth}) per record")
    catalog.insert_row("privacy_ledger", {
        "workload_id": workload_id, "stats_version": version, "mechanism": "gaussian",
        "sensitivity": release.sensitivity, "sigma": release.sigma, "epsilon": epsilon,
        "delta": delta, "cumulative_epsilon": cum_eps, "cumulative_delta": delta,
        "note": f"{what} (add/remove adjacency); record counts derived from the noised cells"})
