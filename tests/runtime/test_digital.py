"""The digital transport: exact packets equal ideal D-SGD, the quantiser is unbiased within its
variance bound, truncated links deliver nothing, and traffic counts b bits per coordinate."""

import math

import numpy as np
import pytest
import torch

from airplan_qo.errors import ValidationError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel, RoundLinks, digital_traffic
from airplan_qo.runtime.compression import quantization_omega, quantize
from airplan_qo.runtime.digital import DigitalGossip
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import LinkSet

TRAFFIC = ("channel_uses", "slots", "energy_j", "bits", "wall_time_s")


def _stats(history):
    return [{k: v for k, v in row.items() if k not in TRAFFIC} for row in history]


@pytest.mark.parametrize("kw", [dict(), dict(dropout=0.2)])
def test_exact_digital_on_the_ideal_channel_is_ideal_dsgd_bit_for_bit(digits, digits_skewed,
                                                                     ring10, kw):
    base = RunConfig.from_dict(dict(model="mlp", rounds=6, local_steps=2, eval_every=2, data_seed=3,
                     train_seed=4, channel_seed=5, **kw))
    dsgd = Trainer(base, digits, digits_skewed, ring10)
    digital = Trainer(RunConfig.from_dict(dict(**{**base.as_dict(), "transport": "digital", "bits": 32})),
                      digits, digits_skewed, ring10)
    a, b = dsgd.run(), digital.run()
    assert _stats(a.history) == _stats(b.history)
    assert torch.equal(dsgd.x, digital.x) and torch.equal(dsgd.m, digital.m)
    # 32 bits per coordinate on every delivered link: what OTA counts as its digital what-if
    assert [r["bits"] for r in a.history] == [r["bits"] for r in b.history]


def test_quantizer_is_unbiased_within_its_variance_bound():
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(1, 50, generator=gen) * torch.linspace(0.01, 3.0, 50)
    draws = 20000
    for bits in (1, 2, 4, 8):
        q = quantize(v.expand(draws, -1).contiguous(), bits, gen)
        err = q - v
        # unbiased: every coordinate's mean error within 5 standard errors of 0
        se = err.std(dim=0) / math.sqrt(draws)
        assert (err.mean(dim=0).abs() <= 5 * se + 1e-7).all(), bits
        mse = float((err.double() ** 2).sum(dim=1).mean())
        levels = 2 ** bits - 1
        bound = v.shape[1] * float(v.abs().max()) ** 2 / levels ** 2
        assert mse <= bound
        assert mse <= quantization_omega(bits, v.shape[1]) * float((v.double() ** 2).sum())
        # and it lands on the grid of 2^b levels
        grid = (q / v.abs().max() + 1) * levels / 2
        assert torch.allclose(grid, grid.round(), atol=1e-4)
        assert int(grid.round().unique().numel()) <= levels + 1
    assert quantize(v, 32, gen) is v


def _ring(n):
    return build(TopologySpec.create("ring", n))


def test_a_truncated_link_delivers_nothing():
    topo = _ring(6)
    links = LinkSet(topo)
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    x = torch.randn(6, 20, generator=torch.Generator().manual_seed(1))
    up = np.ones(links.u.size, dtype=bool)
    cut = 2                                      # edge (u[2], v[2]) truncated
    up[cut] = False
    rl = RoundLinks(np.ones(6, dtype=bool), up, np.ones(links.u.size), links.u.size, 1)
    i, j = int(links.u[cut]), int(links.v[cut])
    for bits in (32, 8):
        g = DigitalGossip(6, 20, bits, x0=torch.zeros(20), gamma=1.0)
        out = g.mix(x.clone(), links, rl, ch)
        # receiver i's new model does not depend on j's: change x_j, i is unchanged
        x2 = x.clone()
        x2[j] += 100.0
        g2 = DigitalGossip(6, 20, bits, x0=torch.zeros(20), gamma=1.0)
        ch2 = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
        out2 = g2.mix(x2, links, rl, ch2)
        assert torch.allclose(out.x[i], out2.x[i], atol=1e-5 if bits < 32 else 0), bits
        # no delivered packet on that link, in either direction
        delivered = set(zip(links.recv[links.up(rl)].tolist(), links.send[links.up(rl)].tolist()))
        assert (i, j) not in delivered and (j, i) not in delivered
        assert out.link_send.size == 2 * (links.u.size - 1)
        # the mean is preserved (symmetric W^t)
        assert torch.allclose(out.x.mean(0), x.mean(0), atol=1e-5)


def test_quantised_gossip_reaches_consensus_and_its_error_shrinks():
    topo = _ring(8)
    links = LinkSet(topo)
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))
    mean = x.mean(0)
    g = DigitalGossip(8, 64, 4, x0=torch.zeros(64))
    rl = ch.draw(8, links.u, links.v)
    for _ in range(300):
        x = g.mix(x, links, rl, ch).x
    assert float((x - mean).abs().max()) < 1e-3
    assert float((x - x.mean(0)).abs().max()) < 1e-4


def test_digital_traffic_hand_count():
    # ring of 4, 3 bits... every client broadcasts 10 coordinates at b = 8 bits: 80 + 32 bits
    topo = _ring(4)
    links = LinkSet(topo)
    ch = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    rl = ch.draw(4, links.u, links.v)
    out = DigitalGossip(4, 10, 8, x0=torch.zeros(10)).mix(torch.ones(4, 10), links, rl, ch)
    slots = links.slot_of
    cost = digital_traffic(out.link_send, out.link_bits, out.link_h2, slots, ch.snr, 0.1, 1e6)
    per_tx = math.ceil((10 * 8 + 32) / math.log2(1 + 10.0))   # 112 bits at log2(11) bit/use
    n_slots = int(slots.max()) + 1
    assert cost.bits == 8 * (10 * 8 + 32)                     # 8 directed links
    assert cost.channel_uses == n_slots * per_tx
    assert cost.slots == n_slots
    assert cost.energy_j == pytest.approx(0.1 / 1e6 * 4 * per_tx)


def test_digital_run_counts_b_bits_per_coordinate(digits, digits_iid, ring10):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=3, transport="digital", bits=8, channel="ota", g_th=0.5,
                    channel_seed=1))
    t = Trainer(cfg, digits, digits_iid, ring10)
    res = t.run()
    assert res.status == "succeeded"
    d = t.d
    for row in res.history:
        # every delivered link carries 8 bits per coordinate plus a scale, or catches up
        per_link = 8 * d + 32
        assert row["bits"] >= per_link and row["bits"] % 1 == 0
        assert row["bits"] <= 20 * (32 * d + 32)


def test_digital_config_validation():
    with pytest.raises(ValidationError, match="bits"):
        RunConfig.from_dict(dict(transport="digital", bits=0))
    with pytest.raises(ValidationError, match="bits"):
        RunConfig.from_dict(dict(transport="digital", bits=33))
    with pytest.raises(ValidationError, match="over the air only"):
        RunConfig.from_dict(dict(transport="digital", k_ratio=0.1))
    with pytest.raises(ValidationError, match="transport"):
        RunConfig.from_dict(dict(transport="carrier_pigeon"))
