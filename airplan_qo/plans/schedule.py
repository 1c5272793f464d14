"""Over-the-air slot schedule: which receivers can be served in the same slot.

A transmitter channel-inverts toward one receiver per slot and radios are half-duplex, so two
receivers may share a slot only if they are not neighbours and have no common neighbour, i.e. at
graph distance >= 3. A slot schedule is therefore a proper colouring of G^2; its number of
colours is the number of slots per gossip round. Every closed neighbourhood is a clique of G^2,
so max degree + 1 is a lower bound.

Colouring is NP-hard, so the schedule is the best of several colourings, cheapest first:

1. greedy in decreasing G^2-degree order (read from G itself when G^2 is G's square), then
   iterated-greedy passes (Culberson): recolour the colour classes one after another, which
   never adds a colour (every size; vectorised);
2. networkx ``greedy_color``: smallest-last and largest-first with colour interchange, and
   DSATUR on the smaller graphs (their cost grows quickly with the size of G^2);
3. on small graphs, an exact DSATUR branch and bound (networkx has no exact colouring) that looks
   for a colouring with fewer colours, within a budget of search steps.

On a very large G^2 (more than :data:`SQUARE_ENTRY_LIMIT` entries, e.g. G(n, 4 ln n / n)
at N = 1e5, whose G^2 has 1e8 edges) G^2 is not formed: the schedule is one greedy pass over G's
arrays, in decreasing order of walks of length 2 (a valid schedule, a few slots more than the
stages would find: 321 against 319 there, in 1 s against 21 s and without ~1.7 GiB).

Above 1000 nodes only stage 1 runs, and it reads G's own arrays: G^2's degrees (the greedy
order) are counted a block of rows at a time and the iterated-greedy passes and the clique use
bit sets of the colours next to each node, so G^2 is never stored (the same colourings).

Each stage is skipped once the colouring meets a lower bound (a clique of G^2 grown from the
closed neighbourhood of a max-degree node), so paths, rings with 3 | n and some tori stop at
stage 1. On small graphs stage 3 usually proves the result optimal: C_n^2 gets its chromatic
number (5 for n = 5, 3 when 3 | n, else 4).
"""

from __future__ import annotations

import attrs
import networkx as nx
import numpy as np
import scipy.sparse as sp

from .graphs import adjacency

#: networkx strategies with colour interchange run up to this many nodes and edges of G^2; their
#: time and memory grow about quadratically (both strategies: ~0.5 s for small-world k = 6 at
#: N = 1000 on one core, ~6 s and ~1 GiB for a ring of 10 000).
INTERCHANGE_NODE_LIMIT = 1_000
INTERCHANGE_EDGE_LIMIT = 30_000
#: networkx DSATUR (quadratic in the number of nodes there) runs up to this many nodes.
DSATUR_NODE_LIMIT = 500
#: The exact search runs up to this many nodes (it recurses once per node) ...
EXACT_NODE_LIMIT = 200
#: ... and stops after this many colour assignments (tens of milliseconds).
EXACT_STEP_BUDGET = 5_000
#: Iterated-greedy passes over the colour classes (each costs one sparse row gather).
ITERATED_GREEDY_PASSES = 6
_TAKEN_CELLS = 1 << 22  # bound on the boolean (receivers x colours) table of one pass step


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
    """Adjacency of G^2 (pairs at distance 1 or 2), without the diagonal.

    ``networkx.power(graph, 2)`` builds the same graph, but as Python dicts and several times
    slower; the sparse product also serves the vectorised greedy passes at large N.
    """
    a = adjacency(graph)
    # (A + I)^2 has the pattern of A + A^2 plus the diagonal: one sparse product, no sum of two
    # large matrices (G^2 has ~N d^2 / 2 edges: 10^8 for d = 46 at N = 1e5). float32 counts
    # are exact up to 2^24 paths, so no entry cancels to zero.
    a1 = (a + sp.identity(a.shape[0], format="csr")).astype(np.float32)
    a2 = (a1 @ a1).tocsr()
    a2.setdiag(0)
    a2.eliminate_zeros()
    a2.data[:] = 1
    return a2


def ota_schedule(graph: nx.Graph) -> Schedule:
    """A slot schedule with as few slots as the staged colouring of G^2 finds (module doc)."""
    n = graph.number_of_nodes()
    a = adjacency(graph)
    deg = np.diff(a.indptr)
    lower = int(deg.max()) + 1 if n else 0
    if lower == n:  # a node sees everyone (star, complete): every receiver needs its own slot
        return Schedule(slots=tuple((i,) for i in range(n)), lower_bound=lower)
    hub = int(np.argmax(deg))
    seed = [hub, *a.indices[a.indptr[hub]:a.indptr[hub + 1]].tolist()]
    if _square_entries(a) > SQUARE_ENTRY_LIMIT:
        best = _distance2_greedy(a)
    elif n > max(INTERCHANGE_NODE_LIMIT, DSATUR_NODE_LIMIT, EXACT_NODE_LIMIT):
        # only stage 1 runs at this size, and it reads G's arrays: G^2 is not stored
        deg2 = _square_degrees(a)
        best = _distance2_greedy(a, np.argsort(-deg2, kind="stable"))
        if _colours(best) > len(_clique_distance2(a, deg2, seed)):
            best = _iterated_greedy_distance2(a, best, int(deg2.sum()))
    else:
        a2 = square_adjacency(graph)
        # the first greedy pass reads G itself: the same colouring as over G^2's rows, faster
        first = _distance2_greedy(a, np.argsort(-np.diff(a2.indptr), kind="stable"))
        best = _staged_colouring(a2, seed, first=first)
    return Schedule(slots=_slots(best), lower_bound=lower)


#: Above this many entries of G^2 (estimated: :func:`_square_entries`) the schedule is one
#: greedy pass over G's own arrays (:func:`_distance2_greedy`): G^2 is not formed. G(n, 4 ln n / n)
#: at N = 1e5 has 2.15e8; its G^2 product took ~9 s and ~1.7 GiB, and the iterated-greedy passes
#: over it ~9 s more to save 1 slot of 320 (the pass without G^2: about 1 s, 321 slots). The
#: exponential graph there (5.2e7) stays below.
SQUARE_ENTRY_LIMIT = 100_000_000
#: Nodes (evenly spaced ids) whose G^2 degree :func:`_square_entries` counts.
SQUARE_SAMPLE = 512


def _square_entries(a: sp.csr_matrix) -> float:
    """The entries of G^2 (both directions, no diagonal), without forming it: the walks of
    length 2 (sum of squared degrees) when they are at most :data:`SQUARE_ENTRY_LIMIT` (they
    bound the entries from above), else n times the mean G^2 degree of :data:`SQUARE_SAMPLE`
    evenly spaced nodes (dense communities repeat many walks: clustered graphs have ~10x fewer
    entries than walks)."""
    n = a.shape[0]
    deg = np.diff(a.indptr).astype(np.int64)
    walks = int((deg ** 2).sum())
    if walks <= SQUARE_ENTRY_LIMIT or n == 0:
        return float(walks)
    sizes = []
    for node in np.unique(np.linspace(0, n - 1, min(n, SQUARE_SAMPLE)).astype(np.int64)):
        nb = a.indices[a.indptr[node]:a.indptr[node + 1]]
        hood = np.concatenate([nb, *(a.indices[a.indptr[u]:a.indptr[u + 1]] for u in nb)])
        hood = np.sort(hood)
        distinct = int(np.count_nonzero(hood[1:] != hood[:-1])) + 1 if hood.size else 0
        sizes.append(distinct - (1 if nb.size else 0))   # less the node itself
    return float(sum(sizes)) * n / len(sizes)


def _distance2_greedy(a: sp.csr_matrix, order: np.ndarray | None = None) -> np.ndarray:
    """Greedy colouring of G^2 read from G's adjacency ``a``: each node, in ``order`` (default:
    decreasing walks of length 2, an upper bound of its G^2 degree), takes the smallest colour
    that no node within distance 2 has. A proper colouring of G^2, so a valid slot schedule, and
    the one :func:`_greedy` finds over G^2's rows in the same order.

    G^2 is never stored: a table ``near[u, c]`` (a neighbour of u has colour c; N x colours
    booleans, widened as colours are added) holds what it is needed for. The colours within
    distance 2 of v are those of ``near`` over v and its neighbours, and colouring v marks its
    neighbours' rows."""
    n = a.shape[0]
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    deg = np.diff(indptr)
    if order is None:
        walks = np.bincount(np.repeat(np.arange(n), deg), weights=deg[indices], minlength=n)
        order = np.argsort(-walks, kind="stable")
    if n and len(indices) <= BITSET_GREEDY_MAX_DEGREE * n:
        return _distance2_greedy_bitsets(indptr, indices, order)
    colour = np.full(n, -1, dtype=np.int64)
    width = 64
    near = np.zeros((n, width), dtype=bool)
    for node in np.asarray(order).tolist():
        nb = indices[indptr[node]:indptr[node + 1]]
        taken = near[nb].any(axis=0)
        taken |= near[node]
        c = int(taken.argmin())
        if taken[c]:   # every colour so far is taken: a new one, in a wider table
            c = width
            near = np.concatenate([near, np.zeros((n, width), dtype=bool)], axis=1)
            width *= 2
        colour[node] = c
        near[nb, c] = True
    return colour


#: G^2's degrees are counted this many (estimated) entries of (A + I)^2 at a time.
SQUARE_BLOCK_ENTRIES = 20_000_000


def _square_degrees(a: sp.csr_matrix) -> np.ndarray:
    """The degree of every node in G^2 (nodes within distance 2), from the product
    (A + I)^2 formed a block of rows at a time and not kept (its rows' entries, less the
    diagonal)."""
    n = a.shape[0]
    offsets = _circulant_offsets(a)
    if offsets is not None:   # every node sees the same offsets, so the same G^2 degree
        reach = np.unique((offsets[:, None] + np.concatenate([[0], offsets])[None, :]) % n)
        return np.full(n, int(np.count_nonzero(reach)), dtype=np.int64)
    # boolean entries: a sum of products is their OR, so no entry cancels (and a quarter of
    # the bytes of float32 counts: ~25% faster)
    a1 = (a + sp.identity(n, format="csr")).astype(np.bool_)
    deg = np.diff(a1.indptr).astype(np.int64)
    walks = np.bincount(np.repeat(np.arange(n), deg), weights=deg[a1.indices], minlength=n)
    bounds = np.searchsorted(np.cumsum(walks), np.arange(SQUARE_BLOCK_ENTRIES,
                                                         float(walks.sum()),
                                                         SQUARE_BLOCK_ENTRIES)) + 1
    out = np.empty(n, dtype=np.int64)
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), n]):
        if hi > lo:
            out[lo:hi] = np.diff((a1[lo:hi] @ a1).indptr) - 1
    return out


def _circulant_offsets(a: sp.csr_matrix) -> np.ndarray | None:
    """The neighbour offsets s (v = u + s mod n) when the graph is circulant (every node has the
    same ones: rings, the exponential graph), else None."""
    n = a.shape[0]
    deg = np.diff(a.indptr)
    k = int(deg[0]) if n else 0
    if n < 3 or k == 0 or np.any(deg != k):
        return None
    rel = (a.indices.astype(np.int64) - np.repeat(np.arange(n, dtype=np.int64), k)) % n
    rel = np.sort(rel.reshape(n, k), axis=1)
    return rel[0] if np.all(rel == rel[0]) else None


def _square_row(a: sp.csr_matrix, v: int) -> np.ndarray:
    """Row v of G^2 (sorted, without v) from G's arrays: the closed neighbourhoods of v's
    neighbours."""
    nb = a.indices[a.indptr[v]:a.indptr[v + 1]]
    hood = np.unique(np.concatenate([nb, *(a.indices[a.indptr[x]:a.indptr[x + 1]]
                                           for x in nb.tolist())]))
    return hood[hood != v].astype(np.int64)


def _clique_distance2(a: sp.csr_matrix, deg2: np.ndarray, seed: list[int]) -> list[int]:
    """:func:`_clique` of G^2 read from G's arrays and G^2's degrees (the same clique)."""
    members = list(seed)
    hits = np.bincount(np.concatenate([_square_row(a, v) for v in members]),
                       minlength=a.shape[0])
    common = np.flatnonzero(hits == len(members))
    while common.size:
        v = int(common[np.argmax(deg2[common])])
        members.append(v)
        common = np.intersect1d(common, _square_row(a, v), assume_unique=True)
    return members


def _iterated_greedy_distance2(a: sp.csr_matrix, colour: np.ndarray, entries: int
                               ) -> np.ndarray:
    """:func:`_iterated_greedy` of G^2 (``entries`` of it) read from G's arrays: the same
    passes and the same colourings (:func:`_recolour_classes_distance2`)."""
    return _greedy_passes(colour, lambda c, order: _recolour_classes_distance2(a, c, order),
                          early=entries > ITERATED_GREEDY_FULL_NNZ)


def _recolour_classes_distance2(a: sp.csr_matrix, colour: np.ndarray, class_order: np.ndarray
                                ) -> np.ndarray:
    """:func:`_recolour_classes` over G^2 read from G's adjacency ``a``: each class takes, node
    by node, the smallest colour no node within distance 2 has taken in this pass.

    ``near[x]`` is a bit set of the new colours of x's neighbours (64 colours a word), so the
    colours within distance 2 of v are the union of ``near`` over v and its neighbours. A class
    is independent in G^2, so the closed neighbourhoods of its nodes are disjoint: the class is
    recoloured at once and its colours marked with one assignment."""
    n = len(colour)
    k = _colours(colour)
    words = k // 64 + 1            # a recoloured node takes a colour < k
    near = np.zeros((n, words), dtype=np.uint64)
    new = np.full(n, -1, dtype=np.int64)
    indptr, indices = a.indptr.astype(np.int64), a.indices.astype(np.int64)
    deg = np.diff(indptr)
    by_class = np.argsort(colour, kind="stable")
    bounds = np.searchsorted(colour[by_class], np.arange(k + 1))
    one = np.uint64(1)
    for c in np.asarray(class_order).tolist():
        members = by_class[bounds[c]:bounds[c + 1]]
        if members.size == 0:
            continue
        d = deg[members]
        first = np.cumsum(d) - d
        total = int(d.sum())
        nbrs = indices[np.arange(total) - np.repeat(first - indptr[members], d)]
        taken = near[members]
        if total:
            has = d > 0
            taken[has] |= np.bitwise_or.reduceat(near[nbrs], first[has], axis=0)
        free = ~taken
        word = np.argmax(free != 0, axis=1)
        x = free[np.arange(members.size), word]
        low = x & (~x + one)        # the lowest free bit, a power of two
        got = word * 64 + (np.frexp(low.astype(np.float64))[1] - 1)
        new[members] = got
        owner = np.repeat(got, d)
        near[nbrs, owner // 64] |= np.left_shift(one, (owner % 64).astype(np.uint64))
    return new


#: Up to this mean degree the sequential greedy pass keeps ``near`` as one Python integer bit
#: set per node (:func:`_distance2_greedy_bitsets`): a few integer operations per neighbour
#: beat a numpy call per node there (small-world k = 8 at N = 1e5: 0.3 s against 0.7 s);
#: on denser graphs the numpy rows win.
BITSET_GREEDY_MAX_DEGREE = 16


def _distance2_greedy_bitsets(indptr: np.ndarray, indices: np.ndarray, order) -> np.ndarray:
    """:func:`_distance2_greedy` with ``near[u]`` a Python integer (bit c: a neighbour of u
    has colour c): the same colouring."""
    n = len(indptr) - 1
    ind, ptr = indices.tolist(), indptr.tolist()
    near = [0] * n
    colour = [0] * n
    for v in np.asarray(order).tolist():
        nb = ind[ptr[v]:ptr[v + 1]]
        taken = near[v]
        for x in nb:
            taken |= near[x]
        bit = ~taken & (taken + 1)     # the lowest colour not taken
        colour[v] = bit.bit_length() - 1
        for x in nb:
            near[x] |= bit
    return np.array(colour, dtype=np.int64)


def directed_conflicts(n: int, recv: np.ndarray, send: np.ndarray) -> sp.csr_matrix:
    """Conflict graph of the receivers of directed links ``send -> recv`` (0/1, no diagonal):
    two receivers conflict when one transmits to the other (half-duplex) or they share a
    transmitter (one channel inversion per transmitter per slot). On a symmetric link set this
    is G^2, the undirected rule."""
    a = sp.coo_matrix((np.ones(len(recv)), (recv, send)), shape=(n, n)).tocsr()  # a[r, s]
    c = (a + a.T + a @ a.T).tocsr()
    c.setdiag(0)
    c.eliminate_zeros()
    c.data[:] = 1
    return c


def directed_schedule(n: int, recv: np.ndarray, send: np.ndarray) -> Schedule:
    """A slot schedule of a round whose links are directed (``send -> recv``; an asymmetric
    mixing matrix, e.g. one-peer rounds): the staged colouring of :func:`directed_conflicts`
    over the nodes that receive. Nodes that receive nothing this round need no slot of their own
    and are listed in slot 0 (they hear nothing there, so it costs nothing). ``lower_bound`` is
    the size of the clique the colouring starts from: a transmitter of most receivers with those
    receivers (and itself when it receives too)."""
    recv = np.asarray(recv, dtype=np.int64)
    send = np.asarray(send, dtype=np.int64)
    receivers = np.unique(recv)
    if receivers.size == 0:
        return Schedule(slots=(tuple(range(n)),), lower_bound=1)
    conflicts = directed_conflicts(n, recv, send)[receivers][:, receivers].tocsr()
    local = np.full(n, -1, dtype=np.int64)
    local[receivers] = np.arange(receivers.size)
    out_deg = np.bincount(send, minlength=n)
    hub = int(np.argmax(out_deg))
    seed = sorted({int(local[r]) for r in recv[send == hub]}
                  | ({int(local[hub])} if local[hub] >= 0 else set()))
    colour = _staged_colouring(conflicts, seed)
    full = np.zeros(n, dtype=np.int64)
    full[receivers] = colour
    slots = tuple(tuple(np.flatnonzero(full == k).tolist()) for k in range(_colours(colour)))
    return Schedule(slots=slots, lower_bound=len(_clique(conflicts, seed)))


def _staged_colouring(a2: sp.csr_matrix, seed: list[int], first: np.ndarray | None = None
                      ) -> np.ndarray:
    """The staged colouring (module doc) of the conflict graph ``a2``, stopping at the size of a
    clique grown from ``seed`` (a clique of ``a2``). ``first``: the greedy colouring in
    decreasing ``a2``-degree order when the caller has it."""
    n = a2.shape[0]
    clique = _clique(a2, seed)
    best = (_greedy(a2, np.argsort(-np.diff(a2.indptr), kind="stable")) if first is None
            else first)
    if _colours(best) > len(clique):
        best = _iterated_greedy(a2, best)
    if (_colours(best) > len(clique) and n <= INTERCHANGE_NODE_LIMIT
            and a2.nnz // 2 <= INTERCHANGE_EDGE_LIMIT):
        g2 = nx.from_scipy_sparse_array(a2)
        runs = [("smallest_last", True), ("largest_first", True)]
        if n <= DSATUR_NODE_LIMIT:
            runs.append(("DSATUR", False))
        for strategy, interchange in runs:
            if _colours(best) == len(clique):
                break
            found = nx.greedy_color(g2, strategy=strategy, interchange=interchange)
            colours = np.fromiter((found[i] for i in range(n)), dtype=np.int64, count=n)
            if _colours(colours) < _colours(best):
                best = colours
    if _colours(best) > len(clique) and n <= EXACT_NODE_LIMIT:
        best = _exact_improve(a2, best, clique, EXACT_STEP_BUDGET)
    return best


def _slots(colour: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """The receivers of each colour, in increasing order (every colour below the largest
    used: an unused one is an empty slot)."""
    by_colour = np.argsort(colour, kind="stable")
    bounds = np.searchsorted(colour[by_colour], np.arange(_colours(colour) + 1)).tolist()
    nodes = by_colour.tolist()
    return tuple(tuple(nodes[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:]))


def _colours(colour: np.ndarray) -> int:
    return int(colour.max()) + 1


def _clique(a2: sp.csr_matrix, seed: list[int]) -> list[int]:
    """Grow a clique of G^2 (a closed neighbourhood of G) greedily: add the common neighbour of
    all members with the most neighbours until there is none."""
    deg2 = np.diff(a2.indptr)
    members = list(seed)
    hits = np.bincount(np.concatenate([a2.indices[a2.indptr[v]:a2.indptr[v + 1]]
                                       for v in members]), minlength=a2.shape[0])
    common = np.flatnonzero(hits == len(members))  # no diagonal: members are not in it
    while common.size:
        v = int(common[np.argmax(deg2[common])])
        members.append(v)
        common = np.intersect1d(common, a2.indices[a2.indptr[v]:a2.indptr[v + 1]],
                                assume_unique=True)
    return members


def _greedy(a2: sp.csr_matrix, order: np.ndarray) -> np.ndarray:
    """Sequential greedy colouring in ``order`` (smallest colour free among coloured neighbours).

    Hand-written on the CSR arrays: networkx would first need G^2 as a Python graph, which alone
    costs seconds at N = 1e5.
    """
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
        colour[node] = int(taken.argmin())
    return colour


def _iterated_greedy(a2: sp.csr_matrix, colour: np.ndarray) -> np.ndarray:
    """Culberson's iterated greedy: recolour whole colour classes in turn (reverse order, then
    largest class first, alternating). A class is an independent set, so all its nodes are
    recoloured at once, and the k-th class recoloured gets a colour < k: never more colours.

    On a large G^2 (more than :data:`ITERATED_GREEDY_FULL_NNZ` entries) the passes stop at the
    first one that saves no colour: there each pass costs seconds, and the later ones saved
    nothing (or 2 colours of 319 on G(1e5, 4 ln n / n)) on the default families at N = 1e5."""
    rows = _structure(a2)
    return _greedy_passes(colour, lambda c, order: _recolour_classes(rows, c, order),
                          early=a2.nnz > ITERATED_GREEDY_FULL_NNZ)


def _greedy_passes(colour: np.ndarray, recolour, *, early: bool) -> np.ndarray:
    """The passes of :func:`_iterated_greedy`: ``recolour(colour, class_order)`` with the
    classes in reverse order, then largest first, alternating; with ``early``, stopping at the
    first pass that saves no colour."""
    for p in range(ITERATED_GREEDY_PASSES):
        k = _colours(colour)
        order = np.arange(k)[::-1] if p % 2 == 0 else np.argsort(
            -np.bincount(colour, minlength=k), kind="stable")
        colour = recolour(colour, order)
        if early and _colours(colour) >= k:
            break
    return colour


#: Above this many entries of G^2, iterated greedy stops at its first pass without a gain.
ITERATED_GREEDY_FULL_NNZ = 30_000_000


def _structure(a2: sp.csr_matrix) -> sp.csr_matrix:
    """``a2``'s pattern with one-byte values: row gathers then copy 1 byte of value per entry
    instead of 4 or 8."""
    return sp.csr_matrix((np.ones(a2.nnz, dtype=np.int8), a2.indices, a2.indptr),
                         shape=a2.shape)


def _recolour_classes(a2: sp.csr_matrix, colour: np.ndarray, class_order: np.ndarray
                      ) -> np.ndarray:
    new = np.full(len(colour), -1, dtype=np.int64)
    by_class = np.argsort(colour, kind="stable")
    bounds = np.searchsorted(colour[by_class], np.arange(_colours(colour) + 1))
    rows = a2[by_class]  # one gather; each class is then a contiguous block of rows
    indptr, indices = rows.indptr, rows.indices
    for c in class_order:
        lo, hi = bounds[c], bounds[c + 1]
        nb_all = new[indices[indptr[lo]:indptr[hi]]]   # the class's neighbours' new colours
        width = int(nb_all.max(initial=-1)) + 2
        chunk = max(1, _TAKEN_CELLS // width)  # rows per (rows x colours) table
        for a in range(lo, hi, chunk):
            b = min(hi, a + chunk)
            nb = nb_all[indptr[a] - indptr[lo]:indptr[b] - indptr[lo]]
            row_of = np.repeat(np.arange(b - a), np.diff(indptr[a:b + 1]))
            seen = nb >= 0
            taken = np.zeros((b - a) * width, dtype=bool)
            taken[row_of[seen] * width + nb[seen]] = True
            # the first colour no neighbour has yet
            new[by_class[a:b]] = np.argmin(taken.reshape(b - a, width), axis=1)
    return new


class _Stop(Exception):
    pass


def _exact_improve(a2: sp.csr_matrix, colour: np.ndarray, clique: list[int], budget: int
                   ) -> np.ndarray:
    """DSATUR branch and bound (Brelaz 1979) for a colouring with fewer colours than ``colour``.

    The clique is pre-coloured 0..|clique|-1 (it breaks the colour symmetry and is the lower
    bound); then the uncoloured node with the most distinct neighbour colours (ties: most
    neighbours, lowest id) is branched on, over the colours used so far plus one new colour,
    while fewer colours than the best colouring found stay possible. Stops at the lower bound or
    after ``budget`` colour assignments and returns the best colouring found (``colour`` if none).
    """
    n = a2.shape[0]
    nbrs = [a2.indices[a2.indptr[v]:a2.indptr[v + 1]].tolist() for v in range(n)]
    best, ub, lb = colour, _colours(colour), len(clique)
    col = [-1] * n
    count = [[0] * ub for _ in range(n)]  # count[v][c]: neighbours of v coloured c
    step = n + 1  # score = distinct neighbour colours * (n + 1) + degree; -1 once coloured
    score = [len(nbrs[v]) for v in range(n)]
    steps = 0

    # Plain Python lists: the nodes have tens of neighbours, where numpy's per-call overhead
    # would dominate (about 3x slower per step).
    def assign(v: int, c: int) -> int:
        col[v], kept = c, score[v]
        score[v] = -1
        for u in nbrs[v]:
            row = count[u]
            if row[c] == 0 and col[u] < 0:
                score[u] += step
            row[c] += 1
        return kept

    def unassign(v: int, c: int, kept: int) -> None:
        col[v], score[v] = -1, kept
        for u in nbrs[v]:
            row = count[u]
            row[c] -= 1
            if row[c] == 0 and col[u] < 0:
                score[u] -= step

    def search(used: int, left: int) -> None:
        nonlocal best, ub, steps
        if left == 0:
            best, ub = np.array(col, dtype=np.int64), used
            if ub <= lb:
                raise _Stop
            return
        v = max(range(n), key=score.__getitem__)  # most saturated, then most neighbours
        row = count[v]
        for c in range(min(used + 1, ub - 1)):
            if c >= ub - 1:  # a better colouring was found below: tighter bound
                break
            if row[c]:
                continue
            steps += 1
            if steps > budget:
                raise _Stop
            kept = assign(v, c)
            search(max(used, c + 1), left - 1)
            unassign(v, c, kept)

    for i, v in enumerate(clique):
        assign(v, i)
    try:
        search(len(clique), n - len(clique))
    except _Stop:
        pass
    return best


def is_valid(graph: nx.Graph, schedule: Schedule) -> bool:
    """No two receivers of one slot within distance 2 and every node scheduled exactly once."""
    n = graph.number_of_nodes()
    colour = schedule.slot_of()
    if len(colour) != n or sorted(i for s in schedule.slots for i in s) != list(range(n)):
        return False
    a2 = square_adjacency(graph).tocoo()
    return bool(np.all(colour[a2.row] != colour[a2.col]))
