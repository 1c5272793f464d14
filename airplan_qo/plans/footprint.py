"""What a candidate topology costs in memory to plan, and what a run costs to train, before
either is attempted.

The planner builds every candidate graph, colours its square for the OTA schedule and computes
its spectra. At large N a dense family can need far more memory than the machine has (G(n, p)
with p = 0.2 at N = 100 000 has 10^9 edges), and finding out by trying means minutes of work and
then a failed allocation. :func:`planning_bytes` estimates the peak from the expected edge count
of the family's parameters; :func:`split_by_memory` keeps the specs that fit in the available
memory and names the others, which the optimizer skips with a warning (or refuses, when none
fits). The constants are measured peaks (``tracemalloc``) of ``describe_many``: 440-1240 bytes per
edge of G (erdos_renyi n = 3000, ring n = 200 000, small_world n = 50 000, clustered
n = 20 000), rounded up; and per edge of G^2, about 60 when G^2 was the sum of two float64
matrices, now 12-23 (peak RSS at N = 1e5 of the exponential graph and of G(n, 4 ln n / n),
whose square has 1.07e8 edges: 3.6 GiB against 13.6 estimated with 100 per edge), so 40.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .families import EXACT_CROSS_MAX_N

#: Bytes per edge of G while a candidate is planned (graph, weights, spectra), rounded up.
BYTES_PER_EDGE = 1500
#: Bytes per edge of G^2 (the OTA schedule colours the square graph).
BYTES_PER_SQUARE_EDGE = 40
#: Bytes per node on top (arrays, schedule, eigenvectors).
BYTES_PER_NODE = 3000
#: Share of the available memory a plan may use.
MEMORY_SHARE = 0.8
#: Training records of the shipped datasets with their default options (train split).
TRAIN_RECORDS = {"digits": 1438, "synthetic": 4800, "mnist1d": 20_000, "leaf_synthetic": 21_000,
                 "cifar10": 50_000, "cifar100": 50_000,
                 "tiny_imagenet": 100_000}


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux ``MemAvailable``), or None
    when the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def expected_edges(family: str, n: int, params: dict[str, Any]) -> float:
    """The expected number of edges of a family's graph on n nodes with ``params`` (resolved,
    defaults filled in)."""
    pairs = n * (n - 1) / 2
    if family in ("ring", "torus"):
        return float(n if family == "ring" else 2 * n)
    if family == "complete":
        return pairs
    if family == "star":
        return float(n - 1)
    if family == "erdos_renyi":
        return params["p"] * pairs
    if family == "small_world":
        return n * params["k"] / 2
    if family == "k_regular":
        return n * params["d"] / 2
    if family == "exponential":
        return n * max(1.0, math.log2(max(n, 2)))
    if family == "clustered":
        c = params["c"]
        sizes = [n // c + (1 if i < n % c else 0) for i in range(c)]
        inside = sum(s * (s - 1) / 2 for s in sizes)
        return params["p_in"] * inside + params["bridges"] * c + params["p_out"] * (pairs - inside)
    if family == "d_cliques":
        s = params.get("size") or min(n, 10)
        m = math.ceil(n / s)
        inter = m * max(2.0, math.log2(max(m, 2))) / 2 if params.get("inter") == "small_world" \
            else float(m)
        return n * (s - 1) / 2 + inter
    if family in ("one_peer_exponential", "base_k"):
        # every round's graph, plus their union: n links per one-peer round; at most n k / 2
        # edges per base_k round over about 2 log_(k+1) n + 2 rounds
        k = params.get("k", 1)
        rounds = (math.ceil(math.log2(max(n, 2))) if family == "one_peer_exponential"
                  else 2 * math.log(max(n, 2), k + 1) + 2)
        return 2.0 * rounds * (n if family == "one_peer_exponential" else n * k / 2)
    if family == "from_edges":
        edges = params.get("edges")
        return float(edges.number_of_edges()) if hasattr(edges, "number_of_edges") else float(n)
    return pairs  # an unknown family: assume the worst


def planning_bytes(spec) -> int:
    """Estimated peak bytes of building and describing ``spec`` (a TopologySpec). The complete
    graph is closed-form: nothing is built."""
    from .families import FAMILIES

    n = spec.n
    if spec.family == "complete":
        return 0
    params = FAMILIES.get(spec.family).resolve(n, spec.param_dict)
    edges = expected_edges(spec.family, n, params)
    mean_degree = 2 * edges / max(n, 1)
    square = min(n * (n - 1) / 2, n * (mean_degree ** 2 + mean_degree) / 2)
    extra = 0.0
    if spec.family == "clustered" and params["p_out"] > 0 and n <= EXACT_CROSS_MAX_N:
        extra = 40.0 * n * (n - 1) / 2   # the exact bridge draw lists every pair
    return int(BYTES_PER_EDGE * edges + BYTES_PER_SQUARE_EDGE * square + BYTES_PER_NODE * n
               + extra)


def split_by_memory(specs: list, available: int | None = None
                    ) -> tuple[list, list[tuple[Any, int]], int | None]:
    """(specs that fit, [(spec, estimated bytes)] that do not, the budget in bytes or None).

    The budget is :data:`MEMORY_SHARE` of :func:`available_memory` (unless ``available`` is
    given); with no budget known, every spec fits.
    """
    if available is None:
        available = available_memory()
    if available is None:
        return list(specs), [], None
    budget = int(MEMORY_SHARE * available)
    fits, skipped = [], []
    for spec in specs:
        need = planning_bytes(spec)
        if need <= budget:
            fits.append(spec)
        else:
            skipped.append((spec, need))
    return fits, skipped, budget


def gib(nbytes: float) -> str:
    """A byte count as '37.3 GiB' (or MiB below one GiB)."""
    if nbytes >= 2 ** 30:
        return f"{nbytes / 2 ** 30:.1f} GiB"
    return f"{nbytes / 2 ** 20:.0f} MiB"


#: Stacked N x d tensors each algorithm keeps beside the models, momentum, gradients and a
#: scratch copy: CHOCO's public copies and aggregates, paper_literal's previous models and
#: memory, gradient tracking's tracking variable and previous gradients, FedProx's anchor (the
#: models the round started from); push-sum's weights are one number per client.
EXTRA_TENSORS = {"choco": 2, "paper_literal": 2, "gradient_tracking": 2, "fedprox": 1}


def training_bytes(n: int, d: int, algorithm: str, transport: str = "ota", bits: int = 32,
                   *, held: int | None = None, trained: int | None = None) -> int:
    """Estimated bytes of the stacked training state of n clients with d parameters (float32):
    models, momentum, gradients and a scratch copy, the algorithm's own state
    (:data:`EXTRA_TENSORS`), and for a quantised digital plan (bits < 32) the public copy of
    each vector it sends, its differences being taken against them. One process of a run
    split over several holds ``held`` clients' rows of the models, the scratch copy and the
    rule's state and trains ``trained`` (their momentum and gradients); both default to n."""
    from .operators import payload_vectors

    tensors = 4 + EXTRA_TENSORS.get(algorithm, 0)
    if transport == "digital" and bits < 32:
        tensors += payload_vectors(algorithm)
    held = n if held is None else held
    trained = n if trained is None else trained
    return int(((tensors - 2) * held + 2 * trained) * 4 * d)


def more_clients_than_records(dataset: str, clients: int) -> str | None:
    """A warning when the dataset (with its default options) has fewer training records than
    there are clients, so that most clients would hold none; None otherwise."""
    records = TRAIN_RECORDS.get(str(dataset).lower())
    if records is None or clients <= records:
        return None
    return (f"{clients} clients but {dataset} has about {records} training records: most "
            "clients would hold no data, and training needs at least one record per client")
