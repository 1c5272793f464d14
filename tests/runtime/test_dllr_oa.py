"""DLLR-OA as its published code runs it: with no noise, the full mask and the Jacobi order a
round is D-SGD's on the same G_t sequence; the code's Gauss-Seidel order keeps every row
stochastic (a common model stays put) and reaches consensus on a fixed graph; masks mix only
their tensors; the SNR variant and the faithful one train; resume is bit-identical."""

import attrs
import numpy as np
import pytest
import torch

from airplan_qo.data import partition
from airplan_qo.errors import ValidationError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.dllr_oa import DLLROA, masked_tensors
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import LinkSet

N = 12


@pytest.fixture(scope="module")
def digits12(digits):
    return partition("dirichlet", digits.y_train, N, seed=0, alpha=0.5)


@pytest.fixture(scope="module")
def er_sequence():
    return build(TopologySpec.create("resample_er", N, seed=3, period=40))


def _exact(**kw) -> dict:
    """The noiseless DLLR-OA: no fixed noise, no power-estimate noise."""
    return dict(dllr_sigma=0.0, dllr_beta_noise=0.0, **kw)


def test_every_round_is_a_fresh_er_half_graph_with_metropolis_weights(er_sequence):
    assert er_sequence.period == 40
    seen = set()
    for r in er_sequence.rounds:
        w = r.weights.toarray()
        deg = np.array([r.graph.degree(i) for i in range(N)])
        for i, j in r.graph.edges():
            assert w[i, j] == w[j, i] == pytest.approx(1 / max(deg[i] + 1, deg[j] + 1))
        assert np.allclose(w.sum(0), 1) and np.allclose(w.sum(1), 1)
        seen.add(frozenset(r.graph.edges()))
    assert len(seen) == 40
    density = np.mean([r.graph.number_of_edges() for r in er_sequence.rounds]) / (N * (N - 1) / 2)
    assert 0.4 < density < 0.6


def test_noiseless_full_mask_jacobi_equals_dsgd_on_the_same_sequence(digits, digits12,
                                                                     er_sequence):
    base = dict(model="logistic", rounds=15, local_steps=2, channel="ideal")
    dsgd = Trainer(RunConfig.from_dict(dict(base, algorithm="dsgd")), digits, digits12,
                   er_sequence)
    dllr = Trainer(RunConfig.from_dict(dict(base, **_exact(algorithm="dllr_oa",
                                                           dllr_order="jacobi"))),
                   digits, digits12, er_sequence)
    for _ in range(15):
        dsgd.step()
        dllr.step()
        assert float((dsgd.x - dllr.x).abs().max()) <= 1e-6
    # and the Gauss-Seidel order (the code's) is a different update
    gs = Trainer(RunConfig.from_dict(dict(base, **_exact(algorithm="dllr_oa"))), digits,
                 digits12, er_sequence)
    gs.step()
    dsgd1 = Trainer(RunConfig.from_dict(dict(base, algorithm="dsgd")), digits, digits12,
                    er_sequence)
    dsgd1.step()
    assert float((gs.x - dsgd1.x).abs().max()) > 1e-4


def _rule(**kw):
    layout_numels = [3, 5, 2, 4]
    offsets = np.concatenate([[0], np.cumsum(layout_numels)[:-1]])
    return DLLROA(N, offsets, layout_numels, **kw), sum(layout_numels)


def test_gauss_seidel_keeps_a_common_model_and_reaches_consensus_on_a_fixed_graph():
    links = LinkSet(build(TopologySpec.create("small_world", N, k=4)))
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    rl = channel.draw(N, links.u, links.v)
    rule, d = _rule(k_ratio=1.0, sigma=0.0, beta_noise=0.0)
    common = torch.randn(1, d, dtype=torch.float64).repeat(N, 1)
    assert torch.allclose(rule.communicate(common.clone(), links, rl, channel).x, common,
                          atol=1e-12)
    x = torch.randn(N, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    lo, hi = x.min(dim=0).values, x.max(dim=0).values
    for _ in range(200):
        x = rule.communicate(x, links, rl, channel).x
    spread = (x - x.mean(dim=0)).abs().max()
    assert spread < 1e-9
    assert bool(((x[0] >= lo - 1e-12) & (x[0] <= hi + 1e-12)).all())


@pytest.mark.parametrize("layer_mask", ["random", "weight", "grad"])
def test_a_receiver_mixes_only_its_masked_tensors(layer_mask):
    links = LinkSet(build(TopologySpec.create("complete", N)))
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    rl = channel.draw(N, links.u, links.v)
    rule, d = _rule(k_ratio=0.5, layer_mask=layer_mask, sigma=0.0, beta_noise=0.0,
                    order="jacobi")
    assert rule.m == masked_tensors(4, 0.5) == 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, d, dtype=torch.float64, generator=g)
    prev = x - torch.randn(N, d, dtype=torch.float64, generator=g)
    before = x.clone()
    out = rule.communicate(x, links, rl, channel, train_gen=g, x_prev=prev)
    mean = before.mean(dim=0)
    for i in range(N):
        changed = [t for t, (o, n) in enumerate(zip(rule.offsets, rule.numels))
                   if not torch.equal(out.x[i, o:o + n], before[i, o:o + n])]
        assert len(changed) == 2
        assert out.k_recv[i] == sum(rule.numels[t] for t in changed)   # what it listened on
        for t in changed:        # the complete graph's Metropolis-free uniform W: the mean
            o, n = rule.offsets[t], rule.numels[t]
            assert torch.allclose(out.x[i, o:o + n], mean[o:o + n], atol=1e-12)
        if layer_mask != "random":
            ref = before[i] if layer_mask == "weight" else before[i] - prev[i]
            norms = [float(ref[o:o + n].norm()) for o, n in zip(rule.offsets, rule.numels)]
            assert sorted(changed) == sorted(np.argsort(norms)[::-1][:2].tolist())
def test_the_power_estimate_noise_perturbs_the_weights_but_not_a_common_model_much():
    links = LinkSet(build(TopologySpec.create("complete", N)))
    channel = Channel("ideal", snr_db=10, g_th=0.1, dropout=0.0, seed=0)
    rl = channel.draw(N, links.u, links.v)
    rule, d = _rule(k_ratio=1.0, sigma=0.0, beta_noise=0.01)
    common = torch.ones(N, d, dtype=torch.float64)
    out = rule.communicate(common.clone(), links, rl, channel).x
    # alpha = count / sum(xi) keeps each row summing to one exactly
    assert torch.allclose(out, common, atol=1e-12)
    x = torch.randn(N, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    exact, _ = _rule(k_ratio=1.0, sigma=0.0, beta_noise=0.0, order="jacobi")
    noisy, _ = _rule(k_ratio=1.0, sigma=0.0, beta_noise=0.01, order="jacobi")
    a = exact.communicate(x.clone(), links, rl, channel).x
    b = noisy.communicate(x.clone(), links, rl, channel).x
    assert 1e-6 < float((a - b).abs().max()) < 0.05


@pytest.mark.parametrize("sigma, channel", [(0.01, "ideal"), (None, "ota")])
def test_it_trains_and_resumes_bit_identically(digits, digits12, er_sequence, tmp_path, sigma,
                                                channel):
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=8, algorithm="dllr_oa", k_ratio=0.5,
                                   dllr_sigma=sigma, channel=channel, snr_db=10.0, dropout=0.1))
    whole = Trainer(cfg, digits, digits12, er_sequence)
    result = whole.run()
    assert result.status == "succeeded" and result.final_accuracy > 0.2   # chance: 0.1
    assert result.total_channel_uses > 0
    first = Trainer(cfg, digits, digits12, er_sequence)
    for _ in range(3):
        first.step()
    first.save(tmp_path / "ckpt.pt")
    second = Trainer(cfg, digits, digits12, er_sequence)
    second.load(tmp_path / "ckpt.pt")
    second.run()
    assert torch.equal(second.x, whole.x)


def test_a_round_costs_its_receivers_masked_tensors_per_slot(digits, digits12, er_sequence):
    cfg = RunConfig.from_dict(_exact(model="logistic", rounds=1, algorithm="dllr_oa",
                                     k_ratio=1.0, channel="ideal"))
    tr = Trainer(cfg, digits, digits12, er_sequence)
    row = tr.step()
    links = tr.link_schedule[0]
    slots = int(np.unique(links.slot_of[np.bincount(links.recv, minlength=N) > 0]).size)
    assert row["slots"] == slots
    assert row["channel_uses"] == slots * np.ceil(tr.d / 2)


def test_dllr_oa_refuses_the_digital_transport():
    with pytest.raises(ValidationError, match="over the air"):
        RunConfig(algorithm="dllr_oa", transport="digital")
    with pytest.raises(ValidationError, match="dllr_mask"):
        attrs.evolve(RunConfig(algorithm="dllr_oa"), dllr_mask="topk")
