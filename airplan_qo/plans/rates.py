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


@functools.lru_cache(maxsize=4096)
def inverse_rate(links: float, snr_db: float, g_th: float) -> float:
    """Expected channel uses per bit, E[1/R], of a packet sent at the rate of the worst of
    ``links`` active Rayleigh links (their minimum gain is ``g_th + Exp(1)/links``): a slot
    lasts as long as its slowest transmitter's packet, and the slowest of several transmitters
    is the one with the worst of all their links. E[1/R] exceeds 1/E[R] (Jensen): a packet's
    duration follows the rate it meets, not the mean rate."""
    snr = 10 ** (snr_db / 10.0)
    x, w = _laguerre()
    return float(w @ (1.0 / np.log2(1.0 + snr * (g_th + x / max(float(links), 1.0)))))


def resend_multiple(bits: int, delivered: float, links: float = 1.0) -> float:
    """How many b-bit increments a digital packet carries, in expectation: a link that missed m
    packets (each round it delivers with probability ``delivered``) is caught up at its next
    delivery, ``min(m + 1, 32 / b)`` increments (never more than one exact float32 copy); a
    broadcast carries the largest catch-up of its ``links`` delivered links (the runtime's
    rule, runtime/digital.py). 1 for exact packets (b = 32) or links that always deliver."""
    cap = 32.0 / bits
    miss = 1.0 - float(delivered)
    if cap <= 1.0 or miss <= 0.0:
        return 1.0
    links = max(float(links), 1.0)
    total, j = 0.0, 1
    while j <= cap:
        total += 1.0 - (1.0 - miss ** (j - 1)) ** links
        j += 1
    frac = cap - math.floor(cap)
    if frac > 0:
        total += frac * (1.0 - (1.0 - miss ** math.floor(cap)) ** links)
    return total


def _catch_up_levels(bits: int, delivered: float, links: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The values a packet's catch-up multiple X takes (1, 2, ..., 32 / b) and their
    probabilities, X the largest ``min(m + 1, 32 / b)`` over ``links`` delivered links."""
    cap = 32.0 / bits
    miss = 1.0 - float(delivered)
    if cap <= 1.0 or miss <= 0.0:
        return np.array([1.0]), np.array([1.0])
    levels = [float(j) for j in range(1, math.floor(cap) + 1)]
    if cap > levels[-1]:
        levels.append(cap)
    at_least = np.array([1.0 - (1.0 - miss ** j) ** max(float(links), 1.0)
                         for j in range(len(levels))])        # P(X >= levels[j])
    return np.array(levels), at_least - np.append(at_least[1:], 0.0)


@functools.lru_cache(maxsize=4096)
def slot_time(transmitters: float, links: float, bits: int, delivered: float, snr_db: float,
              g_th: float, ideal: bool = False) -> float:
    """Expected channel uses per message bit of one slot of digital broadcasts: the slot lasts
    as long as its longest packet, E[max over its ``transmitters`` of X_j / R_j], X_j the
    packet's catch-up multiple (:func:`resend_multiple` over the transmitter's ``links``
    delivered links, each delivering with probability ``delivered`` when it sends) and R_j the
    rate of its worst link (``g_th + Exp(1)/links`` above the threshold). Computed from the
    distribution of the maximum, ``P(T <= t) = (sum_x P(X = x) P(1/R <= t / x))^K``,
    integrated on a grid (deterministic)."""
    snr = 10 ** (snr_db / 10.0)
    k = max(float(transmitters), 1.0)
    g = max(float(links), 1.0)
    xs, px = _catch_up_levels(bits, delivered, g)
    if ideal:
        inv = 1.0 / math.log2(1.0 + snr)
        # T = max X_j / R: P(max X <= x) = P(X <= x)^K
        cdf = np.cumsum(px) ** k
        return float(inv * (xs[0] + np.sum(np.diff(xs) * (1.0 - cdf[:-1]))))
    worst = 1.0 / math.log2(1.0 + snr * g_th)        # the inverse rate at the threshold
    t = np.linspace(0.0, xs[-1] * worst, 2001)[1:]

    def inv_rate_cdf(u: np.ndarray) -> np.ndarray:    # P(1/R <= u)
        with np.errstate(over="ignore"):              # 2^(1/u) = inf: that rate never occurs
            need = (np.exp2(1.0 / u) - 1.0) / snr - g_th
        return np.exp(-g * np.maximum(need, 0.0))

    one = sum(p * inv_rate_cdf(t / x) for x, p in zip(xs, px))
    survival = 1.0 - np.clip(one, 0.0, 1.0) ** k
    return float(np.trapezoid(survival, t) if hasattr(np, "trapezoid")
                 else np.trapz(survival, t))


def channel_rate(kind: str, receivers: int, snr_db: float, g_th: float,
                 dropout: float = 0.0) -> float:
    """:func:`broadcast_rate` for a channel model (``ideal``: no fading, every link up)."""
    if kind == "ideal":
        return ideal_rate(snr_db)
    return broadcast_rate(int(receivers), float(snr_db), float(g_th),
                          math.exp(-g_th) * (1.0 - dropout))


__all__ = ["QUADRATURE_NODES", "broadcast_rate", "channel_rate", "ideal_rate", "inverse_rate",
           "resend_multiple", "slot_time"]
