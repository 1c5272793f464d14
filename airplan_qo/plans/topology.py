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

from ..errors import ValidationError
from .families import FAMILIES, build_graph, build_rounds, union_graph, validate_n
from .graphs import directed_links, edge_arrays, edge_weights
from .mixing import DEFAULT_WEIGHTS, PRESCRIBED, WEIGHTS
from .schedule import Schedule, directed_schedule, ota_schedule
from .spectra import (SpectralStats, complete_stats, graph_lambda2, periodic_spectral_stats,
                      spectral_stats)


#: Parameters left out of a spec's label: filled in by the planner from the workload's statistics
#: (still part of the spec's identity; a label names the same choice for every seed and
#: statistics version, as the evaluation's per-plan summaries need).
_UNLABELLED = frozenset({"cliques", "residual", "stats"})


def _freeze_params(params: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(dict(params or {}).items()))


def parse_topology(item: Any) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """``"small_world(k=4)"``, ``"ring"``, ``{"family": "small_world", "k": 4}`` (a grid's
    TOML table), a networkx graph or a scipy sparse adjacency matrix (both planned as
    ``from_edges``) to ``(family, ((param, value), ...))``: how grids and the Python API name a
    topology with its parameters."""
    graph = as_graph(item)
    if graph is not None:
        return "from_edges", (("edges", graph),)
    if isinstance(item, dict):
        params = dict(item)
        family = params.pop("family", None)
        if not isinstance(family, str):
            raise ValidationError(f"a topology table needs a 'family' string, got {item!r}")
        return family.strip().lower(), tuple(sorted(params.items()))
    if not isinstance(item, str):
        raise ValidationError(f"a topology is a string like 'small_world(k=4)', a table, or a "
                              f"networkx graph (planned as from_edges), got {item!r}; for an "
                              f"edge list use from_edges(edges='FILE') or a networkx graph")
    name, sep, rest = item.strip().partition("(")
    params: dict[str, Any] = {}
    if sep:
        if not rest.endswith(")"):
            raise ValidationError(f"topology {item!r}: expected NAME or NAME(key=value, ...)")
        for part in rest[:-1].split(","):
            if not part.strip():
                continue
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValidationError(f"topology {item!r}: parameter {part.strip()!r} is not "
                                      "key=value")
            params[key.strip()] = _literal(value.strip())
    if not name.strip():
        raise ValidationError(f"topology {item!r} has no family name")
    return name.strip().lower(), tuple(sorted(params.items()))


def as_graph(item: Any) -> nx.Graph | None:
    """``item`` as an undirected networkx graph when it is one (or a scipy sparse adjacency
    matrix), else None. A directed graph is refused: the plan space is undirected."""
    if isinstance(item, nx.Graph):
        if item.is_directed():
            raise ValidationError("a directed graph cannot be a topology (links are used both "
                                  "ways); pass G.to_undirected() to plan it as from_edges")
        return item
    if sp.issparse(item):
        if item.shape[0] != item.shape[1]:
            raise ValidationError(f"an adjacency matrix must be square, got shape {item.shape}")
        return nx.from_scipy_sparse_array(sp.csr_array(item))
    return None


def _literal(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("'\"")



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
        """Validate names and parameters and fill the family's defaults. A periodic family's
        mixing matrices are part of its construction: any weights rule named for it is replaced
        by ``prescribed`` (as every rule gives 11^T/n on the complete graph)."""
        fam = FAMILIES.get(family)
        if not (fam.periodic and str(weights).lower() == PRESCRIBED):
            WEIGHTS.get(weights)
        n = validate_n(n)
        return cls(fam.name, n, fam.resolve(n, params), int(seed),
                   PRESCRIBED if fam.periodic else weights.lower())

    @classmethod
    def fully_connected(cls, n: int, seed: int = 0) -> "TopologySpec":
        """The topology of the fully connected reference (``fc``): the complete graph with
        Metropolis-Hastings weights; also where a tail on the complete graph mixes."""
        return cls.create("complete", n, seed=seed, weights="metropolis_hastings")

    @property
    def periodic(self) -> bool:
        """Whether the topology changes from round to round (one period of graphs and W_t)."""
        return FAMILIES.get(self.family).periodic

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def params_json(self) -> str:
        """Canonical JSON of the parameters (the catalog cache key)."""
        return json.dumps({k: (str(v) if isinstance(v, (Path, nx.Graph)) else v)
                           for k, v in self.params}, sort_keys=True)

    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params
                          if not isinstance(v, (Path, nx.Graph)) and k not in _UNLABELLED)
        return f"{self.family}({shown})" if shown else self.family


@attrs.frozen
class PhaseStats:
    """One round of a periodic topology, as the per-round cost accounting reads it."""

    links: int                          # directed links (transmitter -> receiver)
    slots: int                          # OTA slots that hold a receiver
    receivers: int                      # clients that receive from someone this round
    in_degrees: tuple[tuple[int, int], ...]   # (in-degree, receivers with it)


@attrs.frozen
class TopologyStats:
    """Everything the planner needs to know about one topology.

    A periodic topology also carries one :class:`PhaseStats` per round of its period; its
    ``slots_per_round`` is then the mean over the period (it may be fractional).
    """

    spec: TopologySpec
    spectra: SpectralStats
    slots_per_round: int | float
    slots_lower_bound: int
    compute_ms: float
    phases: tuple[PhaseStats, ...] = ()

    @property
    def period(self) -> int:
        return max(1, len(self.phases))

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
            "period": self.period,
            **({"period_rho": s.period_rho,
                "slots_by_round": [ph.slots for ph in self.phases]} if self.phases else {}),
        }


@attrs.frozen
class RoundTopology:
    """One round of a periodic topology: its graph (undirected support), W_t (doubly
    stochastic, possibly asymmetric) and its OTA schedule."""

    graph: nx.Graph = attrs.field(eq=False)
    weights: sp.csr_matrix = attrs.field(eq=False)
    schedule: Schedule

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        return edge_arrays(self.graph)


@attrs.frozen
class Topology:
    """A built topology: spec, graph, mixing matrix W and its OTA schedule.

    A periodic topology (``rounds`` not empty) mixes over ``rounds[t mod period]`` in round t;
    its ``graph`` is the union of the rounds' graphs and it has no single ``weights`` or
    ``schedule`` (None): read them per round with :meth:`at`.
    """

    spec: TopologySpec
    graph: nx.Graph = attrs.field(eq=False)
    weights: sp.csr_matrix | None = attrs.field(eq=False)
    schedule: Schedule | None
    rounds: tuple[RoundTopology, ...] = attrs.field(default=(), eq=False)

    @property
    def period(self) -> int:
        return max(1, len(self.rounds))

    def at(self, t: int) -> "Topology | RoundTopology":
        """What round t (0-based) mixes over: the topology itself when static."""
        return self.rounds[t % len(self.rounds)] if self.rounds else self

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        return edge_arrays(self.graph)


def round_schedule(graph: nx.Graph, w: sp.spmatrix) -> Schedule:
    """The OTA schedule of one round of a periodic topology: a colouring of the conflicts of the
    round's links (:func:`.schedule.directed_schedule`; G^2 over the receivers when W_t is
    symmetric)."""
    recv, send, _edge, _w = directed_links(graph, w)
    return directed_schedule(graph.number_of_nodes(), recv, send)


def build(spec: TopologySpec) -> Topology:
    if spec.periodic:
        rounds = build_rounds(spec.family, spec.n, seed=spec.seed, **spec.param_dict)
        return Topology(spec, union_graph(rounds), None, None, tuple(
            RoundTopology(r.graph, r.weights, round_schedule(r.graph, r.weights))
            for r in rounds))
    graph = build_graph(spec.family, spec.n, seed=spec.seed, **spec.param_dict)
    w = WEIGHTS.get(spec.weights)(graph)
    return Topology(spec, graph, w, ota_schedule(graph))


def phase_stats(r: RoundTopology) -> PhaseStats:
    """The accounting figures of one round of a periodic topology."""
    n = r.graph.number_of_nodes()
    recv, _send, _edge, _w = directed_links(r.graph, r.weights)
    indeg = np.bincount(recv, minlength=n)
    hist = np.bincount(indeg[indeg > 0])
    slot_of = r.schedule.slot_of()
    return PhaseStats(links=int(recv.size), slots=int(np.unique(slot_of[indeg > 0]).size),
                      receivers=int((indeg > 0).sum()),
                      in_degrees=tuple((int(g), int(c)) for g, c in enumerate(hist) if c))


def _periodic_stats(spec: TopologySpec, topo: Topology, start: float) -> TopologyStats:
    phases = tuple(phase_stats(r) for r in topo.rounds)
    spectra = periodic_spectral_stats(topo.rounds, drawn=FAMILIES.get(spec.family).drawn)
    slots = float(np.mean([ph.slots for ph in phases]))
    return TopologyStats(spec, spectra, int(slots) if slots.is_integer() else slots,
                         min(r.schedule.lower_bound for r in topo.rounds),
                         (time.perf_counter() - start) * 1e3, phases)


def describe(spec: TopologySpec) -> tuple[Topology, TopologyStats]:
    """Build the topology and compute its statistics (timed, for the catalog's cache)."""
    start = time.perf_counter()
    topo = build(spec)
    if topo.rounds:
        return topo, _periodic_stats(spec, topo, start)
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
        if first.periodic:      # one spec per graph: the weights are the family's own
            for spec in members:
                topo = build(spec)
                out[spec] = (_periodic_stats(spec, topo, time.perf_counter()), None)
            continue
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
                arrays = WeightArrays(u, v, edge_weights(graph, w), w.diagonal())
            out[spec] = (TopologyStats(spec, spectra, schedule.slots_per_round,
                                       schedule.lower_bound,
                                       shared_ms + (time.perf_counter() - t0) * 1e3), arrays)
    return [out[s] for s in specs]
