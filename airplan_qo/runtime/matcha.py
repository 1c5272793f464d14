"""MATCHA rounds in the runtime: D-SGD over the matchings activated this round.

The schedule (matchings, probabilities p, alpha) is :mod:`~..plans.matcha`'s. The run's links
are those of G with the mixing matrix I - alpha L (every matching active, :func:`matcha_links`);
each round draws B_j ~ Bernoulli(p_j) from the training generator (``train_seed``, so the
draws are the same on every device and survive a checkpoint) and the links of inactive
matchings are treated as down for the round, whose weight then moves to the self-weights as for
any down link: the round mixes with exactly W_t = I - alpha sum_j B_j L_j (times the channel's
own drops). The mixing itself is the transport's D-SGD (ideal, over the air with the centred
models, decay 0, as for any topology that changes every round; or digital). Pairs of one
matching talk point to point: over the air a receiver hears one transmitter per active matching.
"""

from __future__ import annotations

import types

import attrs
import numpy as np
import scipy.sparse as sp
import torch

from ..plans.matcha import MatchaSchedule, plan_matcha
from .channel import Channel, RoundLinks
from .gossip import Exchange, LinkSet

__all__ = ["Matcha", "matcha_links"]


def matcha_links(topology, schedule: MatchaSchedule,
                 device: torch.device | str | None = None) -> LinkSet:
    """The links of G with W = I - alpha L (a round with every matching active)."""
    w = sp.csr_matrix(schedule.base_weights())
    w.eliminate_zeros()
    view = types.SimpleNamespace(graph=topology.graph, weights=w, schedule=topology.schedule,
                                 spec=topology.spec, period=1)
    return LinkSet(view, device)


class Matcha:
    """MATCHA: each round activates matchings at random and mixes through ``inner`` (the
    transport's D-SGD rule) over the active ones."""

    name = "matcha"

    def __init__(self, inner, topology, budget: float,
                 device: torch.device | str | None = None):
        self.inner = inner
        self.budget = float(budget)
        self.set_topology(topology, device)

    def set_topology(self, topology, device: torch.device | str | None = None) -> LinkSet:
        """Plan the schedule of ``topology``'s graph; returns the run's links."""
        self.schedule = plan_matcha(topology.graph, self.budget)
        self.links = matcha_links(topology, self.schedule, device)
        index = {e: j for j, m in enumerate(self.schedule.matchings) for e in m}
        u, v = self.links.u, self.links.v
        #: the matching of each undirected edge of the links
        self.edge_matching = np.array([index[(min(a, b), max(a, b))]
                                       for a, b in zip(u.tolist(), v.tolist())], dtype=np.int64)
        return self.links

    def activations(self, train_gen: torch.Generator) -> np.ndarray:
        """This round's B (one Bernoulli per matching) from the training generator."""
        m = len(self.schedule.matchings)
        return self.schedule.sample(torch.rand(m, generator=train_gen, dtype=torch.float64)
                                    .numpy())

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator, **kw: object) -> Exchange:
        active = self.activations(train_gen)
        up = rl.up & active[self.edge_matching]
        round_links = attrs.evolve(rl, up=up)
        return self.inner.communicate(x, links, round_links, channel, train_gen=train_gen,
                                      **kw)

    def rewire(self, links: LinkSet) -> None:
        self.inner.rewire(links)

    def state(self) -> dict:
        return self.inner.state()

    def set_state(self, state: dict) -> None:
        self.inner.set_state(state)
