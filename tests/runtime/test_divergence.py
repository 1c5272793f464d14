"""Divergence detection: a run whose models blow up is recorded ``failed`` with the reason, even
when its loss never passes ``divergence_factor`` x the initial loss; healthy runs are not."""

import math

import airplan_qo as aq
from airplan_qo.runtime import metrics
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.metrics import at_chance, consensus_exploded, stuck_after_explosion


def test_lr_10_is_recorded_failed_not_succeeded(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql("EXPLAIN ANALYZE TRAIN digits ON 20 CLIENTS WITH "
                       "(lr = 10, rounds = 50, seed = 1) COST MODEL dsgd")
        assert "(actual status=failed rounds=2 " in res.text.splitlines()[0]
        ex = db.catalog.query("SELECT status, reason, actual_rounds FROM airplan.executions")[0]
        assert ex["status"] == "failed" and ex["actual_rounds"] == 2
        assert "consensus distance" in ex["reason"] and "drifted apart" in ex["reason"]
        assert not db.catalog.query("SELECT * FROM airplan.feedback WHERE metric = 'rounds' "
                                    "AND NOT censored")


def test_loss_explosion_then_chance_accuracy_fails_the_run(digits, digits_iid, complete10,
                                                           monkeypatch):
    # without the consensus check this run would drag on at chance accuracy for all 30 rounds
    monkeypatch.setattr(metrics, "CONSENSUS_FACTOR", math.inf)
    result = Trainer(RunConfig(model="mlp", lr=10.0, rounds=30), digits, digits_iid,
                     complete10).run()
    assert result.status == "failed", result.reason
    assert result.rounds < 30
    assert "exploded" in result.reason and "stayed at chance" in result.reason


def _row(r, loss, acc):
    return {"round": r, "train_loss": loss, "test_accuracy": acc, "client_acc_mean": acc}


def test_stuck_after_explosion_needs_an_explosion_and_a_streak_at_chance():
    slow = [_row(r, 2.3, 0.1) for r in range(1, 20)]          # slow start: no explosion
    assert stuck_after_explosion(slow, 2.3, 10) is None
    blown = [_row(1, 300.0, 0.1)] + [_row(r, 5.0, 0.1) for r in range(2, 5)]
    assert stuck_after_explosion(blown, 2.3, 10) is None       # 4 evaluations: not yet
    reason = stuck_after_explosion(blown + [_row(5, 5.0, 0.1)], 2.3, 10)
    assert reason.startswith("training loss exploded to 300 at round 1 (130 x the initial")
    recovering = [_row(1, 300.0, 0.1)] + [_row(r, 1.0, 0.1 + 0.1 * r) for r in range(2, 9)]
    assert stuck_after_explosion(recovering, 2.3, 10) is None  # a spike it recovered from
    unevaluated = blown + [_row(r, 5.0, None) for r in range(5, 9)]
    assert stuck_after_explosion(unevaluated, 2.3, 10) is None  # only evaluated rounds count


def test_chance_and_consensus_thresholds():
    assert at_chance(0.14, 10) and not at_chance(0.16, 10)
    assert at_chance(0.55, 2) and not at_chance(0.6, 2)
    assert at_chance(0.014, 100) and not at_chance(0.02, 100)
    assert not at_chance(None, 10)
    assert consensus_exploded(159.0 * 5, 5.0, 3) is None
    assert consensus_exploded(2e4 * 5, 5.0, 3).startswith("consensus distance 1e+05 at round 3")
    assert "NaN" in consensus_exploded(math.nan, 5.0, 3)


def test_diverging_models_fail_and_noisy_runs_with_a_large_step_do_not(digits, digits_skewed,
                                                                       ring10):
    # the loss peaks at 14 x the initial loss, the consensus distance at 123 x the model's
    # norm, and accuracy sits at chance from round 3
    blown = Trainer(RunConfig(model="mlp", lr=10.0, rounds=20), digits, digits_skewed,
                    ring10).run()
    assert blown.status == "failed" and blown.rounds == 7
    assert blown.reason.startswith("training loss exploded to 32.06 at round 3 (13.9 x the "
                                   "initial loss 2.312) and accuracy has stayed at chance")
    for kw in (dict(k_ratio=1.0), dict(k_ratio=0.3), dict(k_ratio=0.05)):
        cfg = RunConfig.from_dict(dict(model="mlp", lr=0.5, local_steps=5, rounds=60, channel="ota",
                                       snr_db=0.0, dropout=0.1, eval_every=5, **kw))
        result = Trainer(cfg, digits, digits_skewed, ring10).run()
        assert result.status == "succeeded", (kw, result.reason)
