"""Time-varying (periodic) topologies: one graph and one mixing matrix per round, W_t =
W_{t mod period}.

A periodic family builds the whole period at once, as :class:`Round` values (the round's
undirected support graph and its W_t). A W_t may be asymmetric (a directed round: node i averages
with what it receives, and what it sends is not what it hears); every W_t is doubly stochastic,
so gossip preserves the average. Two families are defined here, both with finite-time exact
averaging: the product of one period's matrices is 11^T/n.

``one_peer_exponential`` (Ying et al. 2021, "Exponential Graph is Provably Efficient for
Decentralized Deep Training")
    tau = ceil(log2 n) rounds; in round t node i averages with node (i + 2^(t mod tau)) mod n:
    W_t = (I + P_t) / 2 with P_t the cyclic shift by 2^t. Every node receives from one node and
    sends to one node per round. The shifts commute, so the product of any tau consecutive
    rounds is prod_t (I + P_t) / 2 = (1/2^tau) sum over all shifts 0..2^tau - 1, which is
    11^T/n exactly when n = 2^tau; for other n the averaging is only approximate.

``base_k`` (Takezawa et al. 2023, "Beyond Exponential Graph: Communication-Efficient Topologies
for Decentralized Learning via Finite-time Convergence"): the Base-(k+1) graph
    Every round is a union of disjoint small symmetric blocks, so every node has at most k
    neighbours per round (k = maximum degree), and one period averages exactly for every n:

    * *k-peer hyper-hypercube* (m nodes whose prime factors are all <= k + 1): m = f_1 ... f_L
      with factors in [2, k + 1]; the nodes are numbered in the mixed radix (f_1, ..., f_L) and
      in round l every node averages with the f_l - 1 nodes that differ from it only in digit l
      (a clique, weights 1/f_l). After L rounds every node holds the mean.
    * *simple Base-(k+1) graph* (any m): write m in base k + 1, m = sum_l a_l (k+1)^(p_l)
      (p_0 > p_1 > ... , 1 <= a_l <= k), and split the nodes into consecutive groups V_l of
      a_l (k+1)^(p_l) nodes. (1) Every group averages itself with its hyper-hypercube (groups
      with shorter schedules then idle). (2) In round M + l (M = the longest of those schedules,
      l = 0 .. L-2) the group V_l, now uniform, is mixed into the later nodes U_l = V_{l+1} u ...:
      V_l is cut into a_l sub-blocks of (k+1)^(p_l) nodes, each node u of U_l takes one partner
      in each sub-block (|U_l| < (k+1)^(p_l), so partners are distinct), and with
      c = |V_l| / (|V_l| + |U_l|): W_uu = 1 - c, W_uj = W_ju = c / a_l, W_jj = 1 - c / a_l for
      each partner j (unpaired nodes idle). Every later group stays uniform and the nodes of U_l
      now average to the overall mean of V_l u U_l. (3) From round M + l + 1 each sub-block of V_l
      runs its own hyper-hypercube; every sub-block received the same total from U_l, so V_l ends
      uniform at that mean too. One period takes 2 p_0 + 1 + [a_0 > 1] rounds.
    * *Base-(k+1) graph* (any n): n = n_p n_r with n_p the largest divisor of n whose prime
      factors are all <= k + 1. Either the simple Base-(k+1) graph on all n nodes, or the simple
      graph on n_p blocks of n_r consecutive nodes in parallel followed by the hyper-hypercube
      across the blocks (the i-th node of every block); the shorter period is used (the second
      on ties).

``resample_er`` (the topology of DLLR-OA's published code, Qiao et al. 2023)
    A fresh G_t ~ G(n, p) every round (p = 1/2 there), with Metropolis weights
    W_ij = 1 / max(deg_i + 1, deg_j + 1) and W_ii = 1 - sum_j W_ij on that round's graph. A
    redrawn-every-round sequence is a periodic family whose period is long (``period`` rounds,
    drawn once from the topology seed): the runtime, the accounting and the spectra already
    follow one graph and W_t per round, and a run of at most ``period`` rounds never repeats a
    draw. A round's graph need not be connected (the code does not ask it to); the union of
    the period's graphs must be. Its period does not average exactly (``period_rho`` > 0).

Every built period of the exact families is checked numerically (:func:`check_exact`): the
product of the period's matrices applied to random vectors must give their mean; a construction
that does not is refused with a :class:`~airplan_qo.errors.PlanningError` rather than used.
"""

from __future__ import annotations

import math

import attrs
import networkx as nx
import numpy as np
import scipy.sparse as sp

from ..errors import PlanningError

#: Relative tolerance of the exactness check (float64 products of ~tens of sparse matrices).
EXACT_TOL = 1e-9


@attrs.frozen
class Round:
    """One round of a periodic topology: the undirected support graph (nodes 0..n-1, an edge
    wherever W_t has weight in either direction) and the doubly-stochastic W_t (CSR)."""

    graph: nx.Graph = attrs.field(eq=False)
    weights: sp.csr_matrix = attrs.field(eq=False)


def _round(n: int, rows, cols, vals) -> Round:
    """A round from off-diagonal entries (row, col, value); the diagonal makes rows sum to one."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.float64)
    off = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    diag = 1.0 - np.asarray(off.sum(axis=1)).ravel()
    w = (off + sp.diags(diag)).tocsr()
    w.eliminate_zeros()
    g = nx.empty_graph(n)
    g.add_edges_from((int(a), int(b)) for a, b in zip(rows.tolist(), cols.tolist()) if a != b)
    return Round(g, w)


# ---------------------------------------------------------------------------- one peer exponential


def one_peer_exponential_rounds(n: int) -> tuple[Round, ...]:
    """The one-peer exponential graph's period (module docstring)."""
    tau = max(1, math.ceil(math.log2(n)))
    nodes = np.arange(n)
    out = []
    for t in range(tau):
        peer = (nodes + 2 ** t) % n
        out.append(_round(n, nodes, peer, np.full(n, 0.5)))
    return tuple(out)


# ------------------------------------------------------------------------------------ base (k+1)


def small_factors(m: int, k: int) -> list[int] | None:
    """m as a product of factors in [2, k + 1] (largest first, greedily), [] for m = 1, or None
    when m has a prime factor above k + 1."""
    out: list[int] = []
    rest = m
    for f in range(k + 1, 1, -1):
        while rest % f == 0:
            out.append(f)
            rest //= f
    return out if rest == 1 else None


def _hyper_hypercube(nodes: list[int], k: int) -> list[list[tuple[int, int, float]]]:
    """Per round, the off-diagonal entries (i, j, w) of the k-peer hyper-hypercube on ``nodes``
    (their count must factor into factors <= k + 1)."""
    factors = small_factors(len(nodes), k)
    if factors is None:
        raise PlanningError(f"base_k: {len(nodes)} nodes do not factor into factors <= {k + 1}")
    m = len(nodes)
    pos = np.arange(m)
    stride = 1
    rounds = []
    for f in factors:
        digit = (pos // stride) % f
        entries = []
        for a in range(f):
            for b in range(f):
                if a != b:
                    entries += [(nodes[i], nodes[i + (b - a) * stride], 1.0 / f)
                                for i in pos[digit == a].tolist()]
        rounds.append(entries)
        stride *= f
    return rounds


def _base_digits(m: int, k: int) -> list[tuple[int, int]]:
    """m in base k + 1 as (a_l, p_l) pairs, highest power first, zero digits left out."""
    out = []
    p = 0
    while (k + 1) ** (p + 1) <= m:
        p += 1
    rest = m
    while rest:
        a = rest // (k + 1) ** p
        if a:
            out.append((a, p))
            rest -= a * (k + 1) ** p
        p -= 1
    return out


def _simple_base(nodes: list[int], k: int) -> list[list[tuple[int, int, float]]]:
    """Per round, the off-diagonal entries of the simple Base-(k+1) graph on ``nodes``."""
    m = len(nodes)
    if m == 1:
        return []
    if small_factors(m, k) is not None:
        return _hyper_hypercube(nodes, k)
    digits = _base_digits(m, k)
    groups, start = [], 0
    for a, p in digits:
        size = a * (k + 1) ** p
        groups.append(nodes[start:start + size])
        start += size
    own = [_hyper_hypercube(g, k) for g in groups]
    big_m = max(len(r) for r in own)
    n_groups = len(groups)
    sub_rounds = {}
    for l, ((a, p), g) in enumerate(zip(digits, groups)):
        if l < n_groups - 1:
            block = (k + 1) ** p
            per_block = [_hyper_hypercube(g[c * block:(c + 1) * block], k) for c in range(a)]
            sub_rounds[l] = [sum((pb[r] for pb in per_block), []) for r in range(p)]
    length = max([big_m + l + 1 + len(sub_rounds[l]) for l in sub_rounds] + [big_m])
    rounds: list[list[tuple[int, int, float]]] = [[] for _ in range(length)]
    for r in range(big_m):                                   # (1) every group averages itself
        for sched in own:
            if r < len(sched):
                rounds[r] += sched[r]
    for l in range(n_groups - 1):                            # (2) V_l mixed into the later nodes
        a, p = digits[l]
        block = (k + 1) ** p
        later = [u for g in groups[l + 1:] for u in g]
        c = len(groups[l]) / (len(groups[l]) + len(later))
        for idx, u in enumerate(later):
            for b in range(a):
                j = groups[l][b * block + idx]
                rounds[big_m + l] += [(u, j, c / a), (j, u, c / a)]
        for r, entries in enumerate(sub_rounds[l]):          # (3) its sub-blocks re-average
            rounds[big_m + l + 1 + r] += entries
    return rounds


def _largest_smooth_divisor(n: int, k: int) -> int:
    out = 1
    rest = n
    for q in range(2, k + 2):
        while rest % q == 0:
            out *= q
            rest //= q
    return out


def base_k_rounds(n: int, k: int) -> tuple[Round, ...]:
    """The Base-(k+1) graph's period on n nodes with maximum degree k (module docstring)."""
    if k < 1:
        raise PlanningError(f"base_k needs a maximum degree k >= 1, got {k}")
    k = min(k, n - 1)
    nodes = list(range(n))
    best = _simple_base(nodes, k)
    n_p = _largest_smooth_divisor(n, k)
    n_r = n // n_p
    if n_p > 1 and n_r > 1:
        blocks = [nodes[b * n_r:(b + 1) * n_r] for b in range(n_p)]
        inner = [_simple_base(b, k) for b in blocks]
        across = [_hyper_hypercube([blk[i] for blk in blocks], k) for i in range(n_r)]
        composite = ([sum((s[r] for s in inner), []) for r in range(len(inner[0]))]
                     + [sum((s[r] for s in across), []) for r in range(len(across[0]))])
        if len(composite) <= len(best):
            best = composite
    out = []
    for entries in best:
        rows, cols, vals = zip(*entries) if entries else ((), (), ())
        out.append(_round(n, rows, cols, vals))
    return tuple(out)


# ------------------------------------------------------------------------------------ resample er


def resample_er_rounds(n: int, p: float, period: int, seed: int) -> tuple[Round, ...]:
    """``period`` independent G(n, p) rounds with Metropolis weights (module docstring), drawn
    from ``seed``: the upper triangle of an n x n uniform draw below p per round."""
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, k=1)
    out = []
    for _ in range(period):
        keep = rng.random(iu.size) < p
        i, j = iu[keep], ju[keep]
        deg = np.bincount(np.concatenate([i, j]), minlength=n)
        w = 1.0 / np.maximum(deg[i] + 1, deg[j] + 1)
        out.append(_round(n, np.concatenate([i, j]), np.concatenate([j, i]),
                          np.concatenate([w, w])))
    return tuple(out)


# ------------------------------------------------------------------------------------ checks


def period_apply(rounds: tuple[Round, ...], x: np.ndarray, start: int = 0,
                 length: int | None = None) -> np.ndarray:
    """W_{start+length-1} ... W_{start} x (phases taken modulo the period)."""
    tau = len(rounds)
    for t in range(start, start + (tau if length is None else length)):
        x = rounds[t % tau].weights @ x
    return x


def check_doubly_stochastic(rounds: tuple[Round, ...], what: str) -> None:
    for t, r in enumerate(rounds):
        w = r.weights
        rows = np.asarray(w.sum(axis=1)).ravel()
        cols = np.asarray(w.sum(axis=0)).ravel()
        if (not np.allclose(rows, 1.0, atol=1e-12) or not np.allclose(cols, 1.0, atol=1e-12)
                or (w.data < -1e-15).any()):
            raise PlanningError(f"{what}: round {t}'s mixing matrix is not doubly stochastic")


def is_exact(rounds: tuple[Round, ...], seed: int = 0) -> bool:
    """Whether one period (from phase 0) maps every vector to its mean, checked on four random
    vectors: a product that is not 11^T/n moves a random vector off its mean almost surely."""
    n = rounds[0].weights.shape[0]
    x = np.random.default_rng(seed).standard_normal((n, 4))
    y = period_apply(rounds, x)
    return bool(np.abs(y - x.mean(axis=0)).max() <= EXACT_TOL * np.abs(x).max())


def check_exact(rounds: tuple[Round, ...], what: str) -> None:
    """Refuse a construction whose period does not average exactly (module docstring)."""
    check_doubly_stochastic(rounds, what)
    if not is_exact(rounds):
        raise PlanningError(f"{what}: the product of one period's mixing matrices is not "
                            "11^T/n; this construction is not supported")
