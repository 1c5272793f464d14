"""Mixing-only rounds (``Trainer.step(train=False)``): the rule mixes, nobody trains."""

import attrs
import numpy as np
import pytest
import torch

from airplan_qo.data import partition
from airplan_qo.errors import ExecutionError
from airplan_qo.plans.channel_config import ChannelConfig
from airplan_qo.plans.cliques import encode_cliques
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer


def _trained(cfg, digits, part, topology, rounds=3):
    trainer = Trainer(cfg, digits, part, topology)
    for _ in range(rounds):
        trainer.step()
    return trainer


def test_a_mixing_only_round_keeps_the_average_and_the_momentum(digits, digits_skewed, ring10):
    cfg = RunConfig(model="logistic", rounds=10, lr=0.1, local_steps=2)
    trainer = _trained(cfg, digits, digits_skewed, ring10)
    x, m = trainer.x.clone(), trainer.m.clone()
    before = trainer.history[-1]["consensus_distance"]
    row = trainer.step(train=False)
    # no local step: the momentum buffers are untouched and the round has no training loss
    assert torch.equal(trainer.m, m)
    assert row["train_loss"] is None
    # the ring's weights are doubly stochastic: mixing keeps the network average ...
    torch.testing.assert_close(trainer.x.mean(dim=0), x.mean(dim=0), rtol=0, atol=1e-6)
    # ... and is exactly one application of W to the models (ideal channel)
    w = torch.from_numpy(ring10.weights.toarray()).float()
    torch.testing.assert_close(trainer.x, w @ x, rtol=1e-5, atol=1e-6)
    # ... which draws the clients together
    assert row["consensus_distance"] < before
    assert row["channel_uses"] == trainer.history[-2]["channel_uses"] > 0
    assert trainer.round == 4


def test_mixing_only_rounds_over_the_air_close_the_consensus_gap(digits):
    part = partition("dirichlet", digits.y_train, 10, seed=0, alpha=0.3)
    cfg = RunConfig(model="logistic", rounds=30, lr=0.1, local_steps=5,
                    channel=ChannelConfig(kind="ota", snr_db=20.0))
    ring = build(TopologySpec.create("ring", 10))
    trainer = _trained(cfg, digits, part, ring, rounds=8)
    gap = trainer.history[-1]["consensus_distance"]
    for _ in range(15):
        row = trainer.step(train=False)
    assert row["consensus_distance"] < 0.5 * gap
    assert all(h["train_loss"] is None for h in trainer.history[-15:])
    assert all(h["channel_uses"] > 0 for h in trainer.history[-15:])


def test_clique_averaging_has_nothing_to_average_in_a_mixing_only_round(digits):
    part = partition("dirichlet", digits.y_train, 20, seed=0, alpha=0.5)
    cliques = [list(range(0, 10)), list(range(10, 20))]
    topology = build(TopologySpec.create("d_cliques", 20, cliques=encode_cliques(cliques),
                                         averaging="clique"))
    cfg = RunConfig(model="logistic", rounds=10, lr=0.1)
    trainer = _trained(cfg, digits, part, topology, rounds=2)
    m = trainer.m.clone()
    row = trainer.step(train=False)
    assert torch.equal(trainer.m, m) and row["train_loss"] is None
    assert np.isfinite(row["consensus_distance"])


@pytest.mark.filterwarnings("ignore:algorithm 'paper_literal' reproduces")
@pytest.mark.parametrize("algorithm, why", [
    ("gradient_tracking", "gradient trackers"),
    ("fedavg", "update, which is zero"),
    ("paper_literal", "update, which is zero"),
])
def test_rules_that_send_updates_refuse_a_mixing_only_round(digits, digits_skewed, ring10,
                                                             algorithm, why):
    kw = {"k_ratio": 0.5} if algorithm == "paper_literal" else {}
    cfg = RunConfig(model="logistic", rounds=5, algorithm=algorithm, **kw)
    trainer = _trained(cfg, digits, digits_skewed, ring10, rounds=1)
    with pytest.raises(ExecutionError, match=f"{algorithm} cannot run a mixing-only round: "
                                             f".*{why}.*the rules that can: dsgd"):
        trainer.step(train=False)
    assert trainer.round == 1


def test_a_run_resumed_after_mixing_only_rounds_is_the_same_run(tmp_path, digits,
                                                                  digits_skewed, ring10):
    cfg = RunConfig(model="logistic", rounds=10, lr=0.1, local_steps=2,
                    channel=ChannelConfig(kind="ota", snr_db=10.0))
    trainer = _trained(cfg, digits, digits_skewed, ring10, rounds=2)
    trainer.step(train=False)
    trainer.save(tmp_path / "c.pt")
    again = Trainer(cfg, digits, digits_skewed, ring10)
    again.load(tmp_path / "c.pt")
    for t in (trainer, again):
        t.step(train=False)
        t.step()
    assert torch.equal(trainer.x, again.x) and torch.equal(trainer.m, again.m)
    rows = [[{k: v for k, v in row.items() if k != "wall_time_s"} for row in t.history[-2:]]
            for t in (trainer, again)]
    assert rows[0] == rows[1]


def test_a_run_with_mix_rounds_ends_its_budget_with_mixing_only_rounds(digits, digits_skewed,
                                                                        ring10):
    cfg = RunConfig(model="logistic", rounds=8, lr=0.1, local_steps=2, mix_rounds=3)
    result = Trainer(cfg, digits, digits_skewed, ring10).run()
    trained = [h["train_loss"] is not None for h in result.history]
    assert trained == [True] * 5 + [False] * 3
    # the same rounds stepped by hand give the same models
    by_hand = Trainer(attrs.evolve(cfg, mix_rounds=0), digits, digits_skewed, ring10)
    for t in range(8):
        by_hand.step(train=t < 5)
    final = Trainer(cfg, digits, digits_skewed, ring10)
    final.run()
    assert torch.equal(final.x, by_hand.x)


def test_mix_rounds_is_checked():
    with pytest.raises(Exception, match="mix_rounds must be an integer in 0..rounds - 1"):
        RunConfig(rounds=5, mix_rounds=5)
    with pytest.raises(Exception, match="gradient_tracking cannot run mixing-only rounds"):
        RunConfig(rounds=5, mix_rounds=2, algorithm="gradient_tracking",
                  transport="digital")
    # a configuration without a tail records none (older checkpoints and cache keys hold)
    assert "mix_rounds" not in RunConfig().as_dict()
    assert RunConfig(rounds=5, mix_rounds=2).as_dict()["mix_rounds"] == 2
    assert RunConfig.from_dict(RunConfig(rounds=5, mix_rounds=2).as_dict()).mix_rounds == 2


def test_a_tail_on_the_complete_graph_rewires_and_resumes(tmp_path, digits, digits_skewed,
                                                           ring10):
    cfg = RunConfig(model="logistic", rounds=8, lr=0.1, local_steps=2, mix_rounds=2,
                    mix_on="complete", channel=ChannelConfig(kind="ota", snr_db=10.0))
    trainer = Trainer(cfg, digits, digits_skewed, ring10)
    result = trainer.run()
    assert [h["train_loss"] is not None for h in result.history] == [True] * 6 + [False] * 2
    # the tail ran on the complete graph, whose rounds cost more than the ring's
    assert trainer.topology.spec.family == "complete"
    uses = [h["channel_uses"] for h in result.history]
    assert min(uses[6:]) > max(uses[:6])
    # by hand: train on the ring, then rewire and only mix
    by_hand = Trainer(attrs.evolve(cfg, mix_rounds=0, mix_on=None), digits, digits_skewed,
                      ring10)
    for _ in range(6):
        by_hand.step()
    by_hand.rewire(build(TopologySpec.create("complete", 10, weights="metropolis_hastings")))
    for _ in range(2):
        by_hand.step(train=False)
    assert torch.equal(by_hand.x, trainer.x)
    # a checkpoint before the tail and one inside it resume to the same run
    for at in (6, 7):
        first = Trainer(cfg, digits, digits_skewed, ring10)
        first.run(lambda row: "stop" if row["round"] == at else None)
        first.save(tmp_path / f"{at}.pt")
        again = Trainer(cfg, digits, digits_skewed, ring10)
        again.load(tmp_path / f"{at}.pt")
        assert again.topology.spec.family == ("complete" if at == 7 else "ring")
        again.run()
        assert torch.equal(again.x, trainer.x)


def test_a_resume_may_not_move_the_tail_across_its_checkpoint(tmp_path, digits, digits_skewed,
                                                               ring10):
    cfg = RunConfig(model="logistic", rounds=8, lr=0.1, mix_rounds=2, mix_on="complete")
    first = Trainer(cfg, digits, digits_skewed, ring10)
    first.run(lambda row: "stop" if row["round"] == 7 else None)      # inside the tail
    first.save(tmp_path / "c.pt")
    longer = Trainer(attrs.evolve(cfg, rounds=12), digits, digits_skewed, ring10)
    with pytest.raises(ExecutionError, match="written inside its tail on the complete graph "
                                             r"\(rounds = 8\); with rounds = 12.*rounds = 8"):
        longer.load(tmp_path / "c.pt")
    # the same budget resumes, on the complete graph
    again = Trainer(cfg, digits, digits_skewed, ring10)
    again.load(tmp_path / "c.pt")
    assert again.topology.spec.family == "complete"


def test_mix_on_is_checked():
    with pytest.raises(Exception, match="the plan has none"):
        RunConfig(rounds=5, mix_on="complete")
    with pytest.raises(Exception, match="only dsgd runs its mixing-only rounds on the complete "
                                        "graph, not choco"):
        RunConfig(rounds=5, mix_rounds=2, mix_on="complete", k_ratio=0.5)
    with pytest.raises(Exception, match="mix_on must be one of complete"):
        RunConfig(rounds=5, mix_rounds=2, mix_on="star")
    # recorded only where set (older checkpoints and cache keys hold)
    assert "mix_on" not in RunConfig(rounds=5, mix_rounds=2).as_dict()
    cfg = RunConfig(rounds=5, mix_rounds=2, mix_on="complete")
    assert RunConfig.from_dict(cfg.as_dict()) == cfg
