"""Physical plans and their costs, as values.

A :class:`PhysicalPlan` is topology (family, params, seed, weights rule) x sparsification ratio k
x channel configuration (:class:`.channel_config.ChannelConfig`) x algorithm. A :class:`Cost`
is what an estimator predicts for it, with a breakdown the EXPLAIN output shows and the catalog
records.

Cost accounting (shared by every estimator; estimators only predict rounds and accuracy):

* payload: ``coords = ceil(k * d)`` real coordinates, sent as ``ceil(coords / 2)`` complex
  channel uses. Sparse payloads use a mask shared by all transmitters of a round (rand-k from a
  shared seed), because over-the-air superposition adds coordinate by coordinate: no indices are
  sent and the receiver sums k coordinates in k/2 channel uses.
* one gossip round = ``slots_per_round`` slots (a colouring of G^2): in a slot all neighbours of
  that slot's receivers transmit at once, so a round costs ``slots * ceil(coords / 2)`` channel
  uses and that many symbol times of airtime (``1 / bandwidth_hz`` seconds each).
* energy: every directed link (j -> i) transmits once per round when it is up: both ends online
  and not truncated, probability ``exp(-g_th) (1 - dropout)^2``: ``2|E| exp(-g_th)
  (1 - dropout)^2 ceil(coords / 2)`` symbols at peak power ``P = 10^(tx_power_dbm / 10) mW`` for
  ``1 / bandwidth_hz`` seconds each. Channel inversion never exceeds P, so this is an upper
  bound.
* silent slots: a receiver hears nothing when it is offline or all its links are down; a slot
  whose receivers are all silent costs nothing, so channel uses and airtime are scaled by the
  probability that a slot has a live receiver, ``1 - s^(N / slots)`` with ``s = dropout +
  (1 - dropout) E[(1 - exp(-g_th) (1 - dropout))^deg]`` (1 on the ideal channel without
  dropout).
  Nothing is re-sent: sparse payloads refresh the receivers' aggregates with replica values on
  the round's mask (docs/runtime.md), so a missed link costs no later traffic.
* Clique Averaging (``d_cliques`` with ``averaging='clique'``, more than one clique): every
  clique also exchanges the members' full updates once per round: ``max(clique sizes)`` more
  slots of ``ceil(d / 2)`` channel uses (scaled by the probability that such a slot has a live
  receiver), and ``sum c (c - 1)`` more directed links for energy and bits.
* bits (a digital comparison, :func:`link_bits`, the runtime's count too): the same payloads
  sent as 32-bit floats over every directed link that delivers (both ends online, not
  truncated: ``2|E| exp(-g_th) (1 - dropout)^2`` links), plus ``ceil(log2 d)`` index bits per
  coordinate whose position the receiver cannot derive from the round's shared seed (top-k
  supports; none for the common rand-k mask): ``delivered links * coords * (32 [+ index
  bits])``. For top-k the runtime sends the union of supports a receiver listens on, which can
  exceed ``coords``: the planner's figure is then a lower bound.
* startup: the statistics broadcast (each client's label release, an exact histogram or a
  Count-Min sketch, whichever ``ANALYZE WORKLOAD`` chooses: ``cells / 2`` channel uses per
  client, one slot each), the ``cost=startup..total`` of EXPLAIN.

* digital transport (``transport = 'digital'``, ``bits`` b per coordinate): a client
  broadcasts one packet of ``M = reals * b`` bits (plus the index bits of top-k supports) to
  all its neighbours. Co-slotted transmitters must be at distance >= 3 so that each receiver
  hears only one: the same ``slots_per_round`` colouring of G^2. The packet is sent at the
  rate its worst active receiver supports, ``R = log2(1 + SNR min |h|^2)`` over the links
  above the truncation threshold g_th (:mod:`.rates`). Below 32 bits a link that missed
  packets is caught up at its next delivery (``min(m + 1, 32 / b)`` increments), and a
  broadcast carries the largest catch-up of its links. A slot lasts as long as its longest
  packet: ``channel uses = slots * ceil(M * E[max_j X_j / R_j]) * P(live slot)``
  (:func:`~.rates.slot_time`). Energy: every online client with a live link transmits
  ``ceil(M * E[X] * E[1/R])`` symbols at peak power; bits: ``delivered links * M * E[X]``. No
  channel noise enters the rounds; the quantisation does (``costmodels``).
* algorithms: gradient tracking sends two vectors (x and its tracking variable y: twice the
  payload), push-sum its weight w beside them (repeated :data:`~.operators.WEIGHT_REPEATS`
  times over a noisy over-the-air channel, counted once in bits); FedAvg/FedProx run through
  an access point (:func:`server_round_cost`: one uplink slot over the air or one per client
  digitally, and the exact average broadcast to the worst client); MATCHA uses a share
  :data:`~.operators.MATCHA_BUDGET` of the links. DLLR-OA (``dllr_oa``, on ``resample_er``):
  each receiver of G_t takes one slot of the round's colouring of G_t^2 (about N slots on the
  dense G(n, 1/2); its code processes the receivers one by one), listening on
  ``ceil(sum_{l in M_i} d_l / 2)`` channel uses for its mask M_i of tensors; the plan knows d,
  not the tensors, and costs the random mask's expectation ``k d`` coordinates (the runtime
  counts the tensors each receiver actually masked).
* periodic topologies (one graph and W_t per round, :mod:`.periodic`): every figure above is
  computed for each round of the period from that round's own links, slots and receivers (a
  round's links are the directions its W_t weights; only clients that receive occupy slots), and
  the per-round cost is the mean over the period.

Costs are ordered by (reaches the target, objective total, rounds, plan label): a plan that never
reaches the SLA target sorts after every plan that does; "unknown" (None) is not "infinite" and is
shown as such.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import attrs

from ..errors import ValidationError
from .channel_config import ChannelConfig
from .operators import (EXACT_BITS, SERVER_ALGORITHMS, activation, check_algorithm, check_bits,
                        check_mix_on, check_mixing_tail, check_transport, extra_reals,
                        payload_vectors, resolve, transport_label)
from .rates import channel_rate, ideal_rate, inverse_rate, resend_multiple, slot_time
from .topology import TopologySpec, TopologyStats

OBJECTIVES = ("channel_uses", "energy_j", "airtime_s", "c_ours")
BITS_PER_COORD = 32


def index_bits(d: int) -> int:
    """Bits that name one coordinate of a d-dimensional model."""
    return math.ceil(math.log2(d)) if d > 1 else 1


def link_bits(coords: float, index_coords: float, d: int) -> float:
    """Digital bits one delivered link carries: 32 per coordinate, plus :func:`index_bits` for
    each of ``index_coords`` coordinates whose position the receiver cannot derive."""
    return float(coords * BITS_PER_COORD + index_coords * index_bits(d))


def _indexed(plan: "PhysicalPlan", coords: int) -> int:
    """Coordinates per link that need index bits: the top-k supports of a sparse plan."""
    return coords if plan.k_ratio < 1 and plan.mask == "topk" else 0


def _algorithm(value) -> str:
    # the runtime-only rule that reproduces the AirPlan paper literally is a plan algorithm too
    if isinstance(value, str) and value.strip().lower() == "paper_literal":
        return "paper_literal"
    return check_algorithm(value)


def _check_k(instance, attribute, value):
    if not (0 < value <= 1) or not math.isfinite(value):
        raise ValidationError(f"sparsity k must be in (0, 1], got {value!r}")


def _check_mix_rounds(value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValidationError(f"mix_rounds must be a non-negative integer (the mixing-only "
                              f"rounds at the end of the budget), got {value!r}")
    return int(value)


@attrs.frozen
class PhysicalPlan:
    """One point of the plan space.

    ``transport``: ``ota`` (over-the-air aggregation) or ``digital`` (packets of ``bits`` bits
    per coordinate, 1..32; 32 = exact float32); an over-the-air plan has ``bits = 32`` (the
    payload is analog, nothing is quantised). ``algorithm``: one of
    :data:`~.operators.PLAN_ALGORITHMS` (``auto``: D-SGD at k = 1, CHOCO below).
    ``mix_rounds``: the last ``mix_rounds`` rounds of the round budget only mix (nobody
    trains; :mod:`.finish`), for the algorithms of :data:`~.operators.MIXING_ONLY`; 0: every
    round trains. ``mix_on``: where those rounds mix: None, the plan's own topology;
    ``"complete"``, the complete graph (D-SGD only; the runtime rewires to it when the tail
    starts)."""

    topology: TopologySpec
    k_ratio: float = attrs.field(default=1.0, validator=_check_k)
    channel: ChannelConfig = ChannelConfig()
    algorithm: str = attrs.field(default="auto", converter=_algorithm)
    mask: str = "common_randk"
    transport: str = attrs.field(default="ota", converter=check_transport)
    bits: int = attrs.field(default=EXACT_BITS, converter=check_bits)
    mix_rounds: int = attrs.field(default=0, converter=_check_mix_rounds)
    mix_on: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.transport == "ota" and self.bits != EXACT_BITS:
            raise ValidationError(f"bits = {self.bits} applies to digital plans only: an "
                                  f"over-the-air payload is analog (not quantised)")
        check_mixing_tail(self.effective_algorithm, self.mix_rounds)
        mix_on = check_mix_on(self.mix_on, self.effective_algorithm, self.mix_rounds)
        if mix_on is not None and mix_on == self.topology.family:
            raise ValidationError(f"mix_on = {mix_on!r}: the plan's own topology is the "
                                  f"{mix_on} graph already (leave mix_on out)")
        object.__setattr__(self, "mix_on", mix_on)

    @property
    def effective_algorithm(self) -> str:
        """What runs: with ``auto``, D-SGD for dense payloads (k = 1) and CHOCO gossip for
        k < 1 (its public replicas carry the compression residual)."""
        return resolve(self.algorithm, self.k_ratio)

    def label(self) -> str:
        text = f"{self.topology.label()} [{self.topology.weights}] k={self.k_ratio:g}"
        if self.algorithm != "auto":
            text += f" {self.algorithm}"
        if self.transport != "ota":
            text += f" {transport_label(self.transport, self.bits)}"
        if self.mix_rounds:
            text += f" mix={self.mix_rounds}"
        if self.mix_on:
            text += f" on {self.mix_on}"
        return text


@attrs.frozen
class RoundCost:
    """Per-round resources of a plan (independent of how many rounds it needs).

    ``coords``: coordinates of one payload vector; ``message_bits``: bits of one digital
    message (None over the air); ``rate``: the bits per channel use of the slowest
    transmitter of a slot (digital; None over the air)."""

    coords: int
    channel_uses: float
    slots: int | float          # the mean over the period for a periodic topology
    airtime_s: float
    energy_j: float
    bits: float
    symbols: float
    message_bits: float | None = None
    rate: float | None = None


def live_slot_probability(plan: PhysicalPlan, stats: TopologyStats,
                          active: float = 1.0) -> float:
    """Probability that a slot has at least one receiver that hears a transmitter.

    A receiver of degree g is silent with probability ``dropout + (1 - dropout) l^g``, l the
    probability that one of its links is down; degrees are taken as one node at the maximum
    degree and the others sharing the remaining edge ends equally (exact for regular graphs and
    stars, where the mean degree alone misjudges the leaves). ``active``: the share of links
    a round uses at all (MATCHA's budget; 1 otherwise)."""
    ch = plan.channel
    online = 1.0 - ch.dropout
    link_down = 1.0 - ch.active_probability * online * active  # the receiver is online
    sp = stats.spectra
    n = max(sp.n_nodes, 1)
    rest = (2.0 * sp.n_edges - sp.max_degree) / max(n - 1, 1)
    silent = ch.dropout + online * (link_down ** sp.max_degree + (n - 1) * link_down ** rest) / n
    if silent <= 0.0:
        return 1.0
    return 1.0 - silent ** (n / max(stats.slots_per_round, 1))


def phase_live_slot_probability(plan: PhysicalPlan, phase) -> float:
    """:func:`live_slot_probability` of one round of a periodic topology (a
    :class:`~.topology.PhaseStats`): its receivers' in-degrees are known exactly, and only the
    clients that receive something that round occupy slots."""
    ch = plan.channel
    online = 1.0 - ch.dropout
    link_down = 1.0 - ch.active_probability * online
    receivers = max(phase.receivers, 1)
    silent = ch.dropout + online * sum(c * link_down ** g for g, c in phase.in_degrees) / receivers
    if silent <= 0.0:
        return 1.0
    return 1.0 - silent ** (receivers / max(phase.slots, 1))


@attrs.frozen
class Payload:
    """What one message of a plan carries: ``coords`` coordinates per vector, ``reals`` real
    numbers in all (gradient tracking: two vectors; push-sum: one more real, its weight),
    ``index_coords`` coordinates whose position is sent (top-k) and ``message_bits`` (digital:
    ``reals * bits`` plus the index bits; over the air: the 32-bit equivalent that
    :func:`link_bits` counts)."""

    coords: int
    reals: int
    index_coords: int
    message_bits: float

    @property
    def ota_uses(self) -> int:
        """Channel uses of one over-the-air payload: two reals per complex channel use."""
        return math.ceil(self.reals / 2)


def payload(plan: PhysicalPlan, d: int) -> Payload:
    """The message one client sends per round under ``plan`` for a d-dimensional model."""
    coords = max(1, math.ceil(plan.k_ratio * d))
    alg = plan.effective_algorithm
    vectors = payload_vectors(alg)
    reals = vectors * coords + extra_reals(alg, plan.transport, plan.channel.kind != "ideal")
    indexed = vectors * _indexed(plan, coords)
    bits = plan.bits if plan.transport == "digital" else BITS_PER_COORD
    return Payload(coords, reals, indexed, float(reals * bits + indexed * index_bits(d)))


def digital_rate(plan: PhysicalPlan, receivers: float) -> float:
    """Expected bits per channel use of a broadcast to ``receivers`` receivers on the plan's
    channel (:func:`~.rates.channel_rate`, same truncation as over the air)."""
    ch = plan.channel
    return channel_rate(ch.kind, max(1, round(receivers)), ch.snr_db, ch.g_th, ch.dropout)


def uses_per_bit(plan: PhysicalPlan, links: float) -> float:
    """Expected channel uses per bit of a packet sent at the rate of the worst of ``links``
    active links (:func:`~.rates.inverse_rate`; 1 / log2(1 + SNR) on the ideal channel)."""
    ch = plan.channel
    if ch.kind == "ideal":
        return 1.0 / ideal_rate(ch.snr_db)
    return inverse_rate(round(float(links), 3), ch.snr_db, ch.g_th)


def round_cost(plan: PhysicalPlan, stats: TopologyStats, d: int) -> RoundCost:
    """Per-round resources; for a periodic topology the mean over its period of each round's
    own figures (its slots, links and receivers); through a server for FedAvg/FedProx."""
    if plan.effective_algorithm in SERVER_ALGORITHMS:
        return server_round_cost(plan, stats, d)
    if stats.phases:
        return _periodic_round_cost(plan, stats, d)
    pl = payload(plan, d)
    ch = plan.channel
    slots = stats.slots_per_round
    # MATCHA activates a share of the links (its budget, in expectation); the schedule's
    # slots stay those of the whole graph, a slot with no live receiver costing nothing
    active = activation(plan.effective_algorithm)
    live = live_slot_probability(plan, stats, active)
    symbol_s = 1.0 / ch.bandwidth_hz
    links = 2 * stats.spectra.n_edges * active * ch.active_probability * (1 - ch.dropout) ** 2
    rate = None
    if plan.transport == "digital":
        # a slot lasts as long as its slowest transmitter's packet: the worst of all the
        # slot's delivered links sets the rate, the largest catch-up of a link that missed
        # packets (b < 32) the length; each client broadcasts once per round when online and
        # one of its links is up, at the rate of its own worst link
        sp = stats.spectra
        rate = digital_rate(plan, sp.max_degree)
        # a link misses a packet when its sender sends (is online) and the link does not
        # deliver (receiver offline, truncated, or not active this round)
        delivered = active * ch.active_probability * (1 - ch.dropout)
        per_tx = max(sp.mean_degree * delivered, 1.0)
        transmitters = sp.n_nodes * (1 - ch.dropout) * (1.0 - (1.0 - delivered) ** sp.mean_degree)
        channel_uses = float(slots * live * math.ceil(pl.message_bits * slot_time(
            round(transmitters / max(slots, 1), 3), round(per_tx, 3), plan.bits,
            round(delivered, 6), ch.snr_db, ch.g_th, ch.kind == "ideal")))
        symbols = transmitters * math.ceil(
            pl.message_bits * resend_multiple(plan.bits, delivered, per_tx)
            * uses_per_bit(plan, per_tx))
        bits = links * pl.message_bits * resend_multiple(plan.bits, delivered)
    else:
        channel_uses = float(slots * pl.ota_uses) * live
        symbols = links * pl.ota_uses
        # bits: the information sent (push-sum's weight once, not its repetitions)
        info = pl.reals - extra_reals(plan.effective_algorithm, "ota", ch.kind != "ideal") \
            + extra_reals(plan.effective_algorithm, "digital")
        bits = links * link_bits(info, pl.index_coords, d)
    exchange = clique_exchange_cost(plan, d)
    if exchange is not None:
        channel_uses += exchange.channel_uses
        slots += exchange.slots
        symbols += exchange.symbols
        bits += exchange.bits
    return RoundCost(coords=pl.coords, channel_uses=channel_uses, slots=slots,
                     airtime_s=channel_uses * symbol_s,
                     energy_j=ch.tx_power_w * symbol_s * symbols, bits=bits, symbols=symbols,
                     message_bits=pl.message_bits if plan.transport == "digital" else None,
                     rate=rate)


def server_round_cost(plan: PhysicalPlan, stats: TopologyStats, d: int) -> RoundCost:
    """FedAvg/FedProx through an access point (a star), every client taking part.

    Uplink over the air: every client transmits at once in one slot of ``ceil(reals / 2)``
    channel uses (the access point receives the sum). Uplink digital: one slot per client
    (TDMA), ``M / R`` channel uses each (``M`` the quantised update and, below 32 bits, its
    32-bit scale), R the rate of the client's own link (its expected inverse, E[1/R]); a
    client whose link is truncated (or that is offline) sends nothing. Downlink (both): the
    access point broadcasts the exact average (32 bits per coordinate) once, at the rate of the
    worst client that uploaded. Bits count each transmission once (the broadcast too), as the
    runtime does."""
    ch = plan.channel
    pl = payload(plan, d)
    n = stats.spectra.n_nodes
    up = ch.active_probability * (1 - ch.dropout)       # a client's uplink delivers
    dl_bits = float(pl.reals * BITS_PER_COORD)
    dl_uses = math.ceil(dl_bits * uses_per_bit(plan, max(n * up, 1.0)))
    if plan.transport == "digital":
        rate = digital_rate(plan, 1)
        message = pl.message_bits + (BITS_PER_COORD if plan.bits < BITS_PER_COORD else 0)
        up_uses = n * up * math.ceil(message * uses_per_bit(plan, 1))
        up_symbols = up_uses
        slots = n + 1
        up_bits = n * up * message
    else:
        rate = None
        up_uses = float(pl.ota_uses)
        up_symbols = n * up * pl.ota_uses
        slots = 2
        up_bits = n * up * link_bits(pl.reals, pl.index_coords, d)
    channel_uses = up_uses + dl_uses
    symbol_s = 1.0 / ch.bandwidth_hz
    symbols = up_symbols + dl_uses
    return RoundCost(coords=pl.coords, channel_uses=channel_uses, slots=slots,
                     airtime_s=channel_uses * symbol_s,
                     energy_j=ch.tx_power_w * symbol_s * symbols,
                     bits=up_bits + dl_bits, symbols=symbols,
                     message_bits=pl.message_bits if plan.transport == "digital" else None,
                     rate=rate)


@attrs.frozen
class CliqueExchange:
    """Per-round resources of Clique Averaging's exchange (part of a plan's :class:`RoundCost`)."""

    cliques: int
    slots: int
    channel_uses: float
    symbols: float
    bits: float


def clique_exchange_cost(plan: PhysicalPlan, d: int) -> CliqueExchange | None:
    """Clique Averaging's exchange of the full update (d coordinates) inside every clique: the
    cliques are disjoint and complete, so they receive in parallel in max(sizes) slots (scaled
    by the probability that such a slot has a live receiver); None without Clique Averaging.
    Digital: every member broadcasts ``d * bits`` bits to its clique at the rate of its worst
    clique mate."""
    sizes = averaged_cliques(plan.topology)
    if not sizes:
        return None
    ch = plan.channel
    full = math.ceil(d / 2)
    link_down = 1.0 - ch.active_probability * (1 - ch.dropout)
    mean_deg = sum(c * (c - 1) for c in sizes) / sum(sizes)
    silent = ch.dropout + (1 - ch.dropout) * link_down ** mean_deg
    live = 1.0 - silent ** len(sizes) if silent > 0 else 1.0
    delivered = sum(c * (c - 1) for c in sizes) * ch.active_probability * (1 - ch.dropout) ** 2
    if plan.transport == "digital":
        m = float(d * plan.bits)
        per_slot = math.ceil(m / digital_rate(plan, max(sizes) - 1))
        symbols = sum(c * (1 - ch.dropout) * math.ceil(m / digital_rate(plan, c - 1))
                      for c in sizes)
        return CliqueExchange(len(sizes), max(sizes), max(sizes) * per_slot * live, symbols,
                              delivered * m)
    return CliqueExchange(len(sizes), max(sizes), max(sizes) * full * live, delivered * full,
                          delivered * link_bits(d, 0, d))


def averaged_cliques(spec: TopologySpec) -> tuple[int, ...]:
    """Clique sizes of a ``d_cliques`` spec with Clique Averaging and more than one clique
    (the cliques whose members exchange their updates every round); () otherwise."""
    p = spec.param_dict
    if spec.family != "d_cliques" or p.get("averaging", "clique") != "clique":
        return ()
    return _clique_sizes(spec.n, p.get("cliques"), p.get("size"))


@functools.lru_cache(maxsize=256)
def _clique_sizes(n: int, cliques: str | None, size: int | None) -> tuple[int, ...]:
    # cached: the round cost and both cost models ask for every candidate, and decoding an
    # assignment is O(N)
    from .cliques import clique_sizes, decode_cliques

    if cliques is not None:
        sizes = [len(c) for c in decode_cliques(cliques, n)]
    else:
        sizes = clique_sizes(n, int(size or n))
    return tuple(sizes) if len(sizes) > 1 else ()


def _periodic_round_cost(plan: PhysicalPlan, stats: TopologyStats, d: int) -> RoundCost:
    # digital: a round's slot lasts as long as the packet at the rate of the round's largest
    # in-degree, and every client that receives that round is taken to transmit once (periodic
    # families exchange symmetrically or with one peer)
    pl = payload(plan, d)
    ch = plan.channel
    symbol_s = 1.0 / ch.bandwidth_hz
    delivered = ch.active_probability * (1 - ch.dropout) ** 2
    phases = stats.phases
    links = sum(ph.links for ph in phases) / len(phases)
    rate = None
    if plan.transport == "digital":
        rates = [digital_rate(plan, max(g for g, _ in ph.in_degrees) if ph.in_degrees else 1)
                 for ph in phases]
        per_tx = [math.ceil(pl.message_bits / r) for r in rates]
        channel_uses = sum(ph.slots * u * phase_live_slot_probability(plan, ph)
                           for ph, u in zip(phases, per_tx)) / len(phases)
        symbols = sum(ph.receivers * (1 - ch.dropout) * u
                      for ph, u in zip(phases, per_tx)) / len(phases)
        bits = links * delivered * pl.message_bits
        rate = min(rates)
    else:
        channel_uses = sum(ph.slots * pl.ota_uses * phase_live_slot_probability(plan, ph)
                           for ph in phases) / len(phases)
        symbols = links * delivered * pl.ota_uses
        bits = links * delivered * link_bits(pl.reals, pl.index_coords, d)
    return RoundCost(coords=pl.coords, channel_uses=channel_uses,
                     slots=sum(ph.slots for ph in phases) / len(phases),
                     airtime_s=channel_uses * symbol_s,
                     energy_j=ch.tx_power_w * symbol_s * symbols, bits=bits, symbols=symbols,
                     message_bits=pl.message_bits if plan.transport == "digital" else None,
                     rate=rate)


@attrs.frozen
class Estimate:
    """What an estimator predicts for a plan: rounds to the target and accuracy.

    ``rounds`` is None when the plan never reaches the target (its error floor is above it).
    ``p_meets`` is the predicted probability that the plan reaches the target within the round
    budget (estimators that predict a distribution of rounds); the planner then requires it to
    be at least the request's confidence instead of checking the point estimate. ``notes`` say
    where the estimate extrapolates (a plan outside what the estimator was fitted on).
    ``terms`` are the estimator's named intermediate quantities (VERBOSE shows them);
    ``model_term`` is its uncalibrated core term (recorded with feedback for refits).
    """

    rounds: float | None
    accuracy: float | None
    accuracy_lo: float | None = None
    accuracy_hi: float | None = None
    rounds_lo: float | None = None
    rounds_hi: float | None = None
    terms: dict[str, float] = attrs.field(factory=dict)
    model_term: float | None = None
    calibration_ids: tuple[int, ...] = ()
    extra_constraints: tuple[tuple[str, bool], ...] = ()
    p_meets: float | None = None
    notes: tuple[str, ...] = ()


@attrs.frozen
class Cost:
    """Predicted cost of a plan: the estimate plus the resource breakdown over its rounds."""

    estimate: Estimate
    per_round: RoundCost
    startup: float
    objective: str
    #: a pilot run before the choice (:class:`~airplan_qo.plans.pilot.ReferencePilot`), whose
    #: traffic is part of every total; None: no pilot
    pilot: Any = None
    #: this plan is the one the pilot trained, and its run continues from the pilot's last
    #: round: the pilot's rounds are not paid again (:meth:`total`)
    continues_pilot: bool = False
    #: what one round of a mixing-only tail on another topology costs (``plan.mix_on``: the
    #: complete graph's round); the estimate's ``tail_rounds_paid`` of the predicted rounds are
    #: paid at it. None: every round costs :attr:`per_round`
    tail: RoundCost | None = None

    @property
    def rounds(self) -> float | None:
        return self.estimate.rounds

    @property
    def reaches_target(self) -> bool:
        return self.estimate.rounds is not None

    def total(self, what: str | None = None) -> float | None:
        """Total of a resource over the predicted rounds (None when the target is never reached).

        The objective total includes the startup (statistics broadcast) in channel uses.
        """
        what = what or self.objective
        if what == "c_ours":
            return self.estimate.terms.get("c_ours")
        if what == "rounds":
            return self.rounds
        if what == "privacy_epsilon":
            return self.estimate.terms.get("privacy_epsilon")
        if self.rounds is None:
            return None
        return (self._rounds_of(what) + (self.startup if what == "channel_uses" else 0.0)
                + (self.pilot.total(what) if self.pilot is not None else 0.0))

    def tail_rounds(self) -> float:
        """The predicted rounds paid at :attr:`tail`'s cost (0 without one)."""
        if self.tail is None or self.rounds is None:
            return 0.0
        return min(float(self.estimate.terms.get("tail_rounds_paid", 0.0)), self.paid_rounds())

    def _rounds_of(self, what: str) -> float:
        """Resource ``what`` over the paid rounds: the tail's at its own per-round cost."""
        tail = self.tail_rounds()
        out = getattr(self.per_round, what) * (self.paid_rounds() - tail)
        return out + (getattr(self.tail, what) * tail if tail else 0.0)

    def paid_rounds(self) -> float:
        """The predicted rounds paid beyond the pilot: all of them, or for the plan that
        continues the pilot only those after its last round."""
        if self.rounds is None:
            return math.inf
        if self.continues_pilot:
            return max(self.rounds - self.pilot.rounds, 0.0)
        return self.rounds

    def breakdown(self) -> dict[str, Any]:
        r = self.rounds
        pilot = {} if self.pilot is None else {
            f"pilot_{k}": v for k, v in self.pilot.traffic().items()}
        return {
            "rounds": r,
            "channel_uses": self.total("channel_uses"),
            "slots": None if r is None else self._rounds_of("slots")
            + pilot.get("pilot_slots", 0.0),
            "airtime_s": self.total("airtime_s"),
            "energy_j": self.total("energy_j"),
            "bits": self.total("bits"),
            "privacy_epsilon": self.estimate.terms.get("privacy_epsilon"),
            "startup_channel_uses": self.startup,
            "per_round_channel_uses": self.per_round.channel_uses,
            **({} if self.tail is None else {
                "tail_rounds": self.tail_rounds(),
                "tail_per_round_channel_uses": self.tail.channel_uses}),
            **pilot,
        }

    def sort_key(self, label: str) -> tuple:
        total = self.total()
        return (not self.reaches_target, math.inf if total is None else total,
                math.inf if self.rounds is None else self.rounds, label)
