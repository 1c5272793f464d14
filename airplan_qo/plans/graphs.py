"""Graph arrays shared by the mixing rules, the spectra, the OTA schedule and the runtime: edge
arrays, adjacency, degrees and the CSR layout of W (each cached on the graph), the Laplacians,
W from edge weights, and the directed links of a round.

Topologies are networkx graphs with nodes 0..n-1, built once and never mutated, so the edge
arrays are computed once per graph and everything else is derived from them. Families that
draw their edges in numpy return a :class:`PairsGraph`, whose networkx dicts are filled only
when something reads them.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph


class PairsGraph(nx.Graph):
    """An undirected networkx graph made from numpy node pairs whose adjacency dicts are filled
    on first use.

    It is the graph ``nx.empty_graph(n)`` + ``add_edges_from(zip(u, v))`` builds (same adjacency,
    same neighbour order, one attribute dict shared by both directions of an edge; a repeated
    pair is one edge). Planning reads only its edge arrays (cached at construction) and the
    matrices made from them, so at N = 1e5 the millions of dict entries of a dense family are
    never made there; anything that reads ``_adj`` through networkx (edges, neighbours, degree,
    a change) fills them first, in one pass (:func:`fill_adjacency`).
    """

    @property
    def _adj(self):
        store = self.__dict__
        pending = store.get("_pending_pairs")
        if pending is not None:
            store["_pending_pairs"] = None
            fill_adjacency(store["_adj_dicts"], *pending)
        return store["_adj_dicts"]

    @_adj.setter
    def _adj(self, value):
        self.__dict__["_adj_dicts"] = value
        self.__dict__["_pending_pairs"] = None

    @classmethod
    def from_pairs(cls, n: int, u: np.ndarray, v: np.ndarray) -> "PairsGraph":
        g = cls()
        g._node = {i: {} for i in range(n)}
        g.__dict__["_adj_dicts"] = {i: {} for i in range(n)}
        g.__dict__["_pending_pairs"] = (n, np.asarray(u, dtype=np.int64),
                                        np.asarray(v, dtype=np.int64))
        return g


def fill_adjacency(adj: dict, n: int, u: np.ndarray, v: np.ndarray) -> None:
    """Fill networkx's adjacency dicts ``adj`` (one empty dict per node 0..n-1) with the pairs
    (u, v) as ``add_edges_from(zip(u, v))`` would, a node at a time from numpy: the order in
    which each node meets its neighbours is sorted out in numpy, then each node's dict takes
    them in one ``update`` (per-edge Python work cost ~2x the time at 10^6 edges)."""
    m = u.size
    if m == 0:
        return
    key = np.minimum(u, v) * n + np.maximum(u, v)
    if bool(np.all(u < v)) and bool(np.all(key[1:] > key[:-1])):
        # sorted distinct pairs u < v (G(n, p)): edge t is pair t, and a node meets its
        # neighbours b < a (pairs (b, a), in order) before its pairs (a, c): the v side first
        src, dst = np.concatenate([v, u]), np.concatenate([u, v])
        eid = np.concatenate([np.arange(m), np.arange(m)])
        order = np.argsort(src, kind="stable")
        n_edges = m
    else:
        _keys, first, edge_of = np.unique(key, return_index=True, return_inverse=True)
        loop = u == v   # a self-loop is one entry of its node's dict
        t = np.arange(m)
        src, dst = np.concatenate([u, v[~loop]]), np.concatenate([v, u[~loop]])
        pos = np.concatenate([t, t[~loop]])
        eid = np.concatenate([edge_of, edge_of[~loop]]).ravel()
        order = np.lexsort((pos, src))
        src, dst, eid = src[order], dst[order], eid[order]
        _k, keep = np.unique(src * n + dst, return_index=True)   # each neighbour's first time
        order = np.sort(keep)
        n_edges = first.size
    src, dst, eid = src[order], dst[order], eid[order]
    data = [{} for _ in range(n_edges)]
    bounds = np.searchsorted(src, np.arange(n + 1)).tolist()
    dst_l, eid_l = dst.tolist(), eid.tolist()
    attrs_of = data.__getitem__
    for a in np.flatnonzero(np.diff(bounds)).tolist():
        lo, hi = bounds[a], bounds[a + 1]
        adj[a].update(zip(dst_l[lo:hi], map(attrs_of, eid_l[lo:hi])))


def edge_arrays(graph: nx.Graph) -> tuple[np.ndarray, np.ndarray]:
    """Undirected edges as two int arrays (u < v), in a deterministic order.

    Cached on the graph: iterating a large networkx graph's edges dominates everything else
    here. The cache lives in networkx's own per-graph cache (``__networkx_cache__``), which
    every edge or node change through the networkx API clears, so it is checked in O(1) (a
    count of the edges costs a pass over every node, which at N = 1e5 took longer than the
    spectra). Without that cache (networkx < 3.3) the edge count is compared instead.
    """
    store = getattr(graph, "__networkx_cache__", None)
    if store is not None:
        cached = store.get(_EDGE_ARRAYS)
        if cached is not None:
            return cached
    else:
        cached = graph.graph.get("_edge_arrays")
        if cached is not None and cached[0] == graph.number_of_edges():
            return cached[1], cached[2]
    m = graph.number_of_edges()
    e = np.fromiter(itertools.chain.from_iterable(graph.edges()), dtype=np.int64,
                    count=2 * m).reshape(m, 2)
    u, v = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    order = np.lexsort((v, u))
    return set_edge_arrays(graph, u[order], v[order])


_EDGE_ARRAYS = "airplan_edge_arrays"


def set_edge_arrays(graph: nx.Graph, u: np.ndarray, v: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Cache the edge arrays of a graph built from them (u < v, sorted by (u, v)): what
    :func:`edge_arrays` returns for it until the graph is changed."""
    u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
    u.flags.writeable = v.flags.writeable = False
    store = getattr(graph, "__networkx_cache__", None)
    if store is not None:
        store[_EDGE_ARRAYS] = (u, v)
    else:
        graph.graph["_edge_arrays"] = (len(u), u, v)
    return u, v


def from_edge_weights(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> sp.csr_matrix:
    """W = I - L_w: off-diagonal weights w on edges (u, v), the diagonal making rows sum to one
    (a diagonal entry that comes out exactly zero is not stored)."""
    u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
    w = np.asarray(w, dtype=np.float64)
    if not _sorted_distinct_pairs(n, u, v):
        off = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([u, v]),
                                                      np.concatenate([v, u]))),
                            shape=(n, n)).tocsr()
        return (sp.identity(n, format="csr") - csgraph.laplacian(off)).tocsr()
    off = _symmetric_csr(n, u, v, w)
    diag = 1.0 - np.asarray(off.sum(axis=0)).ravel()   # as csgraph.laplacian sums the degrees
    out = (off + sp.diags(diag, format="csr")).tocsr()
    out.eliminate_zeros()
    return out


def weights_matrix(graph: nx.Graph, w: np.ndarray) -> sp.csr_matrix:
    """:func:`from_edge_weights` for weights w on the graph's edges (in :func:`edge_arrays`
    order), the same matrix: its sparsity layout (rows: the lower neighbours, the diagonal, the
    upper neighbours) is computed once per graph and cached beside the edge arrays, so each
    weights rule only places its values."""
    layout = _weights_layout(graph)
    n = graph.number_of_nodes()
    w = np.asarray(w, dtype=np.float64)
    if layout is None:
        return from_edge_weights(n, *edge_arrays(graph), w)
    data = np.empty(len(layout.indices), dtype=np.float64)
    data[layout.pos_up] = w
    data[layout.pos_low] = w[layout.low_edge]
    data[layout.pos_diag] = 0.0
    out = sp.csr_matrix((data, layout.indices.copy(), layout.indptr.copy()), shape=(n, n))
    out.has_sorted_indices = True
    # the off-diagonal row sums in row order, as csgraph.laplacian sums the degrees (adding
    # the zero diagonal changes no sum)
    out.data[layout.pos_diag] = 1.0 - out @ np.ones(n)
    if not np.all(out.data):    # as I - L_w stores no zero
        out.eliminate_zeros()
    return out


def edge_weights(graph: nx.Graph, w: sp.spmatrix) -> np.ndarray:
    """W[u, v] for the graph's edges (u, v) in :func:`edge_arrays` order: read from W's data
    when W has the layout :func:`weights_matrix` gives, else looked up pair by pair."""
    u, v = edge_arrays(graph)
    if sp.issparse(w) and w.format == "csr":
        layout = _weights_layout(graph)
        if (layout is not None and w.nnz == len(layout.indices) and np.array_equal(w.indptr, layout.indptr)
                and np.array_equal(w.indices, layout.indices)):
            return np.asarray(w.data[layout.pos_up], dtype=np.float64)
    return np.asarray(sp.csr_matrix(w)[u, v]).ravel() if len(u) else np.zeros(0)


class _WeightsLayout:
    """Where W's entries go in CSR: ``pos_up[t]`` holds edge t's (u, v) entry, ``pos_low[k]``
    the (v, u) entry of edge ``low_edge[k]``, ``pos_diag[r]`` the diagonal."""

    def __init__(self, n: int, u: np.ndarray, v: np.ndarray):
        m = len(u)
        upper_count = np.bincount(u, minlength=n)
        lower_count = np.bincount(v, minlength=n)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(upper_count + lower_count + 1, out=indptr[1:])
        idx_dtype = np.int32 if indptr[-1] < 2**31 else np.int64
        start = indptr[:-1]
        up_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(upper_count, out=up_ptr[1:])
        self.pos_up = start[u] + lower_count[u] + 1 + (np.arange(m) - up_ptr[u])
        upper = sp.csr_matrix((np.arange(m, dtype=np.int64), v.astype(idx_dtype),
                               up_ptr.astype(idx_dtype)), shape=(n, n))
        low = upper.tocsc()     # for each r, its pairs (b, r) by increasing b
        col = np.repeat(np.arange(n), np.diff(low.indptr))
        self.pos_low = start[col] + (np.arange(m) - low.indptr[col])
        self.low_edge = np.asarray(low.data, dtype=np.int64)
        self.pos_diag = start + lower_count
        indices = np.empty(int(indptr[-1]), dtype=idx_dtype)
        indices[self.pos_up] = v
        indices[self.pos_low] = low.indices
        indices[self.pos_diag] = np.arange(n)
        self.indices = indices
        self.indptr = indptr.astype(idx_dtype)


def _weights_layout(graph: nx.Graph) -> _WeightsLayout | None:
    """The graph's cached :class:`_WeightsLayout` (None for a graph with a self-loop)."""
    store = getattr(graph, "__networkx_cache__", None)
    cached = None if store is None else store.get(_WEIGHTS_LAYOUT)
    if cached is not None and store.get(_EDGE_ARRAYS) is not None:
        return cached
    u, v = edge_arrays(graph)
    n = graph.number_of_nodes()
    if not _sorted_distinct_pairs(n, u, v):
        return None
    layout = _WeightsLayout(n, u, v)
    if store is not None:
        store[_WEIGHTS_LAYOUT] = layout
    return layout


_WEIGHTS_LAYOUT = "airplan_weights_layout"


def _sorted_distinct_pairs(n: int, u: np.ndarray, v: np.ndarray) -> bool:
    """Whether the pairs are u < v, distinct and sorted by (u, v), as :func:`edge_arrays`
    gives them."""
    if not len(u):
        return True
    key = u * n + v
    return bool(np.all(u < v)) and bool(np.all(key[1:] > key[:-1])) and int(v.max()) < n


def directed_links(graph: nx.Graph, w: sp.spmatrix
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The links one gossip round uses on (G, W): (receivers, senders, edge index into
    :func:`edge_arrays`, weight W[receiver, sender]).

    A symmetric W gossips over both directions of every edge of G. An asymmetric W (a directed
    round, e.g. a one-peer round) gossips only over the directions it weights: a receiver hears
    a sender only where W[receiver, sender] != 0.
    """
    w = sp.csr_matrix(w, dtype=np.float64)
    u, v = edge_arrays(graph)
    recv = np.concatenate([u, v])
    send = np.concatenate([v, u])
    edge = np.concatenate([np.arange(u.size), np.arange(u.size)])
    vals = np.asarray(w[recv, send]).ravel() if u.size else np.zeros(0)
    if u.size and abs(w - w.T).sum() > 1e-9:
        keep = vals != 0
        recv, send, edge, vals = recv[keep], send[keep], edge[keep], vals[keep]
    return recv, send, edge, vals


def adjacency(graph: nx.Graph) -> sp.csr_matrix:
    """0/1 adjacency matrix (CSR, canonical) of an undirected graph with nodes 0..n-1.

    Built from the cached edge arrays rather than ``networkx.to_scipy_sparse_array``, which walks
    the graph's dicts again on every call, and cached beside them (the spectra, the schedule,
    the weights rules and the connectivity check all read it): callers must not change it.
    """
    store = getattr(graph, "__networkx_cache__", None)
    if store is not None:
        cached = store.get(_ADJACENCY)
        if cached is not None and store.get(_EDGE_ARRAYS) is not None:
            return cached
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    if _sorted_distinct_pairs(n, u, v):
        a = _symmetric_csr(n, u, v, np.ones(len(u)))
    else:   # a self-loop (not a topology): each pair as COO counts it
        a = sp.coo_matrix((np.ones(2 * len(u)), (np.concatenate([u, v]), np.concatenate([v, u]))),
                          shape=(n, n)).tocsr()
    if store is not None:
        store[_ADJACENCY] = a
    return a


_ADJACENCY = "airplan_adjacency"


def _symmetric_csr(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> sp.csr_matrix:
    """The symmetric n x n CSR matrix with w on (u, v) and (v, u), for distinct pairs u < v
    sorted by (u, v) (:func:`edge_arrays`), built in O(n + edges) by placing each entry at its
    final position: row r holds its pairs (b, r), b < r, in the order of b, then its pairs
    (r, c) in the order of c, so every row's columns come out sorted (canonical CSR). The pairs
    (b, r) of each r come from the transpose of the upper triangle (a counting sort in C)."""
    m = len(u)
    upper_count = np.bincount(u, minlength=n)
    lower_count = np.bincount(v, minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(upper_count + lower_count, out=indptr[1:])
    idx_dtype = np.int32 if 2 * m < 2**31 and n < 2**31 else np.int64
    indices = np.empty(2 * m, dtype=idx_dtype)
    data = np.empty(2 * m, dtype=np.asarray(w).dtype)
    if m:
        start = indptr[:-1]
        up_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(upper_count, out=up_ptr[1:])
        # pair t sits at rank t - up_ptr[u] among its row's pairs (r, c), after the (b, r)
        pos_up = start[u] + lower_count[u] + (np.arange(m) - up_ptr[u])
        indices[pos_up] = v
        data[pos_up] = w
        # the transpose lists, for each r, the pairs (b, r) by increasing b, with their ids
        upper = sp.csr_matrix((np.arange(m, dtype=np.int64), v.astype(idx_dtype),
                               up_ptr.astype(idx_dtype)), shape=(n, n))
        low = upper.tocsc()
        col = np.repeat(np.arange(n), np.diff(low.indptr))
        pos_low = start[col] + (np.arange(m) - low.indptr[col])
        indices[pos_low] = low.indices
        data[pos_low] = w[low.data]
    a = sp.csr_matrix((data, indices, indptr.astype(idx_dtype)), shape=(n, n))
    a.has_sorted_indices = True
    return a


def laplacian(graph: nx.Graph, *, normed: bool = False) -> sp.csr_matrix:
    """L = D - A of the graph, or D^-1/2 L D^-1/2 with ``normed`` (CSR, canonical): the
    values ``csgraph.laplacian`` gives (entry (r, c) of the normalised one is
    -(1 / sqrt(d_r)) / sqrt(d_c), rounded as it rounds), placed in the graph's cached layout."""
    deg = degrees(graph)
    layout = _weights_layout(graph) if len(deg) and np.all(deg > 0) else None
    if layout is None:   # an isolated node or a self-loop: csgraph's own conventions
        return sp.csr_matrix(csgraph.laplacian(adjacency(graph), normed=normed))
    u, v = edge_arrays(graph)
    data = np.empty(len(layout.indices), dtype=np.float64)
    if normed:
        s = np.sqrt(deg)
        data[layout.pos_up] = -((1.0 / s[u]) / s[v])
        low_u, low_v = u[layout.low_edge], v[layout.low_edge]
        data[layout.pos_low] = -((1.0 / s[low_v]) / s[low_u])   # row v, column u
        data[layout.pos_diag] = 1.0
    else:
        data[layout.pos_up] = -1.0
        data[layout.pos_low] = -1.0
        data[layout.pos_diag] = deg
    n = graph.number_of_nodes()
    out = sp.csr_matrix((data, layout.indices.copy(), layout.indptr.copy()), shape=(n, n))
    out.has_sorted_indices = True
    return out


def degrees(graph: nx.Graph) -> np.ndarray:
    """Node degrees (float) counted from the cached edge arrays, for the same reason, and
    cached beside them (read-only)."""
    store = getattr(graph, "__networkx_cache__", None)
    if store is not None:
        cached = store.get(_DEGREES)
        if cached is not None and store.get(_EDGE_ARRAYS) is not None:
            return cached
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    deg = (np.bincount(u, minlength=n) + np.bincount(v, minlength=n)).astype(float)
    if store is not None:
        deg.flags.writeable = False
        store[_DEGREES] = deg
    return deg


_DEGREES = "airplan_degrees"
