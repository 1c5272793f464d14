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

    Cached on the graph (``graph.graph``): topologies are built once and never mutated, and
    iterating a large networkx graph's edges dominates everything else here.
    """
    cached = graph.graph.get("_edge_arrays")
    if cached is not None and cached[0] == graph.number_of_edges():
        return cached[1], cached[2]
    m = graph.number_of_edges()
    e = np.fromiter(itertools.chain.from_iterable(graph.edges()), dtype=np.int64,
                    count=2 * m).reshape(m, 2)
    u, v = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    u.flags.writeable = v.flags.writeable = False
    graph.graph["_edge_arrays"] = (m, u, v)
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
