"""Gradient tracking: no heterogeneity floor on a quadratic toy, the tracker's mean is the mean
gradient every step, and the rule trains real models on the ideal channel and digitally."""

import numpy as np
import pytest
import torch

from airplan_qo.errors import ValidationError
from airplan_qo.plans.spectra import mixing_rho
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import LinkSet, dsgd_mix
from airplan_qo.runtime.gradient_tracking import GradientTracking

N, D, ETA = 16, 4, 0.1


def _toy():
    topo = build(TopologySpec.create("ring", N))
    links = LinkSet(topo)
    c = torch.from_numpy(np.random.default_rng(0).normal(size=(N, D)) * 3.0)
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    rl = channel.draw(N, links.u, links.v)
    return topo, links, c, channel, rl


def test_gradient_tracking_has_no_heterogeneity_floor_on_a_quadratic():
    topo, links, c, channel, rl = _toy()
    target = c.mean(0)
    up = links.up(rl)
    x = torch.zeros(N, D, dtype=torch.float64)
    for _ in range(3000):                       # D-SGD: x <- W (x - eta grad f_i(x_i))
        x = dsgd_mix(x - ETA * (x - c), links, up)
    dsgd_err = float((x - target).norm(dim=1).max())
    zeta = float((c - target).norm(dim=1).pow(2).mean().sqrt())
    rho = mixing_rho(topo.weights)
    assert 0.1 < dsgd_err / (ETA * zeta / (1 - rho)) < 10       # the O(eta zeta/(1-rho)) floor

    def gradient(x, trainable):
        return (x - c), 0.5 * ((x - c) ** 2).sum(dim=1)

    rule = GradientTracking(N, D, torch.zeros(D, dtype=torch.float64))
    x = torch.zeros(N, D, dtype=torch.float64)
    m = torch.zeros_like(x)
    every = np.ones(N, dtype=bool)
    for _ in range(3000):
        _, x, _, _ = rule.round(x, m, links, rl, channel, gradient, every, ETA, 0.0)
        # the tracker's mean is the mean gradient at the current models, every step
        assert torch.allclose(rule.y.mean(0), (x - c).mean(0), rtol=0, atol=1e-12)
    gt_err = float((x - target).norm(dim=1).max())
    assert gt_err < 1e-8 < 1e-3 < dsgd_err


def test_gradient_tracking_with_momentum_and_quantised_gossip_keeps_the_invariant():
    topo, links, c, channel, rl = _toy()

    def gradient(x, trainable):
        return (x - c), 0.5 * ((x - c) ** 2).sum(dim=1)

    rule = GradientTracking(N, D, torch.zeros(D, dtype=torch.float64), "digital", 8)
    x = torch.zeros(N, D, dtype=torch.float64)
    m = torch.zeros_like(x)
    every = np.ones(N, dtype=bool)
    for _ in range(1500):
        _, x, _, _ = rule.round(x, m, links, rl, channel, gradient, every, 0.05, 0.5)
        assert torch.allclose(rule.y.mean(0), (x - c).mean(0), rtol=0, atol=1e-9)
    assert float((x - c.mean(0)).norm(dim=1).max()) < 1e-4


@pytest.mark.parametrize("kw", [dict(), dict(transport="digital", bits=8, channel="ota",
                                             dropout=0.1, g_th=0.3)])
def test_gradient_tracking_trains_digits(digits, digits_skewed, ring10, kw):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=25, algorithm="gradient_tracking", lr=0.05,
                    eval_every=25, **kw))
    t = Trainer(cfg, digits, digits_skewed, ring10)
    res = t.run()
    assert res.status == "succeeded"
    # on label-skewed clients the tracked global gradient beats D-SGD's local one
    dsgd = Trainer(RunConfig.from_dict(dict(**{**cfg.as_dict(), "algorithm": "dsgd"})), digits,
                   digits_skewed, ring10).run()
    assert res.client_acc_mean > max(0.4, dsgd.client_acc_mean)
    # two vectors per round: twice the bits of D-SGD's exchange on the same links
    assert res.history[0]["bits"] == pytest.approx(2 * dsgd.history[0]["bits"])


def test_gradient_tracking_refusals():
    with pytest.raises(ValidationError, match="random walk"):
        RunConfig.from_dict(dict(algorithm="gradient_tracking", channel="ota"))
    with pytest.raises(ValidationError, match="local_steps"):
        RunConfig.from_dict(dict(algorithm="gradient_tracking", local_steps=3))
    RunConfig.from_dict(dict(algorithm="gradient_tracking", channel="ota", transport="digital"))
