"""The digital (packet) transport: gossip with b-bit quantised packets and no channel noise.

A transport, not an algorithm: D-SGD (``RunConfig(transport="digital", bits=b)``), gradient
tracking and push-sum mix through it. The round's link draws are the channel's, as over the
air (:meth:`~.channel.Channel.draw`): a truncated link (|h|^2 < g_th) or an offline end loses
its packet, and its weight moves to the endpoints' self-weights as in D-SGD; a delivered
packet arrives intact (no receiver noise), its only error the quantisation.

``bits = 32``: the packet is the float32 payload itself; the round is exactly D-SGD's ideal
mixing ``sum_j W^t_ij x_j`` (:func:`~.gossip.dsgd_mix`, the same code), so on the ideal channel
a run is bit-identical to ideal-channel D-SGD.

``bits < 32``: quantising the models themselves would leave a quantisation error of the
models' size every round, which never shrinks. The packets carry differences against a
reference every receiver shares instead, CHOCO-style (Koloskova et al. 2019): client j keeps a
public copy xhat_j (all start at the shared initial model) and broadcasts
q_j = Q_b(x_j^{t+1/2} - xhat_j) (:func:`~.compression.quantize`, unbiased, b bits per
coordinate plus one float32 scale); everyone who hears it sets xhat_j += q_j; then
x_i <- x_i^{t+1/2} + gamma (sum_j W^t_ij xhat_j - xhat_i). As the models converge, x - xhat
shrinks and so does the quantisation error. A receiver that missed packets of j (a truncated
link) does not use its stale copy: that link's weight goes to the self-weight for the round, and
at the link's next delivery the sender also sends what the receiver missed (the missed
increments, or one float32 copy of xhat_j when that is shorter: min((m + 1) b, 32) bits per
coordinate after m missed packets), so every copy in use equals xhat_j. An offline client sends
nothing and keeps its model. With a symmetric W^t the mean of the models is preserved.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ExecutionError
from .channel import Channel, RoundLinks
from .compression import EXACT_BITS, quantization_omega, quantize
from .device import to_device
from .gossip import Exchange, LinkSet, dsgd_mix

__all__ = ["TRANSPORTS", "Digital", "DigitalGossip", "default_digital_gamma"]

#: How gossip travels (``RunConfig.transport``): ``ota`` (over-the-air superposition, as the
#: channel dictates) or ``digital`` (packets of ``bits`` bits per coordinate, this module).
TRANSPORTS = ("ota", "digital")

#: Bits of the per-message scale of a quantised packet (one float32).
SCALE_BITS = 32


def default_digital_gamma(bits: int, d: int) -> float:
    """The consensus step of quantised digital gossip when none is given: 1 for exact packets
    and fine quantisers, 1 / (1 + omega) in general, omega the quantiser's variance bound
    (:func:`~.compression.quantization_omega`), CHOCO's step for a compressor of quality
    delta = 1 / (1 + omega)."""
    return 1.0 / (1.0 + quantization_omega(bits, d))


class DigitalGossip:
    """One vector's gossip over the digital transport (module docstring): ``mix`` returns an
    :class:`~.gossip.Exchange` whose traffic is counted per packet."""

    def __init__(self, n: int, d: int, bits: int, x0: torch.Tensor | None = None,
                 gamma: float | None = None):
        if not 1 <= int(bits) <= EXACT_BITS:
            raise ExecutionError(f"bits must be in 1..{EXACT_BITS}, got {bits}")
        self.n, self.d, self.bits = n, d, int(bits)
        self.gamma = float(gamma) if gamma is not None else default_digital_gamma(bits, d)
        self.ref = None if x0 is None else x0.detach().clone()
        self.xhat: torch.Tensor | None = None
        #: per directed link, packets its receiver missed since the last delivery
        self.missed: np.ndarray | None = None
        #: Called as ``share(xhat, None)`` right after the public copies' update of a round
        #: (quantised packets), before any receiver uses them: a run split over processes
        #: (:mod:`.distributed`) brings there the copies its receivers mix with. None in one
        #: process.
        self.share = None

    @property
    def exact(self) -> bool:
        return self.bits >= EXACT_BITS

    def _start(self, x: torch.Tensor, links: LinkSet) -> None:
        if self.xhat is None:
            base = self.ref if self.ref is not None else torch.zeros(self.d, device=x.device)
            self.xhat = base.to(x.device).unsqueeze(0).repeat(self.n, 1)
        if self.missed is None or self.missed.size != links.recv.size:
            self.missed = np.zeros(links.recv.size, dtype=np.int64)

    def mix(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
            scratch: torch.Tensor | None = None) -> Exchange:
        up, n_tx, _ = links.receiver_stats(rl)
        lids = np.flatnonzero(up)
        send = links.send[lids]
        h2 = rl.h2[links.edge[lids]]
        if self.exact:
            mixed = dsgd_mix(x, links, up, out=scratch)
            bits = np.full(lids.size, float(EXACT_BITS * self.d))
            return Exchange(np.full(self.n, self.d), n_tx, np.full(lids.size, self.d),
                            np.zeros(lids.size), mixed, link_bits=bits, link_send=send,
                            link_h2=h2)
        self._start(x, links)
        active = to_device(rl.active, x.device)
        q = quantize(x - self.xhat, self.bits, channel.gen, channel.uniform)
        if not rl.active.all():
            q[~active] = 0.0
        self.xhat += q
        if self.share is not None:
            self.share(self.xhat, None)
        # Every copy in use equals xhat (missed packets are re-sent with the next delivery)
        s = dsgd_mix(self.xhat, links, up)
        mixed = torch.sub(s, self.xhat, out=scratch).mul_(self.gamma).add_(x)
        if not rl.active.all():
            off = ~active
            mixed[off] = x[off]
        per_coord = np.minimum((self.missed[lids] + 1) * self.bits, EXACT_BITS)
        bits = per_coord * float(self.d) + SCALE_BITS
        sender_on = rl.active[links.send]
        self.missed[~up & sender_on] += 1
        self.missed[up] = 0
        return Exchange(np.full(self.n, self.d), n_tx, np.full(lids.size, self.d),
                        np.zeros(lids.size), mixed, link_bits=bits, link_send=send, link_h2=h2)

    def rewire(self, links: LinkSet) -> None:
        """New links: the public copies stay (a new neighbour gets one float32 copy first)."""
        if self.missed is not None:
            self.missed = np.full(links.recv.size, EXACT_BITS, dtype=np.int64)

    def state(self) -> dict:
        if self.exact or self.xhat is None:
            return {}
        return {"xhat": self.xhat, "missed": torch.from_numpy(self.missed.copy())}

    def set_state(self, state: dict) -> None:
        if not state:
            self.xhat, self.missed = None, None
            return
        self.xhat = state["xhat"].clone()
        self.missed = state["missed"].cpu().numpy().copy()


class Digital:
    """D-SGD over the digital transport: the half-step models gossiped by one
    :class:`DigitalGossip` (the engine's rule for ``transport='digital'``)."""

    name = "dsgd"

    def __init__(self, n: int, d: int, bits: int, x0: torch.Tensor, gamma: float | None = None):
        self.gossip = DigitalGossip(n, d, bits, x0, gamma)

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    scratch: torch.Tensor | None = None, **_: object) -> Exchange:
        return self.gossip.mix(x, links, rl, channel, scratch)

    def rewire(self, links: LinkSet) -> None:
        self.gossip.rewire(links)

    def state(self) -> dict:
        return self.gossip.state()

    def set_state(self, state: dict) -> None:
        self.gossip.set_state(state)
