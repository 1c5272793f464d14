"""ANALYZE WORKLOAD: per-client label sketches and the statistics the planner reads.

For a workload (dataset, clients, partition, alpha, seed) this partitions the dataset exactly as
the runtime will, builds one Count-Min sketch of each client's labels, optionally releases the
sketches through the Gaussian mechanism (recorded in the privacy ledger), estimates heterogeneity
from the released sketches (the paper's KL proxy and a Dirichlet-multinomial MLE), and stores all
of it in one transaction under a new ``stats_version``. Re-analysing with the same settings
returns the stored statistics: no second release, no new rows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import numpy as np

from ..data import load, partition
from ..errors import ValidationError
from .heterogeneity import dirichlet_alpha, label_entropy, paper_alpha
from .privacy import GaussianAccountant, calibrate_sketch_sigma, privatize_sketch, sketch_sensitivity
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
    from ..runtime.model_size import parameter_count

    return BYTES_PER_PARAM * int(parameter_count(model, tuple(input_shape), n_classes))


def analyze_workload(catalog: Catalog, workload: Any) -> WorkloadStats:
    """Analyse ``workload`` (a :class:`~airplan_qo.plans.workload.Workload`) into the catalog."""
    dataset = load(workload.dataset, seed=workload.seed)
    part = partition(workload.partition, dataset.y_train, workload.clients, seed=workload.seed,
                     **({"alpha": workload.alpha} if workload.partition == "dirichlet" else {}))
    alpha = workload.alpha if workload.partition == "dirichlet" else None
    fingerprint = workload_fingerprint(workload.dataset, workload.clients, workload.partition,
                                       alpha, workload.seed)
    depth, width = dimensions(workload.sketch_eps, workload.sketch_delta)
    dp_eps = workload.dp_epsilon
    dp_delta = workload.dp_delta if dp_eps is not None else None

    existing = catalog.find_workload(fingerprint)
    if existing is not None:
        rows = catalog.query(
            "SELECT * FROM airplan.workload_stats WHERE workload_id = ? AND sketch_eps = ? "
            "AND sketch_delta = ? AND dp_epsilon IS NOT DISTINCT FROM ? "
            "AND dp_delta IS NOT DISTINCT FROM ? ORDER BY stats_version DESC LIMIT 1",
            [existing["workload_id"], workload.sketch_eps, workload.sketch_delta, dp_eps,
             dp_delta])
        if rows:
            return WorkloadStats.from_row(rows[0], reused=True)

    labels = [dataset.y_train[idx] for idx in part.indices]
    for client, y in enumerate(labels):
        if len(y) == 0:
            raise ValidationError(f"client {client} has no samples; cannot sketch an empty client")
    sketches = np.stack([
        sketch_labels(y, dataset.n_classes, eps=workload.sketch_eps,
                      delta=workload.sketch_delta, seed=workload.seed).counts
        for y in labels])
    n_records = np.array([len(y) for y in labels], dtype=np.int64)
    sigma = 0.0
    if dp_eps is not None:
        sigma = calibrate_sketch_sigma(dp_eps, dp_delta, depth)

    with catalog.transaction():
        workload_id = register_workload(
            catalog, workload, options={"redrawn": int(getattr(part, "redrawn", 0))})
        version = catalog.next_stats_version(workload_id)
        released = sketches
        if sigma > 0:
            rng = np.random.default_rng([workload.seed, version, 0xD9])
            released = privatize_sketch(sketches, sigma, rng)
        catalog.write_sketches(workload_id, version, released, n_records, workload.seed, sigma)
        counts = _estimated_counts(released, depth, width, workload.seed, dataset.n_classes,
                                   noisy=sigma > 0)
        a_paper, a_dir, entropy = _heterogeneity(counts)
        s_bytes = depth * width * BYTES_PER_CELL
        m_bytes = model_bytes(workload.model, dataset.input_shape, dataset.n_classes)
        if sigma > 0:
            _record_release(catalog, workload_id, version, depth, sigma, dp_eps,
                                         dp_delta)
        row = {
            "workload_id": workload_id, "stats_version": version,
            "n_clients": workload.clients, "n_classes": dataset.n_classes,
            "n_records": int(n_records.sum()), "sketch_eps": workload.sketch_eps,
            "sketch_delta": workload.sketch_delta, "depth": depth, "width": width,
            "alpha_paper": a_paper, "alpha_dirichlet": a_dir, "label_entropy": entropy,
            "sketch_bytes": s_bytes, "model_bytes": m_bytes,
            "stats_overhead": s_bytes / m_bytes if m_bytes else None,
            "dp_epsilon": dp_eps, "dp_delta": dp_delta,
        }
        catalog.insert_row("workload_stats", row)
    return WorkloadStats.from_row(row)


def _estimated_counts(released: np.ndarray, depth: int, width: int, seed: int, n_classes: int,
                      *, noisy: bool) -> np.ndarray:
    est = "median" if noisy else "min"
    return np.stack([estimate_counts(CountMinSketch(depth, width, seed, counts=c), n_classes,
                                     estimator=est) for c in released])


def _heterogeneity(counts: np.ndarray) -> tuple[float | None, float | None, float | None]:
    keep = counts.sum(axis=1) > 0
    if keep.sum() < 2:
        return None, None, None
    counts = counts[keep]
    a_dir = dirichlet_alpha(counts)
    return (float(paper_alpha(counts)), float(a_dir) if np.isfinite(a_dir) else None,
            float(label_entropy(counts)))


def _record_release(catalog: Catalog, workload_id: int, version: int, depth: int, sigma: float,
                    epsilon: float, delta: float) -> None:
    """Ledger row for this release; cumulative (eps, delta) over all of the workload's releases.

    Each record lives on one client, so the per-client releases of one version compose in
    parallel; releases of different versions of the same data compose sequentially (exactly, as
    one Gaussian mechanism at the combined noise).
    """
    sens = sketch_sensitivity(depth)
    previous = catalog.query("SELECT sigma, sensitivity FROM airplan.privacy_ledger "
                             "WHERE workload_id = ? ORDER BY release_id", [workload_id])
    acct = GaussianAccountant(target_delta=delta)
    for p in previous:
        acct = acct.record(p["sigma"], sensitivity=p["sensitivity"])
    acct = acct.record(sigma, sensitivity=sens)
    cum_eps = float(acct.epsilon())
    catalog.insert_row("privacy_ledger", {
        "workload_id": workload_id, "stats_version": version, "mechanism": "gaussian",
        "sensitivity": sens, "sigma": sigma, "epsilon": epsilon, "delta": delta,
        "cumulative_epsilon": cum_eps, "cumulative_delta": delta,
        "note": f"Count-Min sketch cells, L2 sensitivity sqrt({depth}) per record"})
