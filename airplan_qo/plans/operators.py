"""Physical operators of a plan besides its topology: the **transport** (how a message crosses
the air) and the **algorithm** (what the clients send and how they mix it), the rules that
exclude combinations that make no sense (each with the reason a user is shown), and the
algorithms and transports the planner enumerates when a request leaves them to it (``AUTO``).

Transports:

* ``ota``: over-the-air aggregation (analog superposition; the receiver gets the weighted sum of
  its neighbours' payloads plus channel noise), two real coordinates per complex channel use.
* ``digital``: packets; ``b`` bits per coordinate (1..32, 32 = exact float32), sent at the
  rate the worst active receiver supports (:mod:`.rates`); no channel noise beyond the
  quantisation, a truncated link loses its packet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..errors import ValidationError

TRANSPORTS = ("ota", "digital")
#: Bits per coordinate of an exact (float32) payload, and the range a digital plan may use.
EXACT_BITS = 32
MIN_BITS, MAX_BITS = 1, 32

#: Algorithms a plan may name. ``auto`` is the default rule: D-SGD for dense payloads (k = 1),
#: CHOCO gossip for compressed ones (k < 1).
PLAN_ALGORITHMS = ("auto", "dsgd", "choco", "gradient_tracking", "push_sum", "matcha", "fedavg",
                   "fedprox", "dllr_oa")

#: Named presets: algorithms that reproduce a published system's configuration as a whole. They
#: are planned only when asked for by name (not under AUTO), on their own topology when the
#: request names none.
PRESETS: dict[str, tuple[str, dict]] = {
    # DLLR-OA (Qiao et al., MobiHoc 2023), as its published code runs: G_t ~ G(n, 1/2) redrawn
    # every round with Metropolis weights, receivers mixing a mask of k of the model's tensors
    "dllr_oa": ("resample_er", {"p": 0.5}),
}


#: Algorithms that run through a server (a star with an access point), not over a topology.
SERVER_ALGORITHMS = ("fedavg", "fedprox")

#: The algorithms ``USING ALGORITHM AUTO`` (the default) enumerates: every one the runtime
#: trains (the exclusion rules below leave out the combinations that make no sense, e.g. a
#: server without an access point).
AUTO_ALGORITHMS: tuple[str, ...] = ("dsgd", "choco", "gradient_tracking", "push_sum", "matcha",
                                    "fedavg", "fedprox")

#: DLLR-OA's topology: a fresh G(n, 1/2) every round (:data:`PRESETS`).
DLLR_OA_FAMILY = PRESETS["dllr_oa"][0]

#: MATCHA's communication budget C_b: the expected share of the graph's matchings (so, in
#: expectation, of its links) active in a round (Wang et al. 2019; plans/matcha.py).
MATCHA_BUDGET = 0.5


#: The algorithms that can run mixing-only rounds (a plan's ``mix_rounds`` tail): the rules
#: that mix the models themselves. Gradient tracking's exchange carries gradient trackers, and
#: FedAvg, FedProx, paper_literal and DLLR-OA send the round's update, which is zero when
#: nobody trains.
MIXING_ONLY: tuple[str, ...] = ("dsgd", "choco", "push_sum", "matcha")


def check_mixing_tail(algorithm: str, mix_rounds: int) -> None:
    """ValidationError when ``mix_rounds`` mixing-only rounds are asked of an algorithm that
    cannot run them (:data:`MIXING_ONLY`)."""
    if mix_rounds and algorithm not in MIXING_ONLY:
        raise ValidationError(f"mix_rounds = {mix_rounds}: {algorithm} cannot run mixing-only "
                              f"rounds; the algorithms that can: {', '.join(MIXING_ONLY)}")


#: Where a mixing-only tail may run instead of the plan's own topology (``mix_on``;
#: plans/finish.py), and the algorithms that may run it there (a plain average of the models).
TAIL_TOPOLOGIES: tuple[str, ...] = ("complete",)
COMPLETE_TAIL_ALGORITHMS: tuple[str, ...] = ("dsgd",)


def check_mix_on(value: Any, algorithm: str, mix_rounds: int) -> str | None:
    """``mix_on`` checked against the plan's ``algorithm`` and ``mix_rounds``: None (the tail
    mixes on the plan's own topology) or a name of :data:`TAIL_TOPOLOGIES`; ValidationError
    naming the problem otherwise."""
    if value is None:
        return None
    name = value.strip().lower() if isinstance(value, str) else None
    if name not in TAIL_TOPOLOGIES:
        raise ValidationError(f"mix_on must be one of {', '.join(TAIL_TOPOLOGIES)} (or None: "
                              f"the plan's own topology), got {value!r}")
    if not mix_rounds:
        raise ValidationError(f"mix_on = {name!r} says where the mixing-only rounds run, but "
                              f"the plan has none (mix_rounds = 0)")
    if algorithm not in COMPLETE_TAIL_ALGORITHMS:
        raise ValidationError(f"mix_on = {name!r}: only {', '.join(COMPLETE_TAIL_ALGORITHMS)} "
                              f"runs its mixing-only rounds on the {name} graph, not "
                              f"{algorithm}")
    return name


def activation(algorithm: str) -> float:
    """Expected share of the topology's links a round uses: MATCHA's budget, else 1."""
    return MATCHA_BUDGET if algorithm == "matcha" else 1.0


#: The (transport, bits) pairs ``USING TRANSPORT AUTO`` (the default) enumerates.
AUTO_TRANSPORTS: tuple[tuple[str, int], ...] = (("ota", EXACT_BITS), ("digital", 8),
                                                ("digital", EXACT_BITS))

#: Digital bits per coordinate enumerated when a request asks for ``digital`` without a width.
DEFAULT_DIGITAL_BITS = (8, 32)


def check_transport(value: Any) -> str:
    """A valid transport name (lower case), else ValidationError naming the choices."""
    text = str(value).strip().lower() if value is not None else ""
    if text not in TRANSPORTS:
        raise ValidationError(f"unknown transport {value!r}; use one of {', '.join(TRANSPORTS)}")
    return text


def check_bits(value: Any) -> int:
    """Bits per coordinate: an integer in 1..32, else ValidationError."""
    if isinstance(value, bool):
        raise ValidationError(f"bits must be an integer in {MIN_BITS}..{MAX_BITS}, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"bits must be an integer in {MIN_BITS}..{MAX_BITS}, "
                              f"got {value!r}") from None
    if not f.is_integer() or not MIN_BITS <= f <= MAX_BITS:
        raise ValidationError(f"bits must be an integer in {MIN_BITS}..{MAX_BITS}, got {value!r}")
    return int(f)


def check_algorithm(value: Any) -> str:
    """A valid plan algorithm name (lower case), else ValidationError naming the choices."""
    text = str(value).strip().lower() if value is not None else ""
    if text not in PLAN_ALGORITHMS:
        from ..registry import suggest

        raise ValidationError(f"unknown algorithm {value!r}{suggest(text, list(PLAN_ALGORITHMS))}"
                              f"; use one of {', '.join(PLAN_ALGORITHMS)}")
    return text


def parse_transport(value: Any) -> tuple[str, int | None]:
    """One transport choice as (name, bits): ``"ota"``, ``"digital"`` (bits None: the default
    widths :data:`DEFAULT_DIGITAL_BITS`), ``"digital(8)"``, ``"digital(bits=8)"`` or a
    ``(name, bits)`` pair; ValidationError otherwise."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValidationError(f"a transport pair is (name, bits), got {value!r}")
        name, bits = check_transport(value[0]), value[1]
    else:
        text = str(value).strip().lower().replace(" ", "")
        name, _, rest = text.partition("(")
        bits = None
        if rest:
            if not rest.endswith(")"):
                raise ValidationError(f"unclosed '(' in transport {value!r}")
            arg = rest[:-1]
            key, eq, num = arg.partition("=")
            if eq and key not in ("bits", "b"):
                raise ValidationError(f"unknown parameter '{key}' for transport {name!r}; "
                                      f"allowed: bits")
            bits = num if eq else arg
        name = check_transport(name)
    if bits is None:
        return name, None
    if name != "digital":
        raise ValidationError("bits applies to the digital transport only: an over-the-air "
                              "payload is analog (not quantised)")
    return name, check_bits(bits)


def auto_rule(k_ratio: float) -> str:
    """What ``auto`` runs: D-SGD at k = 1, CHOCO below."""
    return "dsgd" if k_ratio >= 1 else "choco"


def resolve(algorithm: str, k_ratio: float) -> str:
    """The algorithm that runs (``auto`` resolved by :func:`auto_rule`)."""
    return auto_rule(k_ratio) if algorithm == "auto" else algorithm


def canonical(algorithm: str, k_ratio: float) -> str:
    """``auto`` when ``algorithm`` is what the default rule would run at ``k_ratio``, so that a
    plan the rule already covers keeps the default rule's label."""
    return "auto" if algorithm in ("dsgd", "choco") and auto_rule(k_ratio) == algorithm \
        else algorithm


@attrs.frozen
class Combination:
    """What an exclusion rule judges: one (algorithm, transport) pair in its plan's context."""

    algorithm: str
    transport: str
    bits: int = EXACT_BITS
    k_ratio: float = 1.0
    family: str | None = None
    access_point: bool = False
    local_steps: int = 1
    periodic: bool = False


#: A rule returns the reason a combination makes no sense, or None.
Rule = Callable[[Combination], "str | None"]


def _gt_over_the_air(c: Combination) -> str | None:
    if c.algorithm == "gradient_tracking" and c.transport == "ota":
        return ("gradient tracking over the air: the channel noise on the tracking variable "
                "is summed round after round (its mean drifts as a random walk instead of "
                "tracking the mean gradient); plan it with TRANSPORT digital")
    return None


def _server_needs_access_point(c: Combination) -> str | None:
    if c.algorithm in SERVER_ALGORITHMS and not c.access_point:
        return (f"{c.algorithm} runs through a server: the workload must declare an access "
                f"point (WITH (access_point = true))")
    return None


def _server_topology(c: Combination) -> str | None:
    if c.algorithm in SERVER_ALGORITHMS and c.family not in (None, "complete"):
        return (f"{c.algorithm} averages every client's model at the server (W = 11^T/N): the "
                f"topology is not a choice, plan it on the complete graph, not {c.family}")
    return None


def _dsgd_dense(c: Combination) -> str | None:
    if c.algorithm == "dsgd" and c.k_ratio < 1:
        return (f"dsgd transmits whole models (k = 1); k = {c.k_ratio:g} needs choco (whose "
                f"replicas carry the compression residual)")
    return None


def _compressed_server(c: Combination) -> str | None:
    if c.algorithm in SERVER_ALGORITHMS + ("gradient_tracking", "push_sum", "matcha") \
            and c.k_ratio < 1:
        return (f"{c.algorithm} is planned with dense payloads only (k = 1): sparsifying its "
                f"messages without a residual (as CHOCO keeps) biases the average")
    return None


def _compressed_digital(c: Combination) -> str | None:
    if c.transport == "digital" and c.algorithm == "choco":
        return (f"compressed payloads (k = {c.k_ratio:g}, CHOCO's replica refresh) are sent over "
                f"the air; a digital plan sends whole models and compresses them by quantising "
                f"to fewer bits per coordinate (digital(bits = 8))")
    return None


def _gt_one_gradient(c: Combination) -> str | None:
    if c.algorithm == "gradient_tracking" and c.local_steps != 1:
        return (f"gradient tracking takes one gradient per round (local_steps = 1): its "
                f"tracking variable follows the change of that gradient, got local_steps = "
                f"{c.local_steps}")
    return None


def _push_sum_exact(c: Combination) -> str | None:
    if c.algorithm == "push_sum" and c.transport == "digital" and c.bits < EXACT_BITS:
        return (f"push_sum over the digital transport sends exact float32 packets: quantising "
                f"its models and weights to {c.bits} bits would break the mass it conserves; "
                f"use digital(bits = 32) or TRANSPORT ota")
    return None


def _matcha_static(c: Combination) -> str | None:
    if c.algorithm == "matcha" and c.periodic:
        return (f"matcha samples matchings of one static graph; topology {c.family} changes "
                f"every round")
    return None


def _clique_averaging(c: Combination) -> str | None:
    if c.family == "d_cliques" and c.algorithm not in ("dsgd", "choco"):
        return (f"D-Cliques' Clique Averaging runs with D-SGD or CHOCO, not {c.algorithm}")
    return None


def _dllr_oa_over_the_air(c: Combination) -> str | None:
    if c.algorithm == "dllr_oa" and c.transport != "ota":
        return ("dllr_oa aggregates over the air (its neighbours' masked tensors superpose at "
                "the receiver, inverted by the power-limited rule); it has no packet form: plan "
                "it with TRANSPORT ota")
    return None


def _dllr_oa_schedule(c: Combination) -> str | None:
    if c.algorithm == "dllr_oa" and c.family not in (None, DLLR_OA_FAMILY):
        return (f"dllr_oa is reproduced on its own schedule, a fresh G(n, 1/2) every round "
                f"(topology {DLLR_OA_FAMILY}), not on {c.family}")
    return None


#: The exclusion rules, in the order they are checked; the first that applies gives the reason.
EXCLUSIONS: tuple[tuple[str, Rule], ...] = (
    ("needs an access point", _server_needs_access_point),
    ("server topology", _server_topology),
    ("noise integrated", _gt_over_the_air),
    ("one gradient per round", _gt_one_gradient),
    ("dense payload", _dsgd_dense),
    ("dense payload", _compressed_server),
    ("compressed over the air only", _compressed_digital),
    ("exact packets", _push_sum_exact),
    ("static graph", _matcha_static),
    ("clique averaging", _clique_averaging),
    ("over the air only", _dllr_oa_over_the_air),
    ("its own schedule", _dllr_oa_schedule),
)


def exclusion(algorithm: str, transport: str, *, bits: int = EXACT_BITS, k_ratio: float = 1.0,
              family: str | None = None, access_point: bool = False, local_steps: int = 1,
              periodic: bool = False) -> str | None:
    """Why ``algorithm`` over ``transport`` makes no sense in this context (the first rule of
    :data:`EXCLUSIONS` that applies), or None when the combination may be planned.
    ``algorithm`` may be ``auto`` (resolved at ``k_ratio``); ``periodic``: the topology
    changes every round."""
    c = Combination(resolve(check_algorithm(algorithm), k_ratio), check_transport(transport),
                    check_bits(bits), float(k_ratio), family, bool(access_point),
                    int(local_steps), bool(periodic))
    for _, rule in EXCLUSIONS:
        reason = rule(c)
        if reason is not None:
            return reason
    return None


def transport_label(transport: str, bits: int) -> str:
    """How a plan label names a transport: ``ota`` or ``digital(b=8)``."""
    return f"digital(b={bits})" if transport == "digital" else transport


def payload_vectors(algorithm: str) -> int:
    """Vectors an algorithm sends per round: gradient tracking sends x and its tracking
    variable y, every other algorithm one."""
    return 2 if algorithm == "gradient_tracking" else 1


#: Over a noisy over-the-air channel push-sum sends its weight share on this many coordinates,
#: so that the receiver can average the repetitions (the noise on w shrinks by their root).
WEIGHT_REPEATS = 64


def extra_reals(algorithm: str, transport: str = "ota", noisy: bool = True) -> int:
    """Reals sent beside the payload: push-sum's weight w (repeated :data:`WEIGHT_REPEATS`
    times over a noisy over-the-air channel, once in a packet or on the ideal channel)."""
    if algorithm != "push_sum":
        return 0
    return WEIGHT_REPEATS if transport == "ota" and noisy else 1


__all__ = ["DLLR_OA_FAMILY", "PRESETS",
           "AUTO_ALGORITHMS", "AUTO_TRANSPORTS", "Combination", "MATCHA_BUDGET", "MIXING_ONLY",
           "COMPLETE_TAIL_ALGORITHMS", "TAIL_TOPOLOGIES", "activation", "check_mix_on",
           "check_mixing_tail",
           "DEFAULT_DIGITAL_BITS", "EXACT_BITS", "EXCLUSIONS", "MAX_BITS", "MIN_BITS", "WEIGHT_REPEATS",
           "PLAN_ALGORITHMS", "SERVER_ALGORITHMS", "TRANSPORTS", "auto_rule", "canonical",
           "check_algorithm", "check_bits", "check_transport", "exclusion", "extra_reals",
           "parse_transport", "payload_vectors", "resolve", "transport_label"]
