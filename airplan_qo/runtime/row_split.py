"""A rank's rows of a run split by rows: its block of clients and their senders (the halo).

In a run over several processes (:mod:`.distributed`) a rank trains a contiguous block [lo, hi)
of the clients. Where the update rule's receivers use only their own links, their own state and
their senders' rows (D-SGD in either over-the-air form or on the ideal channel, digital D-SGD
with exact or quantised packets, MATCHA over either, push-sum, CHOCO with the common rand-k
mask: :func:`splits`), the rank holds only the rows it needs, and the rule's state for those
rows: a table of its block, first, then the round's halo, the senders j of the round's links
(i, j) with receiver i in the block (:func:`halo`), with as many rows as the largest halo of
any round of the period (:func:`table_rows`; :func:`held_rows` lists every client held over the
period). A round's halo rows are received afresh in that round, so another round's senders can
take their rows. The rule runs on that table with the rank's share of the round's links
(:class:`LocalLinks`, indices of the table) as it runs on the whole stack in one process, with
the same arithmetic per receiver:

- mixing ``sum_j W_ij x_j`` is the scipy CSR product, whose row i adds its entries one after
  the other in the order stored: one process stores them in the clients' order, and the
  share's operators store each row's entries in the clients' order too (``columns``: the
  client of each row of the table), so row i adds the same terms in the same order. The split
  is used only where every operator of the single-process run takes that sparse form
  (:func:`~.gossip.dense_form`: more than 2000 clients, or fewer than N^2 / 8 nonzeros), on
  the CPU;
- per-receiver quantities (noise level, shrinkage, a dropped link's weight moved to the
  self-weight) come from the receiver's own links, in the same order; per-sender ones
  (push-sum's share 1 / (outdeg + 1) and lost packets) from all the sender's links
  (:class:`LocalLinks` keeps ``whole``); a branch taken on the whole round (CHOCO's consensus
  step when every client is online) from every client (:func:`local_round`);
- the receivers' noise is drawn for the whole round, as one process draws it, 16 rows at a
  time, and a rank keeps its receivers' rows (:class:`HaloNoise`): the CPU generator fills a
  normal draw 16 numbers at a time, so 16-row pieces (16 d numbers) continue one stream
  exactly (``tests/runtime/test_row_split.py`` checks it), and the quantiser's uniforms
  (:meth:`HaloNoise.uniform`) likewise; a CUDA generator is not split;
- the average model (:func:`column_mean`) is the mean of every client's model taken a slab of
  columns at a time: torch's mean over the rows of one slab equals the same columns of the
  whole stack's mean (checked by the tests for slabs of a multiple of 64 columns), so a rank
  holds N x (slab) numbers of it at a time instead of N x d.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import attrs
import numpy as np
import torch

from ..plans.operators import WEIGHT_REPEATS
from .channel import Channel, RoundLinks
from .digital import Digital, DigitalGossip
from .gossip import DSGD, Choco, Exchange, LinkSet, dense_form
from .push_sum import PushSum

__all__ = ["COLUMN_SLAB", "NOISE_ROWS", "HaloNoise", "LocalLinks", "column_mean",
           "draw_rows", "global_exchange", "halo", "held_rows", "local_round", "set_rule_rows",
           "splits", "table_rows"]

#: Rows of one piece of the receivers' noise (the CPU generator's normal draws come in groups
#: of 16 numbers, so pieces of 16 rows continue the stream of one whole draw exactly).
NOISE_ROWS = 16
#: Columns of the average model's slabs are a multiple of this.
COLUMN_SLAB = 64


def _inner(rule: Any) -> Any:
    return getattr(rule, "inner", rule)


def splits(algorithm: str, device: torch.device, n: int,
           links: list[tuple[np.ndarray, np.ndarray]], clique_averaging: bool,
           mask: str = "common_randk") -> bool:
    """Whether a run is split by rows: D-SGD (over the air in either form, its difference
    form's aggregates per receiver and remembered models per sender; digital, exact packets or
    quantised ones whose public copies travel), MATCHA over either, push-sum (whose weights
    travel with the rows) or CHOCO with the common rand-k mask (whose receivers' state is their
    own rows and whose senders' replicas travel), on the CPU, without
    Clique Averaging, where every round's operator with all links up takes the sparse form
    (``links``: per round of the period, its (receivers, senders))."""
    if algorithm not in ("dsgd", "matcha", "push_sum", "choco") or device.type != "cpu" \
            or clique_averaging:
        return False
    if algorithm == "choco" and mask != "common_randk":
        return False
    return all(not dense_form(n, int(recv.size) + n) for recv, _ in links)


def held_rows(lo: int, hi: int, links: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The clients whose rows a rank with block [lo, hi) holds over the period: the block and
    every sender of a link into it (``links``: per round, (receivers, senders)), sorted."""
    parts = [np.arange(lo, hi, dtype=np.int64)]
    for recv, send in links:
        into = (recv >= lo) & (recv < hi)
        parts.append(np.asarray(send[into], dtype=np.int64))
    return np.unique(np.concatenate(parts))


def table_rows(lo: int, hi: int, links: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """The rows of a rank's table: its block and the most senders from outside it of any round
    (a round's halo rows are those of its own senders; they change with the round)."""
    return (hi - lo) + max(halo(lo, hi, recv, send).size for recv, send in links)


def halo(lo: int, hi: int, recv: np.ndarray, send: np.ndarray) -> np.ndarray:
    """The senders into [lo, hi) from outside it, sorted."""
    into = (recv >= lo) & (recv < hi)
    out = np.asarray(send[into], dtype=np.int64)
    return np.unique(out[(out < lo) | (out >= hi)])


class LocalLinks(LinkSet):
    """A rank's share of a :class:`~.gossip.LinkSet`: the links whose receiver is in its block,
    in the same order, with clients numbered by their row of the rank's table of ``rows`` rows:
    the block first, then this link set's senders from outside it (sorted), then rows no client
    uses here (``held``: the client of each row, ``lo`` for the unused ones). Edges keep their
    global numbers, so the round's draws (:class:`~.channel.RoundLinks` of every edge) apply as
    they are. Operators take the sparse form with each row's entries in the clients' order
    (``columns``). :meth:`up` remembers the round's draws it was given (MATCHA's, with the
    inactive matchings down), from which the round's traffic is counted."""

    def __init__(self, links: LinkSet, lo: int, hi: int, rows: int):
        into = np.flatnonzero((links.recv >= lo) & (links.recv < hi))
        #: the links' numbers among every link
        self.lids = into
        self.lo, self.hi = lo, hi
        #: the senders from outside the block, in the rows after it
        self.halo = halo(lo, hi, links.recv, links.send)
        used = (hi - lo) + self.halo.size
        if used > rows:
            raise ValueError(f"{used} rows needed, the table has {rows}")
        self.n = int(rows)
        self.held = np.concatenate([np.arange(lo, hi), self.halo,
                                    np.full(rows - used, lo)]).astype(np.int64)
        self.columns = np.concatenate([self.held[:used],
                                       links.n + np.arange(rows - used)]).astype(np.int64)
        self.u, self.v = links.u, links.v
        self.recv = self.position(links.recv[into]).astype(links.recv.dtype)
        self.send = self.position(links.send[into]).astype(links.send.dtype)
        if not np.array_equal(self.held[self.send], links.send[into]):
            raise ValueError("a sender into the block is not among the rows held")
        self.edge = links.edge[into]
        self.w = links.w[into]
        self.diag = links.diag[self.held]
        self.complete_uniform = False
        self.slot_of = links.slot_of[self.held]
        self.index = {}
        self.weights = None
        self.device = links.device
        self._base = None
        #: every link (push-sum counts a sender's links over all of them)
        self.whole = links
        #: the round's draws as the rule last used them
        self.seen: RoundLinks | None = None

    def position(self, clients: np.ndarray) -> np.ndarray:
        """The rows of the table holding ``clients`` (of the block or the halo)."""
        clients = np.asarray(clients, dtype=np.int64)
        inside = (clients >= self.lo) & (clients < self.hi)
        return np.where(inside, clients - self.lo,
                        (self.hi - self.lo) + np.searchsorted(self.halo, clients))

    def up(self, links: RoundLinks) -> np.ndarray:
        self.seen = links
        return super().up(links)


class HaloNoise:
    """The channel as a rank's rule sees it: every draw and setting is the channel's, but
    :meth:`randn` of the receivers' noise draws the whole round's noise (every receiver with
    an active transmitter, as one process draws it) :data:`NOISE_ROWS` rows at a time and
    returns the rows of this rank's receivers, without holding the rest. :meth:`finish` draws
    the round's noise when the rank's own receivers drew none, so the generator advances as in
    one process. :meth:`uniform` gives the quantiser its rows of the whole (N x m) draw of
    uniforms (``held``: the clients of the table's rows; ``n``: every client)."""

    def __init__(self, channel: Channel, receivers: Callable[[], np.ndarray], lo: int, hi: int,
                 draws: bool, held: np.ndarray | None = None, n: int = 0):
        self._channel = channel
        self._receivers = receivers
        self._lo, self._hi = lo, hi
        self._draws = draws
        self._drawn = False
        self._held, self._n = held, n

    def uniform(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The held rows (in the table's order) of ``torch.rand(n, m)`` from the channel's
        generator, drawn :data:`NOISE_ROWS` rows at a time (uniforms are drawn one number after
        the other, so any pieces continue one draw exactly)."""
        held = self._held
        if held is None or len(shape) != 2 or shape[0] != held.size:
            raise RuntimeError(f"unexpected uniform draw of size {shape} in a run split by rows")
        gen = self._channel.gen
        order = np.argsort(held, kind="stable")
        ranked = held[order]
        out = torch.empty(*shape, device=gen.device)
        draw = functools.partial(torch.rand, generator=gen, device=gen.device)
        for start, stop, piece in _pieces(draw, self._n, shape[1]):
            a, b = np.searchsorted(ranked, [start, stop])
            if a < b:
                out[torch.from_numpy(order[a:b]).to(gen.device)] = \
                    piece[torch.from_numpy(ranked[a:b] - start).to(gen.device)]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)

    def randn(self, *size: int) -> torch.Tensor:
        if len(size) != 2 or self._drawn or not self._draws:
            raise RuntimeError(f"unexpected noise draw of size {size} in a run split by rows")
        rows, d = size
        every = self._receivers()
        first, last = np.searchsorted(every, [self._lo, self._hi])
        if rows != last - first:
            raise RuntimeError(f"{rows} noise rows asked, {last - first} receivers held")
        self._drawn = True
        return draw_rows(self._channel, int(every.size), d, int(first), int(last))

    def finish(self, width: int) -> None:
        """The round's noise (``width`` numbers per receiver), drawn and dropped, when no
        receiver of this rank drew it."""
        if self._draws and not self._drawn:
            every = self._receivers()
            if every.size:
                draw_rows(self._channel, int(every.size), width, 0, 0)
            self._drawn = True


def draw_rows(channel: Channel, rows: int, d: int, first: int, last: int) -> torch.Tensor:
    """Rows first..last-1 of ``channel.randn(rows, d)``, drawn :data:`NOISE_ROWS` rows at a
    time (the generator ends where the whole draw leaves it); a d below 16 draws it whole
    (pieces of fewer than 16 numbers are drawn another way)."""
    if d < NOISE_ROWS:
        return channel.randn(rows, d)[first:last].clone()
    out = torch.empty(last - first, d, device=channel.device)
    for start, stop, piece in _pieces(channel.randn, rows, d):
        lo, hi = max(start, first), min(stop, last)
        if lo < hi:
            out[lo - first:hi - first] = piece[lo - start:hi - start]
    return out


def _pieces(draw: Callable[..., torch.Tensor], rows: int, width: int):
    """``draw(rows, width)`` as pieces of :data:`NOISE_ROWS` rows, in order: (first row,
    row after the last, the piece)."""
    for start in range(0, rows, NOISE_ROWS):
        stop = min(rows, start + NOISE_ROWS)
        yield start, stop, draw(stop - start, width)


def global_exchange(rule: Any, links: LinkSet, round_links: RoundLinks, d: int,
                    x: torch.Tensor, noisy: bool = False,
                    link_bits: np.ndarray | None = None) -> Exchange:
    """The :class:`~.gossip.Exchange` one process's rule returns for the round (what its
    traffic is counted from), from every link and the round's draws as the rule used them:
    d coordinates to every receiver and on every delivered link, and for digital D-SGD's
    exact packets 32 d bits per delivered link (quantised packets: ``link_bits``); push-sum's
    d + 1 values per link (d plus its weight's repetitions per receiver over a ``noisy``
    channel)."""
    up, n_tx, _ = links.receiver_stats(round_links)
    lids = np.flatnonzero(up)
    inner = _inner(rule)
    if isinstance(inner, Choco):         # the k masked coordinates
        k = inner.k
        return Exchange(np.full(links.n, k), n_tx, np.full(lids.size, k, dtype=np.float64),
                        np.zeros(lids.size), x)
    if isinstance(inner, PushSum):       # d values and the weight per link
        extra = 1 if inner.digital or not noisy else WEIGHT_REPEATS
        nnz = np.full(lids.size, d + 1)
        base = (np.full(links.n, d + extra), n_tx, nnz, np.zeros(lids.size), x)
        if not inner.digital:
            return Exchange(*base)
        return Exchange(*base, link_bits=32.0 * nnz, link_send=links.send[lids],
                        link_h2=round_links.h2[links.edge[lids]])
    base = (np.full(links.n, d), n_tx, np.full(lids.size, d), np.zeros(lids.size), x)
    if isinstance(inner, Digital):
        bits = np.full(lids.size, float(32 * d)) if link_bits is None else link_bits
        return Exchange(*base, link_bits=bits,
                        link_send=links.send[lids],
                        link_h2=round_links.h2[links.edge[lids]])
    return Exchange(*base)


def local_round(round_links: RoundLinks, held: np.ndarray) -> RoundLinks:
    """The round's draws for a rank's table: its rows' online flags, every edge's draws, and
    whether every client is online (CHOCO's consensus step takes another form then)."""
    return attrs.evolve(round_links, active=round_links.active[held],
                        whole_active=round_links.all_active)


def set_rule_rows(rule: Any, rows: int) -> None:
    """Make the rule (D-SGD, digital D-SGD, MATCHA over either, push-sum, CHOCO) work on
    ``rows`` rows."""
    inner = _inner(rule)
    if isinstance(inner, Digital):
        inner = inner.gossip
    if not isinstance(inner, (DSGD, DigitalGossip, PushSum, Choco)):
        raise TypeError(f"{type(rule).__name__} is not split by rows")
    inner.n = rows


def column_mean(d: int, slab: int, columns: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """The mean over clients of every client's model, (d,), a slab of ``slab`` columns (a
    multiple of :data:`COLUMN_SLAB`) at a time: ``columns(c0, c1)`` returns every client's
    columns c0..c1-1 (N x (c1 - c0)), whose torch mean over the rows is those columns of the
    whole stack's ``x.mean(dim=0)``."""
    if slab % COLUMN_SLAB:
        raise ValueError(f"slab must be a multiple of {COLUMN_SLAB}, got {slab}")
    parts = []
    for c0 in range(0, d, slab):
        parts.append(columns(c0, min(d, c0 + slab)).mean(dim=0))
    return torch.cat(parts)
