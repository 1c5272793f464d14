"""Collaboration gain: what a group of 10 clients reaches with its own data, against the fully
connected plan on all clients.

On a task that does not need the other clients' data, one group (a D-Cliques clique of 10)
reaches the SLA alone and the cheapest plan is not to communicate. This measures, per dataset
and seed: the N clients' Dirichlet (or, for ``leaf_synthetic``, natural per-user) partition
of the workload; ``fc``, the mean accuracy of the clients' own models after the round budget on
the complete graph over all N clients; and ``group``, the same for the 10 clients of the first
D-Cliques clique (formed from the true label counts, as ANALYZE WORKLOAD would) trained on the
complete graph among themselves, nobody else's data. Both on the ideal channel (no noise), with
the workload defaults (lr 0.05, momentum 0.9, batch 32, 5 local steps). Prints one JSON line per
run and a summary: mean and standard deviation over seeds of fc, group, group / fc, and how
many seeds the group alone met 0.95 * fc.

    OMP_NUM_THREADS=1 nice python benchmarks/bench_collaboration.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from airplan_qo.data import Partition, load, partition_dataset
from airplan_qo.plans.cliques import form_cliques
from airplan_qo.plans.topology import TopologySpec, build

DATASETS = ("digits", "synthetic", "mnist1d", "leaf_synthetic")
GROUP = 10


def run(dataset, part, *, model: str, rounds: int, seed: int) -> float:
    """Mean accuracy of the clients' own models after ``rounds`` rounds on the complete graph."""
    from airplan_qo.runtime import RunConfig, Trainer

    cfg = RunConfig.from_dict(dict(model=model, rounds=rounds, lr=0.05, momentum=0.9, batch_size=32,
                                   local_steps=5, k_ratio=1.0, channel="ideal", data_seed=seed,
                                   train_seed=seed + 1, channel_seed=seed + 2))
    topo = build(TopologySpec.create("complete", part.n_clients))
    result = Trainer(cfg, dataset, part, topo).run(None)
    return float(result.client_acc_mean)


def measure(name: str, *, clients: int, alpha: float, model: str, rounds: int, seed: int
            ) -> dict:
    data = load(name, seed=seed)
    scheme = "natural" if name == "leaf_synthetic" else "dirichlet"
    part = partition_dataset(data, scheme, clients, seed=seed, alpha=alpha)
    counts = part.label_counts(data.y_train, data.n_classes)
    clique = form_cliques(counts, GROUP, seed)[0]
    group = Partition(indices=[part.indices[c] for c in clique], n_samples=part.n_samples,
                      scheme="group", seed=seed)
    start = time.perf_counter()
    fc = run(data, part, model=model, rounds=rounds, seed=seed)
    alone = run(data, group, model=model, rounds=rounds, seed=seed)
    return {"dataset": name, "seed": seed, "partition": scheme,
            "alpha": alpha if scheme == "dirichlet" else None, "clients": clients,
            "model": model, "rounds": rounds, "train_samples": int(part.sizes.sum()),
            "group_samples": int(group.sizes.sum()), "fc": round(fc, 4),
            "group": round(alone, 4), "ratio": round(alone / fc, 4),
            "group_meets_0.95fc": bool(alone >= 0.95 * fc),
            "seconds": round(time.perf_counter() - start, 1)}


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]

        def stat(key):
            values = [r[key] for r in mine]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return round(statistics.fmean(values), 4), round(sd, 4)

        out.append({"dataset": name, "seeds": len(mine), "model": mine[0]["model"],
                    "partition": mine[0]["partition"], "train_samples": mine[0]["train_samples"],
                    "group_samples_mean": round(float(np.mean([r["group_samples"]
                                                               for r in mine]))),
                    "fc": stat("fc"), "group": stat("group"), "ratio": stat("ratio"),
                    "group_meets_0.95fc": sum(r["group_meets_0.95fc"] for r in mine)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--alpha", type=float, default=0.5, help="Dirichlet alpha (not leaf)")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for name in args.datasets:
        for seed in args.seeds:
            rows.append(measure(name, clients=args.clients, alpha=args.alpha, model=args.model,
                                rounds=args.rounds, seed=seed))
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
                      "summary": summary(rows)}, indent=1))


if __name__ == "__main__":
    main()
