"""Digital link rates: the bits per channel use a packet can be sent at.

A digital transmitter broadcasts one packet to all its active receivers, so it must use the rate
its worst active receiver supports (transmitter-side channel knowledge, Shannon rate):

    R = log2(1 + SNR * min over active receivers |h|^2)

Links are Rayleigh faded (|h|^2 ~ Exp(1)) and truncated by the same rule as over-the-air
aggregation: a link with |h|^2 < g_th is not used (its packet is lost). Given m active
receivers, the minimum of m gains conditioned on exceeding g_th is ``g_th + Exp(1)/m``
(memorylessness), so the expected rate is a one-dimensional integral against ``e^{-x}``,
computed deterministically by Gauss-Laguerre quadrature and averaged over the binomial number of
active receivers (at least one: a transmitter with none sends nothing). On the ideal channel
|h|^2 = 1 and R = log2(1 + SNR).
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Gauss-Laguerre nodes of the rate integral (exact to ~1e-10 for these smooth integrands).
QUADRATURE_NODES = 64


@functools.lru_cache(maxsize=1)
def _laguerre() -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.laguerre.laggauss(QUADRATURE_NODES)
    return x, w


def ideal_rate(snr_db: float) -> float:
    """Bits per channel use without fading: log2(1 + SNR)."""
    return math.log2(1.0 + 10 ** (snr_db / 10.0))


@functools.lru_cache(maxsize=4096)
def broadcast_rate(receivers: int, snr_db: float, g_th: float, active: float = -1.0) -> float:
    """Expected rate (bits per channel use) of a broadcast to ``receivers`` Rayleigh-faded
    receivers, each active (not truncated, online) with probability ``active`` (default
    ``exp(-g_th)``), at the rate of the worst active one; cached per (receivers, SNR, g_th,
    active)."""
    receivers = max(int(receivers), 1)
    a = math.exp(-g_th) if active < 0 else float(active)
    snr = 10 ** (snr_db / 10.0)
    x, w = _laguerre()
    if a >= 1.0 and g_th <= 0:
        m = np.array([receivers], dtype=float)
        pm = np.array([1.0])
    else:
        m = np.arange(1, receivers + 1, dtype=float)
        # binomial probabilities of m active receivers, in logs (large degrees)
        logp = (np.array([math.lgamma(receivers + 1) - math.lgamma(k + 1)
                          - math.lgamma(receivers - k + 1) for k in m])
                + m * math.log(max(a, 1e-300)) + (receivers - m) * math.log(max(1 - a, 1e-300)))
        pm = np.exp(logp - logp.max())
        pm /= pm.sum()
    rates = np.log2(1.0 + snr * (g_th + x[None, :] / m[:, None])) @ w
    return float(pm @ rates)


def channel_rate(kind: str, receivers: int, snr_db: float, g_th: float,
                 dropout: float = 0.0) -> float:
    """:func:`broadcast_rate` for a channel model (``ideal``: no fading, every link up)."""
    if kind == "ideal":
        return ideal_rate(snr_db)
    return broadcast_rate(int(receivers), float(snr_db), float(g_th),
                          math.exp(-g_th) * (1.0 - dropout))


__all__ = ["QUADRATURE_NODES", "broadcast_rate", "channel_rate", "ideal_rate"]
