"""The Trainer end to end: a numpy reference, learning on digits, stopping rules, rewiring."""

import math

import numpy as np
import pytest
import torch

from airplan_qo.data import Partition
from airplan_qo.errors import ExecutionError, ValidationError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import (
    PAPER_LITERAL_WARNING,
    ROUND_KEYS,
    RunConfig,
    Trainer,
    default_gamma,
)


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("strategy", ["loop", "batched"])
def test_dsgd_matches_an_independent_numpy_reference(digits, digits_skewed, ring10, strategy):
    cfg = RunConfig(model="logistic", rounds=4, lr=0.1, momentum=0.9, batch_size=16,
                    local_steps=2, strategy=strategy, data_seed=3)
    trainer = Trainer(cfg, digits, digits_skewed, ring10)
    w0 = trainer.x[0].double().numpy().copy()
    for _ in range(cfg.rounds):
        trainer.step()

    n, c, f = 10, 10, 64
    x = np.tile(w0, (n, 1))
    mom = np.zeros_like(x)
    w_mix = ring10.weights.toarray()
    feats = digits.x_train.reshape(digits.n_train, -1).astype(np.float64)
    sizes = np.array([len(ix) for ix in digits_skewed.indices])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(digits_skewed.indices)
    rng = np.random.default_rng(3)
    for _ in range(cfg.rounds):
        for _ in range(cfg.local_steps):
            pos = np.floor(rng.random((n, cfg.batch_size)) * sizes[:, None]).astype(int)
            idx = flat[offsets[:, None] + pos]
            grads = np.zeros_like(x)
            for i in range(n):
                weight, bias = x[i, :c * f].reshape(c, f), x[i, c * f:]
                xb, yb = feats[idx[i]], digits.y_train[idx[i]]
                p = _softmax(xb @ weight.T + bias)
                p[np.arange(len(yb)), yb] -= 1.0
                p /= len(yb)
                grads[i] = np.concatenate([(p.T @ xb).ravel(), p.sum(axis=0)])
            mom = 0.9 * mom + grads
            x = x - 0.1 * mom
        x = w_mix @ x
    np.testing.assert_allclose(trainer.x.double().numpy(), x, rtol=1e-4, atol=1e-5)


def _run(digits, partition, topology, **kw):
    base = dict(model="mlp", rounds=25, lr=0.05, local_steps=5, eval_every=5)
    base.update(kw)
    return Trainer(RunConfig.from_dict(base), digits, partition, topology).run()


@pytest.mark.parametrize("kw", [dict(), dict(channel="ota", snr_db=10.0),
                                dict(k_ratio=0.1, channel="ota", snr_db=10.0),
                                dict(k_ratio=0.1, mask="topk", channel="ota", dropout=0.1)])
def test_short_digits_run_learns(digits, digits_iid, ring10, kw):
    result = _run(digits, digits_iid, ring10, **kw)
    assert result.status == "succeeded"
    assert result.rounds == 25
    assert result.final_accuracy > 0.6                       # chance is 0.1
    assert result.client_acc_mean > 0.5
    assert len(result.client_accuracies) == 10
    assert 0 < result.jain_fairness <= 1
    assert result.total_channel_uses > 0 and result.total_energy_j > 0
    history = result.history
    assert [h["round"] for h in history] == list(range(1, 26))
    assert all(tuple(h) == ROUND_KEYS for h in history)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    if kw.get("channel") == "ota":
        assert np.mean([h["link_drop_rate"] for h in history]) == \
            pytest.approx(1 - math.exp(-0.1), abs=0.05)


def test_evaluation_only_every_eval_every_rounds(digits, digits_iid, ring10):
    result = _run(digits, digits_iid, ring10, rounds=7, eval_every=3, local_steps=1)
    evaluated = [h["round"] for h in result.history if h["test_accuracy"] is not None]
    assert evaluated == [3, 6, 7]
    assert all(h["consensus_distance"] is not None for h in result.history)


def test_paper_literal_runs_and_is_flagged(digits, digits_iid, ring10):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=5, algorithm="paper_literal", k_ratio=0.1,
                                   error_feedback=True, channel="ota"))
    with pytest.warns(RuntimeWarning, match="does not|instead of averaging"):
        trainer = Trainer(cfg, digits, digits_iid, ring10)
    result = trainer.run()
    assert result.algorithm == "paper_literal"
    assert result.warnings == (PAPER_LITERAL_WARNING,)
    assert "instead of averaging" in result.warnings[0]
    assert result.rounds == 5


def test_huge_learning_rate_fails_with_a_reason(digits, digits_iid, ring10):
    result = _run(digits, digits_iid, ring10, lr=1e4, momentum=0.0, rounds=20)
    assert result.status == "failed"
    assert result.rounds < 20
    assert "loss" in result.reason or "NaN" in result.reason


def test_target_accuracy_stops_early(digits, digits_iid, ring10):
    result = _run(digits, digits_iid, ring10, rounds=60, eval_every=1, target_accuracy=0.7)
    assert result.status == "succeeded"
    # judged on the clients' own models, smoothed over 3 evaluations: known one evaluation later
    assert result.rounds_to_target == result.rounds - 1 < 59
    acc = [h["client_acc_mean"] for h in result.history]
    assert np.mean(acc[-3:]) >= 0.7
    assert "reached" in result.reason


def test_target_metric_average_model(digits, digits_iid, ring10):
    own = _run(digits, digits_iid, ring10, rounds=60, eval_every=1, target_accuracy=0.7)
    avg = _run(digits, digits_iid, ring10, rounds=60, eval_every=1, target_accuracy=0.7,
               target_metric="avg_model_accuracy")
    acc = [h["test_accuracy"] for h in avg.history]
    assert np.mean(acc[-3:]) >= 0.7
    assert avg.rounds_to_target is not None and own.rounds_to_target is not None


def test_callback_can_stop(digits, digits_iid, ring10):
    seen = []

    def callback(row):
        seen.append(row["round"])
        return "stop" if row["round"] == 3 else None

    cfg = RunConfig(model="logistic", rounds=10)
    result = Trainer(cfg, digits, digits_iid, ring10).run(callback)
    assert seen == [1, 2, 3] and result.rounds == 3
    assert result.status == "succeeded" and "callback" in result.reason
    assert result.final_accuracy is not None               # evaluated although round 3 was not


def test_rewire_keeps_the_average_model(digits, digits_skewed, ring10, complete10):
    for kw in (dict(), dict(k_ratio=0.2)):
        cfg = RunConfig.from_dict(dict(model="mlp", rounds=8, local_steps=2, **kw))
        trainer = Trainer(cfg, digits, digits_skewed, ring10)
        for _ in range(4):
            trainer.step()
        before = trainer.average_model().clone()
        models = trainer.x.clone()
        trainer.rewire(complete10)
        assert torch.equal(trainer.average_model(), before)
        assert torch.equal(trainer.x, models)
        row = trainer.step()
        assert row["slots"] == complete10.schedule.slots_per_round
        result = trainer.run()
        assert result.status == "succeeded" and result.rounds == 8
    with pytest.raises(ExecutionError, match="cannot rewire"):
        trainer.rewire(build(TopologySpec.create("ring", 12)))


def test_complete_graph_dsgd_is_exact_averaging(digits, digits_iid, complete10):
    trainer = Trainer(RunConfig(model="logistic", rounds=2), digits, digits_iid, complete10)
    trainer.step()
    assert float(trainer.x.std(dim=0).max()) < 1e-6
    assert trainer.history[-1]["consensus_distance"] < 1e-5


def test_strategies_agree_on_a_run(digits, digits_skewed, ring10):
    results = [Trainer(RunConfig(model="cnn4", rounds=2, strategy=s, batch_size=8), digits,
                       digits_skewed, ring10) for s in ("loop", "batched")]
    for trainer in results:
        trainer.step()
        trainer.step()
    torch.testing.assert_close(results[0].x, results[1].x, rtol=1e-4, atol=1e-5)


def test_a_conv_model_is_evaluated_a_client_at_a_time_on_the_cpu(digits, digits_skewed, ring10,
                                                                monkeypatch):
    """On the CPU a model with convolutions is evaluated one client at a time (a grouped
    convolution over many clients is slower there on the evaluation's large batches); the
    accuracies are those of evaluating many clients at once."""
    from airplan_qo.runtime import engine

    trainer = Trainer(RunConfig(model="cnn4", rounds=2, strategy="batched", batch_size=8),
                      digits, digits_skewed, ring10)
    trainer.step()
    assert trainer._eval_clients() == engine._EVAL_CLIENTS_CPU_CONV == 1
    one_at_a_time = trainer.client_accuracies()
    monkeypatch.setattr(engine, "_EVAL_CLIENTS_CPU_CONV", engine._EVAL_CLIENTS)
    np.testing.assert_array_equal(trainer.client_accuracies(), one_at_a_time)
    mlp = Trainer(RunConfig(model="mlp", rounds=2), digits, digits_skewed, ring10)
    assert mlp._eval_clients() == engine._EVAL_CLIENTS


def test_clients_without_data_do_not_train(digits, ring10):
    idx = np.arange(digits.n_train)
    parts = [idx[i::9] for i in range(9)] + [np.array([], dtype=np.int64)]
    partition = Partition(indices=parts, n_samples=digits.n_train, scheme="custom")
    trainer = Trainer(RunConfig(model="logistic", rounds=3), digits, partition, ring10)
    result = trainer.run()
    assert result.status == "succeeded"


def test_offline_round_has_no_loss(digits, digits_iid, ring10):
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=30, dropout=0.9, channel_seed=1))
    result = Trainer(cfg, digits, digits_iid, ring10).run()
    assert result.status == "succeeded"
    assert any(h["train_loss"] is None for h in result.history)
    assert any(h["dropout_rate"] == 1.0 for h in result.history)


def test_config_validation():
    with pytest.raises(ValidationError, match="dsgd transmits whole models"):
        RunConfig(algorithm="dsgd", k_ratio=0.1)
    with pytest.raises(ValidationError, match="error_feedback applies to 'paper_literal'"):
        RunConfig(k_ratio=0.1, error_feedback=True)
    with pytest.raises(ValidationError, match="channel must be one of"):
        RunConfig.from_dict(dict(channel="awgn"))
    with pytest.raises(ValidationError, match="lr must be"):
        RunConfig(lr=0.0)
    with pytest.raises(ValidationError, match="k_ratio"):
        RunConfig(k_ratio=1.5)
    with pytest.raises(ValidationError, match="train_seed"):
        RunConfig(train_seed=-1)
    with pytest.raises(ValidationError, match="unknown model"):
        RunConfig(model="vgg")
    assert RunConfig(k_ratio=0.1).resolved_algorithm == "choco"
    assert RunConfig().resolved_algorithm == "dsgd"
    assert RunConfig(k_ratio=0.05).resolved_gamma == default_gamma(0.05) == 0.05
    assert RunConfig(k_ratio=0.05, mask="topk").resolved_gamma == 0.5
    assert RunConfig(k_ratio=0.1, gamma=0.3).resolved_gamma == 0.3


def test_trainer_checks_its_inputs(digits, digits_iid):
    with pytest.raises(ExecutionError, match="partition has 10 clients"):
        Trainer(RunConfig(), digits, digits_iid, build(TopologySpec.create("ring", 8)))


def test_seeds_are_independent_streams(digits, digits_iid, ring10):
    base = dict(model="logistic", rounds=3, channel="ota")
    a = Trainer(RunConfig.from_dict(base), digits, digits_iid, ring10).run()
    b = Trainer(RunConfig.from_dict(dict(**base, channel_seed=5)), digits, digits_iid, ring10).run()
    c = Trainer(RunConfig.from_dict(base), digits, digits_iid, ring10).run()
    strip = [{k: v for k, v in h.items() if k != "wall_time_s"} for h in a.history]
    assert strip == [{k: v for k, v in h.items() if k != "wall_time_s"} for h in c.history]
    assert [h["link_drop_rate"] for h in a.history] != [h["link_drop_rate"] for h in b.history]
    assert a.seeds == {"data_seed": 0, "train_seed": 0, "channel_seed": 0}
