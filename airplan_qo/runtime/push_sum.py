"""Push-sum gossip: Stochastic Gradient Push (SGP; Assran, Loizou, Ballas & Rabbat, ICML 2019).

Each client keeps a numerator x_i and a weight w_i (1 at the start) and trains the de-biased
model z_i = x_i / w_i, which is what it evaluates and what the engine stores. One round:

    x_i <- sum_j P_ij (x_j - eta grad F_j(z_j)),    w_i <- sum_j P_ij w_j,    z_i = x_i / w_i

with P column-stochastic: sender j splits its mass equally over itself and its out-neighbours,
1 / (outdeg_j + 1) each (outdeg over the round's links; on an undirected graph the degree).
The weights are the *sender's*: a receiver only sums what arrives, so no receiver needs to know
its in-degree and the graph may be directed or unbalanced (a symmetric, doubly stochastic W is
not needed). Column sums of one keep sum_i x_i and sum_i w_i, so the de-biased z reach the
exact average where receive-side averaging (each receiver weighting 1 / (indeg_i + 1)) reaches
a stationary-distribution-weighted one.

The engine applies the local step to z: x_i - eta m_i with z_i = x_i / w_i is
z_i - (eta / w_i) m_i, so each client's learning rate is divided by its weight
(:meth:`PushSum.lr_scale`; momentum m_i <- beta m_i + grad F_i(z_i) as for every rule). This is
the paper's update; applying the plain step to z instead (as the reference code's optimizer
does) would make the fixed point the w-weighted optimum.

A packet lost to truncation (or an offline end) stays with its sender: j adds the share it
could not deliver to its own, which keeps P column-stochastic (the sender knows its channel,
as truncation needs CSI at the transmitter). Over the air a receiver gets
sum_j P_ij x_j + n_i on d coordinates and sum_j P_ij w_j on ``WEIGHT_REPEATS`` more (each
sender repeats its weight share so the receiver can average the repetitions: noise / sqrt(r)),
with the channel's noise level; the weight is then kept above ``WEIGHT_FLOOR`` so z stays
finite. The noise breaks the sums' invariance in the realisation, not in expectation.
Digital transport: exact float32 packets only (d + 1 values per link).
"""

from __future__ import annotations

import numpy as np
import torch

from ..plans.operators import WEIGHT_REPEATS
from .channel import Channel, RoundLinks
from .device import to_device
from .gossip import Exchange, LinkSet, Operator

__all__ = ["PushSum", "push_sum_weights", "receive_side_weights", "sender_counts"]

#: Smallest weight a receiver keeps after a noisy reception.
WEIGHT_FLOOR = 0.05


def push_sum_weights(n: int, recv: np.ndarray, send: np.ndarray, delivered: np.ndarray,
                     counts: tuple[np.ndarray, np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The column-stochastic P of one round: (receivers, senders, P_ij) of the delivered links
    and the diagonal P_jj. Sender j's share is 1 / (outdeg_j + 1) over its links (delivered or
    not); what it could not deliver stays on its diagonal. ``counts``: each sender's links and
    lost links (:func:`sender_counts`) where ``recv``/``send`` are only some of its links."""
    if counts is None:
        counts = (np.bincount(send, minlength=n), np.bincount(send[~delivered], minlength=n))
    outdeg = counts[0].astype(np.float64)
    share = 1.0 / (outdeg + 1.0)
    lost = counts[1].astype(np.float64)
    diag = share * (1.0 + lost)
    ok = np.flatnonzero(delivered)
    return recv[ok], send[ok], share[send[ok]], diag


def sender_counts(links: LinkSet, rl: RoundLinks) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row of the models, its links as a sender and those lost this round, counted over
    every link where ``links`` is a rank's share of them (a run split by rows,
    :class:`~.row_split.LocalLinks`: ``whole`` and ``held``); None for a whole link set."""
    whole = getattr(links, "whole", None)
    if whole is None:
        return None
    delivered = whole.up(rl)
    held = links.held
    return (np.bincount(whole.send, minlength=whole.n)[held],
            np.bincount(whole.send[~delivered], minlength=whole.n)[held])


def receive_side_weights(n: int, recv: np.ndarray, send: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row-stochastic receive-side averaging, each receiver weighting itself and its
    in-neighbours 1 / (indeg_i + 1) (what plain averaging gossip does on a directed graph):
    (receivers, senders, weights, diagonal)."""
    indeg = np.bincount(recv, minlength=n).astype(np.float64)
    w = 1.0 / (indeg + 1.0)
    return recv, send, w[recv], w


class PushSum:
    """SGP on the stacked de-biased models (module docstring); state: the weights w (N,)."""

    name = "push_sum"

    def __init__(self, n: int, d: int, transport: str = "ota",
                 device: torch.device | str | None = None):
        self.n, self.d = n, d
        self.digital = transport == "digital"
        self.w = torch.ones(n, dtype=torch.float64, device=device)

    def lr_scale(self) -> torch.Tensor:
        """(N, 1) factor of each client's learning rate on z: 1 / w_i."""
        return (1.0 / self.w).float().unsqueeze(1)

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    scratch: torch.Tensor | None = None, **_: object) -> Exchange:
        device = x.device
        up = links.up(rl)
        recv, send, vals, diag = push_sum_weights(self.n, links.recv, links.send, up,
                                                  sender_counts(links, rl))
        w_col = self.w.to(device, x.dtype).unsqueeze(1)
        num = x * w_col                                         # x_j = w_j z_j
        op = Operator(self.n, recv, send, vals, diag, device=links.device,
                      columns=getattr(links, "columns", None))
        new_x = op.apply(num)
        new_w = torch.from_numpy(diag * self.w.cpu().numpy()).to(self.w.device)
        new_w.index_add_(0, to_device(recv, self.w.device),
                         torch.from_numpy(vals).to(self.w.device) * self.w[to_device(
                             send, self.w.device)])
        n_tx = np.bincount(recv, minlength=self.n)
        noisy = channel.noisy and not self.digital
        if noisy and recv.size:
            power = np.zeros(self.n)
            norms = (torch.linalg.vector_norm(num, dim=1).double() ** 2).cpu().numpy()
            np.maximum.at(power, recv, vals ** 2 * norms[send])
            g_min = np.full(self.n, np.inf)
            np.minimum.at(g_min, recv, rl.h2[links.edge[up]])
            sigma = channel.noise_std(power / self.d, g_min)
            rows = np.flatnonzero(n_tx > 0)
            noise = channel.randn(rows.size, self.d + WEIGHT_REPEATS)
            noise.mul_(to_device(sigma[rows], device).float().unsqueeze(1))
            new_x.index_add_(0, to_device(rows, device), noise[:, :self.d].to(x.dtype))
            w_noise = noise[:, self.d:].double().mean(dim=1).to(self.w.device)
            new_w.index_add_(0, to_device(rows, self.w.device), w_noise)
            new_w.clamp_(min=WEIGHT_FLOOR)
        self.w = new_w
        z = new_x.div_(new_w.to(device, x.dtype).unsqueeze(1))
        extra = 1 if self.digital or not channel.noisy else WEIGHT_REPEATS
        k_recv = np.full(self.n, self.d + extra)
        nnz = np.full(recv.size, self.d + 1)
        if self.digital:
            h2 = rl.h2[links.edge[up]]
            return Exchange(k_recv, n_tx, nnz, np.zeros(recv.size), z,
                            link_bits=32.0 * nnz, link_send=send, link_h2=h2)
        return Exchange(k_recv, n_tx, nnz, np.zeros(recv.size), z)

    def rewire(self, links: LinkSet) -> None:
        return None

    def state(self) -> dict:
        return {"w": self.w}

    def set_state(self, state: dict) -> None:
        self.w = state["w"].clone()
