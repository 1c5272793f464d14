"""D-Cliques (Bellet, Kermarrec and Lavoie, 2022): clique formation from label statistics.

"D-Cliques: Compensating for Data Heterogeneity with Topology in Decentralized Federated
Learning" groups clients into cliques whose joint label distribution is close to the global one,
so that averaging inside a clique already sees (nearly) iid data; the cliques are then joined
sparsely. This module forms the cliques from per-client label counts only: the counts the
catalog releases with ``ANALYZE WORKLOAD`` (class histograms or Count-Min sketches, possibly
noised), never the raw labels.

The skew of a clique is the total-variation distance ``0.5 * sum_c |p_clique(c) - p_global(c)|``
between its label distribution (its members' counts, summed and normalised) and the global one
(all clients' counts, summed and normalised). :func:`form_cliques` assigns greedily and then
improves the assignment by swaps that lower the sum of the cliques' skews.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..errors import ValidationError

#: Improvement passes of the swap phase at most (each tries every client once).
MAX_SWAP_PASSES = 30
#: Swap partners tried per client and pass at most (all other clients when N is below this).
MAX_SWAP_PARTNERS = 512
_TOL = 1e-12


def _counts(label_counts) -> np.ndarray:
    arr = np.asarray(label_counts, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValidationError(f"label counts must be a (clients x classes) matrix, "
                              f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValidationError("label counts must be finite and non-negative")
    return arr


def clique_sizes(n: int, size: int) -> list[int]:
    """Sizes of the ceil(n / size) cliques of at most ``size`` clients, as equal as possible."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= n:
        raise ValidationError(f"clique size must be an integer in [1, n = {n}], got {size!r}")
    m = math.ceil(n / size)
    return [n // m + (1 if i < n % m else 0) for i in range(m)]


def _tv(sums: np.ndarray, glob: np.ndarray) -> np.ndarray:
    """TV distance of each row of ``sums`` (unnormalised counts) to the distribution ``glob``."""
    tot = sums.sum(axis=-1, keepdims=True)
    p = np.divide(sums, tot, out=np.zeros_like(sums), where=tot > 0)
    return 0.5 * np.abs(p - glob).sum(axis=-1)


def _global(counts: np.ndarray) -> np.ndarray:
    tot = counts.sum(axis=0)
    s = tot.sum()
    return tot / s if s > 0 else np.full(counts.shape[1], 1.0 / counts.shape[1])


def clique_skew(label_counts, cliques: list[list[int]]) -> float:
    """Mean over cliques of the TV distance between the clique's and the global label
    distribution (0 = every clique looks like the whole population)."""
    counts = _counts(label_counts)
    glob = _global(counts)
    sums = np.stack([counts[list(c)].sum(axis=0) for c in cliques])
    return float(_tv(sums, glob).mean())


def residual_heterogeneity(label_counts, cliques: list[list[int]]) -> float:
    """The label heterogeneity left after Clique Averaging, as a fraction of the clients' own:
    ``H(cliques) / H(clients)`` with ``H = (1/N) sum_i ||q_i - p_global||^2``, q_i client i's
    label distribution (for ``H(clients)``) or that of its clique (counts summed, for
    ``H(cliques)``). Clique Averaging makes every client apply its clique's mean update, whose
    gradient dissimilarity is the cliques' (the zeta^2 of decentralized-SGD bounds), so the
    cost models scale the workload's heterogeneity by this fraction. 0 when the clients are
    already identical."""
    counts = _counts(label_counts)
    glob = _global(counts)
    tot = counts.sum(axis=1, keepdims=True)
    own = np.divide(counts, tot, out=np.tile(glob, (counts.shape[0], 1)), where=tot > 0)
    h_own = float(np.mean(np.sum((own - glob) ** 2, axis=1)))
    h_cl = 0.0
    for c in cliques:
        s = counts[list(c)].sum(axis=0)
        q = s / s.sum() if s.sum() > 0 else glob
        h_cl += len(c) * float(np.sum((q - glob) ** 2))
    h_cl /= counts.shape[0]
    return 0.0 if h_own <= _TOL else h_cl / h_own


def random_cliques(n: int, size: int, seed: int) -> list[list[int]]:
    """A uniformly random grouping into cliques of the sizes :func:`form_cliques` uses."""
    perm = np.random.default_rng(seed).permutation(n)
    out, start = [], 0
    for s in clique_sizes(n, size):
        out.append(sorted(int(v) for v in perm[start:start + s]))
        start += s
    return out


def form_cliques(label_counts: np.ndarray, size: int, seed: int = 0) -> list[list[int]]:
    """Group the N clients of ``label_counts`` (N x C, per-client class counts) into
    ceil(N / size) cliques of at most ``size`` clients whose label distributions approach the
    global one.

    Greedy: clients in a seeded random order each join the non-full clique where adding them
    lowers that clique's TV distance the most (an empty clique counts as distance 1; ties to the emptiest clique, then the lowest
    index). Swaps: each client in turn is exchanged with the partner in another clique that
    lowers the two cliques' summed TV distance the most, until a pass finds no improving swap
    (at most :data:`MAX_SWAP_PASSES` passes; above :data:`MAX_SWAP_PARTNERS` clients a seeded
    sample of partners is tried). Returns the cliques, each sorted, ordered by smallest member.
    """
    counts = _counts(label_counts)
    n = counts.shape[0]
    sizes = clique_sizes(n, size)
    m = len(sizes)
    rng = np.random.default_rng(seed)
    glob = _global(counts)
    sums = np.zeros((m, counts.shape[1]))
    fill = np.zeros(m, dtype=np.int64)
    cap = np.asarray(sizes)
    of = np.empty(n, dtype=np.int64)
    for i in rng.permutation(n):
        open_ = np.flatnonzero(fill < cap)
        before = _tv(sums[open_], glob)
        after = _tv(sums[open_] + counts[i], glob)
        gain = after - np.where(fill[open_] > 0, before, 1.0)  # an empty clique counts as TV 1
        order = np.lexsort((open_, fill[open_], np.round(gain, 12)))
        b = int(open_[order[0]])
        of[i] = b
        sums[b] += counts[i]
        fill[b] += 1
    if m > 1:
        _swap(counts, glob, sums, of, rng)
    cliques = [sorted(int(v) for v in np.flatnonzero(of == b)) for b in range(m)]
    return sorted(cliques, key=lambda c: c[0])


def _swap(counts: np.ndarray, glob: np.ndarray, sums: np.ndarray, of: np.ndarray,
          rng: np.random.Generator) -> None:
    n = counts.shape[0]
    tv = _tv(sums, glob)
    for _ in range(MAX_SWAP_PASSES):
        improved = False
        for i in rng.permutation(n):
            a = of[i]
            partners = np.flatnonzero(of != a)
            if partners.size > MAX_SWAP_PARTNERS:
                partners = rng.choice(partners, MAX_SWAP_PARTNERS, replace=False)
            if partners.size == 0:
                continue
            b = of[partners]
            delta = counts[partners] - counts[i]          # what clique a gains, b loses
            new_a = _tv(sums[a] + delta, glob)
            new_b = _tv(sums[b] - delta, glob)
            change = new_a + new_b - tv[a] - tv[b]
            k = int(np.argmin(change))
            if change[k] < -1e-9:
                j, bj = int(partners[k]), int(b[k])
                sums[a] += delta[k]
                sums[bj] -= delta[k]
                tv[a], tv[bj] = new_a[k], new_b[k]
                of[i], of[j] = bj, a
                improved = True
        if not improved:
            return


def encode_cliques(cliques: list[list[int]]) -> str:
    """Canonical text of a clique assignment: members space-separated, cliques by ';'."""
    return ";".join(" ".join(str(v) for v in c) for c in cliques)


def decode_cliques(text: str, n: int) -> list[list[int]]:
    """The cliques of :func:`encode_cliques`' text; each of 0..n-1 must appear exactly once."""
    try:
        cliques = [[int(v) for v in part.split()] for part in str(text).split(";")]
    except ValueError:
        raise ValidationError(f"cliques must be ';'-separated groups of client ids, "
                              f"got {str(text)[:40]!r}") from None
    if any(not c for c in cliques):
        raise ValidationError("cliques must not contain an empty clique")
    flat = sorted(v for c in cliques for v in c)
    if flat != list(range(n)):
        raise ValidationError(f"cliques must hold each client 0..{n - 1} exactly once")
    return cliques


__all__ = ["form_cliques", "clique_skew", "clique_sizes", "random_cliques", "encode_cliques",
           "exchange_conflicts", "exchange_slots",
           "decode_cliques"]


def exchange_slots(graph, groups: list[list[int]]) -> np.ndarray:
    """The slot of each receiver in Clique Averaging's exchange (each client receives its
    clique-mates' updates once per round), valid under the rule the gossip schedule follows.

    In a slot every receiver r listens to its clique-mates, who all transmit; r must not
    transmit itself (half-duplex) and must hear no other transmitter of the slot: no neighbour
    of r in ``graph`` (the radio neighbourhood) may be transmitting to another clique. So two
    receivers conflict when they share a clique, or when one is adjacent to a clique-mate of
    the other (an inter-clique edge (a, b) keeps b out of the slots of a's clique-mates and a
    out of those of b's). The slots are a greedy colouring of these conflicts (DSatur), which
    reaches max(clique sizes) on the ring and small-world joins: it pairs the ends of each
    inter-clique edge in one slot. Returns an (N,) int array."""
    n = graph.number_of_nodes()
    clique_of = np.empty(n, dtype=np.int64)
    for c, members in enumerate(groups):
        clique_of[members] = c
    conflicts = nx.Graph()
    conflicts.add_nodes_from(range(n))
    for members in groups:
        conflicts.add_edges_from((u, v) for k, u in enumerate(members) for v in members[k + 1:])
    for a, b in graph.edges():
        if clique_of[a] == clique_of[b]:
            continue
        for x, y in ((a, b), (b, a)):
            conflicts.add_edges_from((y, m) for m in groups[clique_of[x]] if m != x)
    colour = nx.greedy_color(conflicts, strategy="saturation_largest_first")
    return np.array([colour[v] for v in range(n)], dtype=np.int64)


def exchange_conflicts(graph, groups: list[list[int]], slot_of: np.ndarray) -> list[tuple]:
    """(slot, receiver, why) for every receiver of a Clique Averaging slot that transmits or
    hears a transmitter it does not listen to; empty for a valid schedule."""
    clique_of = {v: c for c, members in enumerate(groups) for v in members}
    bad = []
    for s in np.unique(slot_of):
        receivers = set(np.flatnonzero(slot_of == s).tolist())
        senders = {m for r in receivers for m in groups[clique_of[r]] if m != r}
        for r in sorted(receivers):
            if r in senders:
                bad.append((int(s), r, "transmits while it receives"))
            heard = set(graph.neighbors(r)) & senders
            if any(clique_of[t] != clique_of[r] for t in heard):
                bad.append((int(s), r, "hears a transmitter of another clique"))
    return bad
