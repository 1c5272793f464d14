"""Spectral statistics of a topology and its mixing matrix.

Three quantities are often confused: lambda2 of the Laplacian L, lambda2 of
the normalised Laplacian, and the gap of the mixing matrix W actually applied. D-SGD is governed by
p = 1 - rho^2 with rho = max |eigenvalue| of W - 11^T/n (Koloskova et al. 2020); all are reported.

Solvers: closed forms for the ring and the complete graph; dense ``eigvalsh`` up to
``DENSE_LIMIT`` nodes; beyond, plain Lanczos on the (PSD, known-null) matrix with its kernel
shifted to the top (both ends from one run), LOBPCG with an algebraic-multigrid preconditioner
(pyamg, optional) when the matrix is ill-conditioned, and ARPACK then Jacobi-preconditioned
LOBPCG as the fallback; every eigenvalue is checked by its residual ||M x - lambda x||.
Gaps are computed from I - W directly, so tiny gaps keep their relative precision.
"""

from __future__ import annotations

import math

import attrs
import networkx as nx
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.linalg import blas

from ..errors import PlanningError
from .graphs import degrees, edge_arrays, edge_weights, laplacian

DENSE_LIMIT = 2000
RESIDUAL_TOL = 1e-6


@attrs.frozen
class SpectralStats:
    """Graph and mixing-matrix spectra; ``method`` says how they were computed."""

    n_nodes: int
    n_edges: int
    max_degree: int
    mean_degree: float
    lambda2_laplacian: float
    lambda2_normalized: float
    mixing_rho: float
    mixing_gap: float
    mixing_p: float
    method: str
    #: Rounds in one period of a time-varying topology (1: static).
    period: int = 1
    #: ||W_{period-1} ... W_0 - 11^T/n||_2, the contraction of one period (None when static;
    #: 0 when one period averages exactly).
    period_rho: float | None = None


def spectral_stats(graph: nx.Graph, w: sp.spmatrix, *, family: str | None = None,
                   laplacian_lambda2: tuple[float, float, str] | None = None) -> SpectralStats:
    """Spectra of (G, W); pass ``laplacian_lambda2`` to reuse G's part across weights rules."""
    n = graph.number_of_nodes()
    deg = degrees(graph)
    lam2, lam2_norm, method = laplacian_lambda2 or graph_lambda2(graph, family)
    gap, rho = _mixing_gap(graph, w, family)
    return SpectralStats(
        n_nodes=n, n_edges=len(edge_arrays(graph)[0]), max_degree=int(deg.max()),
        mean_degree=float(deg.mean()), lambda2_laplacian=lam2, lambda2_normalized=lam2_norm,
        mixing_rho=rho, mixing_gap=gap, mixing_p=gap * (2.0 - gap), method=method)


def _closed_form(graph: nx.Graph, family: str | None) -> str | None:
    """'complete' or 'ring' when the (connected) graph is one, whatever family built it;
    'circulant' for the exponential family's graph beyond :data:`DENSE_LIMIT` nodes (checked
    against its edges)."""
    n, m = graph.number_of_nodes(), len(edge_arrays(graph)[0])  # counted once, then cached
    if family == "complete" or m == n * (n - 1) // 2:
        return "complete"
    if n >= 3 and m == n and (family == "ring" or degrees(graph).max() == 2):
        return "ring"  # a connected 2-regular graph is a cycle
    if family == "exponential" and n > DENSE_LIMIT and _is_circulant(graph,
                                                                     _exponential_offsets(n)):
        return "circulant"   # (up to DENSE_LIMIT the dense values are as fast, and unchanged)
    return None


def _exponential_offsets(n: int) -> np.ndarray:
    """The neighbour offsets of the exponential graph: +-2^j mod n for 2^j < n, distinct."""
    hops = [1 << e for e in range(max(1, (n - 1).bit_length())) if (1 << e) < n]
    offs = {h % n for h in hops} | {(n - h) % n for h in hops}
    return np.array(sorted(offs - {0}), dtype=np.int64)


def _is_circulant(graph: nx.Graph, offsets: np.ndarray) -> bool:
    """Whether the graph's edges are exactly {i, i + s mod n} for the offsets s."""
    n = graph.number_of_nodes()
    u, v = edge_arrays(graph)
    if 2 * len(u) != n * len(offsets):
        return False
    diff = np.unique((v - u) % n)
    return bool(np.array_equal(np.union1d(diff, (n - diff) % n), offsets))


def _circulant_spectrum(n: int, offsets: np.ndarray) -> np.ndarray:
    """The Laplacian eigenvalues mu_k = sum_s (1 - cos(2 pi k s / n)), k = 1..n-1, of the
    circulant graph with neighbour offsets s (its eigenvectors are the Fourier modes)."""
    k = np.arange(1, n, dtype=np.float64)
    mus = np.zeros(n - 1)
    for off in offsets:
        mus += 1.0 - np.cos(2.0 * math.pi * ((k * off) % n) / n)
    return mus


def graph_lambda2(graph: nx.Graph, family: str | None = None) -> tuple[float, float, str]:
    """(lambda2(L), lambda2(normalised L), method) of a connected graph."""
    n = graph.number_of_nodes()
    form = _closed_form(graph, family)
    if form == "complete":
        return float(n), n / (n - 1.0), "closed-form"
    if form == "ring":
        lam2 = 2.0 - 2.0 * math.cos(2.0 * math.pi / n)
        return lam2, lam2 / 2.0, "closed-form"
    if form == "circulant":  # regular of degree |offsets|: normalised L = L / degree
        offsets = _exponential_offsets(n)
        mus = _circulant_spectrum(n, offsets)
        graph.graph["_laplacian_extremes"] = (float(mus.min()), float(mus.max()))
        return float(mus.min()), float(mus.min()) / len(offsets), "closed-form"
    lap = laplacian(graph)
    deg = degrees(graph)
    fiedler = None
    if n <= DENSE_LIMIT:
        ev = np.linalg.eigvalsh(lap.toarray())
        graph.graph["_laplacian_extremes"] = (float(ev[1]), float(ev[-1]))
    norm_lap = laplacian(graph, normed=True)
    if n <= DENSE_LIMIT:
        lam2, m1 = graph.graph["_laplacian_extremes"][0], "dense"
    else:
        keep: dict = {}
        lam2, lam_max, m1 = _extremes(lap, np.ones(n), keep=keep)
        graph.graph["_laplacian_extremes"] = (lam2, lam_max)
        fiedler = keep.get("small_vector")
        if fiedler is not None:  # a warm start for W's gap (popped by _mixing_gap)
            graph.graph["_fiedler"] = fiedler
    lam2n, m2 = second_smallest(
        norm_lap, np.sqrt(deg), start=None if fiedler is None else np.sqrt(deg) * fiedler)
    return lam2, lam2n, m1 if m1 == m2 else f"{m1}+{m2}"


def laplacian_extremes(graph: nx.Graph) -> tuple[float, float]:
    """(lambda2, lambda_max) of the Laplacian, used by the best-constant weights rule."""
    n = graph.number_of_nodes()
    if "_laplacian_extremes" in graph.graph:
        return graph.graph["_laplacian_extremes"]
    form = _closed_form(graph, None)
    if form == "complete":
        return float(n), float(n)
    if form == "ring":  # eigenvalues 2 - 2 cos(2 pi k / n)
        return (2.0 - 2.0 * math.cos(2.0 * math.pi / n),
                2.0 - 2.0 * math.cos(2.0 * math.pi * (n // 2) / n))
    lap = laplacian(graph)
    if n <= DENSE_LIMIT:
        ev = np.linalg.eigvalsh(lap.toarray())
        graph.graph["_laplacian_extremes"] = (float(ev[1]), float(ev[-1]))
        return graph.graph["_laplacian_extremes"]
    lam2, lam_max, _ = _extremes(lap, np.ones(n))
    graph.graph["_laplacian_extremes"] = (lam2, lam_max)
    return lam2, lam_max


def _mixing_gap(graph: nx.Graph, w: sp.spmatrix, family: str | None) -> tuple[float, float]:
    """(1 - rho, rho) of W - 11^T/n, computed from I - W to keep tiny gaps precise."""
    n = graph.number_of_nodes()
    w = sp.csr_matrix(w)
    off = edge_weights(graph, w)
    form = _closed_form(graph, family)
    if form and len(off) and np.allclose(off, off[0], rtol=1e-12, atol=0):
        # W = I - a L: eigenvalues 1 - a * mu over the nonzero Laplacian eigenvalues mu.
        a = float(off[0])
        if form == "complete":
            mus = np.array([float(n)])
        elif form == "circulant":
            mus = _circulant_spectrum(n, _exponential_offsets(n))
        else:
            k = np.arange(1, n)
            mus = 2.0 - 2.0 * np.cos(2.0 * math.pi * k / n)
        eig_i_minus_w = a * mus
    elif n <= DENSE_LIMIT:
        eig_i_minus_w = np.linalg.eigvalsh(np.eye(n) - w.toarray())[1:]
    elif _is_constant_rule(graph, w, off):
        # W = I - a L (best_constant, max_degree, any rule on a regular graph): the extremes
        # of I - W are a times the Laplacian's, already computed (and residual-checked) for
        # lambda2(L), so no eigensolve of its own
        lam2, lam_max = laplacian_extremes(graph)
        eig_i_minus_w = float(off[0]) * np.array([lam2, lam_max])
    else:
        i_minus_w = (sp.identity(n, format="csr") - w).tocsr()
        small, large, _ = _extremes(i_minus_w, np.ones(n),
                                    start=graph.graph.pop("_fiedler", None))
        eig_i_minus_w = np.array([small, large])
    # W's eigenvalues are 1 - e, so 1 - |1 - e| is a tent in e and its minimum over the
    # non-consensus spectrum (the gap) is reached at the smallest or the largest e.
    tent = np.where(eig_i_minus_w <= 1.0, eig_i_minus_w, 2.0 - eig_i_minus_w)
    gap = float(tent.min())
    gap = float(min(max(gap, 0.0), 1.0))
    return gap, 1.0 - gap


def _is_constant_rule(graph: nx.Graph, w: sp.csr_matrix, off: np.ndarray) -> bool:
    """Whether W = I - a L(G) for one edge weight a > 0: the same weight on every edge, none
    elsewhere off the diagonal, and rows summing to one."""
    if not len(off) or off[0] <= 0 or not np.allclose(off, off[0], rtol=1e-12, atol=0):
        return False
    coo = w.tocoo()
    if int(np.count_nonzero((coo.row != coo.col) & (coo.data != 0))) != 2 * len(off):
        return False   # weights off the graph's edges
    return bool(np.allclose(w.diagonal(), 1.0 - off[0] * degrees(graph), rtol=0, atol=1e-12))


def complete_stats(n: int) -> SpectralStats:
    """Closed-form spectra of K_n under any of the registered rules (all give W = 11^T/n)."""
    return SpectralStats(n_nodes=n, n_edges=n * (n - 1) // 2, max_degree=n - 1,
                         mean_degree=float(n - 1), lambda2_laplacian=float(n),
                         lambda2_normalized=n / (n - 1.0), mixing_rho=0.0, mixing_gap=1.0,
                         mixing_p=1.0, method="closed-form")


def mixing_rho(w: sp.spmatrix) -> float:
    """rho(W - 11^T/n) for a symmetric doubly-stochastic W of any size."""
    n = w.shape[0]
    graph = nx.from_scipy_sparse_array(sp.csr_matrix(w) - sp.diags(sp.csr_matrix(w).diagonal()))
    return _mixing_gap(graph, w, None)[1] if n > 1 else 0.0


def second_smallest(m: sp.spmatrix, null: np.ndarray, *,
                    start: np.ndarray | None = None) -> tuple[float, str]:
    """Second-smallest eigenvalue of a PSD matrix whose kernel is spanned by ``null``.

    Dense up to :data:`DENSE_LIMIT`; beyond, Lanczos (:func:`_lanczos_extremes`), then LOBPCG
    with an algebraic-multigrid preconditioner when the matrix is ill-conditioned (lambda2 tiny
    against ||M||) and pyamg is installed, then ARPACK and Jacobi-preconditioned LOBPCG. Every
    eigenpair is accepted only after its residual check (:func:`eigenpair_ok`). ``start``, an
    approximate eigenvector, only speeds Lanczos up.
    """
    n = m.shape[0]
    if n <= DENSE_LIMIT:
        return float(np.linalg.eigvalsh(m.toarray())[1]), "dense"
    small, _large, ill = _lanczos_extremes(m, null, largest=False, start=start)
    if small is not None:
        return small, "lanczos"
    return _fallback_second_smallest(m, null, ill)


def _fallback_second_smallest(m: sp.spmatrix, null: np.ndarray, ill: bool) -> tuple[float, str]:
    if ill:
        amg = _amg_lobpcg(m, null)
        if amg is not None:
            return amg, "lobpcg"
    return _arpack_second_smallest(m, null)


def _extremes(m: sp.spmatrix, null: np.ndarray, *, start: np.ndarray | None = None,
              keep: dict | None = None) -> tuple[float, float, str]:
    """(lambda2, lambda_max, method) of a PSD matrix with kernel ``null``, from one Lanczos run
    where it converges (each end falls back on its own)."""
    small, large, ill = _lanczos_extremes(m, null, start=start, keep=keep)
    method = "lanczos"
    if small is None:
        small, method = _fallback_second_smallest(m, null, ill)
    if large is None:
        large = _arpack_largest(m)
    return small, large, method


def _arpack_second_smallest(m: sp.spmatrix, null: np.ndarray) -> tuple[float, str]:
    """ARPACK on the two smallest eigenvalues, then Jacobi-preconditioned LOBPCG."""
    n = m.shape[0]
    null = null / np.linalg.norm(null)
    rng = np.random.default_rng(0)
    try:
        vals, vecs = sla.eigsh(m, k=2, which="SM", tol=1e-10, v0=rng.standard_normal(n),
                               maxiter=20 * n)
        i = int(np.argmax(vals))
        x = vecs[:, i]
        if abs(x @ null) < 1e-3 and _residual(m, x, vals[i]) < RESIDUAL_TOL * max(1.0, vals[i]):
            return float(vals[i]), "arpack"
    except sla.ArpackNoConvergence:
        pass
    x0 = rng.standard_normal((n, 2))
    precond = sp.diags(1.0 / np.maximum(m.diagonal(), 1e-12))
    vals, vecs = sla.lobpcg(m, x0, Y=null[:, None], M=precond, largest=False, tol=1e-9,
                            maxiter=5000)
    i = int(np.argmin(vals))
    res = _residual(m, vecs[:, i], vals[i])
    if res > RESIDUAL_TOL * max(1.0, vals[i]) * 100:
        raise PlanningError(f"eigensolver did not converge (residual {res:.2e}) for n={n}")
    return float(vals[i]), "lobpcg"


def _largest(m: sp.spmatrix) -> float:
    """Largest eigenvalue of a symmetric matrix: Lanczos, ARPACK when it does not converge."""
    if m.shape[0] > DENSE_LIMIT:
        _small, large, _ill = _lanczos_extremes(m, None, smallest=False)
        if large is not None:
            return large
    return _arpack_largest(m)


def _arpack_largest(m: sp.spmatrix) -> float:
    return float(sla.eigsh(m, k=1, which="LA", return_eigenvectors=False, tol=1e-10)[0])


def _residual(m, x, lam) -> float:
    x = x / np.linalg.norm(x)
    return float(np.linalg.norm(m @ x - lam * x))


def norm_bound(m: sp.spmatrix) -> float:
    """max_i sum_j |m_ij|, an upper bound of ||m||_2 (Gershgorin) for a symmetric m."""
    return float(abs(sp.csr_matrix(m)).sum(axis=1).max()) if m.shape[0] else 0.0


def eigenpair_ok(m: sp.spmatrix, x: np.ndarray, lam: float, norm: float | None = None) -> bool:
    """The residual check every iterative eigenvalue passes: ||M x - lam x|| / ||x|| at most
    :data:`RESIDUAL_TOL` times ||M|| (its bound :func:`norm_bound` unless ``norm`` is given)."""
    nx_ = float(np.linalg.norm(x))
    if not np.isfinite(lam) or not nx_ > 0.0:
        return False
    norm = norm_bound(m) if norm is None else norm
    return _residual(m, np.asarray(x, dtype=np.float64), lam) <= RESIDUAL_TOL * max(norm, 1e-300)


#: Lanczos stops once the estimated residual of the wanted Ritz pairs is below this times
#: the Ritz value (smallest) or ||M|| (largest): the residual check's own tolerance
#: (:data:`RESIDUAL_TOL`). The eigenvalues' error is far smaller (about residual^2 / gap): at
#: N = 1e5 they moved by at most 3e-11 relative against 1e-7, which took 12% more steps.
LANCZOS_TOL = 1e-6
#: Weight of the random vector mixed into a warm start (it keeps every eigenvector present).
START_NOISE = 0.1
#: At most this many Lanczos steps; its basis is kept in float32 within LANCZOS_MEMORY bytes.
LANCZOS_MAX_STEPS = 1500
LANCZOS_MEMORY = 2 << 30
#: After this many steps, a smallest Ritz value below ILL_CONDITIONED * ||M|| marks the matrix
#: as ill-conditioned: LOBPCG with an AMG preconditioner converges much faster there.
PROBE_STEPS = 100
ILL_CONDITIONED = 1e-3


def _lanczos_extremes(m: sp.spmatrix, null: np.ndarray | None, *, smallest: bool = True,
                      largest: bool = True, start: np.ndarray | None = None,
                      keep: dict | None = None) -> tuple[float | None, float | None, bool]:
    """:func:`_lanczos_run` with BLAS on one thread (:func:`_one_blas_thread`)."""
    with _one_blas_thread():
        return _lanczos_run(m, null, smallest=smallest, largest=largest, start=start, keep=keep)


def _one_blas_thread():
    """A context in which BLAS runs on one thread. Lanczos makes a few vector operations per
    matrix product (length N); threads gain nothing there, and on a busy machine each threaded
    call can wait for a descheduled thread. A no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _lanczos_run(m: sp.spmatrix, null: np.ndarray | None, *, smallest: bool, largest: bool,
                 start: np.ndarray | None, keep: dict | None
                 ) -> tuple[float | None, float | None, bool]:
    """(lambda_min, lambda_max, ill_conditioned) of a symmetric M on the complement of ``null``.

    Plain Lanczos (three-term recurrence, no reorthogonalisation) on M + s q q^T with
    s = 3 ||M||, q = null / ||null||: the kernel moves to an isolated top eigenvalue, which costs
    one step, and lambda_max is the largest Ritz value below 2 ||M||. Ritz values converge to the
    extreme eigenvalues despite the loss of orthogonality; the run stops at the first step where
    every wanted pair is converged by the estimate beta_j |s_j|, before ghost copies appear. Each
    Ritz vector is then formed from the stored basis and residual-checked on M; a failed check, a
    run past the step budget or an ill-conditioned probe returns None for that end.

    ``start`` (an approximate eigenvector of the small end, e.g. another matrix's of the same
    graph) is mixed with a random vector as the first Lanczos vector; ``keep`` receives the
    accepted small-end Ritz vector as ``keep["small_vector"]``.
    """
    n = m.shape[0]
    m = sp.csr_matrix(m, dtype=np.float64)
    norm = norm_bound(m)
    if norm == 0.0:
        return None, None, False
    shift = 3.0 * norm
    q = None if null is None else null / np.linalg.norm(null)
    uniform = q is not None and bool(np.all(q == q[0]))
    max_steps = int(min(n, LANCZOS_MAX_STEPS, max(10, LANCZOS_MEMORY // (4 * n))))
    v = np.random.default_rng(0).standard_normal(n)
    v /= np.linalg.norm(v)
    if start is not None and np.all(np.isfinite(start)) and np.linalg.norm(start) > 0:
        v = np.asarray(start, dtype=np.float64) / np.linalg.norm(start) + START_NOISE * v
        v /= np.linalg.norm(v)
    v_prev = np.zeros(n)
    basis = np.empty((max_steps, n), dtype=np.float32)
    alpha, beta = [], []
    b = 0.0
    done_small = done_large = None
    ill = False
    for j in range(max_steps):
        basis[j] = v
        w = np.ascontiguousarray(m @ v, dtype=np.float64)
        if uniform:  # q = 1 / sqrt(n): q q^T v is the mean of v, fewer passes over memory
            w += shift * (v.sum() / n)
        elif q is not None:
            w = blas.daxpy(q, w, a=shift * blas.ddot(q, v))
        a = float(blas.ddot(v, w))
        w = blas.daxpy(v, w, a=-a)
        w = blas.daxpy(v_prev, w, a=-b)
        b = float(blas.dnrm2(w))
        alpha.append(a)
        beta.append(b)
        steps = j + 1
        exhausted = b <= 1e-12 * norm
        if exhausted or steps % 10 == 0 or steps == max_steps:
            done_small, done_large, theta_min = _ritz(alpha, beta, norm, smallest, largest,
                                                      exhausted)
            if (not smallest or done_small) and (not largest or done_large):
                break
            if (smallest and steps == PROBE_STEPS and q is not None
                    and theta_min < ILL_CONDITIONED * norm and _have_pyamg()):
                ill, smallest = True, False  # lambda2 goes to multigrid; go on for lambda_max
                if not largest:
                    return None, None, True
                if done_large:
                    break
        if exhausted:
            break
        v_prev, v = v, blas.dscal(1.0 / b, w)
    else:
        return None, None, ill
    out = []
    for want, done in ((smallest, done_small), (largest, done_large)):
        if not want or not done:
            out.append(None)
            continue
        theta, s = done
        x = (s.astype(np.float32) @ basis[:steps]).astype(np.float64)
        ok = eigenpair_ok(m, x, theta, norm)
        out.append(theta if ok else None)
        if ok and len(out) == 1 and keep is not None:
            keep["small_vector"] = x
    return out[0], out[1], ill


def _ritz(alpha, beta, norm, smallest, largest, exhausted):
    """Converged extreme Ritz pairs (theta, s) of the tridiagonal T_j, or None, and min theta."""
    from scipy.linalg import eigh_tridiagonal

    d, e = np.asarray(alpha), np.asarray(beta[:-1])
    b_last = 0.0 if exhausted else beta[-1]
    theta = eigh_tridiagonal(d, e, eigvals_only=True) if len(d) > 1 else d.copy()

    def pair(k, scale):
        if len(d) == 1:
            y = np.ones(1)
        else:
            y = eigh_tridiagonal(d, e, select="i", select_range=(k, k))[1][:, 0]
        t = float(theta[k])
        return (t, y) if b_last * abs(y[-1]) <= LANCZOS_TOL * scale else None

    small = pair(0, max(abs(float(theta[0])), 1e-300)) if smallest else None
    large = None
    if largest:
        k = int(np.searchsorted(theta, 2.0 * norm)) - 1  # the largest below the moved kernel
        large = pair(k, norm) if k >= 0 else None
    return small, large, float(theta[0])


def _have_pyamg() -> bool:
    try:
        import pyamg  # noqa: F401
    except ImportError:
        return False
    return True


def _amg_lobpcg(m: sp.spmatrix, null: np.ndarray) -> float | None:
    """lambda2 by LOBPCG preconditioned with pyamg's smoothed aggregation (None when pyamg is
    missing or the result fails its residual check)."""
    try:
        import pyamg
    except ImportError:
        return None
    n = m.shape[0]
    m = sp.csr_matrix(m, dtype=np.float64)
    norm = norm_bound(m)
    q = null / np.linalg.norm(null)
    ml = pyamg.smoothed_aggregation_solver(m, B=q[:, None], symmetry="symmetric")
    x0 = np.random.default_rng(0).standard_normal((n, 2))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals, vecs = sla.lobpcg(m, x0, Y=q[:, None], M=ml.aspreconditioner(), largest=False,
                                tol=1e-9 * norm, maxiter=AMG_MAX_ITER)
    i = int(np.argmin(vals))
    return float(vals[i]) if eigenpair_ok(m, vecs[:, i], float(vals[i]), norm) else None


AMG_MAX_ITER = 300


def periodic_spectral_stats(rounds, drawn: bool = False) -> SpectralStats:
    """Spectra of a periodic topology (rounds with ``graph`` and ``weights``, W_t doubly
    stochastic, possibly asymmetric), as per-round figures the cost models read like a static
    topology's:

    * ``mixing_p`` = (1 - ||W_{tau-1} ... W_0 - 11^T/n||_2^2) / tau. Koloskova et al. 2020
      ("A Unified Theory of Decentralized SGD with Changing Topology and Local Updates",
      Assumption 4) describe a changing topology by (tau, p): one block of tau rounds contracts
      the disagreement by 1 - p; their rates depend on p / tau wherever a static graph's depend
      on p, so p / tau is the per-round p (for tau = 1 it is the static 1 - rho^2). A period
      that averages exactly (one_peer_exponential at n = 2^tau, base_k) has p = 1 / tau.
    * ``mixing_rho`` = sqrt(1 - p) and ``mixing_gap`` = 1 - rho: the static topology with the
      same per-round p (so p = gap (2 - gap) holds as for static topologies);
      ``period_rho`` is the contraction of one period itself.
    * ``n_edges`` = half the directed links per round, ``mean_degree`` = links per round / n and
      ``max_degree`` = the largest in-degree of any round (averages over the period; a
      one-peer round has n links, in-degree 1).
    * ``lambda2_laplacian`` / ``lambda2_normalized``: of the period's average graph (each edge
      weighted by the fraction of rounds that use it).

    ``drawn``: the rounds are independent draws of one random graph (``resample_er``), not a
    fixed cycle. Then Koloskova et al.'s assumption holds with tau = 1 in expectation,
    E||W_t x - xbar||^2 <= (1 - p) ||x - xbar||^2 with p = 1 - lambda_max(E[W_t^T W_t] - 11^T/n)
    (the expectation estimated by the period's mean), and that p is the per-round figure: the
    period product's would divide it by the (arbitrary, long) period.
    """
    from .graphs import directed_links
    from .periodic import is_exact

    tau = len(rounds)
    n = rounds[0].weights.shape[0]
    links, max_in = [], 0
    avg = sp.csr_matrix((n, n))
    for r in rounds:
        recv, _send, _edge, _vals = directed_links(r.graph, r.weights)
        links.append(recv.size)
        if recv.size:
            max_in = max(max_in, int(np.bincount(recv, minlength=n).max()))
        u, v = edge_arrays(r.graph)
        avg = avg + sp.coo_matrix((np.ones(2 * u.size), (np.concatenate([u, v]),
                                                          np.concatenate([v, u]))),
                                  shape=(n, n)).tocsr()
    avg = (avg / tau).tocsr()
    lam2, lam2n, method = _weighted_lambda2(avg)
    # a drawn sequence's long product is near 11^T/n without averaging exactly: its norm is shown
    rho_period = 0.0 if not drawn and is_exact(rounds) else _product_norm(rounds)
    p = (1.0 - rho_period ** 2) / tau
    if drawn:
        p = max(p, _expected_contraction(rounds))
    rho = math.sqrt(max(0.0, 1.0 - p))
    mean_links = float(np.mean(links))
    return SpectralStats(
        n_nodes=n, n_edges=int(round(mean_links / 2)), max_degree=max_in,
        mean_degree=mean_links / n, lambda2_laplacian=lam2, lambda2_normalized=lam2n,
        mixing_rho=rho, mixing_gap=1.0 - rho, mixing_p=p, method=f"periodic+{method}",
        period=tau, period_rho=rho_period)


def _expected_contraction(rounds) -> float:
    """1 - lambda_max(mean_t W_t^T W_t - 11^T/n): the expected one-round contraction of the
    disagreement when each round is an independent draw from the period's rounds."""
    n = rounds[0].weights.shape[0]
    if n <= PRODUCT_DENSE_MAX_N:
        m = np.zeros((n, n))
        for r in rounds:
            w = r.weights.toarray()
            m += w.T @ w
        m = m / len(rounds) - 1.0 / n
        return float(max(0.0, 1.0 - np.linalg.eigvalsh((m + m.T) / 2).max()))

    def apply(x):
        x = np.asarray(x, dtype=np.float64).reshape(n, -1)
        x = x - x.mean(axis=0)
        out = np.zeros_like(x)
        for r in rounds:
            out += r.weights.T @ (r.weights @ x)
        out /= len(rounds)
        return out - out.mean(axis=0)

    op = sla.LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np.float64)
    lam = sla.eigsh(op, k=1, which="LA", return_eigenvectors=False, tol=1e-8,
                    v0=np.random.default_rng(0).standard_normal(n))
    return float(max(0.0, 1.0 - lam[0]))


def _weighted_lambda2(adj: sp.csr_matrix) -> tuple[float, float, str]:
    from scipy.sparse import csgraph

    n = adj.shape[0]
    lap = sp.csr_matrix(csgraph.laplacian(adj))
    norm = sp.csr_matrix(csgraph.laplacian(adj, normed=True))
    deg = np.asarray(adj.sum(axis=1)).ravel()
    if n <= DENSE_LIMIT:
        return (float(np.linalg.eigvalsh(lap.toarray())[1]),
                float(np.linalg.eigvalsh(norm.toarray())[1]), "dense")
    lam2, m1 = second_smallest(lap, np.ones(n))
    lam2n, m2 = second_smallest(norm, np.sqrt(deg))
    return lam2, lam2n, m1 if m1 == m2 else f"{m1}+{m2}"


#: Up to this many nodes the period product is formed densely for its norm (an SVD); above,
#: ARPACK on the chain of sparse products (faster from a few hundred nodes).
PRODUCT_DENSE_MAX_N = 300


def _product_norm(rounds) -> float:
    """||W_{tau-1} ... W_0 - 11^T/n||_2: dense up to :data:`PRODUCT_DENSE_MAX_N` nodes, else
    ARPACK's largest singular value of the product applied as a chain of sparse products."""
    n = rounds[0].weights.shape[0]
    if n <= PRODUCT_DENSE_MAX_N:
        m = np.eye(n)
        for r in rounds:
            m = r.weights @ m
        return float(np.linalg.norm(m - 1.0 / n, 2))

    def fwd(x):
        x = np.asarray(x, dtype=np.float64).reshape(n, -1)
        x = x - x.mean(axis=0)
        for r in rounds:
            x = r.weights @ x
        return x - x.mean(axis=0)

    def back(y):
        y = np.asarray(y, dtype=np.float64).reshape(n, -1)
        y = y - y.mean(axis=0)
        for r in reversed(rounds):
            y = r.weights.T @ y
        return y - y.mean(axis=0)

    op = sla.LinearOperator((n, n), matvec=fwd, rmatvec=back, matmat=fwd, rmatmat=back,
                            dtype=np.float64)
    s = sla.svds(op, k=1, tol=1e-10, return_singular_vectors=False,
                 v0=np.random.default_rng(0).standard_normal(n))
    return float(s[0])
