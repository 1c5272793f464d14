"""Clique Averaging: each client applies its clique's mean update, over the round's links."""

import attrs
import numpy as np
import pytest
import torch

import airplan_qo as aq
from airplan_qo.plans.cliques import encode_cliques, residual_heterogeneity
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel, RoundLinks
from airplan_qo.runtime.clique_averaging import CliqueAveraging, clique_averaging_enabled
from airplan_qo.runtime.gossip import LinkSet

CLIQUES = [[0, 2, 4], [1, 3, 5]]


def _topology(averaging="clique", cliques=CLIQUES):
    spec = TopologySpec.create("d_cliques", 6, cliques=encode_cliques(cliques),
                               averaging=averaging)
    return build(spec)


def _all_up(links: LinkSet) -> RoundLinks:
    e = links.u.size
    return RoundLinks(np.ones(links.n, bool), np.ones(e, bool), np.ones(e), e, 0)


def test_enabled_only_for_d_cliques_with_averaging_and_several_cliques():
    assert clique_averaging_enabled(_topology())
    assert not clique_averaging_enabled(_topology("none"))
    assert not clique_averaging_enabled(_topology(cliques=[list(range(6))]))
    assert not clique_averaging_enabled(build(TopologySpec.create("ring", 6)))


def test_ideal_channel_gives_every_member_its_cliques_mean_update():
    topo = _topology()
    links = LinkSet(topo)
    ca = CliqueAveraging(topo, links)
    gen = torch.Generator().manual_seed(0)
    before = torch.randn(6, 7, generator=gen)
    delta = torch.randn(6, 7, generator=gen)
    x = before + delta
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    cost = ca.apply(x, before, _all_up(links), ch, np.ones(6, bool), 20.0, 1e6)
    for c in CLIQUES:
        want = delta[c].mean(dim=0)
        for i in c:
            assert torch.allclose(x[i] - before[i], want, atol=1e-6)
    # three slots (clique size), each ceil(7 / 2) = 4 channel uses
    assert cost.slots == 3 and cost.channel_uses == 12


def test_a_down_link_or_an_idle_member_is_left_out_of_the_mean():
    topo = _topology()
    links = LinkSet(topo)
    ca = CliqueAveraging(topo, links)
    before = torch.zeros(6, 4)
    delta = torch.arange(24, dtype=torch.float32).view(6, 4)
    x = before + delta
    rl = _all_up(links)
    # link 0 - 2 down
    e = next(i for i, (a, b) in enumerate(zip(links.u, links.v)) if {a, b} == {0, 2})
    up = rl.up.copy()
    up[e] = False
    rl = attrs.evolve(rl, up=up)
    trained = np.ones(6, bool)
    trained[5] = False                  # client 5 did not train: it neither sends nor changes
    x[5] = before[5]
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    ca.apply(x, before, rl, ch, trained, 20.0, 1e6)
    assert torch.allclose(x[0], (delta[0] + delta[4]) / 2)
    assert torch.allclose(x[4], (delta[0] + delta[2] + delta[4]) / 3)
    assert torch.allclose(x[1], (delta[1] + delta[3]) / 2)
    assert torch.equal(x[5], before[5])


def test_noisy_exchange_adds_bounded_noise():
    topo = _topology()
    links = LinkSet(topo)
    ca = CliqueAveraging(topo, links)
    gen = torch.Generator().manual_seed(1)
    before = torch.zeros(6, 200)
    delta = torch.randn(6, 200, generator=gen)
    x = before + delta
    ch = Channel("ota", snr_db=10, g_th=0.1, dropout=0.0, seed=3)
    ca.apply(x, before, _all_up(links), ch, np.ones(6, bool), 20.0, 1e6)
    for c in CLIQUES:
        exact = delta[c].mean(dim=0)
        err = float(torch.linalg.vector_norm(x[c] - exact) / torch.linalg.vector_norm(exact))
        assert 0 < err < 1.0


def test_residual_heterogeneity_of_formed_cliques_is_small():
    rng = np.random.default_rng(0)
    counts = np.stack([rng.multinomial(50, rng.dirichlet(np.full(10, 0.1)))
                       for _ in range(50)])
    from airplan_qo.plans.cliques import form_cliques, random_cliques

    formed = residual_heterogeneity(counts, form_cliques(counts, 10, 0))
    rand = residual_heterogeneity(counts, random_cliques(50, 10, 0))
    assert formed < 0.05 < rand < 0.3           # random groups of 10 keep about 1/10
    assert residual_heterogeneity(counts, [[i] for i in range(50)]) == pytest.approx(1.0)
    same = np.tile([5, 5, 5], (4, 1))
    assert residual_heterogeneity(same, [[0, 1], [2, 3]]) == 0.0


def test_planner_fills_the_residual_and_the_cost_models_price_the_averaging():
    db = aq.connect(":memory:")
    w = aq.Workload(dataset="digits", clients=50, alpha=0.1, snr_db=10, rounds=40)
    db.analyze(w)
    res = db.plan(w, topologies=[("d_cliques", {"averaging": "clique"}),
                                 ("d_cliques", {"averaging": "none"})], sparsity=[1.0],
                  fallback="complete")
    by = {c.plan.topology.param_dict["averaging"]: c for c in res.candidates
          if c.plan.topology.family == "d_cliques"}
    avg, plain = by["clique"], by["none"]
    assert 0 <= avg.plan.topology.param_dict["residual"] < 0.05
    # one more exchange per round: the largest clique's slots of the full update
    assert avg.cost.per_round.slots == plain.cost.per_round.slots + 10
    assert avg.cost.per_round.channel_uses > plain.cost.per_round.channel_uses
    # and predicted to need fewer rounds, with a higher chance of meeting the SLA
    assert avg.cost.estimate.terms["mu"] < plain.cost.estimate.terms["mu"]
    assert avg.cost.estimate.p_meets > plain.cost.estimate.p_meets
    db.close()


def test_training_with_clique_averaging_resumes_bit_identically(tmp_path):
    db = aq.connect(str(tmp_path / "c.duckdb"))
    w = aq.Workload(dataset="digits", clients=20, alpha=0.1, snr_db=10, rounds=6,
                    model="logistic")
    db.analyze(w)
    res = db.plan(w, topologies=["d_cliques"], sparsity=[1.0], fallback="complete")
    cand = next(c for c in res.candidates if c.plan.topology.family == "d_cliques")
    from airplan_qo.runtime.execution import _trainer, derive_seeds, run_config

    cfg = run_config(w, cand.plan, w.rounds, None, derive_seeds(w.seed))

    def run(stop_after=None, resume=None):
        t = _trainer(w, cand.plan.topology, cfg)
        assert t.clique_averaging is not None
        if resume:
            t.load(resume)
        while t.round < (stop_after or w.rounds):
            t.step()
        return t

    full = run()
    half = run(stop_after=3)
    half.save(tmp_path / "ck.pt")
    resumed = run(resume=tmp_path / "ck.pt")
    assert torch.equal(full.x, resumed.x)
    db.close()


def test_explain_shows_the_clique_exchange_beside_the_gossip_step():
    import re

    db = aq.connect(":memory:")
    db.sql("ANALYZE WORKLOAD digits ON 30 CLIENTS WITH (alpha = 0.1)")
    text = db.sql("EXPLAIN TRAIN digits ON 30 CLIENTS WITH (alpha = 0.1) "
                  "USING TOPOLOGY d_cliques USING SPARSITY 1 FALLBACK COMPLETE")[-1].text
    assert "->  Clique Averaging" in text
    per_round = float(re.search(r"per_round_cost=([\d.]+)", text).group(1))
    uses = [float(v) for v in re.findall(r"channel_uses_per_round=([\d.]+)", text)]
    assert len(uses) == 2 and sum(uses) == pytest.approx(per_round)
    assert re.search(r"Clique Averaging\n\s+payload=\"full update, \d+ coords\" slots=10", text)
    plain = db.sql("EXPLAIN TRAIN digits ON 30 CLIENTS WITH (alpha = 0.1) "
                   "USING TOPOLOGY d_cliques(averaging = 'none') USING SPARSITY 1 "
                   "FALLBACK COMPLETE")[-1].text
    assert "Clique Averaging" not in plain
    db.close()


@pytest.mark.parametrize("n", [20, 30, 50, 60, 100])
@pytest.mark.parametrize("inter", ["ring", "small_world"])
def test_exchange_schedule_follows_the_gossip_rule_on_every_slot(n, inter):
    """No receiver of a Clique Averaging slot transmits or hears another clique's transmitter,
    in max(clique sizes) slots (the planner's count), for the default grid's sizes."""
    from airplan_qo.plans.cliques import (decode_cliques, encode_cliques, exchange_conflicts,
                                          exchange_slots, random_cliques)
    from airplan_qo.plans.families import d_cliques

    text = encode_cliques(random_cliques(n, 10, seed=n))
    graph = d_cliques(n, cliques=text, inter=inter)
    groups = decode_cliques(text, n)
    position = np.empty(n, dtype=np.int64)
    for members in groups:
        position[members] = np.arange(len(members))
    if n >= 30:     # the old order (position in the clique) broke the rule here
        assert exchange_conflicts(graph, groups, position)
    slots = exchange_slots(graph, groups)
    assert exchange_conflicts(graph, groups, slots) == []
    assert slots.max() + 1 == max(len(c) for c in groups)
