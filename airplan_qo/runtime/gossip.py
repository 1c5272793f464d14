"""Communication rules over a (possibly faded) graph: D-SGD, CHOCO-SGD, and the paper's update.

Every rule works on the stacked (N x d) models after local training (the half-step models
x_i^{t+1/2}) and one round's :class:`~.channel.RoundLinks`. What is transmitted, and where
channel noise enters, is stated per rule; noise is only ever added to what a receiver receives.
``communicate(x, links, round_links, channel, ...)`` returns an :class:`Exchange`: what each
receiver listened on (``k_recv``), its active transmitters (``n_tx``), per delivered link the
coordinates carried (``link_nnz``) and those needing index bits (``link_index_bits``), and the
tensor now holding the models (``x``: the ``scratch`` buffer when one was given and used; the
input ``x`` may be overwritten).

``dsgd`` (k = 1)
    x_i <- sum_j W^t_ij x_j^{t+1/2}. Each transmitter j sends its half-step model, pre-scaled by
    W^t_ij, toward receiver i in i's slot; i receives sum_{j active} W^t_ij x_j^{t+1/2} + n_i on
    all d coordinates and adds its own W^t_ii x_i^{t+1/2}. The noise enters once per round with
    variance set by the largest transmitted model norm, so it is large relative to the models'
    disagreement at low SNR; the receiver therefore shrinks what it received toward its own model
    (:func:`shrink`, positive-part James-Stein with its known noise level; a no-op on a noiseless
    link). Without the shrinkage the disagreement grew without bound at 0 dB (ring, N = 20:
    consensus distance 17 at round 40, 82 at round 200; with it, 4.8 -> 4.5 by round 300).
    Dropped links and offline clients re-weight W locally: a dropped edge's weight moves to both
    endpoints' self-weights, which keeps W^t symmetric and doubly stochastic, so the noiseless
    mean is preserved.

``choco`` (k < 1; Koloskova et al. 2019)
    q_i = C(x_i^{t+1/2} - xhat_i) with C the sparsifier; xhat_i += q_i;
    x_i <- x_i^{t+1/2} + gamma * (s_i - xhat_i), s_i receiver i's view of sum_j W_ij xhat_j.
    Over the air a receiver only gets sums, so s_i is kept per coordinate. Transmitting the
    increments q_j (as the textbook algorithm does) makes s_i a running sum of noisy receptions:
    the noise is never removed and grows as a random walk until the models diverge (measured:
    ring, k = 0.3, 0 dB, accuracy 0.91 at round 40, 0.60 at round 120). Instead, on the
    coordinates a receiver listens on (the round's common rand-k mask; for top-k, the union of
    its own and its up transmitters' supports, announced with index bits) the transmitters send
    their replica values xhat_j - x0 (centred at the shared initial model, pre-scaled by W^t_ij)
    and the receiver overwrites s_i there with the received sum, shrunk like D-SGD's. Since xhat
    only changes where it is transmitted, this costs the same channel uses as sending q, the
    noiseless algorithm is unchanged, and each coordinate of s_i carries the noise of one
    reception only. Dropped links (truncated, or an end offline) use W^t as in D-SGD: the pair
    ignores each other on the refreshed coordinates until those coordinates are refreshed again.
    With the common mask every node refreshes the same coordinates with the same symmetric W^t,
    so the noiseless mean is preserved exactly; with top-k, refresh sets differ between the ends
    of a dropped link and the mean can move slightly. Offline clients skip the consensus step.

Periodic topologies (W_t = W_{t mod period}; :func:`link_schedule` gives one :class:`LinkSet`
per round and the trainer passes each round its own). An asymmetric W_t (a directed round, e.g.
one-peer) has links only where it weights them; a dropped link's weight goes to the receiver's
self-weight, which keeps rows but not columns summing to one, so under drops the mean can move
slightly in a directed round. CHOCO's aggregates need nothing more: s_i is overwritten on the
round's common mask with W_t, and a replica coordinate only changes in a round that refreshes it
at every receiver, so each coordinate of s_i is always sum_j W^{t'}_ij xhat_j of the current
replicas for the round t' that last refreshed it (a doubly stochastic mix: the mean is kept and
consensus is the fixed point), and no receiver ever needs the replica of a client it has not
heard. Top-k supports differ between receivers, so an aggregate would keep stale replicas of
former neighbours: :func:`check_schedule` refuses CHOCO with top-k masks on a periodic topology.

``paper_literal`` (reproduction only; does NOT average models)
    The paper's w_i <- w_i^{t+1/2} + gamma * y_i, y_i = sum_{j in N(i)} (C(g_j) + n), with
    g_j = w_j^t - w_j^{t+1/2} as the paper defines it (its own step, sign included). Transmitted:
    the compressed updates, unweighted; noise enters y_i. This adds the neighbours' steps instead
    of averaging models, so clients drift to local optima or diverge; see docs/runtime.md.

The other rules of :data:`ALGORITHMS` live in their own modules and return the same
:class:`Exchange`: :mod:`.gradient_tracking`, :mod:`.push_sum`, :mod:`.matcha` (D-SGD over
sampled matchings) and :mod:`.federated` (FedAvg / FedProx through a server); the digital
transport is :mod:`.digital`.
"""

from __future__ import annotations

import warnings

import attrs
import numpy as np
import scipy.sparse as sp
import torch

from ..errors import ExecutionError
from ..plans.graphs import directed_links, edge_arrays
from .channel import Channel, RoundLinks, Traffic, digital_traffic, traffic
from .compression import ErrorFeedback, common_mask, compress
from .device import to_device

__all__ = ["ALGORITHMS", "Choco", "DSGD", "Exchange", "LinkSet", "OTA_PAYLOADS", "Operator",
           "PaperLiteral", "check_schedule", "dense_form", "difference_decay", "dsgd_mix",
           "link_schedule"]

ALGORITHMS = ("auto", "dsgd", "choco", "paper_literal", "gradient_tracking", "push_sum",
              "matcha", "fedavg", "fedprox", "dllr_oa")

#: Largest N for a dense N x N mixing matrix.
DENSE_MAX_N = 2000
#: Dense W @ X wins unless W has fewer than N^2 / SPARSE_ADVANTAGE nonzeros (one thread,
#: d = 4810: ring N = 100 scipy CSR 0.33 ms vs dense 0.66 ms; Erdos-Renyi(0.2) N = 100 2.2 ms
#: vs 1.1 ms; ring N = 1000 4 ms vs 69 ms; Erdos-Renyi(0.2) N = 1000 257 ms vs 70 ms). The same
#: rule picks the form on a GPU, where the sparse form is a torch CSR tensor (cuSPARSE).
SPARSE_ADVANTAGE = 8


@attrs.frozen(eq=False)
class Exchange:
    """What one round of an update rule sent and where the models now are.

    ``k_recv`` (N,): coordinates each receiver listened on; ``n_tx`` (N,): its active
    transmitters; ``link_nnz`` / ``link_index_bits`` (one entry per delivered link): coordinates
    carried and how many of them need index bits; ``x``: the tensor now holding the models.

    Digital exchanges (:mod:`.digital`) add, per delivered link, the bits it carried
    (``link_bits``), its sender (``link_send``) and its channel gain |h|^2 (``link_h2``): their
    traffic is counted by :func:`~.channel.digital_traffic` from rates instead of channel uses
    per real coordinate. ``more``: further exchanges of the same round (gradient tracking's
    tracker), counted on top. ``traffic``: a round whose cost is not link-shaped (the server
    of :mod:`.federated`) gives it directly."""

    k_recv: np.ndarray
    n_tx: np.ndarray
    link_nnz: np.ndarray
    link_index_bits: np.ndarray
    x: torch.Tensor
    link_bits: np.ndarray | None = None
    link_send: np.ndarray | None = None
    link_h2: np.ndarray | None = None
    more: tuple = ()
    traffic: Traffic | None = None


class LinkSet:
    """Link structure of one topology (or of one round of a periodic topology): directed links
    (receiver, sender), their base weights W_ij, self-weights W_ii, and each receiver's slot.

    A symmetric W uses both directions of every edge of the graph; an asymmetric W (a directed
    round, e.g. one-peer) only the directions it weights (:func:`~..plans.graphs.directed_links`).
    Either way W must be doubly stochastic, so that noiseless gossip preserves the average.
    Channel draws stay per undirected edge (``u``, ``v``): a link is up when its edge is.
    ``device``: where the operators built from it apply (default the CPU).
    """

    def __init__(self, topology, device: torch.device | str | None = None):
        graph = topology.graph
        n = graph.number_of_nodes()
        if sorted(graph.nodes()) != list(range(n)):
            raise ExecutionError("topology nodes must be 0..N-1")
        if topology.weights is None:
            raise ExecutionError(
                f"topology '{topology.spec.family}' changes every round (period "
                f"{topology.period}): build its links per round with link_schedule()")
        w = sp.csr_matrix(topology.weights, dtype=np.float64)
        if w.shape != (n, n):
            raise ExecutionError(f"mixing matrix has shape {w.shape}, expected ({n}, {n})")
        u, v = edge_arrays(graph)
        self.n = n
        self.u, self.v = u, v
        self.recv, self.send, self.edge, self.w = directed_links(graph, w)
        self.diag = w.diagonal().astype(np.float64)
        off = w - sp.diags(self.diag)
        off.eliminate_zeros()
        covered = np.abs(self.w).sum()
        if not np.isclose(np.abs(off).sum(), covered, rtol=1e-9, atol=1e-12):
            raise ExecutionError("mixing matrix has weight outside the graph's edges")
        if not (np.allclose(np.asarray(w.sum(axis=1)).ravel(), 1.0, atol=1e-9)
                and np.allclose(np.asarray(w.sum(axis=0)).ravel(), 1.0, atol=1e-9)):
            raise ExecutionError("mixing matrix must be doubly stochastic (rows and columns "
                                 "summing to one)")
        self.complete_uniform = bool(u.size == n * (n - 1) // 2
                                     and np.allclose(self.w, 1.0 / n)
                                     and np.allclose(self.diag, 1.0 / n))
        self.slot_of = topology.schedule.slot_of()
        self.index = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(self.recv, self.send))}
        self.weights = w
        self.device = torch.device(device or "cpu")
        #: the client of each row where the rows are not the clients in order (a rank's share
        #: of the links in a run split by rows, :mod:`.row_split`): every operator built from
        #: these links then takes the sparse form, each row's entries in the clients' order
        self.columns: np.ndarray | None = None
        self._base: Operator | None = None

    def operator(self, up: np.ndarray) -> "Operator":
        """W restricted to the up links, with the base self-weights (cached when all are up)."""
        if up.all():
            if self._base is None:
                self._base = Operator(self.n, self.recv, self.send, self.w, self.diag,
                                      device=self.device, columns=self.columns)
            return self._base
        return Operator(self.n, self.recv[up], self.send[up], self.w[up], self.diag,
                        device=self.device, columns=self.columns)

    def up(self, links: RoundLinks) -> np.ndarray:
        """Directed-link up mask (2E,) from the round's undirected edge mask."""
        return links.up[self.edge]

    def receiver_stats(self, links: RoundLinks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(up mask (2E,), active transmitters per receiver (N,), min |h|^2 per receiver)."""
        up = self.up(links)
        n_tx = np.bincount(self.recv[up], minlength=self.n)
        g_min = np.full(self.n, np.inf)
        np.minimum.at(g_min, self.recv[up], links.h2[self.edge[up]])
        return up, n_tx, g_min


class Operator:
    """A per-round N x N linear operator (weights on given links plus a diagonal), applied as
    dense ``torch.mm`` or sparse by density (see :data:`SPARSE_ADVANTAGE`). The sparse form is
    scipy CSR on the CPU and a torch CSR tensor elsewhere (``torch_sparse=True`` forces the
    torch form on the CPU too, to test it); the matrix is built in float64 and stored in float32
    either way. ``columns`` (the client of each row and column, where they are not the clients
    in order) takes the sparse form whatever the density and stores each row's entries in the
    order of those clients: a row of the scipy form adds its entries one after the other in the
    order stored, so a rank of a run split by rows (:mod:`.row_split`), whose table holds its
    block first, computes its rows as the whole operator does."""

    def __init__(self, n: int, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                 diag: np.ndarray | None = None, *, device: torch.device | str | None = None,
                 torch_sparse: bool | None = None, columns: np.ndarray | None = None):
        device = torch.device(device or "cpu")
        nnz = rows.size + (n if diag is not None else 0)
        self.dense = columns is None and dense_form(n, nnz)
        self.scipy = False
        if self.dense:
            m = np.zeros((n, n), dtype=np.float64)
            np.add.at(m, (rows, cols), vals)
            if diag is not None:
                m[np.arange(n), np.arange(n)] += diag
            self.matrix = to_device(m.astype(np.float32), device)
            self._exact = m
            return
        m = sp.coo_matrix((vals, (rows, cols)), shape=(n, n))
        if diag is not None:
            m = m + sp.diags(diag)
        self._exact = sp.csr_matrix(m, dtype=np.float64)
        csr = sp.csr_matrix(m, dtype=np.float32)
        if columns is not None:
            self._exact, csr = _in_order(self._exact, columns), _in_order(csr, columns)
        if not (torch_sparse if torch_sparse is not None else device.type != "cpu"):
            self.scipy = True
            self.matrix = csr
            return
        csr.sort_indices()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)     # "sparse CSR support is in beta"
            # scipy's canonical CSR is valid by construction: no invariant checks needed
            self.matrix = torch.sparse_csr_tensor(
                torch.from_numpy(csr.indptr.astype(np.int64)),
                torch.from_numpy(csr.indices.astype(np.int64)),
                torch.from_numpy(csr.data.astype(np.float32)), size=(n, n), device=device,
                check_invariants=False)

    def apply(self, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """operator @ y for y of shape (N, m), float32, on ``y``'s device; the dense form
        writes into ``out`` when given (the sparse forms always return a new tensor). A float64
        ``y`` is multiplied by the float64 weights (exact sums for tests of invariants)."""
        if y.dtype == torch.float64:
            if self.dense:
                return torch.mm(torch.from_numpy(self._exact).to(y.device), y)
            return torch.from_numpy(np.ascontiguousarray(
                self._exact @ y.contiguous().cpu().numpy())).to(y.device)
        if self.dense:
            return torch.mm(self.matrix, y) if out is None else torch.mm(self.matrix, y, out=out)
        if self.scipy:
            return torch.from_numpy(np.ascontiguousarray(self.matrix @ y.contiguous().numpy()))
        return torch.sparse.mm(self.matrix, y.contiguous())


def _in_order(csr: sp.csr_matrix, columns: np.ndarray) -> sp.csr_matrix:
    """``csr`` with each row's entries stored in the order of ``columns[j]`` (not sorted by
    j; scipy's product with a dense matrix adds them in the order stored)."""
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    order = np.lexsort((columns[csr.indices], rows))
    return sp.csr_matrix((csr.data[order], csr.indices[order], csr.indptr), shape=csr.shape)


def dense_form(n: int, nnz: int) -> bool:
    """Whether an N x N operator with ``nnz`` nonzeros is applied in the dense form
    (:data:`DENSE_MAX_N`, :data:`SPARSE_ADVANTAGE`)."""
    return n <= DENSE_MAX_N and nnz * SPARSE_ADVANTAGE >= n * n


def link_schedule(topology, device: torch.device | str | None = None) -> tuple[LinkSet, ...]:
    """One :class:`LinkSet` per round of the topology's period (W_t = W_{t mod period}); a
    static topology has one. ``device``: where their operators apply."""
    rounds = getattr(topology, "rounds", ())
    if not rounds:
        return (LinkSet(topology, device),)
    return tuple(LinkSet(r, device) for r in rounds)


def check_schedule(algorithm: str, mask: str, period: int) -> None:
    """Refuse a rule that cannot follow a topology that changes every round: CHOCO with top-k
    masks. Its receivers refresh only the coordinates their current transmitters send, so an
    aggregate would keep replica values of clients that are no longer its neighbours (and that
    changed them since); with the common rand-k mask every client refreshes the same
    coordinates every round and the replicas stay consistent (docs/runtime.md)."""
    if period > 1 and algorithm == "choco" and mask == "topk":
        raise ExecutionError(
            f"CHOCO with top-k masks needs a static topology; this one changes every round "
            f"(period {period}): use mask 'common_randk'")


def dsgd_mix(x: torch.Tensor, links: LinkSet, up: np.ndarray,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """sum_j W^t_ij x_j: W with the down links' weights moved to the self-weights. Returns
    ``out`` (when the dense form or the mean could use it) or a new tensor; never ``x``."""
    if up.all():
        if links.complete_uniform:
            mean = x.mean(dim=0, keepdim=True)
            return mean.expand_as(x).clone() if out is None else out.copy_(mean.expand_as(x))
        return links.operator(up).apply(x, out)
    diag = links.diag.copy()
    down = ~up
    np.add.at(diag, links.recv[down], links.w[down])
    return Operator(links.n, links.recv[up], links.send[up], links.w[up], diag,
                    device=links.device, columns=links.columns).apply(x, out)


def _received_noise_rows(channel: Channel, power_per_coord: np.ndarray, g_min: np.ndarray,
                         n_tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(n_tx > 0)
    sigma = channel.noise_std(power_per_coord, g_min)
    return rows, sigma


def shrink(received: torch.Tensor, own: torch.Tensor, sigma: np.ndarray,
           listen: torch.Tensor | None = None) -> torch.Tensor:
    """Receiver-side positive-part James-Stein shrinkage of a noisy aggregate toward the
    receiver's own value: ``own + beta_i (received - own)`` with
    ``beta_i = max(0, 1 - m_i sigma_i^2 / ||received_i - own_i||^2)`` over the m_i coordinates
    receiver i listened on (``listen``; all columns when None). Every receiver knows its noise
    level (it set its own inversion gain), so this is implementable; it is an estimate of the
    neighbourhood aggregate with lower mean-squared error than the raw received sum whenever
    m_i >= 3 (James and Stein 1961), and beta_i = 1 on a noiseless link. Without it, noise that
    is large relative to the models' disagreement (low SNR) enters the models every round and
    the disagreement grows with it."""
    dev = received - own
    if listen is None:
        energy = (dev.double() ** 2).sum(dim=1)
        m = torch.full_like(energy, float(dev.shape[1]))
    else:
        dev = dev * listen
        energy = (dev.double() ** 2).sum(dim=1)
        m = listen.sum(dim=1).double()
    noise = m * to_device(np.asarray(sigma, dtype=np.float64), energy.device) ** 2
    beta = torch.where(energy > 0, (1.0 - noise / energy.clamp_min(1e-300)).clamp(0.0, 1.0),
                       torch.ones_like(energy))
    return own + beta.float().unsqueeze(1) * dev


#: What D-SGD transmits over a noisy channel (``RunConfig.ota_payload``): ``difference`` (the
#: default, :class:`DSGD`) or ``model`` (the whole model, as in the AirPlan paper).
OTA_PAYLOADS = ("difference", "model")

#: Power of a round's change relative to the model's, assumed when choosing the decay (the
#: measured ratio ||u||^2 / ||x||^2 of a round's update was 0.02-0.15 on digits).
UPDATE_POWER = 0.1


def difference_decay(rho: float, update_power: float = UPDATE_POWER) -> float:
    """The decay lambda of the difference form for a mixing matrix with rho(W - 11^T/N) = rho.

    A receiver keeps lambda times its previous aggregate, so each transmission carries the
    update plus (1 - lambda) of the (centred) model, power about update_power + (1 - lambda)^2
    of the model's, and a reception's noise fades geometrically (AR(1), variance sigma^2 /
    (1 - lambda^2)). Gossip contracts a disagreement mode of W by mu <= rho per round, and
    correlated noise is contracted less: the steady-state disagreement variance is that of
    sending models times (update_power + (1 - lambda)^2) (1 + lambda mu) / ((1 - lambda^2)
    (1 - lambda mu)). This picks the lambda in {0, 0.05, ..., 0.95} minimising it at mu = rho:
    0.75 on the complete graph (0.37 of the model form's variance), 0 on a slow ring (rho
    near 1, where remembered noise outlives the mixing; then each round sends the centred
    model and the noise is fresh). Measured on digits, N = 20, alpha = 0.5, 0 dB, 40 rounds,
    two seeds, clients' mean accuracy (ideal channel 0.930 / 0.958): complete graph 0.934 /
    0.955 at lambda = 0.7 and 0.935 / 0.957 at 0.9 against 0.876 / 0.896 sending models; on
    the ring lambda = 0.9 looked better at round 40 (0.845 against 0.627) but lost it by round
    120 (0.79 against 0.92 ideal) as the disagreement kept growing."""
    lams = np.arange(0.0, 0.951, 0.05)
    mu = min(max(float(rho), 0.0), 1.0)
    ratio = ((update_power + (1 - lams) ** 2) * (1 + lams * mu)
             / ((1 - lams ** 2) * np.maximum(1 - lams * mu, 1e-12)))
    return float(np.round(lams[int(np.argmin(ratio))], 2))


class DSGD:
    """D-SGD: average the half-step models with W^t (see module docstring).

    ``x0``: the initial model every client starts from (shared by construction); with
    ``payload='difference'`` and a noisy channel the transmissions are centred at it and sent
    as decayed differences (:meth:`_difference`); ``decay`` 0 sends the centred models
    themselves (what a topology that changes every round uses)."""

    name = "dsgd"

    def __init__(self, n: int, d: int, shrinkage: bool = True, *, x0: torch.Tensor | None = None,
                 payload: str = "model", decay: float = 0.0):
        if payload not in OTA_PAYLOADS:
            raise ExecutionError(f"ota_payload must be one of {', '.join(OTA_PAYLOADS)}, "
                                 f"got {payload!r}")
        if payload == "difference" and x0 is None:
            raise ExecutionError("the difference payload needs the shared initial model x0")
        self.n, self.d, self.shrinkage = n, d, shrinkage
        self.payload, self.decay = payload, float(decay)
        self.ref = None if x0 is None else x0.detach().clone()
        #: the rounds some link of the whole run last delivered in, where this rule holds only
        #: some links (a rank of a run split by rows, :mod:`.row_split`): their centred models
        #: are kept as one process keeps them. None: this rule holds every link.
        self.live: set[int] | None = None
        self._reset()

    def _reset(self) -> None:
        #: receiver aggregates: sum_j W_ij decay^(t - tau_ij) p_j(tau_ij), p = x - x0 (N x d)
        self.s: torch.Tensor | None = None
        #: per directed link, the rule's round of its last delivery (-1: never)
        self.sent: np.ndarray | None = None
        #: the centred models p of the rounds some link last delivered: {round: (N x d)}
        self.kept: dict[int, torch.Tensor] = {}
        self.t = 0

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    scratch: torch.Tensor | None = None, **_: object):
        if self.payload == "difference" and channel.noisy:
            return self._difference(x, links, rl, channel)
        up, n_tx, g_min = links.receiver_stats(rl)
        norms = (torch.linalg.vector_norm(x, dim=1).double() ** 2).cpu().numpy() \
            if channel.noisy else None
        mixed = dsgd_mix(x, links, up, out=scratch)
        if channel.noisy:
            power = np.zeros(self.n)
            np.maximum.at(power, links.recv[up], links.w[up] ** 2 * norms[links.send[up]])
            rows, sigma = _received_noise_rows(channel, power / self.d, g_min, n_tx)
            if rows.size:
                noise = channel.randn(rows.size, self.d)
                noise.mul_(to_device(sigma[rows], x.device).float().unsqueeze(1))
                if rows.size == self.n:
                    mixed.add_(noise)
                else:
                    mixed.index_add_(0, to_device(rows, x.device), noise)
                if self.shrinkage:
                    mixed = shrink(mixed, x, sigma)
        k_recv = np.full(self.n, self.d)
        n_links = int(up.sum())
        return Exchange(k_recv, n_tx, np.full(n_links, self.d), np.zeros(n_links), mixed)

    def _difference(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel):
        """One round of the difference form (docs/runtime.md, Over-the-air payloads).

        With p_j = x_j^{t+1/2} - x0 and tau the round link (i, j) last delivered, transmitter j
        sends W_ij (p_j(t) - decay^(t - tau) p_j(tau)) toward i (p_j(t) itself on a link that
        never delivered); receiver i keeps s_i <- decay * s_i + received + noise, so that
        without noise s_i = sum_j W_ij decay^(t - tau_ij) p_j(tau_ij): W p on the links up now,
        and a decayed last value on the others. Its new model is x0 + W_ii p_i + s_i + m_i p_i,
        where m_i = sum_{j down} W_ij (1 - decay^(t - tau_ij)) is the weight its aggregate no
        longer carries (its own model stands in for it, as a dropped link's weight goes to the
        self-weight in the model form). With every link up this is D-SGD exactly. Both ends of
        a link know its history (reciprocal channels; an offline client knows it was offline),
        so every quantity is computable where it is used. An offline client keeps its model;
        its aggregate only decays."""
        self.t += 1
        t, lam, device = self.t, self.decay, x.device
        if self.s is None or not lam:      # decay 0 keeps nothing between rounds
            self.s = torch.zeros_like(x)
            self.sent = np.full(links.recv.size, -1, dtype=np.int64)
            self.kept = {}
        up, n_tx, g_min = links.receiver_stats(rl)
        p = x - self.ref
        lids = np.flatnonzero(up)
        tau = self.sent[lids]
        received = Operator(self.n, links.recv[lids], links.send[lids], links.w[lids],
                            device=links.device, columns=links.columns).apply(p)
        power = np.zeros(self.n)
        payload = np.empty(lids.size)
        for r in np.unique(tau):
            sel = tau == r
            if r < 0:
                norms = (torch.linalg.vector_norm(p, dim=1).double() ** 2).cpu().numpy()
            else:
                c = lam ** (t - int(r))
                old = self.kept[int(r)]
                received -= Operator(self.n, links.recv[lids[sel]], links.send[lids[sel]],
                                     c * links.w[lids[sel]], device=links.device,
                                     columns=links.columns).apply(old)
                norms = (torch.linalg.vector_norm(p - c * old, dim=1).double() ** 2
                         ).cpu().numpy()
            payload[sel] = links.w[lids[sel]] ** 2 * norms[links.send[lids[sel]]]
        np.maximum.at(power, links.recv[lids], payload)
        rows, sigma = _received_noise_rows(channel, power / self.d, g_min, n_tx)
        if rows.size:
            noise = channel.randn(rows.size, self.d)
            noise.mul_(to_device(sigma[rows], device).float().unsqueeze(1))
            received.index_add_(0, to_device(rows, device), noise)
        self.s.mul_(lam).add_(received)
        if lam:
            self.sent[lids] = t
            self.kept[t] = p
            for r in [r for r in self.kept if r != t and not (self.sent == r).any()
                      and (self.live is None or r not in self.live)]:
                del self.kept[r]
        down = np.flatnonzero(~up)
        missing = np.zeros(self.n)
        if down.size:
            ages = t - self.sent[down]
            np.add.at(missing, links.recv[down],
                      links.w[down] * np.where(self.sent[down] < 0, 1.0, 1.0 - lam ** ages))
        own = to_device(links.diag + missing, device).float().unsqueeze(1)
        mixed = self.ref + own * p + self.s
        if not lam and self.shrinkage:     # the round's own noise only, as in the model form
            mixed = shrink(mixed, x, sigma)
        if not rl.active.all():
            off = to_device(np.flatnonzero(~rl.active), device)
            mixed[off] = x[off]
        k_recv = np.full(self.n, self.d)
        return Exchange(k_recv, n_tx, np.full(lids.size, self.d), np.zeros(lids.size), mixed)

    def state(self) -> dict:
        if self.s is None or not self.kept:     # decay 0 (or nothing sent yet): no state
            return {}
        rounds = sorted(self.kept)
        return {"s": self.s, "sent": torch.from_numpy(self.sent.copy()), "t": self.t,
                "kept_rounds": torch.tensor(rounds, dtype=torch.int64),
                "kept": torch.stack([self.kept[r] for r in rounds])}

    def set_state(self, state: dict) -> None:
        self._reset()
        if not state:
            return
        self.s = state["s"].clone()
        self.sent = state["sent"].cpu().numpy().copy()
        self.t = int(state["t"])
        self.kept = {int(r): v.clone() for r, v in zip(state["kept_rounds"].tolist(),
                                                        state["kept"])}

    def rewire(self, links: LinkSet) -> None:
        """New links: the aggregates start again (the next round sends the centred models)."""
        self._reset()


class Choco:
    """CHOCO-SGD whose receivers refresh their aggregates with replica values (module docstring)."""

    name = "choco"

    def __init__(self, n: int, d: int, k: int, mask: str, gamma: float, x0: torch.Tensor,
                 shrinkage: bool = True):
        self.n, self.d, self.k, self.mask, self.gamma = n, d, k, mask, float(gamma)
        self.shrinkage = shrinkage
        self.ref = x0.detach().clone()
        self.xhat = x0.unsqueeze(0).repeat(n, 1)
        self.s = self.xhat.clone()
        #: Called as ``share(xhat, columns)`` right after the replicas' update of a round with
        #: a common mask (``columns``: the mask), before any receiver uses them: a run split
        #: over processes (:mod:`.distributed`) brings there the masked columns of the replicas
        #: its receivers mix with. None in one process.
        self.share = None

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator, scratch: torch.Tensor | None = None,
                    **_: object):
        everyone = rl.all_active      # one process's branch, whatever rows are held
        device = x.device
        active = to_device(rl.active, device)
        indices = (common_mask(self.d, self.k, train_gen, device=device)
                   if self.mask == "common_randk" else None)
        q = compress(torch.sub(x, self.xhat, out=scratch), self.k, self.mask, indices=indices)
        if not everyone:
            q.values[~active] = 0.0
        q.add_to(self.xhat)
        if self.share is not None and q.common:
            self.share(self.xhat, q.indices)

        up, n_tx, g_min = links.receiver_stats(rl)
        lids = np.flatnonzero(up)
        if q.common:
            idx = q.indices
            sent = self.xhat[:, idx] - self.ref[idx]            # what each transmitter sends
            fresh = dsgd_mix(sent, links, up)
            k_recv = np.full(self.n, self.k)
            nnz = np.full(lids.size, self.k, dtype=np.float64)
            idx_bits = np.zeros(lids.size)
            fresh += self.ref[idx]
            if channel.noisy:
                norms = (torch.linalg.vector_norm(sent, dim=1).double() ** 2).cpu().numpy()
                payload = links.w[lids] ** 2 * norms[links.send[lids]]
                sigma = self._add_noise(fresh, None, payload, lids, links, k_recv, n_tx, g_min,
                                        channel)
                if self.shrinkage:
                    fresh = shrink(fresh, self.xhat[:, idx], sigma)
            self.s[:, idx] = fresh
        else:
            support = q.support_mask()
            if not everyone:
                support[~active] = False
            adjacency = Operator(self.n, links.recv[lids], links.send[lids], np.ones(lids.size),
                                 device=links.device)
            listen = (adjacency.apply(support.float()) > 0) | support
            listen[~active] = False                             # offline: no refresh
            sent = self.xhat - self.ref
            fresh = dsgd_mix(sent, links, up)
            k_recv = listen.sum(dim=1).cpu().numpy()
            nnz = k_recv[links.recv[lids]].astype(np.float64)
            idx_bits = nnz.copy()
            if channel.noisy:
                payload = np.empty(lids.size)
                sq = sent.double() ** 2
                for lo in range(0, lids.size, 4096):
                    part = lids[lo:lo + 4096]
                    r = to_device(links.recv[part], device)
                    s_ = to_device(links.send[part], device)
                    payload[lo:lo + part.size] = (links.w[part] ** 2 * (
                        listen[r].double() * sq[s_]).sum(dim=1).cpu().numpy())
            fresh += self.ref
            if channel.noisy:
                sigma = self._add_noise(fresh, listen, payload, lids, links, k_recv, n_tx,
                                        g_min, channel)
                if self.shrinkage:
                    fresh = shrink(fresh, self.xhat, sigma, listen)
            self.s = torch.where(listen, fresh, self.s)

        delta = torch.sub(self.s, self.xhat, out=scratch)
        if everyone:
            x.add_(delta, alpha=self.gamma)
        else:
            x[active] += self.gamma * delta[active]
        return Exchange(k_recv, n_tx, nnz, idx_bits, x)

    def _add_noise(self, fresh: torch.Tensor, listen: torch.Tensor | None, payload: np.ndarray,
                   lids: np.ndarray, links: LinkSet, k_recv: np.ndarray, n_tx: np.ndarray,
                   g_min: np.ndarray, channel: Channel) -> np.ndarray:
        """Receiver noise on what each receiver listened on (``fresh``: rows of W^t sent);
        returns each receiver's noise standard deviation."""
        power = np.zeros(self.n)
        np.maximum.at(power, links.recv[lids], payload)
        sigma = channel.noise_std(power / np.maximum(k_recv, 1), g_min)
        rows = np.flatnonzero(n_tx > 0)
        if not rows.size:
            return sigma
        device = fresh.device
        scale = to_device(sigma, device).float().unsqueeze(1)
        if listen is None:
            noise = channel.randn(rows.size, fresh.shape[1])
            index = to_device(rows, device)
            fresh[index] += noise * scale[index]
            return sigma
        mask = listen.clone()
        mask[to_device(n_tx == 0, device)] = False
        noise = torch.zeros_like(fresh)
        noise[mask] = channel.randn(int(mask.sum()))
        fresh += noise * scale
        return sigma

    def rewire(self, links: LinkSet) -> None:
        """New W: every aggregate is refreshed once (s = W' xhat)."""
        self.s = links.operator(np.ones(links.recv.size, dtype=bool)).apply(self.xhat)

    def state(self) -> dict:
        return {"xhat": self.xhat, "s": self.s, "ref": self.ref}

    def set_state(self, state: dict) -> None:
        if "ref" not in state:
            raise ExecutionError("the checkpoint was written by an older CHOCO runtime "
                                 "(noise-accumulating aggregates); start the run again")
        self.xhat = state["xhat"].clone()
        self.s = state["s"].clone()
        self.ref = state["ref"].clone()


class PaperLiteral:
    """The paper's consensus update, literally (see module docstring): not an averaging rule."""

    name = "paper_literal"

    def __init__(self, n: int, d: int, k: int, mask: str, gamma: float, error_feedback: bool,
                 device: torch.device | str | None = None):
        self.n, self.d, self.k, self.mask, self.gamma = n, d, k, mask, float(gamma)
        self.ef = ErrorFeedback(n, d, device=device) if error_feedback else None

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator, x_prev: torch.Tensor, **_: object):
        device = x.device
        active = to_device(rl.active, device)
        indices = (common_mask(self.d, self.k, train_gen, device=device)
                   if self.mask == "common_randk" else None)
        g = x_prev - x
        if self.ef is not None:
            u = self.ef.compress(g, self.k, self.mask, indices=indices, rows=active)
        else:
            u = compress(g, self.k, self.mask, indices=indices)
            u.values[~active] = 0.0
        up, n_tx, g_min = links.receiver_stats(rl)
        ones = np.ones(int(up.sum()))
        op = Operator(self.n, links.recv[up], links.send[up], ones, device=links.device)
        received = op.apply(u.values if u.common else u.dense())
        lids = np.flatnonzero(up)
        if u.common:
            k_recv = np.full(self.n, self.k)
            listen = None
        else:
            listen = op.apply(u.support_mask().float()) > 0
            k_recv = listen.sum(dim=1).cpu().numpy()
        if channel.noisy:
            norms = u.row_norms_sq().cpu().numpy()
            power = np.zeros(self.n)
            np.maximum.at(power, links.recv[lids], norms[links.send[lids]])
            rows, sigma = _received_noise_rows(channel, power / np.maximum(k_recv, 1), g_min,
                                               n_tx)
            sig = to_device(sigma, device).float().unsqueeze(1)
            if u.common:
                noise = torch.zeros_like(received)
                noise[to_device(rows, device)] = channel.randn(rows.size, self.k)
                received += noise * sig
            else:
                listen[to_device(n_tx == 0, device)] = False
                noise = torch.zeros_like(received)
                noise[listen] = channel.randn(int(listen.sum()))
                received += noise * sig
        step = torch.zeros_like(received)
        step[active] = self.gamma * received[active]
        if u.common:
            x[:, u.indices] += step
        else:
            x += step
        nnz = np.full(lids.size, self.k, dtype=np.float64)
        return Exchange(k_recv, n_tx, nnz, np.zeros(lids.size) if u.common else nnz.copy(), x)

    def rewire(self, links: LinkSet) -> None:
        return None

    def state(self) -> dict:
        return {"ef": self.ef.memory} if self.ef is not None else {}

    def set_state(self, state: dict) -> None:
        if self.ef is not None:
            self.ef.memory = state["ef"].clone()


def round_traffic(result: Exchange, links: LinkSet, d: int, tx_power_w: float,
                  bandwidth_hz: float, snr: float = 10.0) -> Traffic:
    """Traffic of one round from a rule's :class:`Exchange` (and its ``more``): over the air
    by :func:`~.channel.traffic`, digital by :func:`~.channel.digital_traffic` (at the linear
    ``snr``)."""
    if result.traffic is not None:
        cost = result.traffic
    elif result.link_bits is not None:
        cost = digital_traffic(result.link_send, result.link_bits, result.link_h2,
                               links.slot_of, snr, tx_power_w, bandwidth_hz)
    else:
        cost = traffic(np.asarray(result.k_recv), np.asarray(result.n_tx), links.slot_of,
                       result.link_nnz, result.link_index_bits, d, tx_power_w, bandwidth_hz)
    for extra in result.more:
        cost = cost + round_traffic(extra, links, d, tx_power_w, bandwidth_hz, snr)
    return cost
