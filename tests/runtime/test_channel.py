"""Channel model: truncation and dropout rates, OTA noise variance, and traffic accounting."""

import math

import numpy as np
import pytest
import torch

from airplan_qo.errors import ValidationError
from airplan_qo.runtime.channel import (
    Channel,
    dbm_to_watt,
    effective_noise_variance,
    traffic,
    truncation_probability,
)
from airplan_qo.runtime.compression import common_mask
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import DSGD, Choco, LinkSet, dsgd_mix


def _edges(n, m, seed):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n, m)
    v = (u + rng.integers(1, n, m)) % n
    return u, v


@pytest.mark.parametrize("g_th", [0.05, 0.3, 1.0])
def test_truncation_rate_matches_formula(g_th):
    channel = Channel("ota", snr_db=10, g_th=g_th, dropout=0.0, seed=7)
    u, v = _edges(100, 20_000, 0)
    rates = [channel.draw(100, u, v).link_drop_rate for _ in range(10)]
    expected = 1 - math.exp(-g_th)
    assert truncation_probability(g_th) == pytest.approx(expected)
    se = math.sqrt(expected * (1 - expected) / 200_000)
    assert abs(np.mean(rates) - expected) < 5 * se


def test_fading_is_exponential_and_truncated_links_are_down():
    channel = Channel("ota", snr_db=10, g_th=0.2, dropout=0.0, seed=1)
    u, v = _edges(50, 50_000, 1)
    links = channel.draw(50, u, v)
    assert links.h2.mean() == pytest.approx(1.0, abs=0.02)
    assert np.all(links.up == (links.h2 >= 0.2))


def test_dropout_rate_and_offline_links():
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.3, seed=2)
    u, v = _edges(1000, 5000, 2)
    draws = [channel.draw(1000, u, v) for _ in range(20)]
    assert np.mean([d.dropout_rate for d in draws]) == pytest.approx(0.3, abs=0.01)
    for d in draws:
        assert d.link_drop_rate == 0.0            # the ideal channel never truncates
        assert np.all(d.up == (d.active[u] & d.active[v]))


def test_channel_validation():
    with pytest.raises(ValidationError, match="g_th must be a positive"):
        Channel("ota", snr_db=10, g_th=0.0, dropout=0.0, seed=0)
    with pytest.raises(ValidationError, match="dropout"):
        Channel("ideal", snr_db=10, g_th=0.1, dropout=1.0, seed=0)
    with pytest.raises(ValidationError, match="channel must be one of"):
        Channel("awgn", snr_db=10, g_th=0.1, dropout=0.0, seed=0)


def _expected_sigma2(links, rl, power_of_sender, k, snr):
    """Independent per-receiver sigma^2 = max_j(W_ij^2 P_j / k) / (2 snr min_j |h_ij|^2)."""
    out = {}
    w = links.weights.toarray()
    for i in range(links.n):
        best, g_min = 0.0, math.inf
        for e, (a, b) in enumerate(zip(links.u, links.v)):
            if not rl.up[e] or i not in (a, b):
                continue
            j = b if a == i else a
            best = max(best, w[i, j] ** 2 * power_of_sender[j] / k)
            g_min = min(g_min, rl.h2[e])
        if math.isfinite(g_min):
            out[i] = best / (2 * snr * g_min)
    return out


def test_dsgd_noise_variance_matches_formula(ring10):
    links = LinkSet(ring10)
    d = 40_000
    snr_db = 5.0
    channel = Channel("ota", snr_db=snr_db, g_th=0.3, dropout=0.0, seed=11)
    scale = torch.arange(1, 11, dtype=torch.float32)
    checked = 0
    for _ in range(3):
        x = scale.unsqueeze(1).repeat(1, d)
        rl = channel.draw(10, links.u, links.v)
        clean = dsgd_mix(x.clone(), links, links.up(rl))
        x = DSGD(10, d, shrinkage=False).communicate(x, links, rl, channel).x
        residual = (x - clean).double()
        expected = _expected_sigma2(links, rl, (scale.double() ** 2).numpy(), 1.0,
                                    10 ** (snr_db / 10))
        for i in range(10):
            if i in expected:
                assert residual[i].var().item() == pytest.approx(expected[i], rel=0.04)
                checked += 1
            else:
                assert torch.all(residual[i] == 0)
    assert checked >= 20


def test_choco_noise_enters_only_received_coordinates(ring10):
    links = LinkSet(ring10)
    n, d, k = 10, 40_000, 20_000
    snr = 10 ** (3 / 10)
    channel = Channel("ota", snr_db=3.0, g_th=0.2, dropout=0.0, seed=5)
    rl = channel.draw(n, links.u, links.v)
    rule = Choco(n, d, k, "common_randk", 0.3, torch.zeros(d), shrinkage=False)
    x = torch.randn(n, d) * torch.arange(1, n + 1).unsqueeze(1)
    idx = common_mask(d, k, torch.Generator().manual_seed(0))
    rule.communicate(x.clone(), links, rl, channel, train_gen=torch.Generator().manual_seed(0))
    q = x[:, idx]
    up = links.up(rl)
    w = np.zeros((n, n))
    w[links.recv[up], links.send[up]] = links.w[up]
    w[np.arange(n), np.arange(n)] = links.diag
    for e in np.flatnonzero(~up):                     # W^t: a dropped link's weight to self
        w[links.recv[e], links.recv[e]] += links.w[e]
    clean = torch.zeros(n, d)
    clean[:, idx] = torch.from_numpy(w).float() @ q
    residual = (rule.s - clean).double()
    off = torch.ones(d, dtype=torch.bool)
    off[idx] = False
    assert torch.all(residual[:, off] == 0)           # nothing received, no noise
    expected = _expected_sigma2(links, rl, (q.double() ** 2).sum(1).numpy(), k, snr)
    for i, sigma2 in expected.items():
        assert residual[i, idx].var().item() == pytest.approx(sigma2, rel=0.05)


def test_noise_variance_formula():
    assert effective_noise_variance(2.0, 10.0, 0.5) == pytest.approx(0.2)


def test_traffic_by_hand():
    # 3 receivers in 2 slots; receiver 2 hears nobody
    cost = traffic(k_recv=np.array([10, 7, 10]), n_tx=np.array([2, 1, 0]),
                   slot_of=np.array([0, 1, 1]), link_nnz=np.array([10, 10, 7]),
                   link_index_bits=np.array([0, 0, 7]), d=1000, tx_power_w=0.1,
                   bandwidth_hz=1e6)
    assert cost.channel_uses == 5 + 4
    assert cost.slots == 2
    assert cost.energy_j == pytest.approx(0.1 / 1e6 * (2 * 5 + 1 * 4))
    assert cost.bits == (27 * 32 + 7 * 10)
    assert dbm_to_watt(20) == pytest.approx(0.1)


def _one_round(digits, partition, topology, **kw):
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=1, batch_size=8, **kw))
    return Trainer(cfg, digits, partition, topology).step()


def test_round_accounting_common_mask(digits, digits_iid, ring10):
    d = 650                                             # logistic on 8x8 digits, 10 classes
    row = _one_round(digits, digits_iid, ring10, k_ratio=0.1)
    k = 65
    slots = ring10.schedule.slots_per_round
    assert row["slots"] == slots
    assert row["channel_uses"] == slots * math.ceil(k / 2)
    assert row["bits"] == 20 * 32 * k                  # 20 directed links, no index bits
    power = dbm_to_watt(23)                             # the default channel's 23 dBm
    assert row["energy_j"] == pytest.approx(power / 1e6 * 20 * math.ceil(k / 2))
    full = _one_round(digits, digits_iid, ring10)
    assert full["channel_uses"] == slots * math.ceil(d / 2)
    assert full["bits"] == 20 * 32 * d


def test_round_accounting_topk_pays_for_the_union(digits, digits_iid, ring10):
    # a ring receiver listens on the union of its own and its two neighbours' supports
    row = _one_round(digits, digits_iid, ring10, k_ratio=0.1, mask="topk")
    k, slots = 65, ring10.schedule.slots_per_round
    assert slots * math.ceil(k / 2) < row["channel_uses"] <= slots * math.ceil(3 * k / 2)
    per_bit = 32 + math.ceil(math.log2(650))
    assert 20 * k * per_bit < row["bits"] <= 20 * 3 * k * per_bit


def test_dropped_links_reduce_traffic(digits, digits_iid, ring10):
    row = _one_round(digits, digits_iid, ring10, channel="ota", g_th=1.5, channel_seed=3)
    assert 0 < row["link_drop_rate"] <= 1
    assert row["bits"] < 20 * 32 * 650
