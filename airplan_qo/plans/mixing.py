"""Mixing-weight rules: how each client averages its neighbours' models.

Every rule returns a sparse symmetric doubly-stochastic W (scipy CSR) with the sparsity pattern of
G plus the diagonal. The mixing gap of W, not lambda2 of the graph, governs D-SGD, so the rule is
a real axis of the plan space.
"""

from __future__ import annotations

from typing import Callable

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ..registry import Registry
from .graphs import degrees, edge_arrays, weights_matrix

WeightsRule = Callable[[nx.Graph], sp.csr_matrix]
WEIGHTS: Registry[WeightsRule] = Registry("mixing weights rule")
DEFAULT_WEIGHTS = "metropolis_hastings"


#: The weights "rule" of families that define their own mixing matrices (the periodic families
#: ``one_peer_exponential`` and ``base_k``): not a rule that can be applied to a graph.
PRESCRIBED = "prescribed"


@WEIGHTS.register("metropolis_hastings")
def metropolis_hastings(graph: nx.Graph) -> sp.csr_matrix:
    """W_ij = 1 / (1 + max(d_i, d_j)): locally computable, the default."""
    deg = degrees(graph)
    u, v = edge_arrays(graph)
    return weights_matrix(graph, 1.0 / (1.0 + np.maximum(deg[u], deg[v])))


@WEIGHTS.register("max_degree")
def max_degree(graph: nx.Graph) -> sp.csr_matrix:
    """W_ij = 1 / (1 + d_max): one constant weight on every edge."""
    deg = degrees(graph)
    u, v = edge_arrays(graph)
    return weights_matrix(graph, np.full(len(u), 1.0 / (1.0 + deg.max())))


@WEIGHTS.register("best_constant")
def best_constant(graph: nx.Graph) -> sp.csr_matrix:
    """W = I - a L with a = 2 / (lambda2(L) + lambda_N(L)): the optimal single edge weight."""
    from .spectra import laplacian_extremes

    lam2, lam_n = laplacian_extremes(graph)
    u, v = edge_arrays(graph)
    return weights_matrix(graph, np.full(len(u), 2.0 / (lam2 + lam_n)))


@WEIGHTS.register("fastest_mixing")
def fastest_mixing(graph: nx.Graph) -> sp.csr_matrix:
    """Fastest-mixing symmetric Markov chain on G (Boyd, Diaconis, Xiao).

    Solved as an SDP with cvxpy when it is installed (extra ``sdp``), else by a projected
    subgradient method on the edge weights. Never returns a smaller gap than Metropolis-Hastings.
    """
    from .fastest_mixing import optimise

    return optimise(graph, metropolis_hastings(graph))
