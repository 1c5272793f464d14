"""The ``device`` option: parsing, resolution, recording, CPU results unchanged, checkpoints
across devices, and (on a machine with CUDA) the GPU runs themselves."""

import contextlib
import functools
import json

import numpy as np
import pytest
import torch

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import ExecutionError, ValidationError
from airplan_qo.plans.cliques import encode_cliques
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime import execution, gossip
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.checkpoint import read
from airplan_qo.runtime.device import check_device, resolve_device
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.sql import bind, parse_one

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

TRAIN = ("TRAIN digits ON 6 CLIENTS WITH (alpha = 1.0, rounds = 12, seed = 3{extra}) "
         "USING TOPOLOGY small_world(k = 2) USING SPARSITY 1 COST MODEL dsgd")

#: Runs whose every stream and code path a device could disturb: noise, dropout, truncation,
#: common and top-k masks, error feedback.
CASES = [
    dict(channel="ota", dropout=0.2, snr_db=0.0),
    dict(k_ratio=0.1, channel="ota", dropout=0.1),
    dict(k_ratio=0.1, mask="topk", channel="ota", dropout=0.1),
    dict(algorithm="paper_literal", k_ratio=0.2, error_feedback=True, channel="ota"),
]


def _strip(history):
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in history]


# ---- parsing and resolution -----------------------------------------------------------------

@pytest.mark.parametrize("text, want", [("cpu", "cpu"), (" CUDA ", "cuda"), ("cuda:1", "cuda:1"),
                                        ("cuda:01", "cuda:1"), ("Auto", "auto")])
def test_device_text_is_normalised(text, want):
    assert check_device(text) == want
    assert RunConfig(device=text).device == want


@pytest.mark.parametrize("bad", ["cuda:x", "tpu", "", "cpu:0", "cuda:", "gpu", 3, None])
def test_a_bad_device_is_a_one_line_error_naming_the_forms(bad):
    with pytest.raises(ValidationError) as err:
        check_device(bad)
    text = str(err.value)
    assert "\n" not in text and "auto, cpu, cuda or cuda:N" in text and repr(bad) in text
    with pytest.raises(ValidationError, match="device must be"):
        RunConfig(device=bad)


def test_auto_resolves_to_cuda_only_when_cuda_is_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_auto_is_the_cpu_here():
    assert resolve_device("auto") == torch.device("cpu")
    assert Trainer(RunConfig(device="auto", rounds=1), *_digits_ring()).device.type == "cpu"


def test_cuda_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for text in ("cuda", "cuda:0"):
        with pytest.raises(ExecutionError) as err:
            resolve_device(text)
        message = str(err.value)
        assert "\n" not in message and f"device '{text}' needs a CUDA GPU" in message
        assert "use device 'cpu'" in message


def test_a_missing_gpu_index_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(ExecutionError, match=r"device 'cuda:3' does not exist: this machine "
                                             r"has 1 CUDA device \(cuda:0\)"):
        resolve_device("cuda:3")


# ---- SQL, CLI, Python API -------------------------------------------------------------------

def test_with_device_is_an_execution_option_not_a_workload_parameter():
    plain = bind(parse_one(TRAIN.format(extra="")))
    bound = bind(parse_one(TRAIN.format(extra=", device = 'CUDA:0'")))
    assert bound.device == "cuda:0" and plain.device is None
    assert bound.workload == plain.workload        # planning and cache keys are unchanged
    explain = bind(parse_one("EXPLAIN ANALYZE " + TRAIN.format(extra=", device = 'auto'")))
    assert explain.device == "auto"


@pytest.mark.parametrize("value", ["'cuda:x'", "'tpu'", "1"])
def test_with_a_bad_device_points_at_the_value(value):
    text = TRAIN.format(extra=f", device = {value}")
    with pytest.raises(aq.BindError) as err:
        bind(parse_one(text))
    assert "device must be auto, cpu, cuda or cuda:N" in str(err.value)
    assert err.value.col == text.index(f"device = {value}") + len("device = ") + 1


def test_analyze_workload_refuses_the_device_option():
    with pytest.raises(aq.BindError, match="'device' is an execution option of TRAIN"):
        bind(parse_one("ANALYZE WORKLOAD digits ON 6 CLIENTS WITH (device = 'cpu')"))
    with pytest.raises(ValidationError, match="'device' is not a workload setting"):
        aq.Workload.from_params("digits", 6, {"device": "cpu"})


def test_train_records_the_resolved_device_and_explain_analyze_shows_it(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        [res] = db.sql("EXPLAIN ANALYZE " + TRAIN.format(extra=", device = 'cpu'"))
        assert "\nDevice: cpu\n" in res.text
        [doc] = db.sql("EXPLAIN ANALYZE (FORMAT JSON) " + TRAIN.format(extra=""))
        assert doc.document[0]["device"] == "cpu"
        rows = db.catalog.query("SELECT options FROM airplan.executions ORDER BY exec_id")
        for row in rows:
            options = json.loads(row["options"])
            assert options["device"] == "cpu" and options["run_config"]["device"] == "cpu"


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_auto_trains_on_the_cpu_here_and_records_what_was_asked(tmp_path):
    with aq.connect(tmp_path / "c.duckdb", device="auto") as db:
        [res] = db.sql(TRAIN.format(extra=""))
        [row] = db.catalog.query("SELECT options FROM airplan.executions")
        options = json.loads(row["options"])
        assert options["device"] == "cpu" and options["run_config"]["device"] == "auto"


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_fails_before_anything_is_planned_or_recorded(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(ExecutionError, match="device 'cuda' needs a CUDA GPU"):
            db.sql(TRAIN.format(extra=", device = 'cuda'"))
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.planning_runs")[0]["n"] == 0
        plan = db.plan(aq.Workload(dataset="digits", clients=6, rounds=3),
                       topologies=["ring"], sparsity=[1.0], fallback="complete")
        with pytest.raises(ExecutionError, match="device 'cuda:0' needs a CUDA GPU"):
            db.execute(plan, device="cuda:0")
        assert db.catalog.query("SELECT count(*) AS n FROM airplan.executions")[0]["n"] == 0


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cli_device_flag(tmp_path, capsys):
    catalog = str(tmp_path / "c.duckdb")
    assert main(["sql", "--catalog", catalog, "--device", "tpu", "SELECT 1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("airplan: error: device must be auto, cpu, cuda or cuda:N (N the "
                           "index of a CUDA GPU), got 'tpu'")
    assert main(["sql", "--catalog", catalog, "--device", "cuda", "--quiet",
                 TRAIN.format(extra="")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device 'cuda' needs a CUDA GPU" in err
    # the statement's option wins over the flag
    assert main(["sql", "--catalog", catalog, "--device", "cuda", "--quiet",
                 TRAIN.format(extra=", device = 'cpu'")]) == 0
    assert main(["sql", "--catalog", catalog, "--device", "auto", "--quiet",
                 TRAIN.format(extra="")]) == 0
    with aq.connect(catalog) as db:
        rows = db.catalog.query("SELECT options FROM airplan.executions ORDER BY exec_id")
    assert [json.loads(r["options"])["run_config"]["device"] for r in rows] == ["cpu", "auto"]
    assert {json.loads(r["options"])["device"] for r in rows} == {"cpu"}


def _interrupt_at(monkeypatch, at_round):
    import os
    import signal

    original = Trainer.step

    def step(self):
        row = original(self)
        if self.round == at_round:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    monkeypatch.setattr(Trainer, "step", step)


def test_resume_on_another_device_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 4)
    with aq.connect(tmp_path / "a.duckdb") as db:
        [full] = db.sql(TRAIN.format(extra=""))
        full_curve = db.catalog.query("SELECT round, test_accuracy FROM airplan.round_stats "
                                      "ORDER BY round")
    with aq.connect(tmp_path / "b.duckdb") as db:
        with monkeypatch.context() as m:
            _interrupt_at(m, 5)
            [cut] = db.sql(TRAIN.format(extra=", device = 'cuda:0'") if CUDA
                           else TRAIN.format(extra=""))
        exec_id = cut.rows[0][0]
        [row] = db.catalog.query("SELECT options FROM airplan.executions WHERE exec_id = ?",
                                 [exec_id])
        options = json.loads(row["options"])
        if not CUDA:      # as if a GPU machine had started it: its device and its request
            options["device"] = "cuda:0"
            options["run_config"]["device"] = "cuda"
            db.catalog.update_row("executions", exec_id, {"options": json.dumps(options)})
            with pytest.raises(ExecutionError) as err:
                db.resume(exec_id)
            assert f"airplan resume {exec_id} --device cpu" in str(err.value)
            assert db.catalog.query("SELECT status FROM airplan.executions")[0]["status"] \
                == "aborted"
        rep = db.resume(exec_id, device="cpu")
        assert rep.result.status == "succeeded" and rep.result.device == "cpu"
        [row] = db.catalog.query("SELECT options FROM airplan.executions WHERE exec_id = ?",
                                 [exec_id])
        options = json.loads(row["options"])
        assert options["device"] == "cpu" and options["devices"] == ["cuda:0", "cpu"]
        assert options["run_config"]["device"] == "cpu"
        curve = db.catalog.query("SELECT round, test_accuracy FROM airplan.round_stats "
                                 "ORDER BY round")
        assert [r["round"] for r in curve] == [r["round"] for r in full_curve]
        if not CUDA:      # the same CPU arithmetic throughout: the same run, bit for bit
            assert curve == full_curve
            assert rep.result.final_accuracy == full.rows[0][full.columns.index(
                "final_accuracy")]


# ---- CPU results are unchanged --------------------------------------------------------------

def _digits_ring(n=10):
    from airplan_qo.data import load, partition

    ds = load("digits", seed=0)
    return ds, partition("dirichlet", ds.y_train, n, seed=0, alpha=0.5), \
        build(TopologySpec.create("ring", n))


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_device_cpu_is_bit_identical_to_the_default(digits, digits_skewed, ring10, kw):
    runs = []
    for device in (None, "cpu", *(("auto",) if not CUDA else ())):
        cfg = RunConfig.from_dict(dict(model="mlp", rounds=6, local_steps=2, eval_every=2, **kw,
                                       **({"device": device} if device else {})))
        trainer = Trainer(cfg, digits, digits_skewed, ring10)
        result = trainer.run()
        assert trainer.device == torch.device("cpu") and result.device == "cpu"
        runs.append((_strip(result.history), trainer.x, result.client_accuracies))
    for history, x, acc in runs[1:]:
        assert history == runs[0][0] and torch.equal(x, runs[0][1]) and acc == runs[0][2]


def test_clique_averaging_on_cpu_is_unchanged_by_the_option(digits):
    from airplan_qo.data import partition

    cliques = [[0, 2, 4, 6], [1, 3, 5, 7]]
    topo = build(TopologySpec.create("d_cliques", 8, cliques=encode_cliques(cliques)))
    part = partition("dirichlet", digits.y_train, 8, seed=0, alpha=0.1)
    out = []
    for extra in ({}, {"device": "cpu"}):
        cfg = RunConfig.from_dict(dict(rounds=4, channel="ota", dropout=0.1, **extra))
        trainer = Trainer(cfg, digits, part, topo)
        out.append((_strip(trainer.run().history), trainer.x))
    assert out[0][0] == out[1][0] and torch.equal(out[0][1], out[1][1])


# ---- the sparse mixing path used on GPUs, exercised on the CPU -------------------------------

def test_torch_sparse_operator_matches_scipy():
    links = gossip.LinkSet(build(TopologySpec.create("ring", 200)))
    up = np.ones(links.recv.size, dtype=bool)
    up[::7] = False
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(200, 33, generator=gen)
    for args in ((links.recv, links.send, links.w, links.diag),
                 (links.recv[up], links.send[up], links.w[up], links.diag),
                 (links.recv, links.send, np.ones(links.recv.size))):
        scipy_op = gossip.Operator(200, *args)
        torch_op = gossip.Operator(200, *args, torch_sparse=True)
        assert not scipy_op.dense and scipy_op.scipy and not torch_op.scipy
        assert torch.allclose(torch_op.apply(y), scipy_op.apply(y), atol=1e-6)


def test_a_run_mixing_with_torch_sparse_matches_scipy(digits, monkeypatch):
    from airplan_qo.data import partition

    part = partition("iid", digits.y_train, 60, seed=0)
    topo = build(TopologySpec.create("ring", 60))
    cfg = RunConfig.from_dict(dict(rounds=5, channel="ota", dropout=0.1, k_ratio=0.2))
    scipy_run = Trainer(cfg, digits, part, topo)
    assert not scipy_run.links.operator(np.ones(scipy_run.links.recv.size, bool)).dense
    reference = scipy_run.run()
    monkeypatch.setattr(gossip.Operator, "__init__", functools.partialmethod(
        gossip.Operator.__init__, torch_sparse=True))
    sparse_run = Trainer(cfg, digits, part, topo)
    result = sparse_run.run()
    assert torch.allclose(sparse_run.x, scipy_run.x, atol=1e-4)
    for a, b in zip(result.history, reference.history):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=0.02)
        assert a["channel_uses"] == b["channel_uses"]


# ---- checkpoints across devices -------------------------------------------------------------

@contextlib.contextmanager
def _saved_as_if_on_cuda():
    """torch.save tags every CPU storage with location 'cuda:0', as a GPU run's file has."""
    entry = (1, lambda storage: "cuda:0" if storage.device.type == "cpu" else None,
             lambda storage, location: None)
    registry = torch.serialization._package_registry
    registry.insert(0, entry)
    try:
        yield
    finally:
        registry.remove(entry)


def test_a_checkpoint_written_on_a_gpu_resumes_on_the_cpu(tmp_path, digits, digits_skewed,
                                                          ring10):
    cfg = RunConfig.from_dict(dict(rounds=8, k_ratio=0.1, channel="ota", dropout=0.1, eval_every=2))
    full_trainer = Trainer(cfg, digits, digits_skewed, ring10)
    full = full_trainer.run()
    first = Trainer(cfg, digits, digits_skewed, ring10)
    for _ in range(3):
        first.step()
    path = tmp_path / "gpu.pt"
    with _saved_as_if_on_cuda():
        first.save(path)
    if not CUDA:      # read as it was written, the file needs CUDA
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)
    state = read(path)                                 # map_location: onto the CPU
    assert state["x"].device.type == "cpu" and state["round"] == 3
    resumed = Trainer(RunConfig.from_dict({**cfg.as_dict(), "device": "cpu"}), digits,
                      digits_skewed, ring10)
    resumed.load(path)
    result = resumed.run()
    assert _strip(result.history) == _strip(full.history)
    assert torch.equal(resumed.x, full_trainer.x)


def test_auto_strategy_batches_conv_models_on_a_gpu_at_every_image_size():
    from airplan_qo.runtime.flat import auto_strategy
    from airplan_qo.model_size import build_model

    cnn = build_model("cnn4", (3, 32, 32), 10)
    assert auto_strategy(cnn, (3, 32, 32)) == "loop"
    assert auto_strategy(cnn, (3, 32, 32), on_gpu=True) == "batched"
    assert auto_strategy(build_model("mlp", (3, 32, 32), 10), (3, 32, 32)) == "batched"
    assert auto_strategy(build_model("resnet18", (3, 32, 32), 10), (3, 32, 32),
                         on_gpu=True) == "loop"


def test_an_auto_run_resumes_with_the_strategy_that_wrote_its_checkpoint(tmp_path, digits,
                                                                        digits_skewed, ring10):
    """'auto' resolves by device; a checkpoint written where it resolved otherwise (here: as
    if on a GPU) is continued with the strategy it was written with, exactly."""
    cfg = RunConfig(model="cnn4", rounds=4, batch_size=8)
    first = Trainer(cfg, digits, digits_skewed, ring10)
    assert first.strategy == "batched"
    first.use_strategy("loop")
    first.step()
    path = tmp_path / "auto.pt"
    first.save(path)
    resumed = Trainer(cfg, digits, digits_skewed, ring10)
    resumed.load(path)
    assert resumed.strategy == "loop"
    first.step()
    resumed.step()
    assert torch.equal(resumed.x, first.x)
    explicit = Trainer(RunConfig.from_dict({**cfg.as_dict(), "strategy": "batched"}), digits,
                       digits_skewed, ring10)
    with pytest.raises(ExecutionError, match="strategy"):
        explicit.load(path)


def test_a_checkpoint_resumes_with_another_device_setting(tmp_path, digits, digits_skewed,
                                                          ring10):
    """Save with the default device, load into a trainer configured with an explicit device
    (cuda:0 where there is one): the device is not part of what must match."""
    cfg = RunConfig.from_dict(dict(rounds=6, k_ratio=0.1, channel="ota"))
    full_trainer = Trainer(cfg, digits, digits_skewed, ring10)
    full = full_trainer.run()
    first = Trainer(cfg, digits, digits_skewed, ring10)
    for _ in range(2):
        first.step()
    first.save(tmp_path / "c.pt")
    other = RunConfig.from_dict({**cfg.as_dict(), "device": "cuda:0" if CUDA else "cpu"})
    resumed = Trainer(other, digits, digits_skewed, ring10)
    resumed.load(tmp_path / "c.pt")
    assert resumed.x.device == resumed.device and resumed.rule.xhat.device == resumed.device
    result = resumed.run()
    assert result.rounds == 6 and result.status == "succeeded"
    if not CUDA:
        assert _strip(result.history) == _strip(full.history)
    else:
        assert result.final_accuracy == pytest.approx(full.final_accuracy, abs=0.05)


def test_noise_generator_state_from_another_device_reseeds_by_round():
    def channel():
        return Channel("ota", snr_db=10.0, g_th=0.1, dropout=0.0, seed=7)

    saved = channel()
    saved.randn(5)
    same = channel()
    same.set_state(saved.state(), 3)
    assert torch.equal(same.randn(4), saved.randn(4))          # same device: continued
    foreign = dict(channel().state(), gen_device="cuda")
    a, b, c = channel(), channel(), channel()
    a.set_state(foreign, 3)
    b.set_state(foreign, 3)
    c.set_state(foreign, 4)
    first = a.randn(4)
    assert torch.equal(first, b.randn(4))                      # reproducible
    assert not torch.equal(first, c.randn(4))                  # fresh for another round
    assert not torch.equal(first, channel().randn(4))          # not the first rounds' noise


# ---- on a CUDA GPU --------------------------------------------------------------------------

#: Largest per-round difference allowed between two GPU runs with the same seeds, and between
#: a GPU and a CPU run (docs/runtime.md, Devices: reproducibility on a GPU).
GPU_REPEAT_ACC_TOL = 0.02
GPU_REPEAT_LOSS_RTOL = 1e-3
GPU_VS_CPU_ACC_TOL = 0.05


def _run(device, digits, part, topo, **kw):
    cfg = RunConfig.from_dict(dict(rounds=15, local_steps=2, eval_every=3, device=device, **kw))
    trainer = Trainer(cfg, digits, part, topo)
    return trainer, trainer.run()


@needs_cuda
@pytest.mark.parametrize("kw", CASES + [dict(model="cnn4", strategy="batched", channel="ota"),
                                        dict(model="cnn4", strategy="loop", channel="ota")])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_gpu_runs_repeat_within_tolerance(digits, digits_skewed, ring10, kw):
    (ta, a), (_, b) = (_run("cuda", digits, digits_skewed, ring10, **kw) for _ in range(2))
    assert ta.x.device.type == "cuda" and a.device == "cuda:0"
    for ra, rb in zip(a.history, b.history):
        if ra["test_accuracy"] is not None:
            assert abs(ra["test_accuracy"] - rb["test_accuracy"]) <= GPU_REPEAT_ACC_TOL
        if ra["train_loss"] is not None:
            assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=GPU_REPEAT_LOSS_RTOL)
        assert ra["channel_uses"] == rb["channel_uses"]


#: Without channel noise a GPU run sees the same data, link draws and masks as the CPU run and
#: differs only by rounding (with OTA noise it is another noise realisation).
NOISELESS = [dict(dropout=0.1), dict(k_ratio=0.1, dropout=0.1),
             dict(k_ratio=0.1, mask="topk", dropout=0.1),
             dict(model="cnn4", strategy="batched", k_ratio=0.2)]


@needs_cuda
@pytest.mark.parametrize("kw", NOISELESS)
def test_gpu_and_cpu_accuracies_are_close(digits, digits_skewed, ring10, kw):
    _, gpu = _run("cuda", digits, digits_skewed, ring10, **kw)
    _, cpu = _run("cpu", digits, digits_skewed, ring10, **kw)
    assert gpu.final_accuracy == pytest.approx(cpu.final_accuracy, abs=GPU_VS_CPU_ACC_TOL)
    assert gpu.client_acc_mean == pytest.approx(cpu.client_acc_mean, abs=GPU_VS_CPU_ACC_TOL)
    assert gpu.total_channel_uses == pytest.approx(cpu.total_channel_uses, rel=0.05)


@needs_cuda
def test_gpu_sparse_mixing_and_clique_averaging(digits):
    from airplan_qo.data import partition

    part = partition("iid", digits.y_train, 60, seed=0)
    ring = build(TopologySpec.create("ring", 60))
    trainer, gpu = _run("cuda", digits, part, ring, k_ratio=0.2, dropout=0.1)
    assert trainer.links.operator(np.ones(trainer.links.recv.size, bool)).matrix.is_sparse_csr
    _, cpu = _run("cpu", digits, part, ring, k_ratio=0.2, dropout=0.1)
    assert gpu.final_accuracy == pytest.approx(cpu.final_accuracy, abs=GPU_VS_CPU_ACC_TOL)
    _, noisy = _run("cuda", digits, part, ring, channel="ota", dropout=0.1)
    assert noisy.status == "succeeded" and noisy.final_accuracy > 0.5
    cliques = encode_cliques([[0, 2, 4, 6], [1, 3, 5, 7]])
    topo = build(TopologySpec.create("d_cliques", 8, cliques=cliques))
    part = partition("dirichlet", digits.y_train, 8, seed=0, alpha=0.1)
    _, gpu = _run("cuda", digits, part, topo, dropout=0.1)
    _, cpu = _run("cpu", digits, part, topo, dropout=0.1)
    assert gpu.final_accuracy == pytest.approx(cpu.final_accuracy, abs=GPU_VS_CPU_ACC_TOL)
    _, noisy = _run("cuda", digits, part, topo, channel="ota", dropout=0.1)
    assert noisy.status == "succeeded"


@needs_cuda
@pytest.mark.parametrize("channel", ["ideal", "ota"])
def test_gpu_checkpoint_resumes_on_the_cpu_and_back(tmp_path, digits, digits_skewed, ring10,
                                                    channel):
    kw = dict(rounds=10, k_ratio=0.1, channel=channel, dropout=0.1, eval_every=2)
    gpu_full = Trainer(RunConfig.from_dict(dict(device="cuda", **kw)), digits, digits_skewed,
                       ring10).run()
    first = Trainer(RunConfig.from_dict(dict(device="cuda", **kw)), digits, digits_skewed, ring10)
    for _ in range(4):
        first.step()
    first.save(tmp_path / "gpu.pt")
    assert read(tmp_path / "gpu.pt")["device"] == "cuda:0"
    on_cpu = Trainer(RunConfig.from_dict(dict(device="cpu", **kw)), digits, digits_skewed, ring10)
    on_cpu.load(tmp_path / "gpu.pt")
    assert on_cpu.x.device.type == "cpu" and on_cpu.round == 4
    assert torch.equal(on_cpu.x, first.x.cpu())
    for _ in range(3):
        on_cpu.step()
    on_cpu.save(tmp_path / "cpu.pt")
    back = Trainer(RunConfig.from_dict(dict(device="cuda", **kw)), digits, digits_skewed, ring10)
    back.load(tmp_path / "cpu.pt")
    assert back.x.device.type == "cuda" and torch.equal(back.x.cpu(), on_cpu.x)
    result = back.run()
    assert result.status == "succeeded" and result.rounds == 10
    if channel == "ideal":      # with noise, the resumed rounds draw another realisation
        assert result.final_accuracy == pytest.approx(gpu_full.final_accuracy,
                                                      abs=GPU_VS_CPU_ACC_TOL)
