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
from typing import Any

import attrs

from ..errors import ValidationError
from .channel_config import ChannelConfig
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


def _check_k(instance, attribute, value):
    if not (0 < value <= 1) or not math.isfinite(value):
        raise ValidationError(f"sparsity k must be in (0, 1], got {value!r}")


@attrs.frozen
class PhysicalPlan:
    """One point of the plan space."""

    topology: TopologySpec
    k_ratio: float = attrs.field(default=1.0, validator=_check_k)
    channel: ChannelConfig = ChannelConfig()
    algorithm: str = "auto"
    mask: str = "common_randk"

    @property
    def effective_algorithm(self) -> str:
        """What runs: with ``auto``, D-SGD for dense payloads (k = 1) and CHOCO gossip for
        k < 1 (its public replicas carry the compression residual)."""
        if self.algorithm == "auto":
            return "dsgd" if self.k_ratio >= 1 else "choco"
        return self.algorithm

    def label(self) -> str:
        return f"{self.topology.label()} [{self.topology.weights}] k={self.k_ratio:g}"


@attrs.frozen
class RoundCost:
    """Per-round resources of a plan (independent of how many rounds it needs)."""

    coords: int
    channel_uses: float
    slots: int | float          # the mean over the period for a periodic topology
    airtime_s: float
    energy_j: float
    bits: float
    symbols: float


def live_slot_probability(plan: PhysicalPlan, stats: TopologyStats) -> float:
    """Probability that a slot has at least one receiver that hears a transmitter.

    A receiver of degree g is silent with probability ``dropout + (1 - dropout) l^g``, l the
    probability that one of its links is down; degrees are taken as one node at the maximum
    degree and the others sharing the remaining edge ends equally (exact for regular graphs and
    stars, where the mean degree alone misjudges the leaves)."""
    ch = plan.channel
    online = 1.0 - ch.dropout
    link_down = 1.0 - ch.active_probability * online       # given the receiver is online
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


def round_cost(plan: PhysicalPlan, stats: TopologyStats, d: int) -> RoundCost:
    """Per-round resources; for a periodic topology the mean over its period of each round's
    own figures (its slots, links and receivers)."""
    if stats.phases:
        return _periodic_round_cost(plan, stats, d)
    coords = max(1, math.ceil(plan.k_ratio * d))
    uses_per_payload = math.ceil(coords / 2)
    slots = stats.slots_per_round
    channel_uses = float(slots * uses_per_payload) * live_slot_probability(plan, stats)
    symbol_s = 1.0 / plan.channel.bandwidth_hz
    links = (2 * stats.spectra.n_edges * plan.channel.active_probability
             * (1 - plan.channel.dropout) ** 2)
    symbols = links * uses_per_payload
    bits = links * link_bits(coords, _indexed(plan, coords), d)
    exchange = clique_exchange_cost(plan, d)
    if exchange is not None:
        channel_uses += exchange.channel_uses
        slots += exchange.slots
        symbols += exchange.symbols
        bits += exchange.bits
    return RoundCost(coords=coords, channel_uses=channel_uses, slots=slots,
                     airtime_s=channel_uses * symbol_s,
                     energy_j=plan.channel.tx_power_w * symbol_s * symbols, bits=bits,
                     symbols=symbols)


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
    by the probability that a slot has a live receiver); None without Clique Averaging."""
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
    coords = max(1, math.ceil(plan.k_ratio * d))
    uses_per_payload = math.ceil(coords / 2)
    symbol_s = 1.0 / plan.channel.bandwidth_hz
    delivered = plan.channel.active_probability * (1 - plan.channel.dropout) ** 2
    phases = stats.phases
    channel_uses = sum(ph.slots * uses_per_payload * phase_live_slot_probability(plan, ph)
                       for ph in phases) / len(phases)
    links = sum(ph.links for ph in phases) / len(phases)
    symbols = links * delivered * uses_per_payload
    return RoundCost(coords=coords, channel_uses=channel_uses,
                     slots=sum(ph.slots for ph in phases) / len(phases),
                     airtime_s=channel_uses * symbol_s,
                     energy_j=plan.channel.tx_power_w * symbol_s * symbols,
                     bits=links * delivered * link_bits(coords, _indexed(plan, coords), d),
                     symbols=symbols)


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
        per = getattr(self.per_round, what)
        return per * self.rounds + (self.startup if what == "channel_uses" else 0.0)

    def breakdown(self) -> dict[str, Any]:
        r = self.rounds
        return {
            "rounds": r,
            "channel_uses": self.total("channel_uses"),
            "slots": None if r is None else self.per_round.slots * r,
            "airtime_s": self.total("airtime_s"),
            "energy_j": self.total("energy_j"),
            "bits": self.total("bits"),
            "privacy_epsilon": self.estimate.terms.get("privacy_epsilon"),
            "startup_channel_uses": self.startup,
            "per_round_channel_uses": self.per_round.channel_uses,
        }

    def sort_key(self, label: str) -> tuple:
        total = self.total()
        return (not self.reaches_target, math.inf if total is None else total,
                math.inf if self.rounds is None else self.rounds, label)
