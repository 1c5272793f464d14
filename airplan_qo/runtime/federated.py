"""FedAvg and FedProx through a server (an access point every client reaches in one hop).

Each round every online client starts from the global model x^t (the downlink of the previous
round), runs ``local_steps`` steps of the engine's momentum SGD on its own data — FedProx adds
the proximal gradient mu (x_i - x^t) to every step (Li et al. 2020; mu = 0 is FedAvg, McMahan
et al. 2017) — and uploads its update u_i = x_i - x^t. The server forms

    x^{t+1} = x^t + sum_{i in S} (n_i / n_S) u_i,      n_S = sum_{i in S} n_i,

over the clients S whose upload arrived (online, with data, and a link not truncated:
full participation minus dropout and truncation), weighted by their sample counts n_i, and
broadcasts x^{t+1} to every client exactly (the downlink is a digital float32 broadcast).

Uplink transports:

- ``ota`` (over the air, one slot with all of S transmitting): each client pre-scales its
  update by n_i / n_S and inverts its channel, so the server receives the weighted sum plus
  Gaussian noise of variance max_i ||s_i||^2 / d / (2 SNR min_{i in S} |h_i|^2) per coordinate
  (the channel's formula, :meth:`~.channel.Channel.noise_std`); the update, not the model, is
  sent, since the server already knows x^t. On the ideal channel there is no noise.
- ``digital``: each client of S sends Q_b(u_i) (:func:`~.compression.quantize`, unbiased; b =
  32 exact) in its own slot (TDMA) at rate log2(1 + SNR |h_i|^2).

The fading draws are one per client (its link to the server), with the channel's truncation
and dropout. Traffic: the uplink (OTA: ceil(d / 2) channel uses in one slot; digital: the sum
over S of ceil(M / R_i), M = d b bits plus the scale, one slot each) plus the downlink (32 d
bits at the rate of the worst client of S, one slot).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .channel import Channel, RoundLinks, Traffic
from .compression import EXACT_BITS, quantize
from .device import to_device
from .digital import SCALE_BITS
from .gossip import Exchange

__all__ = ["FEDERATED", "Federated"]

#: The algorithms that train through a server.
FEDERATED = ("fedavg", "fedprox")


class Federated:
    """FedAvg / FedProx (module docstring). ``sizes``: each client's sample count n_i."""

    #: the engine keeps the round's starting models (x^t) for :meth:`communicate`
    needs_prev = True

    def __init__(self, name: str, n: int, d: int, sizes: np.ndarray, transport: str = "ota",
                 bits: int = EXACT_BITS, prox_mu: float = 0.0):
        self.name, self.n, self.d = name, n, d
        self.sizes = np.asarray(sizes, dtype=np.float64)
        self.transport, self.bits = transport, int(bits)
        self.prox_mu = float(prox_mu) if name == "fedprox" else 0.0

    def draw(self, channel: Channel, links=None) -> RoundLinks:
        """One fading draw per client (its link to the server), with dropout and truncation."""
        idx = np.arange(self.n)
        return channel.draw(self.n, idx, idx)

    def communicate(self, x: torch.Tensor, links, rl: RoundLinks, channel: Channel,
                    x_prev: torch.Tensor, scratch: torch.Tensor | None = None,
                    tx_power_w: float = 0.1, bandwidth_hz: float = 1e6,
                    **_: object) -> Exchange:
        device = x.device
        start = x_prev[0]
        arrived = rl.up & (self.sizes > 0)
        rows = np.flatnonzero(arrived)
        zeros = np.zeros(0)
        if not rows.size:
            x.copy_(x_prev)
            return Exchange(np.zeros(self.n), np.zeros(self.n), zeros, zeros, x,
                            traffic=Traffic(0.0, 0, 0.0, 0.0))
        weights = self.sizes[rows] / self.sizes[rows].sum()
        index = to_device(rows, device)
        update = x.index_select(0, index) - start
        if self.transport == "digital":
            update = quantize(update, self.bits, channel.gen)
        scaled = update * to_device(weights, device).float().unsqueeze(1)
        total = scaled.sum(dim=0)
        if self.transport == "ota" and channel.noisy:
            power = float((torch.linalg.vector_norm(scaled, dim=1).double() ** 2).max()) / self.d
            g_min = float(rl.h2[rows].min())
            sigma = float(channel.noise_std(np.array([power]), np.array([g_min]))[0])
            total += sigma * channel.randn(self.d)
        new = start + total
        x.copy_(new.unsqueeze(0).expand_as(x))
        cost = self._traffic(rows, rl, channel.snr, tx_power_w, bandwidth_hz)
        n_tx = np.zeros(self.n)
        return Exchange(np.zeros(self.n), n_tx, np.full(rows.size, self.d),
                        np.zeros(rows.size), x, traffic=cost)

    def _traffic(self, rows: np.ndarray, rl: RoundLinks, snr: float, tx_power_w: float,
                 bandwidth_hz: float) -> Traffic:
        per_use = tx_power_w / bandwidth_hz
        h2 = rl.h2[rows]
        if self.transport == "digital":
            message = self.d * self.bits + (SCALE_BITS if self.bits < EXACT_BITS else 0)
            uses = np.ceil(message / np.log2(1.0 + snr * h2))
            up = Traffic(float(uses.sum()), int(rows.size), per_use * float(uses.sum()),
                         float(message * rows.size))
        else:
            uses = math.ceil(self.d / 2)
            up = Traffic(float(uses), 1, per_use * uses * rows.size,
                         float(EXACT_BITS * self.d * rows.size))
        down_bits = EXACT_BITS * self.d
        down_uses = math.ceil(down_bits / math.log2(1.0 + snr * float(h2.min())))
        return up + Traffic(float(down_uses), 1, per_use * down_uses, float(down_bits))

    def rewire(self, links) -> None:
        return None

    def state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        return None
