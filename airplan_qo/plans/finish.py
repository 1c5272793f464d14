"""A plan's mixing-only tail: the last rounds of the budget in which nobody trains and the
clients only mix their models (``PhysicalPlan.mix_rounds``; the runtime's
``Trainer.step(train=False)``).

Why: on data-hungry training a sparse topology's *average* model comes close to the fully
connected plan's, while the clients' own models stay apart (the consensus distance of a constant
step size under heterogeneity), so the clients' mean accuracy, which the SLA bounds, levels off
below the target. A few rounds of mixing alone draw the clients to their average at the sparse
plan's per-round cost (docs/results.md, "Mixing-only rounds after a sparse plan").

How many: :func:`tail_rounds` gives the rounds that shrink the clients' distance to their
average :data:`REDUCTION`-fold at the plan's per-round contraction ``1 - p``, ``p`` the mixing
rate of the *random* mixing matrix (the topology's spectral p times the survival factor of
dropout, truncated links and MATCHA's activation; costmodels/features.py), at least
:data:`MIN_TAIL` rounds, at most :data:`MAX_SHARE` of the budget. The random p, not the ideal
one: over the air at 10 dB the clients' accuracy deficit to their average model shrinks by about
``1 - p`` per mixing-only round (mnist1d, N = 30: 0.82 per round on the one-peer exponential
graph, p = 0.17; 0.88 on Base-2, p = 0.11, whose exact averaging within a period breaks when a
link is truncated; docs/results.md, "Mixing-only tails"). A plan that mixes nearly exactly in one
round (``1 - p`` below :data:`EXACT`: the complete graph) gets no tail.

On the complete graph (``PhysicalPlan.mix_on = "complete"``): the tail's rounds mix on the
complete graph instead of the plan's own topology (the runtime rewires to it when the tail
starts), which draws the clients to their average in one or two rounds, so the tail is short
(:data:`COMPLETE_TAIL` rounds) and the training long; each of its rounds costs what a round of
the complete graph costs. Measured (docs/results.md, "Mixing-only tails on the complete
graph"): over 120 branches of mnist1d runs at 10 dB the clients' deficit to their average model
was 0.95 points on average after one such round, 0.35 after two and 0.30-0.31 after three and
four: the second round reaches the floor one noisy exact average leaves. Only D-SGD runs it (a
plain average of the models; CHOCO's compressed replicas and MATCHA's sampled matchings would
not average in two rounds).
"""

from __future__ import annotations

import math

from .operators import COMPLETE_TAIL_ALGORITHMS, MIXING_ONLY

#: The factor a tail shrinks the clients' distance to their average by: about the clients'
#: accuracy deficit at the end of training (15 points on a one-peer graph) over the deficit
#: mixing leaves over the air (half a point at 10 dB).
REDUCTION = 30.0
MIN_TAIL = 5
#: The largest share of the round budget a tail may take.
MAX_SHARE = 0.25
#: Per-round contraction below which a plan counts as mixing exactly (no tail).
EXACT = 0.1
#: The mixing-only rounds of a tail on the complete graph (module docstring).
COMPLETE_TAIL = 2


def tail_rounds(p: float, algorithm: str, budget: int) -> int:
    """The mixing-only rounds to plan at the end of a ``budget``-round run for a plan whose
    random mixing matrix has rate ``p`` (module docstring); 0 where the algorithm cannot run
    them (:data:`~.operators.MIXING_ONLY`), the plan mixes nearly exactly in a round, or the
    budget is too short for :data:`MIN_TAIL`."""
    if algorithm not in MIXING_ONLY:
        return 0
    q = 1.0 - min(max(float(p), 0.0), 1.0)
    if q <= EXACT:
        return 0
    need = math.ceil(math.log(REDUCTION) / -math.log(q)) if q < 1.0 else budget
    cap = int(budget * MAX_SHARE)
    return min(max(need, MIN_TAIL), cap) if cap >= MIN_TAIL else 0


def complete_tail_rounds(family: str, algorithm: str, budget: int) -> int:
    """The mixing-only rounds of a tail on the complete graph for a plan of topology
    ``family`` running ``algorithm`` over a ``budget``-round run: :data:`COMPLETE_TAIL`, or 0
    where the plan is the complete graph already, its algorithm is not in
    :data:`COMPLETE_TAIL_ALGORITHMS`, or the tail would take more than :data:`MAX_SHARE` of
    the budget."""
    if family == "complete" or algorithm not in COMPLETE_TAIL_ALGORITHMS:
        return 0
    return COMPLETE_TAIL if COMPLETE_TAIL <= budget * MAX_SHARE else 0


__all__ = ["COMPLETE_TAIL", "EXACT", "MAX_SHARE", "MIN_TAIL",
           "REDUCTION", "complete_tail_rounds", "tail_rounds"]
