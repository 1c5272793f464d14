"""Over-the-air slot schedule: which receivers can be served in the same slot.

A transmitter channel-inverts toward one receiver per slot and radios are half-duplex, so two
receivers may share a slot only if they are not neighbours and have no common neighbour, i.e. at
graph distance >= 3. A slot schedule is therefore a proper colouring of G^2; its number of
colours is the number of slots per gossip round. Every closed neighbourhood is a clique of G^2,
so max degree + 1 is a lower bound.
"""

from __future__ import annotations

import attrs
import networkx as nx
import numpy as np
import scipy.sparse as sp

from .mixing import adjacency

EXACT_STRATEGY_LIMIT = 500  # networkx DSATUR on G^2 costs seconds beyond this


@attrs.frozen
class Schedule:
    """slot -> receivers; ``slots_per_round`` = number of slots; ``lower_bound`` = max degree + 1."""

    slots: tuple[tuple[int, ...], ...]
    lower_bound: int

    @property
    def slots_per_round(self) -> int:
        return len(self.slots)

    def slot_of(self) -> np.ndarray:
        n = sum(len(s) for s in self.slots)
        out = np.empty(n, dtype=np.int64)
        for k, members in enumerate(self.slots):
            out[list(members)] = k
        return out


def square_adjacency(graph: nx.Graph) -> sp.csr_matrix:
    """Adjacency of G^2 (pairs at distance 1 or 2), without the diagonal."""
    a = adjacency(graph)
    a2 = (a + a @ a).tocsr()
    a2.setdiag(0)
    a2.eliminate_zeros()
    a2.data[:] = 1
    return a2


def ota_schedule(graph: nx.Graph) -> Schedule:
    """Colour G^2 greedily; small graphs try several orders (incl. DSATUR) and keep the best."""
    n = graph.number_of_nodes()
    deg = np.diff(adjacency(graph).indptr)
    lower = int(deg.max()) + 1 if n else 0
    if lower == n:  # a node sees everyone (star, complete): every receiver needs its own slot
        return Schedule(slots=tuple((i,) for i in range(n)), lower_bound=lower)
    a2 = square_adjacency(graph)
    deg2 = np.diff(a2.indptr)
    orders = [np.argsort(-deg2, kind="stable")]
    if n <= EXACT_STRATEGY_LIMIT:
        orders.append(np.arange(n))
    best = min((_greedy(a2, order) for order in orders), key=lambda c: c.max())
    if n <= EXACT_STRATEGY_LIMIT:
        g2 = nx.from_scipy_sparse_array(a2)
        ds = nx.greedy_color(g2, strategy="DSATUR")
        colours = np.array([ds[i] for i in range(n)])
        if colours.max() < best.max():
            best = colours
    slots = tuple(tuple(np.flatnonzero(best == k).tolist()) for k in range(int(best.max()) + 1))
    return Schedule(slots=slots, lower_bound=lower)


def _greedy(a2: sp.csr_matrix, order: np.ndarray) -> np.ndarray:
    n = a2.shape[0]
    colour = np.full(n, -1, dtype=np.int64)
    indptr, indices = a2.indptr, a2.indices
    for node in order:
        used = colour[indices[indptr[node]:indptr[node + 1]]]
        used = used[used >= 0]
        if used.size == 0:
            colour[node] = 0
            continue
        taken = np.zeros(used.size + 1, dtype=bool)
        taken[used[used <= used.size]] = True
        colour[node] = int(np.argmin(taken))
    return colour


def is_valid(graph: nx.Graph, schedule: Schedule) -> bool:
    """No two receivers of one slot within distance 2 and every node scheduled exactly once."""
    n = graph.number_of_nodes()
    colour = schedule.slot_of()
    if len(colour) != n or sorted(i for s in schedule.slots for i in s) != list(range(n)):
        return False
    a2 = square_adjacency(graph).tocoo()
    return bool(np.all(colour[a2.row] != colour[a2.col]))
