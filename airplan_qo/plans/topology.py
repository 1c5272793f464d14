"""A physical topology: family + parameters + seed + weights rule, and its computed statistics.

``TopologySpec`` is the plan-space value; ``describe`` builds the graph and W and computes the
spectra and the OTA schedule as one ``TopologyStats`` value (what the catalog caches and the CLI
prints).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import attrs
import networkx as nx
import numpy as np
import scipy.sparse as sp

from .families import FAMILIES, build_graph, validate_n
from .mixing import DEFAULT_WEIGHTS, WEIGHTS, edge_arrays
from .schedule import Schedule, ota_schedule
from .spectra import SpectralStats, complete_stats, graph_lambda2, spectral_stats


#: Parameters left out of a spec's label (too long to show; still part of its identity).
_UNLABELLED = frozenset({"cliques", "residual"})
#: Parameters left out of a spec's label while unset.
_UNLABELLED_IF_UNSET = frozenset({"stats"})


def _freeze_params(params: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(dict(params or {}).items()))


@attrs.frozen
class TopologySpec:
    """What to build: family, number of clients, resolved parameters, seed and weights rule."""

    family: str
    n: int = attrs.field(converter=validate_n)
    params: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_freeze_params)
    seed: int = 0
    weights: str = DEFAULT_WEIGHTS

    @classmethod
    def create(cls, family: str, n: int, *, seed: int = 0, weights: str = DEFAULT_WEIGHTS,
               **params: Any) -> "TopologySpec":
        """Validate names and parameters and fill the family's defaults."""
        fam = FAMILIES.get(family)
        WEIGHTS.get(weights)
        n = validate_n(n)
        return cls(fam.name, n, fam.resolve(n, params), int(seed), weights.lower())

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def params_json(self) -> str:
        """Canonical JSON of the parameters (the catalog cache key)."""
        return json.dumps({k: (str(v) if isinstance(v, (Path, nx.Graph)) else v)
                           for k, v in self.params}, sort_keys=True)

    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params
                          if not isinstance(v, (Path, nx.Graph)) and k not in _UNLABELLED
                          and not (k in _UNLABELLED_IF_UNSET and v is None))
        return f"{self.family}({shown})" if shown else self.family


@attrs.frozen
class TopologyStats:
    """Everything the planner needs to know about one topology."""

    spec: TopologySpec
    spectra: SpectralStats
    slots_per_round: int
    slots_lower_bound: int
    compute_ms: float

    def as_dict(self) -> dict[str, Any]:
        s = self.spectra
        return {
            "family": self.spec.family,
            "params": json.loads(self.spec.params_json()),
            "n_nodes": s.n_nodes,
            "n_edges": s.n_edges,
            "max_degree": s.max_degree,
            "mean_degree": s.mean_degree,
            "lambda2_laplacian": s.lambda2_laplacian,
            "lambda2_normalized": s.lambda2_normalized,
            "mixing_rho": s.mixing_rho,
            "mixing_gap": s.mixing_gap,
            "mixing_p": s.mixing_p,
            "weights": self.spec.weights,
            "slots_per_round": self.slots_per_round,
            "slots_lower_bound": self.slots_lower_bound,
            "seed": self.spec.seed,
            "spectral_method": s.method,
        }


@attrs.frozen
class Topology:
    """A built topology: spec, graph, mixing matrix W and its OTA schedule."""

    spec: TopologySpec
    graph: nx.Graph = attrs.field(eq=False)
    weights: sp.csr_matrix = attrs.field(eq=False)
    schedule: Schedule

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        return edge_arrays(self.graph)


def build(spec: TopologySpec) -> Topology:
    graph = build_graph(spec.family, spec.n, seed=spec.seed, **spec.param_dict)
    w = WEIGHTS.get(spec.weights)(graph)
    return Topology(spec, graph, w, ota_schedule(graph))


def describe(spec: TopologySpec) -> tuple[Topology, TopologyStats]:
    """Build the topology and compute its statistics (timed, for the catalog's cache)."""
    start = time.perf_counter()
    topo = build(spec)
    spectra = spectral_stats(topo.graph, topo.weights, family=spec.family)
    stats = TopologyStats(spec, spectra, topo.schedule.slots_per_round,
                          topo.schedule.lower_bound, (time.perf_counter() - start) * 1e3)
    return topo, stats


@attrs.frozen
class WeightArrays:
    """W on a graph as arrays: edges (u < v), their weights, and the self weights."""

    src: np.ndarray
    dst: np.ndarray
    edge_weights: np.ndarray
    self_weights: np.ndarray


def describe_many(specs: list[TopologySpec], *, max_edges_kept: int = 0
                  ) -> list[tuple[TopologyStats, WeightArrays | None]]:
    """Statistics of many specs; the graph, its schedule and its Laplacian spectra are computed
    once per (family, n, params, seed) and shared by the weights rules. The complete graph is
    closed-form at every n (W = 11^T/n under every rule; every receiver needs its own slot).
    W's arrays are returned for graphs of at most ``max_edges_kept`` edges (for the cache)."""
    out: dict[TopologySpec, tuple[TopologyStats, WeightArrays | None]] = {}
    groups: dict[tuple, list[TopologySpec]] = {}
    for spec in specs:
        groups.setdefault((spec.family, spec.n, spec.params, spec.seed), []).append(spec)
    for (family, n, _params, _seed), members in groups.items():
        start = time.perf_counter()
        if family == "complete":
            for spec in members:
                out[spec] = (TopologyStats(spec, complete_stats(n), n, n,
                                           (time.perf_counter() - start) * 1e3), None)
            continue
        first = members[0]
        graph = build_graph(family, n, seed=first.seed, **first.param_dict)
        schedule = ota_schedule(graph)
        lam = graph_lambda2(graph, family)
        shared_ms = (time.perf_counter() - start) * 1e3
        u, v = edge_arrays(graph)
        for spec in members:
            t0 = time.perf_counter()
            w = WEIGHTS.get(spec.weights)(graph)
            spectra = spectral_stats(graph, w, family=family, laplacian_lambda2=lam)
            arrays = None
            if len(u) <= max_edges_kept:
                arrays = WeightArrays(u, v, np.asarray(w[u, v]).ravel(), w.diagonal())
            out[spec] = (TopologyStats(spec, spectra, schedule.slots_per_round,
                                       schedule.lower_bound,
                                       shared_ms + (time.perf_counter() - t0) * 1e3), arrays)
    return [out[s] for s in specs]
