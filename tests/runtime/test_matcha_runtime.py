"""MATCHA in the runtime: a full budget is D-SGD with W = I - alpha L; a smaller one mixes over
the sampled matchings only, reproducibly from the training seed, and trains."""

import pytest
import torch

from airplan_qo.errors import ExecutionError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import DSGD
from airplan_qo.runtime.matcha import Matcha


def _setup(budget, family="erdos_renyi"):
    topo = build(TopologySpec.create(family, 12, p=0.4, seed=1) if family == "erdos_renyi"
                 else TopologySpec.create(family, 12))
    x0 = torch.zeros(6)
    rule = Matcha(DSGD(12, 6, x0=x0, decay=0.0), topo, budget)
    return topo, rule


def test_full_budget_is_dsgd_with_i_minus_alpha_l():
    topo, rule = _setup(1.0)
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 6, generator=gen)
    links = rule.links
    w = torch.from_numpy(rule.schedule.base_weights()).float()
    for _ in range(5):
        rl = ch.draw(12, links.u, links.v)
        want = w @ x
        x = rule.communicate(x, links, rl, ch, train_gen=gen).x
        assert torch.allclose(x, want, atol=1e-5)


def test_a_round_mixes_over_the_active_matchings_only():
    topo, rule = _setup(0.4)
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(12, 6, generator=torch.Generator().manual_seed(1))
    links = rule.links
    for _ in range(5):
        probe = torch.Generator().manual_seed(0)
        probe.set_state(gen.get_state())
        active = rule.activations(probe)
        want = torch.from_numpy(rule.schedule.round_matrix(active)).float() @ x
        rl = ch.draw(12, links.u, links.v)
        out = rule.communicate(x.clone(), links, rl, ch, train_gen=gen).x
        assert torch.allclose(out, want, atol=1e-5)
        assert torch.allclose(out.mean(0), x.mean(0), atol=1e-5)
        x = out


@pytest.mark.parametrize("kw", [dict(), dict(channel="ota", snr_db=10.0),
                                dict(transport="digital", bits=8, channel="ota")])
def test_matcha_trains_digits(digits, digits_skewed, complete10, kw):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=20, local_steps=2, algorithm="matcha",
                    matcha_budget=0.5, eval_every=20, **kw))
    res = Trainer(cfg, digits, digits_skewed, complete10).run()
    full = Trainer(RunConfig.from_dict(dict(**{**cfg.as_dict(), "matcha_budget": 1.0})), digits,
                   digits_skewed, complete10).run()
    assert res.status == "succeeded" and res.client_acc_mean > 0.5
    # about half the links per round; quantised packets also pay the catch-up of a pair that
    # did not talk last round (docs: runtime/digital.py)
    assert res.total_bits < (0.75 if cfg.bits == 32 else 1.0) * full.total_bits


def test_matcha_refuses_a_periodic_topology(digits, digits_skewed):
    topo = build(TopologySpec.create("one_peer_exponential", 8))
    from airplan_qo.data import partition
    part = partition("iid", digits.y_train, 8, seed=0)
    with pytest.raises(ExecutionError, match="static graph"):
        Trainer(RunConfig.from_dict(dict(algorithm="matcha")), digits, part, topo)


def test_clique_averaging_is_refused_with_the_new_rules(digits):
    from airplan_qo.data import partition
    from airplan_qo.plans.cliques import encode_cliques

    topo = build(TopologySpec.create("d_cliques", 6, cliques=encode_cliques([[0, 2, 4],
                                                                            [1, 3, 5]]),
                                     averaging="clique"))
    part = partition("dirichlet", digits.y_train, 6, seed=0, alpha=0.1)
    with pytest.raises(ExecutionError, match="Clique Averaging.*not matcha"):
        Trainer(RunConfig.from_dict(dict(algorithm="matcha")), digits, part, topo)
    ring = build(TopologySpec.create("ring", 6))
    t = Trainer(RunConfig.from_dict(dict(algorithm="push_sum")), digits, part, ring)
    with pytest.raises(ExecutionError, match="Clique Averaging.*not push_sum"):
        t.rewire(topo)
    assert t.topology is ring
