"""Would training several seeds of one plan as one stacked run pay? An upper bound.

An evaluation trains every plan of a workload over several seeds, each a run of its own. The
runtime already trains a run's N clients as one stack; S seeds of the same plan stacked into
one run would be S * N clients. This times a round as the evaluation trains it (local steps,
the over-the-air mixing on a ring, every client evaluated every round) at N clients and at
S * N clients in the same process, the two taking turns, and reports

    bound = S * t(N) / t(S * N)

the speed-up stacking S seeds could give at most (it leaves out what stacking would add: the
seeds' own channel draws, batches and mixing matrices kept apart). Run it with one torch
thread, as evaluation workers train:

    OMP_NUM_THREADS=1 python benchmarks/bench_seed_stacking.py [--workloads digits:20 mnist1d:40]
        [--stack 4] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from airplan_qo.data import load, partition
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer


def trainer_for(dataset: str, model: str, clients: int) -> Trainer:
    """A trainer as the default grid's runs are set up: 5 local steps at lr 0.05, over the air
    at 10 dB, a ring, evaluated every round."""
    ds = load(dataset, seed=0)
    part = partition("dirichlet", ds.y_train, clients, seed=0, alpha=0.5)
    cfg = RunConfig.from_dict({"rounds": 10 ** 6, "model": model, "lr": 0.05,
                               "local_steps": 5, "channel": "ota", "snr_db": 10.0})
    return Trainer(cfg, ds, part, build(TopologySpec.create("ring", clients)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+",
                    default=["digits:20", "synthetic:20", "mnist1d:40"],
                    help="DATASET:N[:MODEL] (model mlp by default)")
    ap.add_argument("--stack", type=int, default=4, help="seeds stacked (S)")
    ap.add_argument("--rounds", type=int, default=10, help="timed rounds per size")
    ap.add_argument("--block", type=int, default=2, help="rounds per turn")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {"torch_threads": torch.get_num_threads(), "stack": args.stack,
           "load_before": os.getloadavg(), "workloads": []}
    for item in args.workloads:
        dataset, n, *rest = item.split(":")
        model = rest[0] if rest else "mlp"
        n = int(n)
        trainers = {"single": trainer_for(dataset, model, n),
                    "stacked": trainer_for(dataset, model, args.stack * n)}
        times: dict[str, list[float]] = {k: [] for k in trainers}
        for t in trainers.values():      # warm-up
            t.step()
        while len(times["single"]) < args.rounds:
            for name, t in trainers.items():
                for _ in range(args.block):
                    t0 = time.perf_counter()
                    t.step()
                    times[name].append(time.perf_counter() - t0)
        single = statistics.median(times["single"])
        stacked = statistics.median(times["stacked"])
        out["workloads"].append({
            "dataset": dataset, "model": model, "clients": n,
            "stacked_clients": args.stack * n, "seconds_per_round": single,
            "stacked_seconds_per_round": stacked,
            "bound": args.stack * single / stacked})
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
