"""Clique Averaging (Bellet, Kermarrec and Lavoie, 2022) over the air.

On a ``d_cliques`` topology with ``averaging='clique'`` every client replaces its local update
(its model after the round's local steps minus its model before them) by the mean of its
clique's updates before the gossip step, so that the update it applies is computed on its
clique's label mix (close to the global one) rather than on its own skewed labels. The paper
averages gradients at every step; averaging the round's update is the same with one local step
and costs one exchange per round, not one per step.

The exchange runs over the same channel as the gossip step and over the round's own link draw
(block fading: the clique's links are the topology's links, up or down as drawn for the round):
receiver i gets ``(u_i + sum_{j up} u_j) / (1 + #up)`` over its clique neighbours j whose link
is up and who trained this round, plus the OTA receiver noise of docs/runtime.md (transmitters
pre-scale by the weight, so the noise power is set by the strongest weighted update), and applies
the same James-Stein shrinkage toward its own update as the gossip step. The payload is the full
update (d coordinates, uncompressed, whatever the plan's k).

Slots: each client receives its clique-mates' updates once, in a slot where it hears no
transmitter of another clique (:func:`~..plans.cliques.exchange_slots`, the gossip schedule's
rule); the ends of each inter-clique edge share a slot, so the exchange takes as many slots as
the largest clique on the ring and small-world joins. A single clique (the complete graph) needs no exchange: its gossip step already averages
every update.
"""

from __future__ import annotations

import numpy as np
import torch

from ..plans.cliques import decode_cliques, exchange_slots
from ..plans.plan import averaged_cliques
from .channel import Channel, RoundLinks, Traffic, dbm_to_watt, traffic
from .device import to_device
from .gossip import LinkSet, Operator, shrink


def clique_averaging_enabled(topology) -> bool:
    """Whether a built topology asks for Clique Averaging (d_cliques with more than one clique)."""
    return bool(averaged_cliques(topology.spec))


class CliqueAveraging:
    """The clique exchange of one topology: its links, weights rule and slot of each receiver."""

    def __init__(self, topology, links: LinkSet):
        n = links.n
        groups = decode_cliques(topology.spec.param_dict["cliques"], n)
        clique_of = np.empty(n, dtype=np.int64)
        for c, members in enumerate(groups):
            clique_of[members] = c
        self.n = n
        self.links = links
        #: directed links of the topology that join two members of one clique
        self.intra = clique_of[links.recv] == clique_of[links.send]
        #: receiver slots: a schedule valid under the gossip's rule (plans.cliques)
        self.slot_of = exchange_slots(topology.graph, groups)

    def apply(self, x: torch.Tensor, before: torch.Tensor, rl: RoundLinks, channel: Channel,
              trained: np.ndarray, tx_power_dbm: float, bandwidth_hz: float,
              shrinkage: bool = True) -> Traffic:
        """Replace each trained client's update ``x - before`` (in ``x``) by its clique's mean
        update as received over the air; returns the exchange's traffic."""
        lk = self.links
        d = x.shape[1]
        up = self.intra & lk.up(rl) & trained[lk.send] & trained[lk.recv]
        recv, send = lk.recv[up], lk.send[up]
        n_tx = np.bincount(recv, minlength=self.n)
        weight = 1.0 / (1.0 + n_tx)
        delta = x - before
        device = x.device
        mean = Operator(self.n, recv, send, weight[recv], weight,
                        device=lk.device).apply(delta)
        if channel.noisy and recv.size:
            g_min = np.full(self.n, np.inf)
            np.minimum.at(g_min, recv, rl.h2[lk.edge[up]])
            norms = (torch.linalg.vector_norm(delta, dim=1).double() ** 2).cpu().numpy()
            power = np.zeros(self.n)
            np.maximum.at(power, recv, weight[recv] ** 2 * norms[send])
            sigma = channel.noise_std(power / d, g_min)
            rows = np.flatnonzero(n_tx > 0)
            noise = channel.randn(rows.size, d)
            noise.mul_(to_device(sigma[rows], device).float().unsqueeze(1))
            mean.index_add_(0, to_device(rows, device), noise)
            if shrinkage:
                mean = shrink(mean, delta, sigma)
        rows = to_device(np.flatnonzero(trained), device)
        x[rows] = before[rows] + mean[rows]
        k_recv = np.full(self.n, d)
        return traffic(k_recv, n_tx, self.slot_of, np.full(recv.size, d), np.zeros(recv.size),
                       d, dbm_to_watt(tx_power_dbm), bandwidth_hz)


__all__ = ["CliqueAveraging", "clique_averaging_enabled"]
