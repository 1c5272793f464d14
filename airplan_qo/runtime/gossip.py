"""Communication rules over a (possibly faded) graph: D-SGD, CHOCO-SGD, and the paper's update.

Every rule works on the stacked (N x d) models after local training (the half-step models
x_i^{t+1/2}) and one round's :class:`~.channel.RoundLinks`. What is transmitted, and where
channel noise enters, is stated per rule; noise is only ever added to what a receiver receives.
``communicate(x, links, round_links, channel, ...)`` returns ``(k_recv, n_tx, link_nnz,
link_index_bits, x_new)``: what each receiver listened on, its active transmitters, per delivered
link the coordinates carried and those needing index bits, and the tensor now holding the models
(the ``scratch`` buffer when one was given and used; the input ``x`` may be overwritten).

``dsgd`` (k = 1)
    x_i <- sum_j W^t_ij x_j^{t+1/2}. Each transmitter j sends its half-step model, pre-scaled by
    W^t_ij, toward receiver i in i's slot; i receives sum_{j active} W^t_ij x_j^{t+1/2} + n_i on
    all d coordinates and adds its own W^t_ii x_i^{t+1/2}. The noise therefore enters the new
    model once per round, with variance set by the largest transmitted model norm (no
    accumulation, but it scales with the model, not with the update). Dropped links and offline
    clients re-weight W locally: a dropped edge's weight moves to both endpoints' self-weights,
    which keeps W^t symmetric and doubly stochastic, so the noiseless mean is preserved.

``choco`` (k < 1; Koloskova et al. 2019)
    q_i = C(x_i^{t+1/2} - xhat_i) with C the sparsifier; xhat_i += q_i;
    x_i <- x_i^{t+1/2} + gamma * sum_j W_ij (xhat_j - xhat_i).
    Over the air a receiver only gets sums, so it keeps one aggregate s_i, its view of
    sum_j W_ij xhat_j (initialised to the shared initial model). Transmitted: q_j pre-scaled by
    W_ij; s_i += W_ii q_i + (received sum_{j active} W_ij q_j + n_i). Noise thus enters s_i and
    stays there (it accumulates over rounds, as in any scheme that transmits differences); it is
    scaled by the small ||q||, not by the model. A link that is down (truncated, or an end
    offline) does not deliver: the transmitter keeps the missed increments for that link and
    sends them with its next delivery on it (the receiver then listens on the union of
    supports, which is counted). The consensus step uses only pairwise-consistent views,
    c_i = s_i - xhat_i + sum_j W_ij p_{j<-i} (p_{j<-i}: what i still owes j), so that with a
    noiseless channel the pair terms cancel and the mean is preserved even with truncated links.
    Offline clients are frozen (they skip the consensus step), which can move the mean slightly.

``paper_literal`` (reproduction only; does NOT average models)
    The paper's w_i <- w_i^{t+1/2} + gamma * y_i, y_i = sum_{j in N(i)} (C(g_j) + n), with
    g_j = w_j^t - w_j^{t+1/2} as the paper defines it (its own step, sign included). Transmitted:
    the compressed updates, unweighted; noise enters y_i. This adds the neighbours' steps instead
    of averaging models, so clients drift to local optima or diverge; see docs/runtime.md.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import ExecutionError
from ..plans.mixing import edge_arrays
from .channel import Channel, RoundLinks, Traffic, traffic
from .compression import ErrorFeedback, Sparse, common_mask, compress

__all__ = ["ALGORITHMS", "Choco", "DSGD", "LinkSet", "Operator", "PaperLiteral", "dsgd_mix"]

ALGORITHMS = ("auto", "dsgd", "choco", "paper_literal")

#: Largest N for a dense N x N mixing matrix.
DENSE_MAX_N = 2000
#: Dense W @ X wins unless W has fewer than N^2 / SPARSE_ADVANTAGE nonzeros (one thread,
#: d = 4810: ring N = 100 scipy CSR 0.33 ms vs dense 0.66 ms; Erdos-Renyi(0.2) N = 100 2.2 ms
#: vs 1.1 ms; ring N = 1000 4 ms vs 69 ms; Erdos-Renyi(0.2) N = 1000 257 ms vs 70 ms).
SPARSE_ADVANTAGE = 8


class LinkSet:
    """Static link structure of a topology: directed links (receiver, sender), their base
    weights W_ij, self-weights W_ii, and each receiver's slot."""

    def __init__(self, topology):
        graph = topology.graph
        n = graph.number_of_nodes()
        if sorted(graph.nodes()) != list(range(n)):
            raise ExecutionError("topology nodes must be 0..N-1")
        w = sp.csr_matrix(topology.weights, dtype=np.float64)
        if w.shape != (n, n):
            raise ExecutionError(f"mixing matrix has shape {w.shape}, expected ({n}, {n})")
        u, v = edge_arrays(graph)
        self.n = n
        self.u, self.v = u, v
        self.recv = np.concatenate([u, v])
        self.send = np.concatenate([v, u])
        self.edge = np.concatenate([np.arange(u.size), np.arange(u.size)])
        self.w = np.asarray(w[self.recv, self.send]).ravel() if u.size else np.zeros(0)
        self.diag = w.diagonal().astype(np.float64)
        off = w - sp.diags(self.diag)
        off.eliminate_zeros()
        covered = np.abs(self.w).sum()
        if not np.isclose(np.abs(off).sum(), covered, rtol=1e-9, atol=1e-12):
            raise ExecutionError("mixing matrix has weight outside the graph's edges")
        if abs(off - off.T).sum() > 1e-9 or not np.allclose(np.asarray(w.sum(axis=1)).ravel(),
                                                            1.0, atol=1e-9):
            raise ExecutionError("mixing matrix must be symmetric with rows summing to one")
        self.complete_uniform = bool(u.size == n * (n - 1) // 2
                                     and np.allclose(self.w, 1.0 / n)
                                     and np.allclose(self.diag, 1.0 / n))
        self.slot_of = topology.schedule.slot_of()
        self.index = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(self.recv, self.send))}
        self.weights = w
        self._base: Operator | None = None

    def operator(self, up: np.ndarray) -> "Operator":
        """W restricted to the up links, with the base self-weights (cached when all are up)."""
        if up.all():
            if self._base is None:
                self._base = Operator(self.n, self.recv, self.send, self.w, self.diag)
            return self._base
        return Operator(self.n, self.recv[up], self.send[up], self.w[up], self.diag)

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
    dense ``torch.mm`` or scipy CSR by density (see :data:`SPARSE_ADVANTAGE`)."""

    def __init__(self, n: int, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                 diag: np.ndarray | None = None):
        nnz = rows.size + (n if diag is not None else 0)
        self.dense = n <= DENSE_MAX_N and nnz * SPARSE_ADVANTAGE >= n * n
        if self.dense:
            m = np.zeros((n, n), dtype=np.float64)
            np.add.at(m, (rows, cols), vals)
            if diag is not None:
                m[np.arange(n), np.arange(n)] += diag
            self.matrix = torch.from_numpy(m.astype(np.float32))
        else:
            m = sp.coo_matrix((vals, (rows, cols)), shape=(n, n))
            if diag is not None:
                m = m + sp.diags(diag)
            self.matrix = sp.csr_matrix(m, dtype=np.float32)

    def apply(self, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """operator @ y for y of shape (N, m), float32; the dense form writes into ``out`` when
        given (the sparse form always returns a new tensor)."""
        if self.dense:
            return torch.mm(self.matrix, y) if out is None else torch.mm(self.matrix, y, out=out)
        return torch.from_numpy(np.ascontiguousarray(self.matrix @ y.contiguous().numpy()))


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
    return Operator(links.n, links.recv[up], links.send[up], links.w[up], diag).apply(x, out)


def _received_noise_rows(channel: Channel, power_per_coord: np.ndarray, g_min: np.ndarray,
                         n_tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(n_tx > 0)
    sigma = channel.noise_std(power_per_coord, g_min)
    return rows, sigma


class DSGD:
    """D-SGD: average the half-step models with W^t (see module docstring)."""

    name = "dsgd"

    def __init__(self, n: int, d: int):
        self.n, self.d = n, d

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    scratch: torch.Tensor | None = None, **_: object):
        up, n_tx, g_min = links.receiver_stats(rl)
        norms = (torch.linalg.vector_norm(x, dim=1).double() ** 2).numpy() if channel.noisy \
            else None
        mixed = dsgd_mix(x, links, up, out=scratch)
        spare = x                       # the half-step models are no longer needed
        if channel.noisy:
            power = np.zeros(self.n)
            np.maximum.at(power, links.recv[up], links.w[up] ** 2 * norms[links.send[up]])
            rows, sigma = _received_noise_rows(channel, power / self.d, g_min, n_tx)
            if rows.size:
                noise = torch.randn(rows.size, self.d, generator=channel.gen,
                                    out=spare[:rows.size])
                noise.mul_(torch.from_numpy(sigma[rows]).float().unsqueeze(1))
                if rows.size == self.n:
                    mixed.add_(noise)
                else:
                    mixed.index_add_(0, torch.from_numpy(rows), noise)
        k_recv = np.full(self.n, self.d)
        n_links = int(up.sum())
        return k_recv, n_tx, np.full(n_links, self.d), np.zeros(n_links), mixed

    def state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        return None

    def rewire(self, links: LinkSet) -> None:
        return None


class Choco:
    """CHOCO-SGD with over-the-air aggregates and per-link backlog (see module docstring)."""

    name = "choco"

    def __init__(self, n: int, d: int, k: int, mask: str, gamma: float, x0: torch.Tensor):
        self.n, self.d, self.k, self.mask, self.gamma = n, d, k, mask, float(gamma)
        self.xhat = x0.unsqueeze(0).repeat(n, 1)
        self.s = self.xhat.clone()
        self.pending: dict[tuple[int, int], torch.Tensor] = {}
        self._common: torch.Tensor | None = None    # this round's common mask as a bool vector

    @staticmethod
    def _row(q: Sparse, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (q.indices if q.common else q.indices[j]), q.values[j]

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator, scratch: torch.Tensor | None = None,
                    **_: object):
        everyone = bool(rl.active.all())
        active = torch.from_numpy(rl.active)
        indices = common_mask(self.d, self.k, train_gen) if self.mask == "common_randk" else None
        q = compress(torch.sub(x, self.xhat, out=scratch), self.k, self.mask, indices=indices)
        if not everyone:
            q.values[~active] = 0.0
        q.add_to(self.xhat)

        up, n_tx, g_min = links.receiver_stats(rl)
        op = links.operator(up)
        if q.common:
            self.s[:, q.indices] += op.apply(q.values)
        else:
            self.s += op.apply(q.dense())
        delivered = self._backlog(q, links, rl, up)

        # what each receiver listens on: the common mask, or the union of its transmitters'
        # top-k supports; widened by any backlog delivered to it
        support = None if q.common else q.support_mask()
        union = None
        if support is not None:
            adjacency = Operator(self.n, links.recv[up], links.send[up], np.ones(int(up.sum())))
            union = adjacency.apply(support.float()) > 0
        k_recv = np.full(self.n, self.k) if union is None else union.sum(dim=1).numpy()
        lids = np.flatnonzero(up)
        nnz = np.full(lids.size, self.k, dtype=np.float64)
        idx_bits = np.zeros(lids.size) if q.common else nnz.copy()
        payload = links.w[lids] ** 2 * q.row_norms_sq().numpy()[links.send[lids]]
        widened: dict[int, torch.Tensor] = {}
        self._common = None
        self._common = self._mask_of(q, 0) if q.common and delivered else None
        if delivered:
            position = {int(lid): p for p, lid in enumerate(lids)}
            for r, items in delivered.items():
                listen = union[r].clone() if union is not None else self._mask_of(q, 0)
                for lid, owed in items:
                    idx, vals = self._row(q, int(links.send[lid]))
                    full = owed.clone()
                    full.index_add_(0, idx, vals)
                    sent = self._mask_of(q, int(links.send[lid])) | (owed != 0)
                    listen |= sent
                    p = position[lid]
                    nnz[p] = idx_bits[p] = float(sent.sum())
                    payload[p] = float(links.w[lid]) ** 2 * float((full.double() ** 2).sum())
                widened[r] = listen
                k_recv[r] = int(listen.sum())
        if channel.noisy:
            power = np.zeros(self.n)
            np.maximum.at(power, links.recv[lids], payload)
            sigma = channel.noise_std(power / np.maximum(k_recv, 1), g_min)
            self._add_noise(q, n_tx, sigma, union, widened, channel)

        delta = torch.sub(self.s, self.xhat, out=scratch)
        for (r, sender), owed in self.pending.items():
            delta[sender] += float(links.w[links.index[(r, sender)]]) * owed
        if everyone:
            x.add_(delta, alpha=self.gamma)
        else:
            x[active] += self.gamma * delta[active]
        return k_recv, n_tx, nnz, idx_bits, x

    def _mask_of(self, q: Sparse, j: int) -> torch.Tensor:
        if q.common and self._common is not None:
            return self._common.clone()
        mask = torch.zeros(self.d, dtype=torch.bool)
        mask[self._row(q, j)[0]] = True
        return mask

    def _backlog(self, q: Sparse, links: LinkSet, rl: RoundLinks,
                 up: np.ndarray) -> dict[int, list[tuple[int, torch.Tensor]]]:
        """Deliver what up links owe (into s), and store what down links miss this round."""
        delivered: dict[int, list[tuple[int, torch.Tensor]]] = {}
        if self.pending:
            for lid in np.flatnonzero(up):
                key = (int(links.recv[lid]), int(links.send[lid]))
                owed = self.pending.pop(key, None)
                if owed is not None:
                    self.s[key[0]] += float(links.w[lid]) * owed
                    delivered.setdefault(key[0], []).append((int(lid), owed))
        for lid in np.flatnonzero(~up & rl.active[links.send]):
            key = (int(links.recv[lid]), int(links.send[lid]))
            owed = self.pending.get(key)
            if owed is None:
                owed = self.pending[key] = torch.zeros(self.d)
            idx, vals = self._row(q, key[1])
            owed.index_add_(0, idx, vals)
        return delivered

    def _add_noise(self, q: Sparse, n_tx: np.ndarray, sigma: np.ndarray,
                   union: torch.Tensor | None, widened: dict[int, torch.Tensor],
                   channel: Channel) -> None:
        """Receiver noise on exactly the coordinates each receiver listened on."""
        receiving = n_tx > 0
        if union is not None:
            listen = union
            for r, mask in widened.items():
                listen[r] = mask
            listen[torch.from_numpy(~receiving)] = False
            noise = torch.zeros(self.n, self.d)
            noise[listen] = torch.randn(int(listen.sum()), generator=channel.gen)
            noise.mul_(torch.from_numpy(sigma).float().unsqueeze(1))
            self.s += noise
            return
        plain = receiving.copy()
        plain[list(widened)] = False
        rows = np.flatnonzero(plain)
        if rows.size:
            noise = torch.randn(rows.size, self.k, generator=channel.gen)
            noise.mul_(torch.from_numpy(sigma[rows]).float().unsqueeze(1))
            self.s[torch.from_numpy(rows).unsqueeze(1), q.indices.unsqueeze(0)] += noise
        for r in sorted(widened):
            mask = widened[r]
            self.s[r, mask] += float(sigma[r]) * torch.randn(int(mask.sum()),
                                                             generator=channel.gen)

    def rewire(self, links: LinkSet) -> None:
        """New W: the aggregates are re-synchronised (s = W' xhat) and the backlog cleared."""
        self.s = links.operator(np.ones(links.recv.size, dtype=bool)).apply(self.xhat)
        self.pending = {}

    def state(self) -> dict:
        keys = sorted(self.pending)
        return {
            "xhat": self.xhat, "s": self.s,
            "pending_keys": torch.tensor(keys, dtype=torch.int64).reshape(-1, 2),
            "pending_values": (torch.stack([self.pending[k] for k in keys]) if keys
                               else torch.zeros(0, self.d)),
        }

    def set_state(self, state: dict) -> None:
        self.xhat = state["xhat"].clone()
        self.s = state["s"].clone()
        keys = state["pending_keys"].tolist()
        self.pending = {(int(r), int(c)): state["pending_values"][i].clone()
                        for i, (r, c) in enumerate(keys)}


class PaperLiteral:
    """The paper's consensus update, literally (see module docstring): not an averaging rule."""

    name = "paper_literal"

    def __init__(self, n: int, d: int, k: int, mask: str, gamma: float, error_feedback: bool):
        self.n, self.d, self.k, self.mask, self.gamma = n, d, k, mask, float(gamma)
        self.ef = ErrorFeedback(n, d) if error_feedback else None

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator, x_prev: torch.Tensor, **_: object):
        active = torch.from_numpy(rl.active)
        indices = common_mask(self.d, self.k, train_gen) if self.mask == "common_randk" else None
        g = x_prev - x
        if self.ef is not None:
            u = self.ef.compress(g, self.k, self.mask, indices=indices, rows=active)
        else:
            u = compress(g, self.k, self.mask, indices=indices)
            u.values[~active] = 0.0
        up, n_tx, g_min = links.receiver_stats(rl)
        ones = np.ones(int(up.sum()))
        op = Operator(self.n, links.recv[up], links.send[up], ones)
        received = op.apply(u.values if u.common else u.dense())
        lids = np.flatnonzero(up)
        if u.common:
            k_recv = np.full(self.n, self.k)
            listen = None
        else:
            listen = op.apply(u.support_mask().float()) > 0
            k_recv = listen.sum(dim=1).numpy()
        if channel.noisy:
            norms = u.row_norms_sq().numpy()
            power = np.zeros(self.n)
            np.maximum.at(power, links.recv[lids], norms[links.send[lids]])
            rows, sigma = _received_noise_rows(channel, power / np.maximum(k_recv, 1), g_min,
                                               n_tx)
            sig = torch.from_numpy(sigma).float().unsqueeze(1)
            if u.common:
                noise = torch.zeros_like(received)
                noise[torch.from_numpy(rows)] = torch.randn(rows.size, self.k,
                                                            generator=channel.gen)
                received += noise * sig
            else:
                listen[torch.from_numpy(n_tx == 0)] = False
                noise = torch.zeros_like(received)
                noise[listen] = torch.randn(int(listen.sum()), generator=channel.gen)
                received += noise * sig
        step = torch.zeros_like(received)
        step[active] = self.gamma * received[active]
        if u.common:
            x[:, u.indices] += step
        else:
            x += step
        nnz = np.full(lids.size, self.k, dtype=np.float64)
        return k_recv, n_tx, nnz, (np.zeros(lids.size) if u.common else nnz.copy()), x

    def rewire(self, links: LinkSet) -> None:
        return None

    def state(self) -> dict:
        return {"ef": self.ef.memory} if self.ef is not None else {}

    def set_state(self, state: dict) -> None:
        if self.ef is not None:
            self.ef.memory = state["ef"].clone()


def round_traffic(result: tuple, links: LinkSet, d: int, tx_power_w: float,
                  bandwidth_hz: float) -> Traffic:
    """Traffic of one round from a rule's (k_recv, n_tx, link_nnz, link_index_bits, ...)."""
    k_recv, n_tx, nnz, idx_bits = result[:4]
    return traffic(np.asarray(k_recv), np.asarray(n_tx), links.slot_of, nnz, idx_bits, d,
                   tx_power_w, bandwidth_hz)
