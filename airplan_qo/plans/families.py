"""Topology families: named, seeded graph generators that form the plan space's first axis.

Each family is a pure function ``(n, *, seed, **params) -> networkx.Graph`` with nodes 0..n-1,
connected by construction or by seeded resampling (else a clear error). Parameters are declared
with their defaults and allowed ranges so the CLI, the SQL binder and the enumerator validate
them the same way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import attrs
import networkx as nx
import numpy as np

from ..errors import PlanningError, ValidationError
from ..registry import Registry, suggest

MAX_RESAMPLES = 1000


@attrs.frozen
class Param:
    """A declared family parameter: type, default (a value or a function of n) and range check."""

    name: str
    kind: type
    default: Any
    doc: str
    check: Callable[[Any, int], str | None] = lambda v, n: None

    def default_for(self, n: int) -> Any:
        return self.default(n) if callable(self.default) else self.default


@attrs.frozen
class Family:
    """A topology family: its generator and its declared parameters."""

    name: str
    build: Callable[..., nx.Graph]
    params: tuple[Param, ...]
    doc: str
    #: A periodic family builds one graph and mixing matrix per round of its period
    #: (:mod:`.periodic`) instead of one graph; its weights are its own (``prescribed``).
    periodic: bool = False
    #: A periodic family whose rounds are independent draws of one random graph (not a fixed
    #: cycle): its per-round mixing is the expected one-round contraction (:mod:`.spectra`).
    drawn: bool = False

    def resolve(self, n: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Fill defaults, coerce types and validate ranges; unknown keys are an error."""
        params = dict(params or {})
        known = {p.name: p for p in self.params}
        for key in params:
            if key not in known:
                hint = suggest(key, list(known))
                allowed = ", ".join(known) or "none"
                raise ValidationError(
                    f"unknown parameter '{key}' for topology '{self.name}'{hint}; allowed: {allowed}")
        out: dict[str, Any] = {}
        for p in self.params:
            value = params[p.name] if p.name in params else p.default_for(n)
            if value is not None:
                value = _coerce(self.name, p, value)
                problem = p.check(value, n)
                if problem:
                    raise ValidationError(
                        f"parameter '{p.name}' of topology '{self.name}' {problem}, got {value!r}")
            out[p.name] = value
        return out


def _coerce(family: str, p: Param, value: Any) -> Any:
    if p.kind is Path or p.kind is object:
        return value
    try:
        if p.kind is int:
            f = float(value)
            if not f.is_integer():
                raise ValueError
            return int(f)
        return p.kind(value)
    except (TypeError, ValueError):
        raise ValidationError(
            f"parameter '{p.name}' of topology '{family}' must be {p.kind.__name__}, got {value!r}"
        ) from None


FAMILIES: Registry[Family] = Registry("topology family")


def family(name: str, *params: Param, periodic: bool = False, drawn: bool = False):
    """Register a generator function as a family with declared parameters; a ``periodic``
    family's generator returns the rounds of its period (:class:`.periodic.Round` values)."""

    def wrap(fn: Callable[..., nx.Graph]) -> Callable[..., nx.Graph]:
        FAMILIES.register(name, Family(name, fn, params, (fn.__doc__ or "").strip().split("\n")[0],
                                       periodic, drawn))
        return fn

    return wrap


def validate_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValidationError(f"number of clients must be an integer >= 2, got {n!r}")
    return int(n)


def build_graph(name: str, n: int, *, seed: int = 0, **params: Any) -> nx.Graph:
    """Build a connected graph of the named family with nodes 0..n-1 (for a periodic family, the
    union of its rounds' graphs)."""
    fam = FAMILIES.get(name)
    if fam.periodic:
        return union_graph(build_rounds(name, n, seed=seed, **params))
    n = validate_n(n)
    resolved = fam.resolve(n, params)
    graph = fam.build(n, seed=seed, **resolved)
    if graph.number_of_nodes() != n or not _connected(graph):
        raise ValidationError(f"topology '{name}' produced a disconnected graph for n={n}")
    return graph


def build_rounds(name: str, n: int, *, seed: int = 0, **params: Any) -> tuple[Any, ...]:
    """The rounds of one period of a periodic family (:class:`.periodic.Round` values: each
    round's graph and W_t); the union of the rounds' graphs must be connected."""
    fam = FAMILIES.get(name)
    if not fam.periodic:
        raise ValidationError(f"topology '{fam.name}' is static (one graph); build_graph builds it")
    n = validate_n(n)
    rounds = fam.build(n, seed=seed, **fam.resolve(n, params))
    if not _connected(union_graph(rounds)):
        raise ValidationError(f"topology '{name}' produced a disconnected graph for n={n}")
    return rounds


def union_graph(rounds) -> nx.Graph:
    """The graph of every edge some round of a period uses (cached on the first round)."""
    first = rounds[0].graph
    cached = first.graph.get("_union")
    if cached is not None and cached[0] == len(rounds):
        return cached[1]
    g = nx.empty_graph(first.number_of_nodes())
    for r in rounds:
        g.add_edges_from(r.graph.edges())
    first.graph["_union"] = (len(rounds), g)
    return g


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _seed_stream(seed):
    rng = _rng(seed)
    while True:
        yield int(rng.integers(0, 2**63 - 1))


def _connected(g: nx.Graph) -> bool:
    from scipy.sparse.csgraph import connected_components

    from .graphs import adjacency

    n = g.number_of_nodes()
    return n > 0 and (n == 1 or connected_components(adjacency(g), directed=False)[0] == 1)


def _resample(make: Callable[[int], nx.Graph], seed, what: str) -> nx.Graph:
    for sub in _take(_seed_stream(seed), MAX_RESAMPLES):
        g = make(sub)
        if _connected(g):
            return g
    raise ValidationError(f"{what}: no connected graph after {MAX_RESAMPLES} seeded draws; "
                          "increase the edge density")


def _take(it, k):
    for _ in range(k):
        yield next(it)


def _prob(v, n):
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _unit(v, n):
    return None if 0 <= v <= 1 else "must be in [0, 1]"


# ---------------------------------------------------------------------------------- families


@family("ring")
def ring(n: int, *, seed: int = 0) -> nx.Graph:
    """Cycle over all clients (a path for n = 2): the sparsest connected regular graph."""
    # networkx.cycle_graph(n)'s graph, edge order included: (0, 1), ..., (n - 2, n - 1), (n - 1, 0)
    u = np.arange(n, dtype=np.int64)
    g = _graph_from_pairs(n, u, (u + 1) % n)
    from .graphs import set_edge_arrays

    set_edge_arrays(g, *_sorted_unique_edges(n, u, (u + 1) % n))
    return g


@family("erdos_renyi", Param("p", float, 0.2, "edge probability", _prob))
def erdos_renyi(n: int, *, seed: int = 0, p: float = 0.2) -> nx.Graph:
    """G(n, p), resampled with derived seeds until connected."""
    return _resample(lambda s: _gnp(n, p, s), seed, f"erdos_renyi(p={p}) with n={n}")


def _gnp(n: int, p: float, seed: int) -> nx.Graph:
    """G(n, p) drawn in numpy (:func:`_gnp_arrays`), its sorted edge arrays cached.

    Kept instead of ``networkx.fast_gnp_random_graph``: that is not faster end to end (both spend
    their time inserting edges into networkx, and it leaves the sorted edge arrays cached here to
    be extracted again, ~1.5 s at N = 1e5) and it would change every seeded G(n, p) graph.
    """
    i, j = _gnp_arrays(n, p, seed)
    g = _graph_from_pairs(n, i, j)
    from .graphs import set_edge_arrays

    set_edge_arrays(g, i, j)   # already sorted by (i, j)
    return g


def _gnp_arrays(n: int, p: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The edges (i < j, sorted) of G(n, p): a Binomial number of distinct pairs of the upper
    triangle."""
    rng = np.random.default_rng(seed)
    total = n * (n - 1) // 2
    m = int(rng.binomial(total, p))
    k = np.sort(rng.choice(total, size=m, replace=False)) if m < total else np.arange(total)
    # linear index k of the upper triangle (row-major, i < j) -> (i, j)
    i = n - 2 - np.floor(np.sqrt(-8.0 * k + 4.0 * n * (n - 1) - 7) / 2.0 - 0.5).astype(np.int64)
    j = k + i + 1 - total + (n - i) * (n - i - 1) // 2
    return i.astype(np.int64), j.astype(np.int64)


def _graph_from_pairs(n: int, u: np.ndarray, v: np.ndarray) -> nx.Graph:
    """The graph ``nx.empty_graph(n)`` + ``add_edges_from(zip(u, v))`` builds, as a
    :class:`.graphs.PairsGraph` (its dicts filled only when networkx reads them)."""
    from .graphs import PairsGraph

    return PairsGraph.from_pairs(n, u, v)


def _sorted_unique_edges(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs as undirected edges (min, max), without self-loops and repeats, sorted."""
    a, b = np.minimum(u, v), np.maximum(u, v)
    key = np.sort(a[a != b].astype(np.int64) * n + b[a != b])
    if key.size:   # sorted, so repeats are neighbours (np.unique hashes first: slower here)
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    return key // n, key % n


def _small_world_k(n: int) -> int:
    k = max(2, 2 * round(math.log2(n) / 2))
    return min(k, (n - 1) // 2 * 2) if n > 3 else 2


def _even_k(v, n):
    if v < 2 or v % 2:
        return "must be an even integer >= 2"
    if v >= n and n > 3:
        return f"must be < n = {n}"
    return None


@family("small_world",
        Param("k", int, _small_world_k, "ring-lattice degree (even), default ~log2 n", _even_k),
        Param("beta", float, 0.3, "rewiring probability", _unit))
def small_world(n: int, *, seed: int = 0, k: int = 4, beta: float = 0.3) -> nx.Graph:
    """Watts-Strogatz ring lattice of even degree k with rewiring probability beta, kept connected.

    For n <= 3 every lattice is complete, so the complete graph is returned.
    """
    if n <= 3 or k >= n - 1:
        return nx.complete_graph(n)
    return _resample(lambda s: _watts_strogatz(n, k, beta, s), seed,
                     f"small_world(k={k}, beta={beta}) with n={n}")


def _watts_strogatz(n: int, k: int, p: float, seed: int) -> nx.Graph:
    """``networkx.watts_strogatz_graph(n, k, p, seed=seed)`` for 2 <= k < n - 1: the same random
    draws in the same order from ``random.Random(seed)``, so the same graph (neighbour order
    included), with the edges kept in one insertion-ordered dict of pair keys instead of
    networkx's adjacency dicts (about 10x faster at N = 1e5; the graph is a
    :class:`.graphs.PairsGraph` with its sorted edge arrays cached)."""
    import random

    from .graphs import set_edge_arrays

    rng = random.Random(seed)
    nodes = list(range(n))
    node = np.arange(n, dtype=np.int64)
    lattice = []   # per offset j, the key min * n + max of each pair (u, u + j mod n)
    for j in range(1, k // 2 + 1):
        other = (node + j) % n
        lattice.append((np.minimum(node, other) * n + np.maximum(node, other)).tolist())
    edges: dict[int, None] = {}   # pair keys, in the order networkx adds the edges
    for keys in lattice:
        edges.update(dict.fromkeys(keys))
    key = np.fromiter(edges, dtype=np.int64, count=len(edges))
    degree = (np.bincount(key // n, minlength=n) + np.bincount(key % n, minlength=n)).tolist()
    random_, choice = rng.random, rng.choice
    for j, keys in enumerate(lattice, start=1):
        for u in nodes:
            if random_() < p:
                w = choice(nodes)
                # as networkx: no self-loops or repeated edges; skip when u sees everyone
                while w == u or (u * n + w if u < w else w * n + u) in edges:
                    w = choice(nodes)
                    if degree[u] >= n - 1:
                        break
                else:
                    del edges[keys[u]]
                    edges[u * n + w if u < w else w * n + u] = None
                    degree[(u + j) % n] -= 1
                    degree[w] += 1
    key = np.fromiter(edges, dtype=np.int64, count=len(edges))
    g = _graph_from_pairs(n, key // n, key % n)
    key.sort()
    set_edge_arrays(g, key // n, key % n)
    return g


def _communities(v, n):
    return None if 1 <= v <= n else f"must be in [1, n = {n}]"


@family("clustered",
        Param("c", int, lambda n: max(1, min(5, n // 2)), "number of communities (default 5)",
              _communities),
        Param("p_in", float, 0.8, "edge probability inside a community", _prob),
        Param("p_out", float, lambda n: min(1.0, 1.0 / n), "probability of extra random bridges",
              _unit),
        Param("bridges", int, 1, "guaranteed bridges between consecutive communities",
              lambda v, n: None if v >= 1 else "must be >= 1"))
def clustered(n: int, *, seed: int = 0, c: int = 5, p_in: float = 0.8, p_out: float = 0.02,
              bridges: int = 1) -> nx.Graph:
    """c communities of size floor(n/c) (the n mod c extra nodes go one each to the first
    communities), each a connected G(size, p_in); consecutive communities (in a cycle) joined by
    ``bridges`` random edges, plus extra random inter-community edges with probability p_out."""
    rng = _rng(seed)
    sizes = [n // c + (1 if i < n % c else 0) for i in range(c)]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    us: list[np.ndarray] = []   # every pair in the order earlier versions added them
    vs: list[np.ndarray] = []
    for i, size in enumerate(sizes):
        bi, bj = _connected_gnp_arrays(size, p_in, rng,
                                       f"clustered community of size {size} with p_in={p_in}")
        us.append(bi + starts[i])
        vs.append(bj + starts[i])
    members = [np.arange(starts[i], starts[i + 1]) for i in range(c)]
    pairs = [(i, (i + 1) % c) for i in range(c if c > 2 else c - 1)]
    for a, b in pairs:
        for _ in range(bridges):
            us.append(np.array([int(rng.choice(members[a]))]))
            vs.append(np.array([int(rng.choice(members[b]))]))
    if p_out > 0 and c > 1:
        if n <= EXACT_CROSS_MAX_N:
            # one uniform per inter-community pair: O(n^2), kept up to this size so that seeded
            # graphs stay exactly what earlier versions drew
            label = np.repeat(np.arange(c), sizes)
            iu, ju = np.triu_indices(n, 1)
            cross = label[iu] != label[ju]
            pick = rng.random(int(cross.sum())) < p_out
            us.append(iu[cross][pick])
            vs.append(ju[cross][pick])
        else:
            iu, ju = _cross_pairs(rng, starts, p_out)
            us.append(iu)
            vs.append(ju)
    u = np.concatenate(us).astype(np.int64)
    v = np.concatenate(vs).astype(np.int64)
    g = _graph_from_pairs(n, u, v)
    from .graphs import set_edge_arrays

    set_edge_arrays(g, *_sorted_unique_edges(n, u, v))
    return g


def _connected_gnp_arrays(n: int, p: float, seed, what: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_gnp_arrays` resampled with derived seeds until connected, as :func:`_resample`
    does with graphs (the same seeds, so the same draw)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    for sub in _take(_seed_stream(seed), MAX_RESAMPLES):
        i, j = _gnp_arrays(n, p, sub)
        if n == 1 or connected_components(coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n)),
                                          directed=False)[0] == 1:
            return i, j
    raise ValidationError(f"{what}: no connected graph after {MAX_RESAMPLES} seeded draws; "
                          "increase the edge density")


#: Up to this many clients the clustered family draws its random inter-community edges pair by
#: pair (O(n^2)); above it, in O(n + edges) (:func:`_cross_pairs`).
EXACT_CROSS_MAX_N = 4096


def _cross_pairs(rng: np.random.Generator, starts: np.ndarray, p: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Each pair (u < v) of nodes in different communities (contiguous ranges starting at
    ``starts``) independently with probability p, in O(n + edges) time and memory: a Binomial
    number of distinct pair indices, mapped to pairs without listing the others."""
    n = int(starts[-1])
    end_of = np.repeat(starts[1:], np.diff(starts)).astype(np.int64)   # community end per node
    per_node = n - end_of                        # partners v > u outside u's community
    cum = np.concatenate([[0], np.cumsum(per_node)])
    total = int(cum[-1])
    m = int(rng.binomial(total, p))
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    k = np.sort(rng.choice(total, size=m, replace=False)) if m < total else np.arange(total)
    u = np.searchsorted(cum, k, side="right") - 1
    v = end_of[u] + (k - cum[u])
    return u.astype(np.int64), v.astype(np.int64)


@family("complete")
def complete(n: int, *, seed: int = 0) -> nx.Graph:
    """Every client talks to every other: the fully connected upper bound."""
    return nx.complete_graph(n)


@family("exponential")
def exponential(n: int, *, seed: int = 0) -> nx.Graph:
    """Static exponential graph (Ying et al. 2021), undirected: i ~ i +- 2^j mod n, 2^j < n."""
    nodes = np.arange(n, dtype=np.int64)
    hops = [1 << e for e in range(max(1, (n - 1).bit_length())) if (1 << e) < n]
    u = np.tile(nodes, len(hops))
    v = np.concatenate([(nodes + j) % n for j in hops])
    # 0 < 2^j < n: no pair is a self-loop; repeated pairs (2^j = n - 2^i) are one edge
    g = _graph_from_pairs(n, u, v)
    from .graphs import set_edge_arrays

    set_edge_arrays(g, *_sorted_unique_edges(n, u, v))
    return g


def _square_rows(n: int) -> int:
    r = int(math.isqrt(n))
    while n % r:
        r -= 1
    return r


@family("torus",
        Param("rows", int, _square_rows, "grid rows (must divide n); default most square",
              lambda v, n: None if v >= 1 and n % v == 0 else f"must divide n = {n}"))
def torus(n: int, *, seed: int = 0, rows: int = 1) -> nx.Graph:
    """rows x (n/rows) grid with wrap-around; a ring when n is prime.

    Node (i, j) of the grid is client i * cols + j.
    """
    grid = nx.grid_2d_graph(rows, n // rows, periodic=True)
    return nx.convert_node_labels_to_integers(grid, ordering="sorted")


def _regular_degree(n: int) -> int:
    d = min(4, n - 1)
    return d - 1 if (n * d) % 2 else d


def _check_degree(v, n):
    if not 1 <= v < n:
        return f"must be in [1, n - 1 = {n - 1}]"
    if (v * n) % 2:
        return f"times n = {n} must be even"
    if v == 1 and n > 2:
        return "must be >= 2 for a connected graph with n > 2"
    return None


@family("k_regular", Param("d", int, _regular_degree, "degree of every node (default 4)",
                           _check_degree))
def k_regular(n: int, *, seed: int = 0, d: int = 4) -> nx.Graph:
    """Uniform random d-regular graph, resampled until connected."""
    return _resample(lambda s: nx.random_regular_graph(d, n, seed=s), seed,
                     f"k_regular(d={d}) with n={n}")


@family("star")
def star(n: int, *, seed: int = 0) -> nx.Graph:
    """Hub 0 linked to every other client: the server-based reference."""
    return nx.star_graph(n - 1)


def _clique_size(v, n):
    return None if 1 <= v <= n else f"must be in [1, n = {n}]"


def _inter(v, n):
    return None if v in INTER_CLIQUE else f"must be one of {', '.join(INTER_CLIQUE)}"


#: How the cliques of ``d_cliques`` are joined.
INTER_CLIQUE = ("ring", "small_world")
#: ``d_cliques`` averaging: ``clique`` (Clique Averaging of the local updates) or ``none``.
CLIQUE_AVERAGING = ("clique", "none")


def _averaging(v, n):
    return None if v in CLIQUE_AVERAGING else f"must be one of {', '.join(CLIQUE_AVERAGING)}"


def _residual(v, n):
    return None if v is None or 0.0 <= v else "must be non-negative"


@family("d_cliques",
        Param("size", int, None, "clients per clique (default: the number of classes, at most n)",
              _clique_size),
        Param("inter", str, "ring", "inter-clique connection: 'ring' or 'small_world'", _inter),
        Param("averaging", str, "clique", "'clique': Clique Averaging, every client applies its "
              "clique's mean local update before gossip (one more exchange inside each clique "
              "per round); 'none': plain D-SGD/CHOCO on the D-Cliques graph", _averaging),
        Param("cliques", str, None, "clique assignment (filled by the planner from ANALYZE "
              "WORKLOAD label counts): client ids, cliques separated by ';'"),
        Param("stats", str, None, "the statistics the cliques were formed from (filled by the "
              "planner)"),
        Param("residual", float, None, "label heterogeneity left after clique averaging, as a "
              "fraction of the clients' own (filled by the planner from the statistics)",
              _residual))
def d_cliques(n: int, *, seed: int = 0, size: int | None = None, inter: str = "ring",
              averaging: str = "clique", cliques: str | None = None, stats: str | None = None,
              residual: float | None = None) -> nx.Graph:
    """D-Cliques (Bellet et al. 2022): label-balanced cliques from the catalog's statistics,
    joined by a ring or a small world of cliques.

    Every clique is complete. ``ring``: clique i and clique i+1 (cyclically) share one edge.
    ``small_world``: the cliques are the nodes of a seeded connected Watts-Strogatz graph
    (degree ~log2 of the number of cliques, rewiring 0.3; complete up to 3 cliques) and each of
    its edges is one edge between the two cliques. The endpoints of a clique's inter-clique
    edges rotate over its members so that the extra degree is spread. ``averaging`` and
    ``residual`` do not change the graph: the runtime and the cost models read them.
    """
    from .cliques import decode_cliques

    if cliques is None:
        raise PlanningError(
            "topology 'd_cliques' needs per-client label statistics: run ANALYZE WORKLOAD and "
            "plan with USING TOPOLOGY d_cliques (the planner forms the cliques)")
    groups = decode_cliques(cliques, n)
    if size is not None and max(len(c) for c in groups) > size:
        raise ValidationError(f"topology 'd_cliques' has a clique of {max(map(len, groups))} "
                              f"clients, above size = {size}")
    g = nx.empty_graph(n)
    for c in groups:
        g.add_edges_from((u, v) for k, u in enumerate(c) for v in c[k + 1:])
    m = len(groups)
    if m == 1:
        return g
    if inter == "ring":
        pairs = [(i, (i + 1) % m) for i in range(m if m > 2 else 1)]
    else:
        if m <= 3:
            meta = nx.complete_graph(m)
        else:
            k = _small_world_k(m)
            meta = _resample(lambda s: nx.watts_strogatz_graph(m, k, 0.3, seed=s), seed,
                             f"d_cliques small world of {m} cliques")
        pairs = sorted((min(a, b), max(a, b)) for a, b in meta.edges())
    used = [0] * m
    for a, b in pairs:
        u = groups[a][used[a] % len(groups[a])]
        v = groups[b][used[b] % len(groups[b])]
        used[a] += 1
        used[b] += 1
        g.add_edge(u, v)
    return g


def _max_degree_k(v, n):
    return None if 1 <= v <= max(1, n - 1) else f"must be in [1, n - 1 = {n - 1}]"


@family("one_peer_exponential", periodic=True)
def one_peer_exponential(n: int, *, seed: int = 0) -> tuple:
    """Time-varying one-peer exponential graph (Ying et al. 2021): in round t client i averages
    with client i + 2^(t mod ceil(log2 n)) mod n, W_t = (I + P_t)/2; exact averaging after
    log2 n rounds when n is a power of two."""
    from .periodic import check_exact, one_peer_exponential_rounds

    rounds = one_peer_exponential_rounds(n)
    if n & (n - 1) == 0:
        check_exact(rounds, f"one_peer_exponential with n={n}")
    return rounds


@family("base_k", Param("k", int, 1, "maximum degree per round", _max_degree_k), periodic=True)
def base_k(n: int, *, seed: int = 0, k: int = 1) -> tuple:
    """Time-varying Base-(k+1) graph (Takezawa et al. 2023): at most k neighbours per round and
    exact averaging after one period, for every n."""
    from .periodic import base_k_rounds, check_exact

    rounds = base_k_rounds(n, k)
    check_exact(rounds, f"base_k(k={k}) with n={n}")
    return rounds


def _period(v, n):
    return None if 1 <= v <= 100_000 else "must be in [1, 100000]"


@family("resample_er", Param("p", float, 0.5, "edge probability of each round", _prob),
        Param("period", int, 200, "rounds drawn before the sequence repeats", _period),
        periodic=True, drawn=True)
def resample_er(n: int, *, seed: int = 0, p: float = 0.5, period: int = 200) -> tuple:
    """Time-varying G(n, p) redrawn every round with Metropolis weights 1/max(deg_i+1, deg_j+1)
    (DLLR-OA's topology, p = 1/2); ``period`` rounds drawn from the seed, then repeated."""
    from .periodic import check_doubly_stochastic, resample_er_rounds

    rounds = resample_er_rounds(n, p, period, seed)
    check_doubly_stochastic(rounds, f"resample_er(p={p}) with n={n}")
    return rounds


@family("from_edges", Param("edges", object, None, "edge-list file path or networkx graph"))
def from_edges(n: int, *, seed: int = 0, edges: Any = None) -> nx.Graph:
    """A user-supplied graph: an edge-list file ("u v" per line, '#' comments) or a networkx graph.

    Node labels are mapped to 0..n-1 in sorted order; the graph must have exactly n nodes and be
    connected.
    """
    if edges is None:
        raise ValidationError("topology 'from_edges' needs an edge list: edges=PATH or a graph")
    g = edges.copy() if isinstance(edges, nx.Graph) else read_edge_list(edges)
    g = nx.Graph(g)
    g.remove_edges_from(list(nx.selfloop_edges(g)))
    if g.number_of_nodes() != n:
        raise ValidationError(f"edge list has {g.number_of_nodes()} nodes but {n} clients were "
                              "requested")
    if not nx.is_connected(g):
        parts = nx.number_connected_components(g)
        raise ValidationError(f"edge list graph is not connected ({parts} components)")
    try:
        order = sorted(g.nodes())
    except TypeError:
        order = sorted(g.nodes(), key=str)
    return nx.relabel_nodes(g, {v: i for i, v in enumerate(order)})


def read_edge_list(path: str | Path) -> nx.Graph:
    """Parse an edge-list file: two node ids per line (space, tab or comma separated)."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"edge list file not found: {p}")
    g = nx.Graph()
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"cannot read edge list {p}: {exc}") from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].replace(",", " ").strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2:
            raise ValidationError(f"{p}:{lineno}: expected two node ids, got {raw.strip()!r}")
        u, v = (_node_id(x) for x in parts[:2])
        g.add_edge(u, v)
    if g.number_of_edges() == 0:
        raise ValidationError(f"edge list {p} has no edges")
    return g


def _node_id(token: str):
    try:
        return int(token)
    except ValueError:
        return token
