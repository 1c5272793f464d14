"""Transport and algorithm as plan dimensions: the digital cost model counted by hand, the
exclusion rules and the plan's label."""

import math

import numpy as np
import pytest

from airplan_qo.errors import ValidationError
from airplan_qo.plans import operators
from airplan_qo.plans.plan import ChannelConfig, PhysicalPlan, round_cost
from airplan_qo.plans.rates import broadcast_rate, inverse_rate, resend_multiple, slot_time
from airplan_qo.plans.topology import TopologySpec, describe

D = 1000


@pytest.fixture(scope="module")
def ring10():
    return describe(TopologySpec.create("ring", 10))[1]


def test_ring_needs_four_slots(ring10):
    # C_10 squared (distance <= 2): any 3 consecutive clients need distinct slots, so 3 slots
    # would repeat with period 3, which 10 is not a multiple of; 4 slots suffice
    assert ring10.slots_per_round == 4


def test_digital_ring_ideal_channel_hand_count(ring10):
    ch = ChannelConfig(kind="ideal", snr_db=10.0, tx_power_dbm=20.0, bandwidth_hz=1e6)
    plan = PhysicalPlan(ring10.spec, 1.0, ch, transport="digital", bits=8)
    cost = round_cost(plan, ring10, D)
    rate = math.log2(11.0)                 # |h|^2 = 1, SNR = 10
    per_packet = math.ceil(D * 8 / rate)   # 8000 bits at 3.459 bit/cu = 2313 channel uses
    assert per_packet == 2313
    assert cost.rate == pytest.approx(rate)
    assert cost.message_bits == D * 8
    assert cost.channel_uses == 4 * per_packet
    assert cost.symbols == 10 * per_packet                  # every client broadcasts once
    assert cost.energy_j == pytest.approx(10 * per_packet * 0.1 / 1e6)
    assert cost.bits == 20 * D * 8                          # 2|E| = 20 delivered links
    # over the air the same round is 4 slots of d/2 channel uses
    ota = round_cost(PhysicalPlan(ring10.spec, 1.0, ch), ring10, D)
    assert ota.channel_uses == 4 * D / 2
    assert ota.rate is None and ota.message_bits is None


def test_digital_ring_truncated_channel_hand_count(ring10):
    g, snr_db = 0.1, 10.0
    plan = PhysicalPlan(ring10.spec, 1.0, ChannelConfig(snr_db=snr_db, g_th=g),
                        transport="digital", bits=8)
    cost = round_cost(plan, ring10, D)
    # the expected rate of a broadcast to 2 receivers, by Monte Carlo: the worst gain above g
    rng = np.random.default_rng(0)
    h = rng.exponential(size=(400_000, 2))
    worst = np.where(h >= g, h, np.inf).min(axis=1)
    sent = np.isfinite(worst)
    rate_mc = np.log2(1 + 10 ** (snr_db / 10) * worst[sent]).mean()
    assert cost.rate == pytest.approx(rate_mc, rel=5e-3)
    # a slot is silent when its receivers (10 / 4 of them) each have both links truncated
    silent = (1 - math.exp(-g)) ** 2
    live = 1 - silent ** (10 / 4)
    # a slot lasts as long as its longest packet: 8d bits times the largest catch-up multiple
    # over the rate, among the slot's 10 / 4 transmitters (each with 2 e^-g delivered links)
    s = math.exp(-g)
    tx = 10 * (1 - (1 - s) ** 2)
    assert cost.channel_uses == pytest.approx(
        4 * math.ceil(8 * D * slot_time(round(tx / 4, 3), round(2 * s, 3), 8, round(s, 6),
                                        snr_db, g)) * live)
    # a link misses a packet with probability 1 - e^-g and catches up at its next delivery
    # (at most 32 / 8 = 4 increments): E[min(m + 1, 4)] = sum_{j < 4} (1 - e^-g)^j
    catch_up = sum((1 - math.exp(-g)) ** j for j in range(4))
    assert cost.bits == pytest.approx(20 * math.exp(-g) * 8 * D * catch_up)


def test_inverse_rate_is_the_worst_links_expected_inverse_rate():
    """E[1/R] at the worst of 3 active links (Monte Carlo) and above 1 / E[R] (Jensen)."""
    g, snr_db = 0.1, 10.0
    rng = np.random.default_rng(1)
    worst = (g + rng.exponential(size=(400_000, 3))).min(axis=1)
    mc = (1 / np.log2(1 + 10 ** (snr_db / 10) * worst)).mean()
    assert inverse_rate(3, snr_db, g) == pytest.approx(mc, rel=5e-3)
    assert inverse_rate(3, snr_db, g) > 1 / broadcast_rate(3, snr_db, g, active=1.0)
    assert resend_multiple(32, 0.5) == 1.0 and resend_multiple(8, 1.0) == 1.0
    assert resend_multiple(8, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert resend_multiple(8, 0.5, links=4) > resend_multiple(8, 0.5)


def test_slot_time_is_the_longest_packets_expected_duration():
    """slot_time against a Monte Carlo of K transmitters, each with g links that deliver with
    probability s (catch-up after misses, at most 32 / b increments) and the rate of its worst
    link; on the ideal channel exact packets take 1 / log2(1 + SNR) per bit."""
    g_th, snr_db, k, g, s, b = 0.1, 10.0, 3, 2, 0.7, 8
    rng = np.random.default_rng(2)
    draws = 100_000
    misses = rng.geometric(s, size=(draws, k, g)) - 1            # misses before a delivery
    x = np.minimum(misses + 1, 32 / b).max(axis=2)
    worst = (g_th + rng.exponential(size=(draws, k, g))).min(axis=2)
    mc = (x / np.log2(1 + 10 ** (snr_db / 10) * worst)).max(axis=1).mean()
    assert slot_time(k, g, b, s, snr_db, g_th) == pytest.approx(mc, rel=0.01)
    assert slot_time(5, 2, 32, 0.7, 10.0, 0.1, ideal=True) == pytest.approx(1 / math.log2(11))


def test_digital_rate_matches_the_design_table():
    # Rayleigh, g_th = 0.1: degree 2 / 4 / 8 at 10 dB
    assert [round(broadcast_rate(k, 10.0, 0.1), 2) for k in (2, 4, 8)] == [2.62, 2.08, 1.67]


def test_payload_of_algorithms(ring10):
    ch = ChannelConfig(kind="ideal")
    base = round_cost(PhysicalPlan(ring10.spec, 1.0, ch, transport="digital", bits=8), ring10, D)
    gt = round_cost(PhysicalPlan(ring10.spec, 1.0, ch, algorithm="gradient_tracking",
                                 transport="digital", bits=8), ring10, D)
    ps = round_cost(PhysicalPlan(ring10.spec, 1.0, ch, algorithm="push_sum"), ring10, D)
    assert gt.message_bits == 2 * base.message_bits
    assert ps.channel_uses == 4 * math.ceil((D + 1) / 2)


def test_server_round_cost(ring10):
    fc = describe(TopologySpec.create("complete", 10))[1]
    ch = ChannelConfig(kind="ideal", snr_db=10.0)
    ota = round_cost(PhysicalPlan(fc.spec, 1.0, ch, algorithm="fedavg"), fc, D)
    dig = round_cost(PhysicalPlan(fc.spec, 1.0, ch, algorithm="fedavg", transport="digital",
                                  bits=8), fc, D)
    rate = math.log2(11.0)
    down32 = math.ceil(32 * D / rate)                  # the exact average, broadcast once
    up8 = math.ceil((8 * D + 32) / rate)               # 8-bit update and its 32-bit scale
    assert ota.channel_uses == D / 2 + down32 and ota.slots == 2
    assert dig.channel_uses == 10 * up8 + down32 and dig.slots == 11


def test_label_keeps_the_default_plan_unchanged(ring10):
    assert PhysicalPlan(ring10.spec, 1.0).label() == "ring [metropolis_hastings] k=1"
    assert (PhysicalPlan(ring10.spec, 1.0, transport="digital", bits=8).label()
            == "ring [metropolis_hastings] k=1 digital(b=8)")
    assert (PhysicalPlan(ring10.spec, 1.0, algorithm="gradient_tracking", transport="digital",
                         bits=8).label()
            == "ring [metropolis_hastings] k=1 gradient_tracking digital(b=8)")


@pytest.mark.parametrize("kwargs, message", [
    ({"transport": "radio"}, "unknown transport"),
    ({"transport": "digital", "bits": 0}, "bits must be an integer in 1..32"),
    ({"transport": "digital", "bits": 33}, "bits must be an integer in 1..32"),
    ({"transport": "digital", "bits": 4.5}, "bits must be an integer in 1..32"),
    ({"bits": 8}, "applies to digital plans only"),
    ({"algorithm": "gossip"}, "unknown algorithm"),
])
def test_plan_validation(ring10, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        PhysicalPlan(ring10.spec, 1.0, **kwargs)


def test_exclusion_reasons():
    ex = operators.exclusion
    assert "random walk" in ex("gradient_tracking", "ota")
    assert ex("gradient_tracking", "digital", bits=8) is None
    assert "access point" in ex("fedavg", "ota")
    assert ex("fedavg", "ota", access_point=True, family="complete") is None
    assert "complete graph" in ex("fedprox", "digital", access_point=True, family="ring")
    assert "whole models" in ex("dsgd", "ota", k_ratio=0.1)
    assert ex("auto", "ota", k_ratio=0.1) is None          # auto resolves to choco
    assert ex("matcha", "ota") is None
    assert "static graph" in ex("matcha", "ota", family="one_peer_exponential", periodic=True)
    assert "Clique Averaging" in ex("matcha", "ota", family="d_cliques")
    assert "one gradient per round" in ex("gradient_tracking", "digital", local_steps=5)
    assert "exact float32" in ex("push_sum", "digital", bits=8)
    assert ex("push_sum", "digital") is None
    assert "sent over the air" in ex("choco", "digital", k_ratio=0.1)
    assert "dense payloads" in ex("push_sum", "digital", k_ratio=0.5)
    with pytest.raises(ValidationError, match="unknown transport"):
        ex("dsgd", "wifi")
