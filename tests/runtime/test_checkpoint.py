"""Checkpoints: safe loading, bit-identical resume, aborts, and mismatches."""

import os
import signal
import threading

import pytest
import torch

from airplan_qo.errors import ExecutionError, ValidationError
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer


def _strip(history):
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in history]


CASES = [
    dict(),
    dict(k_ratio=0.1, channel="ota", dropout=0.2, g_th=0.5),
    dict(channel="ota", dropout=0.2, g_th=0.5),      # D-SGD's difference form keeps state
    dict(k_ratio=0.1, mask="topk", channel="ota", dropout=0.1),
    dict(algorithm="paper_literal", k_ratio=0.2, error_feedback=True, channel="ota"),
    dict(transport="digital", bits=4, channel="ota", dropout=0.2, g_th=0.5),   # public copies
    dict(algorithm="gradient_tracking", local_steps=1),                     # tracker, gradients
    dict(algorithm="gradient_tracking", local_steps=1, transport="digital", bits=8,
         channel="ota", dropout=0.2),
    dict(algorithm="fedprox", prox_mu=0.1, channel="ota", dropout=0.2),
    dict(algorithm="push_sum", channel="ota", dropout=0.2),                  # weights w
    dict(algorithm="matcha", matcha_budget=0.5, transport="digital", bits=8),  # activations
]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_resume_equals_an_uninterrupted_run(tmp_path, digits, digits_skewed, ring10, kw):
    cfg = RunConfig.from_dict({"model": "mlp", "rounds": 10, "local_steps": 2, "eval_every": 3,
                               **kw})
    full_trainer = Trainer(cfg, digits, digits_skewed, ring10)
    full = full_trainer.run()

    first = Trainer(cfg, digits, digits_skewed, ring10)
    for _ in range(4):
        first.step()
    path = tmp_path / "run.pt"
    first.save(path)

    resumed = Trainer(cfg, digits, digits_skewed, ring10)
    resumed.load(path)
    assert resumed.round == 4
    result = resumed.run()
    assert _strip(result.history) == _strip(full.history)
    assert torch.equal(resumed.x, full_trainer.x)
    assert torch.equal(resumed.m, full_trainer.m)
    assert result.client_accuracies == full.client_accuracies
    assert result.final_accuracy == full.final_accuracy


def test_checkpoint_loads_with_weights_only(tmp_path, digits, digits_iid, ring10):
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=3, k_ratio=0.1, channel="ota"))
    trainer = Trainer(cfg, digits, digits_iid, ring10)
    trainer.step()
    trainer.save(tmp_path / "c.pt")
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    assert state["round"] == 1 and state["x"].shape == trainer.x.shape
    assert set(state["rule"]) == {"xhat", "s", "ref"}
    assert "channel" in state and "data_rng" in state and "train_gen" in state


def test_interrupt_from_callback_aborts_with_a_checkpoint(tmp_path, digits, digits_iid, ring10):
    cfg = RunConfig.from_dict(dict(model="mlp", rounds=8, k_ratio=0.2, channel="ota"))
    full = Trainer(cfg, digits, digits_iid, ring10).run()

    def callback(row):
        if row["round"] == 3:
            raise KeyboardInterrupt

    path = tmp_path / "abort.pt"
    aborted = Trainer(cfg, digits, digits_iid, ring10).run(callback, checkpoint_path=path)
    assert aborted.status == "aborted" and aborted.rounds == 3
    assert aborted.checkpoint_path == str(path) and path.exists()
    resumed = Trainer(cfg, digits, digits_iid, ring10)
    resumed.load(path)
    assert _strip(resumed.run().history) == _strip(full.history)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_sigint_finishes_the_round_then_aborts(tmp_path, digits, digits_iid, ring10):
    def callback(row):
        if row["round"] == 2:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    trainer = Trainer(RunConfig(model="logistic", rounds=6), digits, digits_iid, ring10)
    result = trainer.run(callback, checkpoint_path=tmp_path / "sig.pt")
    assert result.status == "aborted" and result.rounds == 2
    assert (tmp_path / "sig.pt").exists()
    assert signal.getsignal(signal.SIGINT) is before     # the run's guard put it back


def test_abort_without_path_uses_a_temporary_file(digits, digits_iid, ring10):
    def callback(row):
        raise KeyboardInterrupt

    result = Trainer(RunConfig(model="logistic", rounds=3), digits, digits_iid,
                     ring10).run(callback)
    assert result.status == "aborted" and os.path.exists(result.checkpoint_path)
    os.unlink(result.checkpoint_path)


def test_mismatches_are_refused(tmp_path, digits, digits_iid, ring10):
    cfg = RunConfig(model="logistic", rounds=3)
    trainer = Trainer(cfg, digits, digits_iid, ring10)
    trainer.step()
    path = tmp_path / "m.pt"
    trainer.save(path)
    with pytest.raises(ExecutionError, match="different configuration.*lr"):
        Trainer(RunConfig(model="logistic", rounds=3, lr=0.2), digits, digits_iid,
                ring10).load(path)
    other = build(TopologySpec.create("erdos_renyi", 10, seed=1, p=0.5))
    with pytest.raises(ExecutionError, match="different topology"):
        Trainer(cfg, digits, digits_iid, other).load(path)
    with pytest.raises(ExecutionError, match="strategy"):
        Trainer(RunConfig(model="logistic", rounds=3, strategy="loop"), digits, digits_iid,
                ring10).load(path)
    with pytest.raises(ExecutionError, match="does not exist"):
        trainer.load(tmp_path / "missing.pt")
    # more rounds is a resumable change
    longer = Trainer(RunConfig(model="logistic", rounds=5), digits, digits_iid, ring10)
    longer.load(path)
    assert longer.run().rounds == 5


def test_rewired_run_resumes_on_the_rewired_topology(tmp_path, digits, digits_iid, ring10,
                                                      complete10):
    cfg = RunConfig(model="logistic", rounds=5, k_ratio=0.3)
    trainer = Trainer(cfg, digits, digits_iid, ring10)
    trainer.step()
    trainer.rewire(complete10)
    trainer.step()
    trainer.save(tmp_path / "r.pt")
    with pytest.raises(ExecutionError, match="rewire first"):
        Trainer(cfg, digits, digits_iid, ring10).load(tmp_path / "r.pt")
    resumed = Trainer(cfg, digits, digits_iid, ring10)
    resumed.rewire(complete10)
    resumed.load(tmp_path / "r.pt")
    assert _strip(resumed.run().history) == _strip(trainer.run().history)


@pytest.mark.parametrize("k_from,k_to,algorithm", [(0.1, 0.3, "choco"), (0.1, 1.0, "dsgd")])
def test_raising_k_mid_run_and_resuming_after_it(tmp_path, digits, digits_iid, ring10, k_from,
                                                 k_to, algorithm):
    cfg = RunConfig.from_dict(dict(model="logistic", rounds=8, k_ratio=k_from, channel="ota"))
    full = Trainer(cfg, digits, digits_iid, ring10)
    rows = [full.step() for _ in range(3)]
    full.rewire(ring10, k_ratio=k_to)
    assert full.algorithm == algorithm and full.config.k_ratio == k_to
    rows += [full.step() for _ in range(5)]
    assert rows[-1]["channel_uses"] > rows[0]["channel_uses"]     # more coordinates sent
    with pytest.raises(ExecutionError, match="only raises k"):
        full.rewire(ring10, k_ratio=k_from)

    part = Trainer(cfg, digits, digits_iid, ring10)
    for _ in range(3):
        part.step()
    part.rewire(ring10, k_ratio=k_to)
    part.step()
    part.save(tmp_path / "c.pt")
    resumed = Trainer(cfg, digits, digits_iid, ring10)
    resumed.rewire(ring10, k_ratio=k_to)          # as the monitor's replay does
    resumed.load(tmp_path / "c.pt")
    rest = [resumed.step() for _ in range(4)]
    assert _strip(rest) == _strip(rows[4:])


#: A run configuration as executions' options and checkpoints stored it before the channel's
#: settings became one value (the same flat form :meth:`RunConfig.as_dict` writes now).
FLAT_RUN_CONFIG = {
    "model": "logistic", "lr": 0.05, "momentum": 0.9, "batch_size": 32, "local_steps": 1,
    "rounds": 6, "k_ratio": 0.1, "algorithm": "auto", "mask": "common_randk",
    "error_feedback": False, "gamma": None, "channel": "ota", "ota_payload": "difference",
    "snr_db": 5.0, "g_th": 0.2, "tx_power_dbm": 23.0, "bandwidth_hz": 1e6, "dropout": 0.1,
    "data_seed": 1, "train_seed": 2, "channel_seed": 3, "target_accuracy": None,
    "target_metric": "accuracy", "eval_every": 1, "threads": 1, "strategy": "auto",
    "weight_decay": 0.0, "client_eval_samples": 2000, "divergence_factor": 1e3, "device": "cpu",
}


def test_a_flat_run_config_resumes(tmp_path, digits, digits_iid, ring10):
    from airplan_qo.plans.channel_config import ChannelConfig

    cfg = RunConfig.from_dict(FLAT_RUN_CONFIG)
    assert cfg.channel == ChannelConfig(kind="ota", snr_db=5.0, g_th=0.2, dropout=0.1)
    # the fields added since (transport, bits, ...) take their defaults
    assert cfg.as_dict() == {**FLAT_RUN_CONFIG, "transport": "ota", "bits": 32,
                             "prox_mu": None, "matcha_budget": 0.5, "dllr_mask": "random",
                             "dllr_sigma": 0.01, "dllr_order": "gauss_seidel",
                             "dllr_beta_noise": 0.01}
    first = Trainer(cfg, digits, digits_iid, ring10)
    for _ in range(3):
        first.step()
    first.save(tmp_path / "c.pt")
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    state["config"] = dict(FLAT_RUN_CONFIG)            # as the earlier code wrote it
    torch.save(state, tmp_path / "old.pt")
    resumed = Trainer(RunConfig.from_dict(FLAT_RUN_CONFIG), digits, digits_iid, ring10)
    resumed.load(tmp_path / "old.pt")
    assert resumed.round == 3
    full_trainer = Trainer(cfg, digits, digits_iid, ring10)
    full = full_trainer.run()
    assert _strip(resumed.run().history) == _strip(full.history)
    assert torch.equal(resumed.x, full_trainer.x)


def test_a_run_config_wants_a_channel_value():
    import attrs

    with pytest.raises(ValidationError, match="channel must be a ChannelConfig"):
        RunConfig(channel="ota")
    cfg = RunConfig.from_dict(FLAT_RUN_CONFIG)
    assert RunConfig.from_dict(attrs.asdict(cfg)) == cfg
    assert RunConfig.from_dict({**attrs.asdict(cfg), "channel": cfg.channel}) == cfg
    with pytest.raises(ValidationError, match="given whole and as dropout, snr_db"):
        RunConfig.from_dict({"channel": cfg.channel, "snr_db": 3.0, "dropout": 0.1})
