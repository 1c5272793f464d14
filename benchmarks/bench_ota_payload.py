"""What D-SGD sends over the air: whole models (the paper's) against decayed differences.

For each topology and seed: the clients' mean accuracy (and the average model's) after the
round budget on the ideal channel, and over the air at each SNR with ``ota_payload='model'``
and ``'difference'`` (docs/runtime.md, Over-the-air payloads). Workload: digits, N clients,
Dirichlet alpha, the MLP with the workload defaults (lr 0.05, momentum 0.9, batch 32, 5 local
steps), seeds derived from the workload seed as TRAIN does. Prints one JSON line per run and a
summary per (topology, channel, payload): the mean over seeds and the gap to the ideal channel.

    OMP_NUM_THREADS=1 nice python benchmarks/bench_ota_payload.py --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import attrs

from airplan_qo.data import load, partition_dataset
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.plans.workload import Workload
from airplan_qo.runtime import RunConfig, Trainer
from airplan_qo.runtime.execution import derive_seeds


def run(topo, dataset, part, w, *, channel: str, snr_db: float, payload: str, rounds: int
        ) -> dict:
    cfg = RunConfig(model=w.model, lr=w.lr, momentum=w.momentum, batch_size=w.batch_size,
                    local_steps=w.local_steps, rounds=rounds,
                    channel=attrs.evolve(w.channel_config, kind=channel, snr_db=snr_db),
                    ota_payload=payload, **derive_seeds(w.seed))
    trainer = Trainer(cfg, dataset, part, topo)
    start = time.perf_counter()
    r = trainer.run()
    return {"client_acc_mean": r.client_acc_mean, "avg_model_accuracy": r.final_accuracy,
            "decay": getattr(trainer.rule, "decay", None), "status": r.status,
            "wall_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--topologies", nargs="+", default=["complete", "ring"])
    ap.add_argument("--snr-db", type=float, nargs="+", default=[0.0, 10.0])
    args = ap.parse_args()
    rows = []
    for family in args.topologies:
        topo = build(TopologySpec.create(family, args.clients))
        for seed in args.seeds:
            w = Workload(dataset="digits", clients=args.clients, alpha=args.alpha, seed=seed)
            dataset = load(w.dataset, seed=w.seed)
            part = partition_dataset(dataset, w.partition, w.clients, seed=w.seed,
                                     alpha=w.alpha)
            cases = [("ideal", 0.0, "model")] + [("ota", s, p) for s in args.snr_db
                                                   for p in ("model", "difference")]
            for channel, snr, payload in cases:
                row = {"topology": family, "seed": seed, "channel": channel,
                       "snr_db": snr if channel == "ota" else None, "payload": payload,
                       **run(topo, dataset, part, w, channel=channel, snr_db=snr,
                             payload=payload, rounds=args.rounds)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = []
    for family in args.topologies:
        ideal = statistics.mean(r["client_acc_mean"] for r in rows
                                if r["topology"] == family and r["channel"] == "ideal")
        for snr in args.snr_db:
            for payload in ("model", "difference"):
                acc = [r["client_acc_mean"] for r in rows if r["topology"] == family
                       and r["channel"] == "ota" and r["snr_db"] == snr
                       and r["payload"] == payload]
                summary.append({"topology": family, "snr_db": snr, "payload": payload,
                                "client_acc_mean": statistics.mean(acc),
                                "per_seed": acc, "ideal": ideal,
                                "gap_to_ideal": ideal - statistics.mean(acc)})
    print(json.dumps({"summary": summary, "clients": args.clients, "alpha": args.alpha,
                      "rounds": args.rounds, "seeds": args.seeds,
                      "python": platform.python_version()}, indent=1))


if __name__ == "__main__":
    main()
