"""FedAvg / FedProx through a server: one local step with equal data is D-SGD on the complete
graph with uniform weights; FedProx with mu = 0 is FedAvg; the proximal term pulls toward x^t;
uplink noise, truncation and quantisation behave as the channel and transport say."""

import math

import numpy as np
import pytest
import torch

from airplan_qo.data.partition import Partition
from airplan_qo.errors import ValidationError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer


@pytest.fixture(scope="module")
def equal(digits):
    parts = np.array_split(np.random.default_rng(0).permutation(digits.n_train), 10)
    size = min(len(p) for p in parts)
    return Partition(tuple(np.sort(p[:size]) for p in parts), digits.n_train, "iid")


@pytest.fixture(scope="module")
def complete():
    return build(TopologySpec.create("complete", 10))


def test_fedavg_with_one_local_step_is_dsgd_on_the_complete_graph(digits, equal, complete):
    base = dict(model="mlp", rounds=8, local_steps=1, eval_every=4, data_seed=1, train_seed=2,
                channel_seed=3)
    dsgd = Trainer(RunConfig.from_dict(base), digits, equal, complete)
    fed = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **base)), digits, equal, complete)
    assert dsgd.links.complete_uniform
    a, b = dsgd.run(), fed.run()
    assert float((dsgd.x - fed.x).abs().max()) <= 1e-6
    assert float((fed.x - fed.x[0]).abs().max()) == 0.0        # every client holds the model
    for ra, rb in zip(a.history, b.history):
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], abs=1e-6)


def test_fedprox_with_mu_zero_is_fedavg(digits, digits_skewed, complete):
    base = dict(model="mlp", rounds=5, local_steps=3, dropout=0.2, channel="ota", g_th=0.5)
    fa = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **base)), digits, digits_skewed, complete)
    fp = Trainer(RunConfig.from_dict(dict(algorithm="fedprox", prox_mu=0.0, **base)), digits, digits_skewed,
                 complete)
    ra, rb = fa.run(), fp.run()
    assert torch.equal(fa.x, fp.x)
    assert [r["train_loss"] for r in ra.history] == [r["train_loss"] for r in rb.history]


def test_fedavg_weights_by_sample_count_and_prox_pulls_toward_the_global_model(
        digits, digits_skewed, complete):
    base = dict(model="mlp", rounds=1, local_steps=5, lr=0.1, momentum=0.0)
    start = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **base)), digits, digits_skewed, complete)
    x0 = start.x[0].clone()
    # local models after 5 steps, without the server: the same run's local training
    local = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **base)), digits, digits_skewed, complete)
    local._anchor = None
    local._local_train(np.ones(10, dtype=bool))
    sizes = torch.tensor(start.sizes, dtype=torch.float64)
    want = ((local.x.double() * (sizes / sizes.sum()).unsqueeze(1)).sum(0)).float()
    start.step()
    assert torch.allclose(start.x[0], want, atol=1e-5)
    # FedProx with a large mu stays closer to x^t than FedAvg
    prox = Trainer(RunConfig.from_dict(dict(algorithm="fedprox", prox_mu=5.0, **base)), digits, digits_skewed,
                   complete)
    prox.step()
    assert float((prox.x[0] - x0).norm()) < 0.8 * float((start.x[0] - x0).norm())


def test_fedavg_uplink_over_the_air_and_digital(digits, digits_skewed, complete):
    base = dict(model="mlp", rounds=6, local_steps=2, channel="ota", snr_db=10.0, g_th=0.3,
                channel_seed=4)
    ideal = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **{**base, "channel": "ideal"})), digits,
                    digits_skewed, complete).run()
    ota = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", **base)), digits, digits_skewed, complete)
    r_ota = ota.run()
    dig = Trainer(RunConfig.from_dict(dict(algorithm="fedavg", transport="digital", bits=8, **base)), digits,
                  digits_skewed, complete)
    r_dig = dig.run()
    for r in (r_ota, r_dig):
        assert r.status == "succeeded" and r.client_acc_mean > 0.5 * ideal.client_acc_mean
    d = ota.d
    for row in r_ota.history:
        # one uplink slot of ceil(d/2) channel uses, plus the downlink broadcast
        assert row["channel_uses"] > math.ceil(d / 2)
        assert row["slots"] == 2.0
    # digital: one uplink slot per client that arrived, plus the downlink; 8 bits/coordinate
    for row in r_dig.history:
        arrived = row["slots"] - 1
        assert row["bits"] == arrived * (8 * d + 32) + 32 * d
    assert r_ota.total_channel_uses < r_dig.total_channel_uses
    assert ideal.total_channel_uses < r_dig.total_channel_uses


def test_federated_config_validation():
    with pytest.raises(ValidationError, match="proximal"):
        RunConfig.from_dict(dict(algorithm="fedavg", prox_mu=0.1))
    with pytest.raises(ValidationError, match="whole models"):
        RunConfig.from_dict(dict(algorithm="fedprox", k_ratio=0.5))


def test_ota_uplink_adds_the_channels_noise_to_the_weighted_sum():
    from airplan_qo.runtime.channel import Channel, RoundLinks, noise_std
    from airplan_qo.runtime.federated import Federated

    n, d = 5, 40000
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(d, generator=gen)
    x_prev = start.repeat(n, 1)
    x = x_prev + torch.randn(n, d, generator=gen) * torch.arange(1, n + 1).unsqueeze(1)
    sizes = np.array([10, 20, 30, 40, 50])
    up = np.array([True, True, False, True, True])            # client 2 truncated
    h2 = np.array([0.5, 1.5, 0.05, 0.3, 2.0])
    rl = RoundLinks(np.ones(n, bool), up, h2, n, 1)
    ch = Channel("ota", snr_db=10.0, g_th=0.1, dropout=0.0, seed=1)
    rule = Federated("fedavg", n, d, sizes)
    out = rule.communicate(x.clone(), None, rl, ch, x_prev=x_prev).x
    a = sizes[up] / sizes[up].sum()
    mean = start + (torch.from_numpy(a).float().unsqueeze(1) * (x[up] - start)).sum(0)
    scaled = torch.from_numpy(a).float().unsqueeze(1) * (x[up] - start)
    power = float((scaled.double() ** 2).sum(dim=1).max()) / d
    sigma = float(noise_std(np.array([power]), np.array([h2[up].min()]), ch.snr)[0])
    err = out[0] - mean
    assert float(err.mean()) == pytest.approx(0.0, abs=5 * sigma / math.sqrt(d))
    assert float(err.std()) == pytest.approx(sigma, rel=0.03)
    assert torch.equal(out[0], out[3])                         # every client gets the model
