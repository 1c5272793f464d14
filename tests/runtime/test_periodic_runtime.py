"""The runtime on periodic topologies: round t mixes over W_{t mod period} (links, channel
draws, compression and CHOCO replicas), per-round accounting follows each round's graph, and
resume is bit-identical."""

import math

import attrs
import numpy as np
import pytest
import torch

import airplan_qo as aq
from airplan_qo.data import partition
from airplan_qo.errors import ExecutionError
from airplan_qo.plans.graphs import directed_links
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.gossip import LinkSet, dsgd_mix, link_schedule


@pytest.fixture(scope="module")
def digits16(digits):
    return partition("iid", digits.y_train, 16, seed=0)


def _still(cfg: RunConfig) -> RunConfig:
    """A configuration whose local steps do not move the models (to watch the mixing alone)."""
    return attrs.evolve(cfg, lr=1e-12, momentum=0.0)


def _spread(trainer: Trainer, seed: int = 0) -> None:
    """Give every client a different model (they all start from the same one)."""
    g = torch.Generator().manual_seed(seed)
    trainer.x += 0.01 * torch.randn(trainer.x.shape, generator=g)


def _disagreement(x: torch.Tensor) -> float:
    return float((x.double() - x.double().mean(dim=0)).norm() / x.double().norm())


@pytest.mark.parametrize("family, params", [("one_peer_exponential", {}), ("base_k", {"k": 1}),
                                            ("base_k", {"k": 2})])
def test_dsgd_reaches_consensus_exactly_at_the_end_of_each_period(digits, digits16, family,
                                                                  params):
    topo = build(TopologySpec.create(family, 16, **params))
    tr = Trainer(_still(RunConfig(model="logistic", rounds=20)), digits, digits16, topo)
    _spread(tr)
    mean = tr.x.double().mean(dim=0)
    seen = []
    for t in range(2 * topo.period):
        tr.step()
        seen.append(_disagreement(tr.x))
        assert tr.links is tr.link_schedule[t % topo.period]
    assert seen[topo.period - 1] < 1e-5 and seen[-1] < 1e-5
    assert all(d > 1e-3 for d in seen[:topo.period - 1])
    assert torch.allclose(tr.x.double().mean(dim=0), mean, atol=1e-6)


def test_a_static_union_graph_does_not_average_in_one_period(digits, digits16):
    """The same rounds' edges, mixed all at once every round, do not reach the average: the
    exactness comes from the sequence of W_t (a check that the runtime follows it)."""
    topo = build(TopologySpec.create("exponential", 16, weights="metropolis_hastings"))
    tr = Trainer(_still(RunConfig(model="logistic", rounds=20)), digits, digits16, topo)
    _spread(tr)
    for _ in range(4):
        tr.step()
    assert _disagreement(tr.x) > 1e-3


def test_each_rounds_links_come_from_its_own_graph():
    topo = build(TopologySpec.create("one_peer_exponential", 8))
    links = link_schedule(topo)
    assert len(links) == 3
    for t, ls in enumerate(links):
        assert np.array_equal(np.sort(ls.recv), np.arange(8))      # one sender per receiver
        assert np.array_equal((ls.recv + 2 ** t) % 8, ls.send)
        assert np.allclose(ls.w, 0.5)
        assert ls.u.size == (4 if t == 2 else 8)                  # channel draws per edge
    with pytest.raises(ExecutionError, match="changes every round"):
        LinkSet(topo)


def test_a_dropped_directed_link_is_renormalised_at_the_receiver():
    topo = build(TopologySpec.create("one_peer_exponential", 8))
    ls = link_schedule(topo)[0]
    x = torch.arange(8, dtype=torch.float32).unsqueeze(1)
    up = np.ones(ls.recv.size, dtype=bool)
    up[ls.recv == 3] = False                     # 3 does not hear 4 this round
    out = dsgd_mix(x, ls, up)
    assert out[3, 0] == 3.0 and out[2, 0] == 2.5 and out[4, 0] == 4.5


@pytest.mark.parametrize("family", ["one_peer_exponential", "base_k"])
def test_choco_follows_the_changing_neighbours_and_keeps_the_average(digits, digits16, family):
    """CHOCO with the common rand-k mask: each coordinate's aggregate is refreshed with the
    round's W_t whenever that coordinate's replicas change, so the consensus step keeps the
    average exactly and the clients converge to it although their neighbours change every
    round."""
    topo = build(TopologySpec.create(family, 16))
    cfg = _still(RunConfig(model="logistic", rounds=600, k_ratio=0.2))
    tr = Trainer(cfg, digits, digits16, topo)
    _spread(tr, seed=1)
    mean = tr.x.double().mean(dim=0)
    start = _disagreement(tr.x)
    for _ in range(600):
        tr.step()
    assert torch.allclose(tr.x.double().mean(dim=0), mean, atol=1e-5)
    assert _disagreement(tr.x) < 0.005 * start


def test_choco_with_top_k_masks_is_refused_on_a_changing_topology(digits, digits16, ring10,
                                                                 digits_iid):
    topo = build(TopologySpec.create("base_k", 16))
    with pytest.raises(ExecutionError, match="top-k masks needs a static topology"):
        Trainer(RunConfig(model="logistic", k_ratio=0.2, mask="topk"), digits, digits16, topo)
    tr = Trainer(RunConfig(model="logistic", k_ratio=0.2, mask="topk"), digits, digits_iid,
                 ring10)
    with pytest.raises(ExecutionError, match="top-k masks"):
        tr.rewire(build(TopologySpec.create("base_k", 10)))


def test_rewire_onto_a_periodic_topology_continues_at_the_rounds_phase(digits, digits16):
    tr = Trainer(RunConfig(model="logistic", rounds=10, k_ratio=0.3), digits, digits16,
                 build(TopologySpec.create("ring", 16)))
    for _ in range(3):
        tr.step()
    topo = build(TopologySpec.create("one_peer_exponential", 16))
    tr.rewire(topo)
    assert tr.links is tr.link_schedule[3 % 4]
    tr.step()
    assert tr.links is tr.link_schedule[3] and tr.history[-1]["slots"] == 2.0


def _rows(run):
    return [(h["test_accuracy"], h["train_loss"], h["consensus_distance"], h["channel_uses"],
             h["energy_j"], h["bits"], h["link_drop_rate"]) for h in run.history]


@pytest.mark.parametrize("family, params", [("one_peer_exponential", {}), ("base_k", {"k": 2})])
@pytest.mark.parametrize("k_ratio, channel", [(1.0, "ideal"), (0.3, "ota")])
def test_short_training_runs_and_resumes_bit_identically(digits, digits16, tmp_path, family,
                                                         params, k_ratio, channel):
    topo = build(TopologySpec.create(family, 16, **params))
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=11, k_ratio=k_ratio, channel=channel,
                                   dropout=0.1, snr_db=10.0))
    uninterrupted = Trainer(cfg, digits, digits16, topo)
    whole = uninterrupted.run()
    assert whole.status == "succeeded" and whole.final_accuracy > 0.5
    first = Trainer(cfg, digits, digits16, topo)
    for _ in range(topo.period + 1):           # stop mid-period
        first.step()
    first.save(tmp_path / "ckpt.pt")
    second = Trainer(cfg, digits, digits16, build(TopologySpec.create(family, 16, **params)))
    second.load(tmp_path / "ckpt.pt")
    rest = second.run()
    assert _rows(rest) == _rows(whole)
    assert torch.equal(second.x, uninterrupted.x)


def test_a_checkpoint_is_refused_on_another_periodic_topology(digits, digits16, tmp_path):
    cfg = RunConfig(model="logistic", rounds=6)
    tr = Trainer(cfg, digits, digits16, build(TopologySpec.create("one_peer_exponential", 16)))
    tr.step()
    tr.save(tmp_path / "a.pt")
    for other in ("base_k", "ring"):
        t2 = Trainer(cfg, digits, digits16, build(TopologySpec.create(other, 16)))
        with pytest.raises(ExecutionError, match="different topology"):
            t2.load(tmp_path / "a.pt")


def test_a_static_checkpoint_without_rounds_still_loads(digits, digits_iid, ring10, tmp_path):
    cfg = RunConfig(model="logistic", rounds=6)
    tr = Trainer(cfg, digits, digits_iid, ring10)
    tr.step()
    tr.save(tmp_path / "a.pt")
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    del state["link_phases"]                  # as written before periodic topologies
    torch.save(state, tmp_path / "old.pt")
    t2 = Trainer(cfg, digits, digits_iid, ring10)
    t2.load(tmp_path / "old.pt")
    assert t2.round == 1
    t3 = Trainer(cfg, digits, digits_iid, build(TopologySpec.create("base_k", 10)))
    with pytest.raises(ExecutionError, match="different topology"):
        t3.load(tmp_path / "old.pt")


@pytest.fixture(scope="module")
def measured():
    """Per (plan, channel): the plan's per-round cost and the runtime's per-round rows."""
    db = aq.connect(":memory:")
    out = []
    for channel, dropout in (("ideal", 0.0), ("ota", 0.0), ("ota", 0.2)):
        w = aq.Workload(dataset="digits", clients=12, alpha=0.5, rounds=24, model="logistic",
                        channel=channel, dropout=dropout)
        result = db.plan(w, topologies=["one_peer_exponential", ("base_k", {"k": 2}),
                                        ("base_k", {"k": 1})],
                         sparsity=[0.1, 1.0], estimator="dsgd", transports=["ota"],
                         algorithms=["auto"])
        for cand in result.candidates:
            report = db.execute(attrs.evolve(result, chosen=cand), stop_at_target=False,
                                reoptimize=False)
            rows = db.catalog.query(
                "SELECT round, channel_uses, slots, energy_j FROM airplan.round_stats "
                "WHERE exec_id = ? AND round >= 1 ORDER BY round", [report.exec_id])
            out.append((channel, dropout, cand, rows))
    db.close()
    return out


def test_every_periodic_plan_is_measured(measured):
    seen = {(c.plan.topology.label(), c.plan.k_ratio) for ch, _, c, _ in measured
            if ch == "ideal"}
    assert seen == {(f, k) for f in ("one_peer_exponential", "base_k(k=2)", "base_k(k=1)")
                    for k in (0.1, 1.0)}


def test_each_rounds_channel_uses_follow_that_rounds_graph(measured):
    """Ideal channel: round t costs exactly the slots of W_{t mod period} times the payload's
    channel uses, and the plan's per-round figure is their mean over the period."""
    for channel, _, cand, rows in measured:
        if channel != "ideal":
            continue
        topo = build(cand.plan.topology)
        uses = math.ceil(cand.cost.per_round.coords / 2)
        slots = [r.schedule.slots_per_round for r in topo.rounds]
        for row in rows:
            phase = (row["round"] - 1) % topo.period
            assert row["channel_uses"] == slots[phase] * uses, (cand.plan.label(), row)
            assert row["slots"] == slots[phase]
        whole = rows[:len(rows) - len(rows) % topo.period]     # whole periods
        assert np.mean([r["channel_uses"] for r in whole]) == pytest.approx(
            cand.cost.per_round.channel_uses, rel=1e-12)
    varying = [c for ch, _, c, _ in measured if ch == "ideal"
               and len({r.schedule.slots_per_round for r in build(c.plan.topology).rounds}) > 1]
    assert varying, "some plan's rounds need different numbers of slots"


def test_predicted_channel_uses_and_energy_match_the_runtime_on_fading_channels(measured):
    for channel, dropout, cand, rows in measured:
        if channel == "ideal":
            continue
        tol = 0.05 if dropout == 0.0 else 0.12
        per = cand.cost.per_round
        assert np.mean([r["channel_uses"] for r in rows]) == pytest.approx(
            per.channel_uses, rel=tol), (dropout, cand.plan.label())
        assert np.mean([r["energy_j"] for r in rows]) == pytest.approx(
            per.energy_j, rel=2 * tol), (dropout, cand.plan.label())


def test_the_schedules_links_are_the_rounds_directed_links():
    topo = build(TopologySpec.create("base_k", 12, k=2))
    for r, ls in zip(topo.rounds, link_schedule(topo)):
        recv, send, _, w = directed_links(r.graph, r.weights)
        assert np.array_equal(ls.recv, recv) and np.array_equal(ls.send, send)
        assert np.array_equal(ls.slot_of, r.schedule.slot_of())


def test_a_resumed_run_knows_the_mixing_p_of_a_periodic_plan():
    """Periodic topologies are not in the catalog's topologies cache: a resumed execution's
    re-optimiser recomputes their p instead of taking 0 (which would let it rewire to any
    topology however poorly connected)."""
    from airplan_qo.runtime.monitor import plan_mixing_p

    db = aq.connect(":memory:")
    spec = TopologySpec.create("one_peer_exponential", 16)
    assert plan_mixing_p(db.catalog, {"topology_id": None}, spec) == pytest.approx(0.25)
    assert plan_mixing_p(db.catalog, {"topology_id": None},
                         TopologySpec.create("from_edges", 3, edges=build(
                             TopologySpec.create("ring", 3)).graph)) == 0.0
    db.close()
