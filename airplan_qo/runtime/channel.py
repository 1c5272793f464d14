"""Channel models (``ideal``, ``ota``), client dropout, and the per-round traffic accounting.

Per round (block fading, reciprocal channels), for every undirected edge {i, j}:

- ``ota``: |h_ij|^2 ~ Exp(1) (Rayleigh, h ~ CN(0, 1)); the link is *truncated* (both directions
  silent this round) when |h_ij|^2 < g_th, which happens with probability 1 - exp(-g_th).
  Truncation is what keeps the noise finite: channel inversion divides by h.
- ``ideal``: no fading, no truncation, no noise.
- Client dropout (both channels): each client is offline with probability ``dropout``; an
  offline client neither trains nor transmits nor receives, so all its links are down.

A receiver i gets the sum of its active neighbours' payloads s_ij (over k_i real coordinates, in
ceil(k_i / 2) complex channel uses: two reals per complex symbol). All transmitters scale by a
common factor so the sum adds coherently and no transmitter exceeds its power, which leaves
real Gaussian noise of variance, per received coordinate,

    sigma_i^2 = max_j (||s_ij||^2 / k_i) / (2 * SNR * min_{j active} |h_ij|^2),

with SNR = 10^(snr_db / 10) (transmit power over receiver noise power).

Accounting per round, from what is really sent: receivers of one slot of the schedule listen in
parallel, so a slot lasts max over its receivers of ceil(k_i / 2) channel uses and the round's
channel uses are the sum over slots; ``slots`` counts the slots that carried anything; energy is
P_tx * (1 / bandwidth) * (symbols sent by all transmitters); ``bits`` is what a digital link
would carry instead (:func:`~..plans.plan.link_bits`, the planner's count too): 32 bits per
transmitted coordinate, plus ceil(log2 d) index bits per
coordinate whose position the receiver cannot derive from a shared seed.

The ``digital`` transport (:mod:`.digital`) uses the same draws (a truncated link loses its
packet) but no receiver noise; its cost is counted from rates (:func:`digital_traffic`):
transmitter j broadcasts its message of M_j bits at R_j = log2(1 + SNR min_i |h_ij|^2)
bits per channel use over its delivered links (CSI at the transmitter, the truncation rule
keeping |h|^2 >= g_th; |h|^2 = 1 on the ideal channel) in the slot of the same G^2 colouring,
so a slot lasts max_j ceil(M_j / R_j) channel uses and ``bits`` counts b bits per coordinate.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import torch

from ..errors import ValidationError
from ..plans.channel_config import CHANNELS, ChannelConfig
from ..plans.plan import link_bits

__all__ = [
    "CHANNELS",
    "Channel",
    "RoundLinks",
    "Traffic",
    "dbm_to_watt",
    "digital_traffic",
    "effective_noise_variance",
    "noise_std",
    "snr_linear",
    "traffic",
    "truncation_probability",
]



def snr_linear(snr_db: float) -> float:
    return float(10.0 ** (float(snr_db) / 10.0))


def dbm_to_watt(dbm: float) -> float:
    return float(10.0 ** (float(dbm) / 10.0) / 1000.0)


def truncation_probability(g_th: float) -> float:
    """P(|h|^2 < g_th) for |h|^2 ~ Exp(1): the per-link, per-round drop probability."""
    return float(-math.expm1(-float(g_th)))


def effective_noise_variance(max_power_per_coord: float | np.ndarray, snr: float,
                             g_min: float | np.ndarray) -> float | np.ndarray:
    """sigma_eff^2 = max_j(||s_j||^2 / k) / (2 * SNR * min_j |h_j|^2), per real coordinate."""
    return max_power_per_coord / (2.0 * snr * g_min)


@attrs.frozen
class RoundLinks:
    """One round's link state: which clients are online and which undirected edges are up."""

    active: np.ndarray          # (N,) bool
    up: np.ndarray              # (E,) bool: both ends online and not truncated
    h2: np.ndarray              # (E,) |h|^2 (ones for the ideal channel)
    eligible: int               # edges with both ends online
    truncated: int              # of those, dropped by truncation
    #: whether every client of the round is online, where ``active`` covers only some of them
    #: (a rank's rows in a run split by rows); None: ``active`` covers every client
    whole_active: bool | None = None

    @property
    def all_active(self) -> bool:
        """Whether every client of the round is online."""
        return bool(self.active.all()) if self.whole_active is None else self.whole_active

    @property
    def link_drop_rate(self) -> float:
        return self.truncated / self.eligible if self.eligible else 0.0

    @property
    def dropout_rate(self) -> float:
        return float(1.0 - self.active.mean()) if self.active.size else 0.0


class Channel:
    """Draws dropout and fading per round and the receivers' noise.

    Two generators, both seeded from ``seed``: a numpy Generator for the per-node and per-edge
    draws, a torch Generator for the noise tensors. The dropout and fading draws have a size set
    by the round's graph alone (N clients and its edges; the same every round of a static
    topology), so which links are up never depends on the model or the data; the noise draws
    cover exactly the coordinates received.

    The numpy draws stay on the CPU. The noise generator lives on ``device`` (default the CPU),
    seeded the same way, so the noise is drawn where it is added: drawing N x d Gaussians on the
    CPU and copying them over would cost more than a whole GPU round (72 ms for 100 x 95k on one
    core). A CUDA generator draws other numbers than the CPU one from the same seed.
    """

    def __init__(self, kind: str, *, snr_db: float, g_th: float, dropout: float, seed: int,
                 device: "torch.device | str | None" = None):
        if kind not in CHANNELS:
            raise ValidationError(f"channel must be one of {', '.join(CHANNELS)}, got {kind!r}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValidationError(f"dropout must be in [0, 1), got {dropout}")
        if kind == "ota":
            if not float(g_th) > 0.0 or not math.isfinite(float(g_th)):
                raise ValidationError(
                    f"g_th must be a positive number for the ota channel, got {g_th} "
                    f"(without truncation the inverted noise has infinite mean)"
                )
            if not math.isfinite(float(snr_db)):
                raise ValidationError(f"snr_db must be finite, got {snr_db}")
        self.kind = kind
        self.snr = snr_linear(snr_db)
        self.g_th = float(g_th)
        self.dropout = float(dropout)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator(device=torch.device(device or "cpu")).manual_seed(int(seed))

    @classmethod
    def of(cls, config: ChannelConfig, *, seed: int,
           device: "torch.device | str | None" = None) -> "Channel":
        """The simulated channel of a run's settings."""
        return cls(config.kind, snr_db=config.snr_db, g_th=config.g_th, dropout=config.dropout,
                   seed=seed, device=device)

    @property
    def device(self) -> torch.device:
        """Where the noise is drawn (the run's device)."""
        return self.gen.device

    def randn(self, *size: int) -> torch.Tensor:
        """Standard Gaussian noise of ``size`` from the noise generator, on its device."""
        return torch.randn(*size, generator=self.gen, device=self.gen.device)

    def uniform(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Uniforms in [0, 1) of ``shape`` from the noise generator, on its device (the
        quantiser's; a rank of a run split by rows draws its rows of them instead,
        :class:`~.row_split.HaloNoise`)."""
        return torch.rand(shape, generator=self.gen, device=self.gen.device)

    @property
    def noisy(self) -> bool:
        return self.kind == "ota"

    def draw(self, n: int, u: np.ndarray, v: np.ndarray) -> RoundLinks:
        """Online clients and up edges for one round (edges given as arrays u, v)."""
        active = self.rng.random(n) >= self.dropout
        both = active[u] & active[v]
        if self.kind == "ota":
            h2 = self.rng.exponential(1.0, size=u.size)
            faded = h2 >= self.g_th
        else:
            h2 = np.ones(u.size)
            faded = np.ones(u.size, dtype=bool)
        up = both & faded
        return RoundLinks(active, up, h2, int(both.sum()), int((both & ~faded).sum()))

    def noise_std(self, power_per_coord: np.ndarray, g_min: np.ndarray) -> np.ndarray:
        """sigma_i per receiver from max_j ||s_ij||^2 / k_i and min_j |h_ij|^2 (0 if silent)."""
        return noise_std(power_per_coord, g_min, self.snr) if self.noisy \
            else np.zeros_like(power_per_coord)

    def state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "gen": self.gen.get_state(),
                "gen_device": self.gen.device.type}

    def set_state(self, state: dict, round_: int = 0) -> None:
        """Restore :meth:`state`. A noise-generator state saved on another kind of device
        (CUDA vs CPU) cannot be continued here: the generator is then re-seeded from the seed
        and ``round_`` (the checkpoint's round), so the resumed run still draws fresh noise,
        reproducibly, instead of repeating the noise of its first rounds."""
        self.rng.bit_generator.state = state["rng"]
        if state.get("gen_device", "cpu") == self.gen.device.type:
            self.gen.set_state(state["gen"])
        else:
            seq = np.random.SeedSequence([self.seed, int(round_), 1])
            self.gen.manual_seed(int(seq.generate_state(1, dtype=np.uint32)[0]))


def noise_std(power_per_coord: np.ndarray, g_min: np.ndarray, snr: float) -> np.ndarray:
    """Per-receiver noise standard deviation; zero where nothing was received (g_min = inf)."""
    power = np.asarray(power_per_coord, dtype=np.float64)
    g = np.asarray(g_min, dtype=np.float64)
    out = np.zeros_like(power)
    live = np.isfinite(g) & (g > 0)
    out[live] = np.sqrt(effective_noise_variance(power[live], snr, g[live]))
    return out


@attrs.frozen
class Traffic:
    """One round's communication cost."""

    channel_uses: float
    slots: int
    energy_j: float
    bits: float

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.channel_uses + other.channel_uses, self.slots + other.slots,
                       self.energy_j + other.energy_j, self.bits + other.bits)


def traffic(k_recv: np.ndarray, n_tx: np.ndarray, slot_of: np.ndarray, link_nnz: np.ndarray,
            link_index_bits: np.ndarray, d: int, tx_power_w: float,
            bandwidth_hz: float) -> Traffic:
    """Channel uses, slots, energy and digital bits of one round.

    ``k_recv`` (N,): coordinates each receiver listens on; ``n_tx`` (N,): its active
    transmitters; ``slot_of`` (N,): its slot; ``link_nnz`` / ``link_index_bits`` (one entry per
    delivered link): coordinates carried, and how many of them need index bits.
    """
    symbols = np.where(n_tx > 0, np.ceil(np.asarray(k_recv, dtype=np.float64) / 2.0), 0.0)
    n_slots = int(slot_of.max()) + 1 if slot_of.size else 0
    slot_len = np.zeros(n_slots)
    np.maximum.at(slot_len, slot_of, symbols)
    bits = link_bits(float(np.sum(link_nnz)), float(np.sum(link_index_bits)), d)
    energy = tx_power_w / bandwidth_hz * float(np.sum(n_tx * symbols))
    return Traffic(float(slot_len.sum()), int((slot_len > 0).sum()), energy, bits)


def digital_traffic(link_send: np.ndarray, link_bits: np.ndarray, link_h2: np.ndarray,
                    slot_of: np.ndarray, snr: float, tx_power_w: float,
                    bandwidth_hz: float) -> Traffic:
    """Channel uses, slots, energy and bits of one digital round (module docstring).

    Per delivered link (i <- j): its sender ``link_send``, the bits it carried ``link_bits``
    and its |h|^2 ``link_h2``. Transmitter j sends one broadcast of M_j = max over its links
    of their bits (a link catching up on missed packets extends it) at rate
    R_j = log2(1 + snr min |h_ij|^2); ``slot_of``: the slot of each client as a transmitter."""
    link_send = np.asarray(link_send, dtype=np.int64)
    bits = np.asarray(link_bits, dtype=np.float64)
    n = int(slot_of.size)
    if not link_send.size:
        return Traffic(0.0, 0, 0.0, 0.0)
    message = np.zeros(n)
    np.maximum.at(message, link_send, bits)
    gain = np.full(n, np.inf)
    np.minimum.at(gain, link_send, np.asarray(link_h2, dtype=np.float64))
    sending = message > 0
    uses = np.zeros(n)
    uses[sending] = np.ceil(message[sending] / np.log2(1.0 + snr * gain[sending]))
    n_slots = int(slot_of.max()) + 1
    slot_len = np.zeros(n_slots)
    np.maximum.at(slot_len, slot_of, uses)
    return Traffic(float(slot_len.sum()), int((slot_len > 0).sum()),
                   tx_power_w / bandwidth_hz * float(uses.sum()), float(bits.sum()))
