"""Runs of the distributed equality tests (tests/runtime/test_distributed.py), and the program
every rank of a test group runs:

    RANK=r WORLD_SIZE=R MASTER_ADDR=127.0.0.1 MASTER_PORT=p \\
        python tests/runtime/distributed_scenarios.py OUT_DIR NAME [NAME ...]

Each rank builds the same ``DistributedTrainer`` per scenario and runs it; rank 0 writes the
outcome to OUT_DIR/NAME.pt. A scenario named ``resume_*`` first loads OUT_DIR/NAME.in.pt (a
checkpoint the test wrote with one process); ``*_save`` ones save a checkpoint at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from airplan_qo.data import load, partition
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig

torch.set_num_threads(1)

_BASE = dict(model="mlp", lr=0.05, batch_size=16, data_seed=1, train_seed=2, channel_seed=3,
             client_eval_samples=200)
_OTA = dict(channel="ota", snr_db=5.0, g_th=0.2)

#: name -> (topology family, N, RunConfig fields)
SCENARIOS = {
    # the complete graph: D-SGD's difference form keeps state (decay 0.75) across rounds
    "dsgd_complete_ota_dropout": ("complete", 8, dict(rounds=5, local_steps=2, dropout=0.25,
                                                      **_OTA)),
    "dsgd_ring_ideal": ("ring", 10, dict(rounds=4, model="logistic")),
    "dsgd_peer_ota_dropout": ("one_peer_exponential", 8, dict(rounds=5, dropout=0.2, **_OTA)),
    "choco_ring_ota_dropout": ("ring", 10, dict(rounds=5, k_ratio=0.1, local_steps=2,
                                                dropout=0.2, eval_every=2, **_OTA)),
    "choco_peer_ota": ("one_peer_exponential", 8, dict(rounds=5, k_ratio=0.2, dropout=0.1,
                                                       **_OTA)),
    # written by R ranks at round 3, resumed by one process (the test) to round 6
    "choco_ring_save": ("ring", 10, dict(rounds=3, k_ratio=0.1, dropout=0.2, **_OTA)),
    "dsgd_complete_save": ("complete", 8, dict(rounds=3, dropout=0.25, **_OTA)),
    # written by one process at round 3 (the test), resumed by R ranks to round 6
    "resume_choco_ring": ("ring", 10, dict(rounds=6, k_ratio=0.1, dropout=0.2, **_OTA)),
    "resume_dsgd_complete": ("complete", 8, dict(rounds=6, dropout=0.25, **_OTA)),
    # rank 0's callback rewires to the complete graph and checkpoints at round 2, stops at 4
    "callback_rewire_save_stop": ("ring", 8, dict(rounds=6, dropout=0.2, **_OTA)),
    # the digital transport (quantised, public copies), MATCHA and FedAvg through a server
    "digital_ring_dropout": ("ring", 10, dict(rounds=5, transport="digital", bits=4,
                                              dropout=0.2, **_OTA)),
    "matcha_complete_ota": ("complete", 8, dict(rounds=5, algorithm="matcha", dropout=0.1,
                                                **_OTA)),
    "fedavg_ota_dropout": ("complete", 8, dict(rounds=4, algorithm="fedavg", local_steps=2,
                                               dropout=0.2, **_OTA)),
    "fedprox_digital_dropout": ("complete", 8, dict(rounds=4, algorithm="fedprox",
                                                    prox_mu=0.1, local_steps=2, dropout=0.2,
                                                    transport="digital", bits=8, **_OTA)),
    "push_sum_ring_ota_dropout": ("ring", 10, dict(rounds=5, algorithm="push_sum",
                                                   local_steps=2, dropout=0.2, **_OTA)),
    # sparse topologies evaluated at the last round only: the ranks exchange neighbour rows
    # (tests/runtime/test_distributed.py counts them); the same run with exchange='all'
    "dsgd_ring12_sparse": ("ring", 12, dict(rounds=4, dropout=0.2, eval_every=4, **_OTA)),
    "dsgd_ring12_sparse_all": ("ring", 12, dict(rounds=4, dropout=0.2, eval_every=4, **_OTA)),
    "dsgd_peer16_sparse": ("one_peer_exponential", 16, dict(rounds=5, dropout=0.1,
                                                            eval_every=5, **_OTA)),
    # evaluated every other round: those rounds gather every model, the others the neighbours'
    "dsgd_peer16_sparse_eval2": ("one_peer_exponential", 16, dict(rounds=5, dropout=0.1,
                                                                  eval_every=2, **_OTA)),
    "choco_peer16_sparse": ("one_peer_exponential", 16, dict(rounds=5, k_ratio=0.1,
                                                             dropout=0.1, eval_every=5,
                                                             **_OTA)),
    "digital_ring12_sparse": ("ring", 12, dict(rounds=4, transport="digital", bits=4,
                                               dropout=0.2, eval_every=4, **_OTA)),
    "push_sum_peer16_sparse": ("one_peer_exponential", 16, dict(rounds=5, algorithm="push_sum",
                                                                dropout=0.1, eval_every=5,
                                                                **_OTA)),
    # state kept between rounds, exchanged neighbour-only: D-SGD's difference form (decay 0.3
    # on a ring of 8) and CHOCO's replicas; checkpoints gather every row's state
    "dsgd_ring8_sparse_save": ("ring", 8, dict(rounds=3, dropout=0.2, eval_every=3, **_OTA)),
    "choco_ring12_sparse_save": ("ring", 12, dict(rounds=3, k_ratio=0.1, dropout=0.2,
                                                  eval_every=3, **_OTA)),
    "resume_choco_ring12_sparse": ("ring", 12, dict(rounds=6, k_ratio=0.1, dropout=0.2,
                                                    eval_every=3, **_OTA)),
    # rank 0's callback rewires CHOCO to the complete graph and checkpoints at round 2
    "callback_choco_rewire_sparse": ("ring", 12, dict(rounds=6, k_ratio=0.1, dropout=0.2,
                                                      eval_every=6, **_OTA)),
    # split by rows (airplan_qo/runtime/row_split.py): sparse operators (a ring of 30, one-peer
    # exponential of 32), rules without state between rounds; a rank holds its block and halo
    "split_dsgd_ring30_ota": ("ring", 30, dict(rounds=4, dropout=0.2, eval_every=2, **_OTA)),
    "split_dsgd_ring31_model": ("ring", 31, dict(rounds=4, dropout=0.2, ota_payload="model",
                                                 local_steps=2, eval_every=3, **_OTA)),
    "split_dsgd_ring30_ideal": ("ring", 30, dict(rounds=3, dropout=0.1, eval_every=3)),
    "split_digital_ring30": ("ring", 30, dict(rounds=4, transport="digital", dropout=0.2,
                                              eval_every=4, **_OTA)),
    "split_dsgd_peer32_ota": ("one_peer_exponential", 32, dict(rounds=5, dropout=0.1,
                                                               eval_every=5, **_OTA)),
    "split_matcha_ring30_ota": ("ring", 30, dict(rounds=4, algorithm="matcha", dropout=0.1,
                                                 eval_every=4, **_OTA)),
    "split_push_sum_ring30_ota": ("ring", 30, dict(rounds=4, algorithm="push_sum",
                                                   local_steps=2, dropout=0.2, eval_every=2,
                                                   **_OTA)),
    "split_push_sum_peer32_digital": ("one_peer_exponential", 32, dict(
        rounds=4, algorithm="push_sum", transport="digital", dropout=0.1, eval_every=4,
        **_OTA)),
    "split_push_sum_ring30_save": ("ring", 30, dict(rounds=3, algorithm="push_sum",
                                                    dropout=0.2, eval_every=3, **_OTA)),
    "split_choco_ring30_ota": ("ring", 30, dict(rounds=4, k_ratio=0.1, local_steps=2,
                                                dropout=0.2, eval_every=2, **_OTA)),
    "split_choco_peer32_ota": ("one_peer_exponential", 32, dict(rounds=5, k_ratio=0.2,
                                                                dropout=0.1, eval_every=5,
                                                                **_OTA)),
    "split_choco_ring30_save": ("ring", 30, dict(rounds=3, k_ratio=0.1, dropout=0.2,
                                                 eval_every=3, **_OTA)),
    "resume_split_choco_ring30": ("ring", 30, dict(rounds=6, k_ratio=0.1, dropout=0.2,
                                                   eval_every=3, **_OTA)),
    "callback_split_choco_rewire": ("ring", 30, dict(rounds=4, k_ratio=0.1, dropout=0.2,
                                                     eval_every=4, **_OTA)),
    "split_digital4_ring30": ("ring", 30, dict(rounds=5, transport="digital", bits=4,
                                               dropout=0.2, eval_every=2, **_OTA)),
    "split_digital4_peer32": ("one_peer_exponential", 32, dict(rounds=5, transport="digital",
                                                               bits=6, dropout=0.1,
                                                               eval_every=5, **_OTA)),
    "split_digital4_ring30_save": ("ring", 30, dict(rounds=3, transport="digital", bits=4,
                                                    dropout=0.2, eval_every=3, **_OTA)),
    "resume_split_digital4_ring30": ("ring", 30, dict(rounds=6, transport="digital", bits=4,
                                                      dropout=0.2, eval_every=3, **_OTA)),
    # D-SGD's difference form keeping state (decay 0.25 on a 4-regular graph of 48, sparse)
    "split_dsgd_kreg48_ota": ("k_regular", 48, dict(rounds=5, dropout=0.2, local_steps=2,
                                                    eval_every=2, **_OTA)),
    "split_dsgd_kreg48_save": ("k_regular", 48, dict(rounds=3, dropout=0.2, eval_every=3,
                                                     **_OTA)),
    "resume_split_dsgd_kreg48": ("k_regular", 48, dict(rounds=6, dropout=0.2, eval_every=3,
                                                       **_OTA)),
    # written by R ranks at round 3, resumed by one process to round 6; and the other way
    "split_dsgd_ring30_save": ("ring", 30, dict(rounds=3, dropout=0.2, eval_every=3, **_OTA)),
    # uneven blocks (11, 10, 10 on 3 ranks): rank 0 closes the gaps of the padded gather
    "split_choco_ring31_save": ("ring", 31, dict(rounds=3, k_ratio=0.1, dropout=0.2,
                                                 eval_every=3, **_OTA)),
    "resume_split_dsgd_ring30": ("ring", 30, dict(rounds=6, dropout=0.2, eval_every=3,
                                                  **_OTA)),
    # rank 0's callback rewires to the complete graph (every row held again) at round 2
    "callback_split_rewire": ("ring", 30, dict(rounds=4, dropout=0.2, eval_every=4, **_OTA)),
    # a plan's mixing-only tail: the last rounds only mix, whole and split by rows
    "dsgd_peer_mix_ota": ("one_peer_exponential", 8, dict(rounds=5, mix_rounds=2, dropout=0.2,
                                                          **_OTA)),
    "split_dsgd_ring30_mix": ("ring", 30, dict(rounds=5, mix_rounds=2, dropout=0.2,
                                               eval_every=2, **_OTA)),
    # ... and on the complete graph: every rank rewires when the tail starts, or, resumed from
    # a checkpoint inside the tail (round 3 of 6, the tail rounds 3-6), before it loads
    "split_dsgd_ring30_mixc": ("ring", 30, dict(rounds=5, mix_rounds=2, mix_on="complete",
                                                dropout=0.2, eval_every=2, **_OTA)),
    "resume_split_dsgd_ring30_mixc": ("ring", 30, dict(rounds=6, mix_rounds=4,
                                                       mix_on="complete", dropout=0.2,
                                                       eval_every=2, **_OTA)),
}
#: scenarios whose ranks gather every row (``DistributedTrainer(..., exchange=...)``)
EXCHANGE = {"dsgd_ring12_sparse_all": "all"}


def callback(name: str, trainer, checkpoint: Path | None):
    """The callback a scenario runs with (None for most)."""
    if not name.startswith("callback_"):
        return None

    def after(row: dict):
        if row["round"] == 2:
            trainer.rewire(build(TopologySpec.create("complete", trainer.n)))
            trainer.save(checkpoint)
        return "stop" if row["round"] == 4 else None
    return after


def inputs(name: str, **changes):
    """(config, dataset, partition, topology) of a scenario; ``changes`` edit the config."""
    family, n, fields = SCENARIOS[name]
    config = RunConfig.from_dict({**_BASE, **fields, **changes})
    dataset = load("digits", seed=0)
    part = partition("dirichlet", dataset.y_train, n, seed=0, alpha=0.5)
    return config, dataset, part, build(TopologySpec.create(family, n))


def outcome(trainer, result, x=None) -> dict:
    """What the tests compare: every round's statistics but its wall time, the final models
    (``x``: every client's, gathered from a run split by rows), the result's accuracies and
    totals."""
    return {
        "history": [{k: v for k, v in row.items() if k != "wall_time_s"}
                    for row in result.history],
        "x": (trainer.x if x is None else x).clone(),
        "status": result.status,
        "final_accuracy": result.final_accuracy,
        "client_accuracies": result.client_accuracies,
        "totals": (result.total_channel_uses, result.total_energy_j, result.total_bits,
                   result.total_slots),
    }


def _refuse_memory(out: Path, rank: int) -> None:
    """Rank 1 sees almost no memory available: every rank must refuse the run, with the same
    message, instead of rank 1 alone (which would leave the others waiting for it)."""
    from airplan_qo.errors import ExecutionError
    from airplan_qo.plans import footprint
    from airplan_qo.runtime import distributed

    if rank == 1:
        footprint.available_memory = lambda: 100_000
    try:
        distributed.DistributedTrainer(*inputs("split_dsgd_ring30_save"))
    except ExecutionError as exc:
        (out / f"refuse_memory_rank1.{rank}.txt").write_text(str(exc))


def main(out: Path, names: list[str]) -> None:
    from airplan_qo.runtime import distributed

    group = distributed.init("gloo")
    try:
        for name in names:
            if name == "refuse_memory_rank1":
                _refuse_memory(out, group.rank)
                continue
            trainer = distributed.DistributedTrainer(*inputs(name),
                                                     exchange=EXCHANGE.get(name, "auto"))
            if name.startswith("resume_"):
                trainer.load(out / f"{name}.in.pt")
            result = trainer.run(callback(name, trainer, out / f"{name}.ckpt.pt"))
            if name.endswith("_save"):
                trainer.save(out / f"{name}.ckpt.pt" if group.rank == 0 else None)
            split = getattr(trainer, "split", False)
            models = trainer.models() if split else None       # every rank takes part
            if group.rank == 0:
                torch.save({**outcome(trainer, result, models), "split": split,
                            "held": None if trainer.held is None else trainer.held.tolist()},
                           out / f"{name}.pt")
            # the rows this rank holds (split by rows) and the table's size
            torch.save({"held": None if trainer.held is None else trainer.held.tolist(),
                        "table_rows": trainer.x.shape[0], "split": split},
                       out / f"{name}.held{group.rank}.pt")
            # what this rank received, round by round
            torch.save([t.as_dict() for t in trainer.traffic_log],
                       out / f"{name}.traffic{group.rank}.pt")
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
