"""Graph arrays shared by the mixing rules, the spectra, the OTA schedule and the runtime: edge
arrays (cached on the graph), adjacency, Laplacian, degrees, and the directed links of a round.

Topologies are networkx graphs with nodes 0..n-1, built once and never mutated, so the edge
arrays are computed once per graph and everything else is derived from them.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph


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
    """W = I - L_w: off-diagonal weights w on edges (u, v), the diagonal making rows sum to one."""
    off = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([u, v]), np.concatenate([v, u]))),
                        shape=(n, n)).tocsr()
    return (sp.identity(n, format="csr") - csgraph.laplacian(off)).tocsr()


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
    """0/1 adjacency matrix (CSR) of an undirected graph with nodes 0..n-1.

    Built from the cached edge arrays rather than ``networkx.to_scipy_sparse_array``, which walks
    the graph's dicts again on every call.
    """
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    return sp.coo_matrix((np.ones(2 * len(u)), (np.concatenate([u, v]), np.concatenate([v, u]))),
                         shape=(n, n)).tocsr()


def laplacian(graph: nx.Graph, *, normed: bool = False) -> sp.csr_matrix:
    """L = D - A of the graph, or D^-1/2 L D^-1/2 with ``normed`` (CSR)."""
    return sp.csr_matrix(csgraph.laplacian(adjacency(graph), normed=normed))


def degrees(graph: nx.Graph) -> np.ndarray:
    """Node degrees (float) counted from the cached edge arrays, for the same reason."""
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    return np.bincount(np.concatenate([u, v]), minlength=n).astype(float)
