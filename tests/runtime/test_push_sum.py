"""Push-sum (SGP): on an unbalanced directed graph the sums of x and w are invariant and the
de-biased models reach the exact average (receive-side averaging reaches a biased one); with
gradients, the stationary mean is the mean of the local optima; it trains real models."""

import types

import numpy as np
import pytest
import torch

from airplan_qo.errors import ValidationError
from airplan_qo.runtime.channel import Channel, RoundLinks
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import Operator
from airplan_qo.runtime.push_sum import PushSum, receive_side_weights

N = 8
# directed ring 0 -> 1 -> ... -> 7 -> 0 plus chords: strongly connected, unbalanced
EDGES = [(j, (j + 1) % N) for j in range(N)] + [(0, 4), (0, 2), (3, 6), (5, 1)]
SEND = np.array([s for s, _ in EDGES])
RECV = np.array([r for _, r in EDGES])


def _links():
    links = types.SimpleNamespace(recv=RECV, send=SEND, edge=np.arange(len(EDGES)),
                                  device=torch.device("cpu"), n=N)
    links.up = lambda rl: rl.up[links.edge]
    rl = RoundLinks(np.ones(N, dtype=bool), np.ones(len(EDGES), dtype=bool),
                    np.ones(len(EDGES)), len(EDGES), 0)
    return links, rl


def test_push_sum_keeps_the_sums_and_reaches_the_exact_mean():
    links, rl = _links()
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    z = torch.from_numpy(np.random.default_rng(0).normal(size=(N, 3)))
    mean = z.mean(0)
    rule = PushSum(N, 3)
    for _ in range(300):
        z = rule.communicate(z, links, rl, channel).x
        assert float(rule.w.sum()) == pytest.approx(N, abs=1e-12)
        assert torch.allclose((z * rule.w.unsqueeze(1)).sum(0), N * mean, atol=1e-12)
    assert float((z - mean).abs().max()) < 1e-10
    # receive-side averaging (1 / (indeg + 1)) converges to a biased, pi-weighted mean
    r, s, v, diag = receive_side_weights(N, RECV, SEND)
    op = Operator(N, r, s, v, diag)
    y = torch.from_numpy(np.random.default_rng(0).normal(size=(N, 3)))
    for _ in range(300):
        y = op.apply(y)
    assert float((y - y.mean(0)).abs().max()) < 1e-10          # consensus ...
    assert float((y[0] - mean).abs().max()) > 1e-2             # ... on the wrong value


def test_a_lost_packet_stays_with_its_sender():
    links, rl = _links()
    up = rl.up.copy()
    up[0] = False                                              # 0 -> 1 truncated
    rl = RoundLinks(rl.active, up, rl.h2, rl.eligible, 1)
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    z = torch.from_numpy(np.random.default_rng(1).normal(size=(N, 3)))
    rule = PushSum(N, 3)
    before = z.sum(0)
    z = rule.communicate(z, links, rl, channel).x
    assert float(rule.w.sum()) == pytest.approx(N, abs=1e-12)
    assert torch.allclose((z * rule.w.unsqueeze(1)).sum(0), before, atol=1e-12)


def test_push_sum_gradient_steps_reach_the_mean_of_the_optima():
    links, rl = _links()
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    c = torch.from_numpy(np.random.default_rng(2).normal(size=(N, 2)) * 3)
    eta = 0.05

    def sgp():
        rule, z = PushSum(N, 2), torch.zeros(N, 2, dtype=torch.float64)
        for _ in range(4000):
            z = z - eta * (z - c) / rule.w.unsqueeze(1)       # x - eta grad, in z
            z = rule.communicate(z, links, rl, channel).x
        return z

    z = sgp()
    assert float((z.mean(0) - c.mean(0)).abs().max()) < 1e-8
    r, s, v, diag = receive_side_weights(N, RECV, SEND)
    op = Operator(N, r, s, v, diag)
    y = torch.zeros(N, 2, dtype=torch.float64)
    for _ in range(4000):
        y = op.apply(y - eta * (y - c))
    assert float((y.mean(0) - c.mean(0)).abs().max()) > 1e-2


@pytest.mark.parametrize("kw", [dict(), dict(channel="ota", snr_db=10.0),
                                dict(transport="digital", channel="ota", dropout=0.1)])
def test_push_sum_trains_digits(digits, digits_skewed, ring10, kw):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=20, local_steps=2, algorithm="push_sum",
                    eval_every=20, **kw))
    res = Trainer(cfg, digits, digits_skewed, ring10).run()
    dsgd = Trainer(RunConfig.from_dict(dict(**{**cfg.as_dict(), "algorithm": "dsgd"})), digits, digits_skewed,
                   ring10).run()
    assert res.status == "succeeded"
    assert res.client_acc_mean > dsgd.client_acc_mean - 0.1


def test_push_sum_on_a_regular_undirected_graph_is_dsgd(digits, digits_skewed, ring10):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=5, local_steps=2, algorithm="push_sum"))
    a = Trainer(cfg, digits, digits_skewed, ring10)
    b = Trainer(RunConfig.from_dict(dict(**{**cfg.as_dict(), "algorithm": "dsgd"})), digits, digits_skewed,
                ring10)
    a.run(), b.run()
    assert float((a.x - b.x).abs().max()) < 1e-5


def test_push_sum_refuses_quantised_packets():
    with pytest.raises(ValidationError, match="push_sum"):
        RunConfig.from_dict(dict(algorithm="push_sum", transport="digital", bits=8))
