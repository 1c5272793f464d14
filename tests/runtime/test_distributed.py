"""One run over several processes (torch.distributed, gloo on loopback) equals the
single-process run: round statistics, final models, accuracies and checkpoints, bit for bit
(the MLP and logistic models' local training is the same arithmetic on a block of clients as on
all of them; docs/runtime.md, Several processes). Covers D-SGD (ideal, and over the air in its
stateful difference form) and CHOCO with a common rand-k mask, a static and a time-varying
topology, dropout, uneven blocks (3 ranks), a callback that rewires, checkpoints and stops,
resume across a different number of processes, and the CLI under torchrun; and, on sparse
topologies, that each rank receives only the rows its clients mix with (neighbour-only
exchange), with the same results."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import distributed_scenarios as S
from airplan_qo.errors import ExecutionError
from airplan_qo.runtime import distributed
from airplan_qo.runtime.checkpoint import read
from airplan_qo.runtime.compression import k_from_ratio
from airplan_qo.runtime.engine import Trainer
from airplan_qo.runtime.gossip import DSGD

pytestmark = pytest.mark.skipif(not torch.distributed.is_available()
                                or not torch.distributed.is_gloo_available(),
                                reason="needs torch.distributed with gloo")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(S.__file__).resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def launch(world: int, out: Path, names: list[str]) -> None:
    """Start ``world`` processes on loopback running the scenarios; fail with their output."""
    port = str(_free_port())
    procs = [subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *names],
        env=_env(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    bad = [(r, p.returncode, o) for r, (p, o) in enumerate(zip(procs, outputs)) if p.returncode]
    assert not bad, "\n".join(f"rank {r} exited {rc}:\n{o[-3000:]}" for r, rc, o in bad)


def _single(name: str, **changes):
    import tempfile

    trainer = Trainer(*S.inputs(name, **changes))
    with tempfile.TemporaryDirectory() as tmp:
        return trainer, trainer.run(S.callback(name, trainer, Path(tmp) / "one.pt"))


_REFERENCE: dict[tuple, dict] = {}


def reference(name: str, **changes) -> dict:
    """The single-process run's outcome (cached)."""
    key = (name, tuple(sorted(changes.items())))
    if key not in _REFERENCE:
        _REFERENCE[key] = S.outcome(*_single(name, **changes))
    return _REFERENCE[key]


def _write_inputs(out: Path, names: list[str]) -> None:
    """The one-process checkpoints at round 3 that the resume_* scenarios load."""
    for name in names:
        if name.startswith("resume_"):
            if S.SCENARIOS[name][2].get("mix_rounds", 0) >= 3:   # round 3 inside the tail
                trainer = Trainer(*S.inputs(name))
                trainer.run(lambda row: "stop" if row["round"] == 3 else None)
            else:
                trainer, _ = _single(name, rounds=3)
            trainer.save(out / f"{name}.in.pt")


TWO = [name for name in S.SCENARIOS]
THREE = ["push_sum_ring_ota_dropout", "dsgd_peer_ota_dropout", "choco_ring_ota_dropout",
         "resume_dsgd_complete", "choco_ring_save", "dsgd_ring12_sparse", "dsgd_peer16_sparse",
         "choco_peer16_sparse", "choco_ring12_sparse_save", "resume_choco_ring12_sparse",
         "push_sum_peer16_sparse", "digital_ring12_sparse", "split_dsgd_ring31_model",
         "split_dsgd_peer32_ota", "split_matcha_ring30_ota", "split_digital_ring30",
         "split_dsgd_ring30_save", "resume_split_dsgd_ring30", "split_push_sum_ring30_ota",
         "split_push_sum_ring30_save", "split_choco_ring30_ota", "split_choco_peer32_ota",
         "split_choco_ring30_save", "resume_split_choco_ring30", "split_digital4_ring30",
         "split_digital4_peer32", "split_digital4_ring30_save", "resume_split_digital4_ring30",
         "split_dsgd_kreg48_ota", "split_dsgd_kreg48_save", "resume_split_dsgd_kreg48",
         "split_choco_ring31_save", "split_dsgd_ring30_mix", "resume_split_dsgd_ring30_mixc"]
SPARSE = [name for name in S.SCENARIOS
          if "_sparse" in name and not name.startswith(("callback_", "resume_"))]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Outcomes of the scenarios on 2 ranks (all) and 3 ranks (uneven blocks: 4-3-3, 3-3-2)."""
    done = {}
    for world, names in ((2, TWO), (3, THREE)):
        out = tmp_path_factory.mktemp(f"ranks{world}")
        _write_inputs(out, names)
        launch(world, out, names)
        done[world] = out
    return done


def _same(got: dict, ref: dict) -> None:
    assert got["status"] == ref["status"]
    assert len(got["history"]) == len(ref["history"])
    for mine, theirs in zip(got["history"], ref["history"]):
        assert mine == theirs, f"round {theirs['round']} differs"
    assert torch.equal(got["x"], ref["x"])
    assert got["final_accuracy"] == ref["final_accuracy"]
    assert got["client_accuracies"] == ref["client_accuracies"]
    assert got["totals"] == ref["totals"]


@pytest.mark.parametrize("world, name", [(2, n) for n in TWO] + [(3, n) for n in THREE])
def test_distributed_run_equals_the_single_process_run(ranks, world, name):
    got = torch.load(ranks[world] / f"{name}.pt", weights_only=False)
    ref = reference(name)
    _same(got, ref)
    # the runs did something: models moved apart (FedAvg's clients hold the server's model)
    # and over a noisy channel noise was drawn
    assert torch.equal(got["x"][0], got["x"][-1]) == name.startswith("fed")
    assert got["history"][-1]["round"] == (4 if name.startswith("callback") else
                                           S.SCENARIOS[name][2]["rounds"])
    # a mixing-only tail ran as such: no training loss in its rounds
    tail = S.SCENARIOS[name][2].get("mix_rounds", 0)
    trained = [row["train_loss"] is not None for row in got["history"]]
    assert trained == [True] * (len(trained) - tail) + [False] * tail


@pytest.mark.parametrize("world, name", [(2, "choco_ring_save"), (2, "dsgd_complete_save"),
                                         (3, "choco_ring_save"),
                                         (2, "callback_rewire_save_stop"),
                                         (2, "dsgd_ring8_sparse_save"),
                                         (2, "choco_ring12_sparse_save"),
                                         (3, "choco_ring12_sparse_save"),
                                         (2, "callback_choco_rewire_sparse"),
                                         (2, "split_dsgd_ring30_save"),
                                         (3, "split_dsgd_ring30_save"),
                                         (2, "split_push_sum_ring30_save"),
                                         (3, "split_push_sum_ring30_save"),
                                         (2, "split_choco_ring30_save"),
                                         (3, "split_choco_ring30_save"),
                                         (2, "callback_split_choco_rewire"),
                                         (2, "split_digital4_ring30_save"),
                                         (3, "split_digital4_ring30_save"),
                                         (2, "split_dsgd_kreg48_save"),
                                         (3, "split_choco_ring31_save"),
                                         (3, "split_dsgd_kreg48_save"),
                                         (2, "callback_split_rewire")])
def test_checkpoint_of_several_processes_is_the_single_process_checkpoint(ranks, world, name,
                                                                         tmp_path):
    """Rank 0 writes the models, the gathered momentum and the rule's state of every client,
    as one process does; one process resumes it and ends where an uninterrupted run ends."""
    saved = read(ranks[world] / f"{name}.ckpt.pt")
    if name.startswith("callback"):
        # the one-process run of the same callback, checkpointed at the same round
        trainer = Trainer(*S.inputs(name))
        trainer.run(S.callback(name, trainer, tmp_path / "one.pt"))
        mine = read(tmp_path / "one.pt")
        assert mine["round"] == saved["round"] == 2
    else:
        trainer, _ = _single(name)
        trainer.save(tmp_path / "one.pt")
        mine = read(tmp_path / "one.pt")
    for key in ("x", "m"):
        assert torch.equal(saved[key], mine[key]), key
    assert saved["rule"].keys() == mine["rule"].keys()
    for key, value in mine["rule"].items():
        assert torch.equal(saved["rule"][key], value) if isinstance(value, torch.Tensor) \
            else saved["rule"][key] == value
    assert saved["history"] == [dict(r, wall_time_s=s["wall_time_s"])
                                for r, s in zip(mine["history"], saved["history"])]
    if name.startswith("callback"):
        return
    # resumed by one process to round 6 = the uninterrupted one-process run of 6 rounds
    longer = S.inputs(name, rounds=6)
    resumed = Trainer(*longer)
    resumed.load(ranks[world] / f"{name}.ckpt.pt")
    result = resumed.run()
    straight = Trainer(*longer)
    expected = straight.run()
    assert torch.equal(resumed.x, straight.x)
    strip = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in result.history]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time_s"}
                     for r in expected.history]


def _outside_rows(weights, lo: int, hi: int) -> set[int]:
    """The j outside [lo, hi) with W_ij != 0 for some i in [lo, hi)."""
    coo = sp.coo_matrix(weights)
    keep = ((coo.data != 0) & (coo.row >= lo) & (coo.row < hi)
            & ((coo.col < lo) | (coo.col >= hi)))
    return set(coo.col[keep].tolist())


def _expected_rows(name: str, world: int, rank: int) -> list[set[int]]:
    """Per round, the clients whose rows a rank must receive, from the mixing matrices
    themselves: the senders j of W^t_ij != 0 into its block (every other client with
    exchange 'all')."""
    config, _, _, topology = S.inputs(name)
    n = topology.graph.number_of_nodes()
    lo, hi = distributed.blocks(n, world)[rank]
    if S.EXCHANGE.get(name) == "all":
        return [set(range(n)) - set(range(lo, hi))] * config.rounds
    mats = [r.weights for r in getattr(topology, "rounds", ())] or [topology.weights]
    return [_outside_rows(mats[t % len(mats)], lo, hi) for t in range(config.rounds)]


@pytest.mark.parametrize("world, name", [(2, n) for n in SPARSE]
                         + [(3, n) for n in SPARSE if n in THREE])
def test_a_rank_receives_only_the_rows_its_clients_mix(ranks, world, name):
    """Per round a rank receives the rows of the clients its receivers mix with: their
    half-step models (push-sum's weight w_j travels with its row as 2 float32 words), or the
    public copies CHOCO (the k masked columns) and quantised digital gossip mix; plus the
    losses, the consensus distance's partial sum, mean and row norms. On evaluated rounds
    every model: a stateless rule (D-SGD sending centred models) gathers the half-step
    models instead of the neighbours' and mixes them all; the others gather the mixed models
    after the round."""
    config, *_ = S.inputs(name)
    rule = Trainer(*S.inputs(name)).rule
    stateless = isinstance(rule, DSGD) and rule.decay == 0
    d = torch.load(ranks[world] / f"{name}.pt", weights_only=False)["x"].shape[1]
    n = S.SCENARIOS[name][1]
    sizes = [hi - lo for lo, hi in distributed.blocks(n, world)]
    width = {"push_sum": d + 2, "choco": k_from_ratio(config.k_ratio, d)}.get(
        config.resolved_algorithm, d)
    gathered_all = S.EXCHANGE.get(name) == "all"
    for rank in range(world):
        log = torch.load(ranks[world] / f"{name}.traffic{rank}.pt")
        expected = _expected_rows(name, world, rank)
        assert [t["round"] for t in log] == list(range(1, config.rounds + 1))

        def gathered(per_row: int) -> int:       # an all_gather's bytes (padded if uneven)
            if len(set(sizes)) == 1:
                return (n - sizes[rank]) * per_row
            return max(sizes) * (world - 1) * per_row

        for t, rows in zip(log, expected):
            evaluated = t["round"] % config.eval_every == 0 or t["round"] == config.rounds
            full = gathered_all or (evaluated and stateless)
            if full:
                assert t["rows"] == n - sizes[rank]
                assert t["model_bytes"] == gathered(width * 4)
            else:
                assert t["rows"] == len(rows), (rank, t)
                assert t["model_bytes"] == len(rows) * width * 4
            other = gathered(4 * config.local_steps)               # the losses
            if not full:                                           # consensus from blocks
                other += (8 * d if rank > 0 else 0) + (4 * d if rank < world - 1 else 0)
                other += gathered(8)
            if evaluated:                   # every model after the mixing, accuracy counts
                other += (0 if full else gathered(4 * d)) + gathered(8)
            assert t["other_bytes"] == other, (rank, t)
        if not gathered_all:
            # at most half the (R - 1)/R of the stack an all_gather brings, per round
            sparse = [t for t in log if not stateless or not (
                t["round"] % config.eval_every == 0 or t["round"] == config.rounds)]
            assert sum(t["rows"] for t in sparse) <= len(sparse) * (n - sizes[rank]) / 2


# (a tail on the complete graph ends the run holding every row, as a rewiring to it does)
SPLIT = [name for name in S.SCENARIOS if name.startswith(("split_", "resume_split_"))
         and not S.SCENARIOS[name][2].get("mix_on")]


def _halo(name: str, lo: int, hi: int) -> set[int]:
    """The senders into [lo, hi) over the period, from the mixing matrices themselves
    (MATCHA: every edge of the graph)."""
    config, _, _, topology = S.inputs(name)
    if config.resolved_algorithm == "matcha":
        return {j for i in range(lo, hi) for j in topology.graph.neighbors(i)} - set(range(lo, hi))
    mats = [r.weights for r in getattr(topology, "rounds", ())] or [topology.weights]
    return set().union(*(_outside_rows(w, lo, hi) for w in mats))


def _round_halo(name: str, lo: int, hi: int) -> int:
    """The most senders from outside [lo, hi) into it of any one round."""
    config, _, _, topology = S.inputs(name)
    if config.resolved_algorithm == "matcha":
        return len(_halo(name, lo, hi))
    mats = [r.weights for r in getattr(topology, "rounds", ())] or [topology.weights]
    return max(len(_outside_rows(w, lo, hi)) for w in mats)


@pytest.mark.parametrize("world, name", [(2, n) for n in SPLIT]
                         + [(3, n) for n in SPLIT if n in THREE])
def test_a_run_split_by_rows_holds_its_block_and_halo_only(ranks, world, name):
    """Split by rows, a rank's table holds its block and the senders into it over the
    period, nothing else; per round it receives the round's senders' half-step models, and on
    evaluated rounds a slab of every block's columns at a time for the average model (as many
    bytes as the blocks) but no whole stack; its results equal one process's (above)."""
    config, *_ = S.inputs(name)
    n = S.SCENARIOS[name][1]
    bounds = distributed.blocks(n, world)
    sizes = [hi - lo for lo, hi in bounds]
    d = torch.load(ranks[world] / f"{name}.pt", weights_only=False)["x"].shape[1]
    # push-sum's weight w_j travels with its row as 2 float32 words; CHOCO's replicas' k
    # masked columns travel
    width = {"push_sum": d + 2, "choco": k_from_ratio(config.k_ratio, d)}.get(
        config.resolved_algorithm, d)
    for rank, (lo, hi) in enumerate(bounds):
        held = torch.load(ranks[world] / f"{name}.held{rank}.pt")
        assert held["split"], (rank, held)
        expected = sorted(set(range(lo, hi)) | _halo(name, lo, hi))
        assert held["held"] == expected
        # the table: the block and the most senders of any one round
        assert held["table_rows"] == (hi - lo) + _round_halo(name, lo, hi)
        assert held["table_rows"] <= len(expected)
        if "peer" not in name:      # one-peer exponential: every 2^k-hop sender of a period
            assert len(expected) < n
        elif world == 3:            # ... but only one per client and round
            assert held["table_rows"] < len(expected)
        if config.resolved_algorithm == "matcha":
            continue                # a round's rows depend on the matchings it activates
        log = torch.load(ranks[world] / f"{name}.traffic{rank}.pt")
        first = 4 if name.startswith("resume_") else 1
        assert [t["round"] for t in log] == list(range(first, config.rounds + 1))

        def gathered(per_row: int) -> int:
            if len(set(sizes)) == 1:
                return (n - sizes[rank]) * per_row
            return max(sizes) * (world - 1) * per_row

        for t, rows in zip(log, _expected_rows(name, world, rank)[first - 1:]):
            evaluated = t["round"] % config.eval_every == 0 or t["round"] == config.rounds
            assert t["rows"] == len(rows), (rank, t)
            assert t["model_bytes"] == len(rows) * width * 4
            # the clients' training losses (none in a mixing-only round)
            trains = t["round"] <= config.rounds - config.mix_rounds
            other = gathered(4 * config.local_steps) if trains else 0
            other += (8 * d if rank > 0 else 0) + (4 * d if rank < world - 1 else 0)
            other += gathered(8)
            if evaluated:           # the average model's slabs, accuracy counts
                other += gathered(4 * d) + gathered(8)
            assert t["other_bytes"] == other, (rank, t)


def test_a_run_split_by_rows_gives_every_model_on_request(ranks):
    """``trainer.models()`` gathers every client's model (compared with one process's
    above); ``gather_models()``, which would put them into the rank's table, says so."""
    from airplan_qo.runtime.distributed import DistributedTrainer

    trainer = DistributedTrainer.__new__(DistributedTrainer)
    trainer.held = np.arange(3)
    with pytest.raises(ExecutionError, match=r"split by rows.*trainer.models\(\)"):
        trainer.gather_models()


def test_resumed_by_several_processes_from_a_one_process_checkpoint(ranks):
    """The resume_* scenarios loaded a checkpoint one process wrote at round 3 and ran to 6:
    the same as one process running 6 rounds (compared above); here: they did resume."""
    for world, names in ((2, TWO), (3, THREE)):
        for name in [n for n in names if n.startswith("resume_")]:
            got = torch.load(ranks[world] / f"{name}.pt", weights_only=False)
            assert [r["round"] for r in got["history"]] == list(range(1, 7))
            _same(got, reference(name))


def test_blocks_split_clients_contiguously():
    assert distributed.blocks(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert distributed.blocks(8, 2) == [(0, 4), (4, 8)]
    assert distributed.blocks(5, 5) == [(i, i + 1) for i in range(5)]
    with pytest.raises(ExecutionError, match="6 processes for 5 clients"):
        distributed.blocks(5, 6)


def test_init_names_what_is_missing(monkeypatch):
    for name in distributed.LAUNCH_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ExecutionError, match="RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are "
                                             "not set.*torchrun"):
        distributed.init()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_nccl_without_cuda_is_refused(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ExecutionError, match="backend 'nccl' needs CUDA GPUs"):
        distributed.init("nccl")
    with pytest.raises(ExecutionError, match="backend must be one of gloo, nccl, got 'mpi'"):
        distributed.init("mpi")
    assert distributed.active() is None


def test_a_trainer_without_a_group_is_refused(digits, digits_iid, ring10):
    from airplan_qo.runtime.engine import RunConfig

    with pytest.raises(ExecutionError, match="needs a process group.*init"):
        distributed.DistributedTrainer(RunConfig(rounds=1), digits, digits_iid, ring10)


@pytest.mark.parametrize("kw", [dict(algorithm="gradient_tracking"),
                                dict(algorithm="gradient_tracking", transport="digital")])
def test_rules_not_split_over_processes_are_refused(digits, digits_iid, ring10, kw):
    from airplan_qo.runtime.engine import RunConfig

    with pytest.raises(ExecutionError, match="does not run split over processes.*one process"):
        distributed.DistributedTrainer(RunConfig(rounds=1, **kw), digits, digits_iid, ring10)


def _round_stats(catalog: Path) -> list[tuple]:
    from airplan_qo.catalog.store import Catalog

    with Catalog.open(catalog, read_only=True) as cat:
        return [tuple(row.values()) for row in cat.query(
            "SELECT round, test_accuracy, client_acc_mean, client_acc_min, train_loss, "
            "consensus_distance, channel_uses, slots, energy_j, bits, link_drop_rate, "
            "dropout_rate FROM airplan.round_stats ORDER BY exec_id, round")]


def _processes(catalog: Path) -> list[int]:
    """The ``processes`` each execution of ``catalog`` recorded in its options."""
    from airplan_qo.catalog.store import Catalog

    with Catalog.open(catalog, read_only=True) as cat:
        return [int(row["p"]) for row in cat.query(
            "SELECT options->>'processes' AS p FROM airplan.executions ORDER BY exec_id")]


def _cli(args: list[str], cwd: Path, world: int = 1) -> subprocess.CompletedProcess:
    launcher = ([] if world == 1 else
                ["-m", "torch.distributed.run", "--nproc-per-node", str(world),
                 "--master-addr", "127.0.0.1", "--master-port", str(_free_port())])
    cmd = [sys.executable, *launcher, "-m", "airplan_qo", *args]
    done = subprocess.run(cmd, cwd=cwd, env=_env(AIRPLAN_BACKEND="gloo"), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_cli_under_torchrun_trains_and_resumes_like_one_process(tmp_path):
    """``torchrun --nproc-per-node 2 -m airplan_qo sql "TRAIN ..."`` records the same rounds as
    ``airplan sql``; a 2-process ``resume`` of a one-process execution (from its round-10
    checkpoint) records what the one-process run recorded."""
    statement = ("TRAIN digits ON 8 CLIENTS WITH (rounds = 12, snr_db = 5, dropout = 0.2) "
                 "USING TOPOLOGY ring SLA accuracy >= 0.99 FALLBACK COMPLETE")
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    _cli(["sql", "--catalog", str(one), "--quiet", statement], tmp_path)
    done = _cli(["sql", "--catalog", str(two), "--quiet", statement], tmp_path, world=2)
    assert "succeeded" in done.stdout
    rows = _round_stats(one)
    assert len(rows) == 12
    assert _round_stats(two) == rows

    # the one-process execution as if it had failed after its round-10 checkpoint
    from airplan_qo.catalog.store import Catalog

    with Catalog.open(one) as cat:
        cat.update_row("executions", 1, {"status": "failed"})
        cat.query("DELETE FROM airplan.round_stats WHERE round > 10")
        path = cat.query("SELECT checkpoint_path FROM airplan.executions")[0]["checkpoint_path"]
    assert read(path)["round"] == 10
    done = _cli(["resume", "--catalog", str(one), "--quiet", "1"], tmp_path, world=2)
    assert "execution 1: succeeded after 12 rounds" in done.stdout
    assert _round_stats(one) == rows
    with Catalog.open(one, read_only=True) as cat:
        history = cat.query("SELECT options->'processes_history' AS h FROM airplan.executions")
    assert json.loads(history[0]["h"]) == [1, 2]


def test_cli_run_split_by_rows_records_what_one_process_records(tmp_path):
    """Under the CLI (rank 0 leads, the other waits for jobs) a plan on a ring of 30 clients is
    split by rows (each rank holds its 15 clients and 2 neighbours) and records the same rounds
    as one process."""
    from airplan_qo.plans.topology import TopologySpec, build
    from airplan_qo.runtime.gossip import LinkSet
    from airplan_qo.runtime.row_split import splits

    ring = LinkSet(build(TopologySpec.create("ring", 30)))
    assert splits("dsgd", torch.device("cpu"), 30, [(ring.recv, ring.send)], False)
    statement = ("TRAIN digits ON 30 CLIENTS WITH (rounds = 4, snr_db = 5, dropout = 0.2) "
                 "USING TOPOLOGY ring USING SPARSITY 1 SLA rounds <= 50")
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    _cli(["sql", "--catalog", str(one), "--quiet", statement], tmp_path)
    done = _cli(["sql", "--ranks", "2", "--catalog", str(two), "--quiet", statement], tmp_path)
    assert "ring [" in done.stdout and "k=1" in done.stdout
    rows = _round_stats(one)
    assert len(rows) == 4 and _round_stats(two) == rows
    assert _processes(two) == [2]


def test_cli_ranks_option_trains_like_one_process(tmp_path):
    """``airplan sql --ranks 2 "TRAIN ..."`` starts the two processes itself (torch's launcher,
    standalone) and records what one process records; ``--ranks 0`` is refused."""
    statement = ("TRAIN digits ON 6 CLIENTS WITH (rounds = 5, snr_db = 5, dropout = 0.2) "
                 "USING TOPOLOGY ring SLA accuracy >= 0.99 FALLBACK COMPLETE")
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    _cli(["sql", "--catalog", str(one), "--quiet", statement], tmp_path)
    done = _cli(["sql", "--ranks", "2", "--catalog", str(two), "--quiet", statement], tmp_path)
    assert "succeeded" in done.stdout
    rows = _round_stats(one)
    assert len(rows) == 5 and _round_stats(two) == rows
    assert _processes(one) == [1] and _processes(two) == [2]
    refused = subprocess.run([sys.executable, "-m", "airplan_qo", "sql", "--ranks", "0",
                              "SELECT 1"], cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "--ranks" in refused.stderr


def _running(needle: str) -> list[str]:
    """The processes whose command line holds ``needle`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:     # not a process, or gone meanwhile
            continue
        if needle in line:
            found.append(line)
    return found


#: A run whose rounds a test compares after interrupting it: 30 rounds, none reaching the SLA.
_INTERRUPTED = ("TRAIN digits ON 6 CLIENTS WITH (rounds = 30, snr_db = 5, dropout = 0.2) "
                "USING TOPOLOGY ring SLA accuracy >= 0.99 FALLBACK COMPLETE")


def _two_ranks_at_round_12(tmp_path: Path, one: Path, two: Path):
    """Train :data:`_INTERRUPTED` in one process into ``one``, then start it under ``airplan
    sql --ranks 2`` into ``two`` (a session of its own, as a terminal's foreground job) and
    return (the process, the mark file holding rank 0's pid) once rank 0 has trained round 12
    (tests/fixtures/mark_round)."""
    import time

    _cli(["sql", "--catalog", str(one), "--quiet", _INTERRUPTED], tmp_path)
    mark = tmp_path / "mark"
    env = _env(AIRPLAN_BACKEND="gloo", AIRPLAN_TEST_MARK_AT="12",
               AIRPLAN_TEST_MARK_FILE=str(mark))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "fixtures" / "mark_round"),
                                         env["PYTHONPATH"]])
    proc = subprocess.Popen(
        [sys.executable, "-m", "airplan_qo", "sql", "--ranks", "2", "--catalog", str(two),
         "--quiet", _INTERRUPTED], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mark.exists(), "rank 0 never trained round 12"
    return proc, mark


def test_ctrl_c_under_ranks_records_aborted_and_resumes_like_one_process(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the process group of ``airplan sql --ranks 2 "TRAIN
    ..."``): the launcher passes it on to both ranks once, they stop together at the end of a
    round with a checkpoint, rank 0 records the execution ``aborted``, the command exits 130
    quietly once every process is gone, and ``airplan resume --ranks 2`` finishes it with the
    rounds an uninterrupted one-process run records."""
    import signal

    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    proc, mark = _two_ranks_at_round_12(tmp_path, one, two)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "resume with: airplan resume 1" in err and "Traceback" not in err, err[-3000:]
    assert not Path("/proc").is_dir() or not _running(str(two))

    from airplan_qo.catalog.store import Catalog

    with Catalog.open(two, read_only=True) as cat:
        [row] = cat.query("SELECT status, actual_rounds, checkpoint_path FROM "
                          "airplan.executions")
    assert row["status"] == "aborted" and 12 <= row["actual_rounds"] < 30
    assert read(row["checkpoint_path"])["round"] == row["actual_rounds"]
    done = _cli(["resume", "--catalog", str(two), "--ranks", "2", "--quiet", "1"], tmp_path)
    assert "execution 1: succeeded after 30 rounds" in done.stdout
    rows = _round_stats(one)
    assert len(rows) == 30 and _round_stats(two) == rows


def test_rank_0_killed_leaves_a_resumable_run_and_one_line_from_the_others(tmp_path):
    """Rank 0 of ``airplan sql --ranks 2 "TRAIN ..."`` killed mid-run (SIGKILL: it writes
    nothing): the command exits 137, rank 1 says in one line that rank 0 left (no traceback),
    and ``airplan resume --ranks 2`` finds the execution's process gone and finishes it from
    its last periodic checkpoint with the rounds an uninterrupted one-process run records."""
    import signal

    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    proc, mark = _two_ranks_at_round_12(tmp_path, one, two)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGKILL, out[-2000:] + err[-3000:]
    assert "rank 1: rank 0 left the run" in err and "Traceback" not in err, err[-3000:]
    done = _cli(["resume", "--catalog", str(two), "--ranks", "2", "--quiet", "1"], tmp_path)
    assert "execution 1: succeeded after 30 rounds" in done.stdout
    rows = _round_stats(one)
    assert len(rows) == 30 and _round_stats(two) == rows


def test_shares_are_refused_by_the_memory_they_share():
    """Every rank gathers every share and decides the same: the ranks on one host are summed
    against that host's memory (one GPU's for CUDA), a split share (a block of 500 and 2
    neighbours) fits where the whole stack would not."""
    from airplan_qo.plans.footprint import training_bytes

    mib = 2 ** 20

    def share(where, rows, available):
        need = training_bytes(1000, 4810, "dsgd", "ota", 32, held=rows, trained=500)
        return distributed.MemoryShare(where, need, available, rows)

    # two hosts, 48 MiB usable each (60 x 0.8): a split share of ~38.6 MB fits on each
    split = [share("a", 502, 60 * mib), share("b", 502, 60 * mib)]
    assert distributed.memory_refusal(split, 1000, 4810, "dsgd") is None
    # the whole stack (~57.7 MB) does not
    whole = [share("a", 1000, 60 * mib), share("b", 1000, 60 * mib)]
    assert distributed.memory_refusal(whole, 1000, 4810, "dsgd").startswith(
        "rank 0 of 2 on a hold 1000 of 1000 clients' models of a 4810-parameter model with "
        "dsgd: ~")
    # two split shares on one host are summed, against the least memory either saw
    same = [share("a", 502, 100 * mib), share("a", 502, 60 * mib)]
    refusal = distributed.memory_refusal(same, 1000, 4810, "dsgd")
    assert refusal.startswith("ranks 0, 1 of 2 on a hold 502, 502 of 1000 clients' models")
    assert "spread the ranks over more hosts or GPUs" in refusal
    # a system that does not say how much is free refuses nothing
    assert distributed.memory_refusal([share("a", 1000, None)] * 2, 1000, 4810, "dsgd") is None


def test_a_share_one_rank_cannot_hold_is_refused_by_every_rank(tmp_path):
    launch(2, tmp_path, ["refuse_memory_rank1"])
    said = [(tmp_path / f"refuse_memory_rank1.{r}.txt").read_text() for r in range(2)]
    assert said[0] == said[1]
    # both ranks run on this host: their shares (15 clients and 2 neighbours each) are summed
    # against the least memory either saw, rank 1's
    assert said[0].startswith("ranks 0, 1 of 2 on ") and " hold 17, 17 of 30 clients'" in said[0]
    assert said[0].endswith("spread the ranks over more hosts or GPUs, or use fewer clients or "
                            "a smaller model")


def test_a_run_over_processes_is_not_refused_for_the_whole_stack(monkeypatch):
    """Rank 0 does not refuse a run over several processes for the memory of every client's
    models: each rank checks its own share (above)."""
    from airplan_qo.plans import footprint
    from airplan_qo.runtime import execution
    from airplan_qo.runtime.engine import RunConfig

    monkeypatch.setattr(footprint, "available_memory", lambda: 2 ** 20)
    with pytest.raises(ExecutionError, match="needs ~"):
        execution._check_training_memory(1000, 4810, RunConfig())
    monkeypatch.setattr(distributed, "active", lambda: distributed.Group(0, 2, 0, "gloo"))
    execution._check_training_memory(1000, 4810, RunConfig())
