"""Gradient tracking (GT-DSGD; DIGing, Nedic, Olshevsky & Shi 2017; Pu & Nedic 2021).

Each client keeps, besides its model x_i, a tracker y_i of the network's average gradient and
its last gradient g_i. One round:

    x^{t+1} = W^t (x^t - eta y^t)
    g^{t+1} = grad F_i(x_i^{t+1}; xi^{t+1})                  (one minibatch gradient)
    y^{t+1} = W^t (y^t + g^{t+1} - g^t),      y^0 = g^0 = grad F_i(x_i^0; xi^0)

so two d-vectors travel per round (x, then y). A doubly stochastic W^t preserves sums, hence
mean_i y_i^t = mean_i g_i^t every round: each client steps along an estimate of the *global*
gradient, and at a consensus fixed point the gradients of the f_i sum to zero — no
heterogeneity floor (D-SGD's error of order eta zeta / (1 - rho) on heterogeneous data).

Momentum (``RunConfig.momentum`` beta) is applied to the tracked direction, heavy-ball style
(Xin & Khan 2019): m_i <- beta m_i + y_i, x_i^t - eta m_i is what is mixed; beta = 0 is the
plain update above. The fixed point is unchanged (y -> 0 at the optimum, so m -> 0). One
gradient per round: ``local_steps`` must be 1 (:class:`~.engine.RunConfig` refuses more).

Transports: the ideal channel, and ``digital`` (each of the two vectors through its own
:class:`~.digital.DigitalGossip`; quantised gossip keeps the sum, so the invariant holds with
b < 32 too). Over the air it is refused: receiver noise on y enters the sum of the trackers
and y^{t+1} = W(y^t + ...) integrates it into a random walk (the same failure as CHOCO's
noise-accumulating aggregates). Dropped links move their weight to the self-weights (a
symmetric W^t: sums kept); an offline client neither computes a gradient nor mixes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..errors import ExecutionError
from .channel import Channel, RoundLinks
from .device import to_device
from .digital import DigitalGossip
from .gossip import Exchange, LinkSet, dsgd_mix

__all__ = ["GradientTracking", "OTA_REFUSAL"]

OTA_REFUSAL = (
    "gradient_tracking does not run over the air: receiver noise on the tracker y is summed "
    "into mean(y) and y <- W(y + g_new - g_old) integrates it into a random walk; use "
    "transport 'digital' (or the ideal channel)")

#: gradient(x, trainable) -> (gradients of the trainable rows of x, their losses) or
#: (None, None) when none trains
Gradient = Callable[[torch.Tensor, np.ndarray], "tuple[torch.Tensor | None, torch.Tensor | None]"]


class GradientTracking:
    """GT-DSGD on the stacked (N x d) models (module docstring)."""

    name = "gradient_tracking"

    def __init__(self, n: int, d: int, x0: torch.Tensor, transport: str = "ota",
                 bits: int = 32, gamma: float | None = None):
        self.n, self.d = n, d
        self.digital = transport == "digital"
        self.mix_x = DigitalGossip(n, d, bits, x0, gamma) if self.digital else None
        self.mix_y = (DigitalGossip(n, d, bits, torch.zeros_like(x0), gamma)
                      if self.digital else None)
        self.y: torch.Tensor | None = None
        self.g: torch.Tensor | None = None

    def _mix(self, gossip: DigitalGossip | None, v: torch.Tensor, links: LinkSet,
             rl: RoundLinks, channel: Channel) -> Exchange:
        if gossip is not None:
            return gossip.mix(v, links, rl, channel)
        if channel.noisy:
            raise ExecutionError(OTA_REFUSAL)
        up, n_tx, _ = links.receiver_stats(rl)
        n_links = int(up.sum())
        return Exchange(np.full(self.n, self.d), n_tx, np.full(n_links, self.d),
                        np.zeros(n_links), dsgd_mix(v, links, up))

    def _scatter(self, old: torch.Tensor, rows: np.ndarray, new: torch.Tensor) -> torch.Tensor:
        if rows.size == self.n:
            return new.clone()
        out = old.clone()
        out[to_device(rows, old.device)] = new
        return out

    def round(self, x: torch.Tensor, m: torch.Tensor, links: LinkSet, rl: RoundLinks,
              channel: Channel, gradient: Gradient, trainable: np.ndarray, lr: float,
              momentum: float) -> tuple[Exchange, torch.Tensor, float | None, float | None]:
        """One round on models ``x`` with momentum buffers ``m`` (updated in place): returns
        (the exchange of x, with y's in ``more``; the new models; the mean loss of the
        round's gradients, or None when none was computed; the first gradient's loss on the
        first round)."""
        rows = np.flatnonzero(trainable)
        first_loss = None
        if self.y is None:
            grads, losses = gradient(x, trainable)
            self.g = torch.zeros_like(x)
            if grads is not None:
                self.g = self._scatter(self.g, rows, grads)
                first_loss = float(losses.mean())
            self.y = self.g.clone()
        index = to_device(rows, x.device)
        if rows.size:
            if rows.size == self.n:
                m.mul_(momentum).add_(self.y)
            else:
                m[index] = m[index] * momentum + self.y[index]
        step = torch.zeros_like(x)
        if rows.size:
            step[index] = m[index]
        half = x - lr * step
        ex_x = self._mix(self.mix_x, half, links, rl, channel)
        x_new = ex_x.x
        grads, losses = gradient(x_new, trainable)
        g_new = self.g if grads is None else self._scatter(self.g, rows, grads)
        ex_y = self._mix(self.mix_y, self.y + g_new - self.g, links, rl, channel)
        self.y, self.g = ex_y.x, g_new
        loss = float(losses.mean()) if losses is not None else None
        exchange = Exchange(ex_x.k_recv, ex_x.n_tx, ex_x.link_nnz, ex_x.link_index_bits,
                            x_new, ex_x.link_bits, ex_x.link_send, ex_x.link_h2, (ex_y,))
        return exchange, x_new, loss, first_loss

    def rewire(self, links: LinkSet) -> None:
        for gossip in (self.mix_x, self.mix_y):
            if gossip is not None:
                gossip.rewire(links)

    def state(self) -> dict:
        if self.y is None:
            return {}
        out = {"y": self.y, "g": self.g}
        for key, gossip in (("x", self.mix_x), ("y", self.mix_y)):
            if gossip is not None:
                out.update({f"{key}_{k}": v for k, v in gossip.state().items()})
        return out

    def set_state(self, state: dict) -> None:
        if not state:
            self.y = self.g = None
            return
        self.y, self.g = state["y"].clone(), state["g"].clone()
        for key, gossip in (("x", self.mix_x), ("y", self.mix_y)):
            if gossip is not None:
                gossip.set_state({k[len(key) + 1:]: v for k, v in state.items()
                                  if k.startswith(f"{key}_")})
