"""Fastest-mixing weights: minimise rho(W - 11^T/n) over symmetric stochastic W on G's edges.

W = I - sum_l w_l a_l a_l^T with edge weights w >= 0 and row sums of w at most one (a Markov
chain). The SDP (cvxpy) is exact; the projected subgradient method (Boyd et al., "Fastest mixing
Markov chain on a graph", section 5) needs only eigenvectors and scales to larger graphs. Both
start from, and never return worse than, Metropolis-Hastings.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .graphs import edge_arrays, from_edge_weights

SUBGRADIENT_ITERS = 300
DENSE_LIMIT = 600
SDP_LIMIT = 50  # the SDP took 1.5 s at n = 30 and 5-12 s at n = 50 (SCS); beyond, subgradient


def optimise(graph: nx.Graph, start: sp.csr_matrix) -> sp.csr_matrix:
    """The fastest-mixing weights on ``graph``, never mixing slower than ``start`` (the
    Metropolis-Hastings W, which seeds the search)."""
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    w0 = np.asarray(start[u, v]).ravel()
    best_w, best_rho = w0, _rho(n, u, v, w0)
    if n <= 2 or len(u) == 0 or best_rho < 1e-12:
        return start
    candidates = []
    if n <= SDP_LIMIT and _have_cvxpy():
        candidates.append(_solve_sdp(n, u, v))
    if n <= DENSE_LIMIT:
        candidates.append(_subgradient(n, u, v, w0))
    for w in candidates:
        if w is None:
            continue
        rho = _rho(n, u, v, w)
        if rho < best_rho - 1e-12:
            best_w, best_rho = w, rho
    return from_edge_weights(n, u, v, best_w)


def _have_cvxpy() -> bool:
    try:
        import cvxpy  # noqa: F401
    except ImportError:
        return False
    return True


def _dense_w(n, u, v, w) -> np.ndarray:
    m = np.zeros((n, n))
    m[u, v] = w
    m[v, u] = w
    m[np.arange(n), np.arange(n)] = 1.0 - m.sum(axis=1)
    return m


def _rho(n, u, v, w) -> float:
    if n > DENSE_LIMIT:
        from .spectra import mixing_rho

        return mixing_rho(from_edge_weights(n, u, v, w))
    ev = np.linalg.eigvalsh(_dense_w(n, u, v, w))
    return float(max(ev[-2], -ev[0]))


def _project(n, u, v, w) -> np.ndarray:
    """Feasible point near w: non-negative weights, each node's total at most one."""
    w = np.maximum(w, 0.0)
    tot = np.bincount(u, w, n) + np.bincount(v, w, n)
    scale = np.maximum(1.0, np.maximum(tot[u], tot[v]))
    return w / scale


def _subgradient(n, u, v, w0, iters: int = SUBGRADIENT_ITERS) -> np.ndarray:
    w, best, best_rho = w0.copy(), w0.copy(), np.inf
    for t in range(1, iters + 1):
        vals, vecs = np.linalg.eigh(_dense_w(n, u, v, w))
        lam2, lam_n = vals[-2], vals[0]
        rho = max(lam2, -lam_n)
        if rho < best_rho:
            best, best_rho = w.copy(), rho
        if lam2 >= -lam_n:
            x = vecs[:, -2]
            g = -((x[u] - x[v]) ** 2)
        else:
            x = vecs[:, 0]
            g = (x[u] - x[v]) ** 2
        norm = np.linalg.norm(g)
        if norm == 0:
            break
        w = _project(n, u, v, w - (1.0 / np.sqrt(t)) * 0.5 * g / norm * np.sqrt(len(w)) / n)
    return best


def _solve_sdp(n, u, v) -> np.ndarray | None:
    """min s  s.t.  -sI <= Q^T W Q <= sI, w >= 0, node sums <= 1 (Q: basis of 1-perp)."""
    import cvxpy as cp

    m = len(u)
    inc = sp.coo_matrix((np.concatenate([np.ones(m), -np.ones(m)]),
                         (np.concatenate([u, v]), np.concatenate([np.arange(m)] * 2))),
                        shape=(n, m)).toarray()
    basis = np.linalg.qr(np.hstack([np.ones((n, 1)), np.eye(n)[:, 1:]]))[0][:, 1:]
    w, s = cp.Variable(m), cp.Variable()
    proj = basis.T @ inc
    mid = np.eye(n - 1) - proj @ cp.diag(w) @ proj.T
    mid = (mid + mid.T) / 2
    eye = np.eye(n - 1)
    problem = cp.Problem(cp.Minimize(s), [mid << s * eye, mid >> -s * eye, w >= 0,
                                          np.abs(inc) @ w <= 1])
    try:
        problem.solve()
    except Exception:  # a solver failure falls back to the subgradient result
        return None
    if w.value is None:
        return None
    return _project(n, u, v, np.asarray(w.value).ravel())
