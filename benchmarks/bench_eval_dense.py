"""The clients' evaluation of a dense model (the MLPs, logistic regression) on the CPU: class by
sample with the true class's score against the highest (``flat.client_correct``), against the
(n, m, C) logits and an argmax over the classes it replaced.

Every evaluated round counts each client's correct predictions on the evaluation samples (2000
on mnist1d, the test set on digits). This times ``Trainer.client_accuracies`` both ways in the
same process, taking turns, after a few training rounds, and checks that they count the same;
then a whole round (5 local steps, ring, over the air at 10 dB) each way.

    OMP_NUM_THREADS=1 python benchmarks/bench_eval_dense.py [--dataset mnist1d] [--model mlp]
        [--clients 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import airplan_qo.runtime.engine as engine
from airplan_qo.data import load, partition
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.flat import client_logits


def argmax_correct(model, layout, params, x, y, strategy):
    """The count as the runtime made it before: (n, m, C) logits, argmax over the classes."""
    return (client_logits(model, layout, params, x, strategy).argmax(dim=2)
            == y.unsqueeze(0)).sum(dim=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--dataset", default="mnist1d")
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load(args.dataset, seed=0)
    part = partition("dirichlet", ds.y_train, args.clients, seed=0, alpha=0.5)
    cfg = RunConfig.from_dict({"rounds": 1000, "model": args.model, "lr": 0.05,
                               "local_steps": 5, "snr_db": 10.0})
    trainer = Trainer(cfg, ds, part, build(TopologySpec.create("ring", args.clients)))
    for _ in range(3):
        trainer.step()
    shipped = engine.client_correct
    ways = {"argmax": argmax_correct, "class_by_sample": shipped}
    counts, evals, rounds = {}, {k: [] for k in ways}, {k: [] for k in ways}
    try:
        for name, fn in ways.items():        # warm-up, and the counts compared
            engine.client_correct = fn
            counts[name] = trainer._correct(0, trainer.n)[0].tolist()
        for _ in range(args.repeats):       # taking turns, so load changes hit both alike
            for name, fn in ways.items():
                engine.client_correct = fn
                t0 = time.perf_counter()
                trainer.client_accuracies()
                evals[name].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trainer.step()
                rounds[name].append(time.perf_counter() - t0)
    finally:
        engine.client_correct = shipped
    result = {"model": args.model, "dataset": args.dataset, "clients": args.clients,
              "strategy": trainer.strategy,
              "eval_samples": int(trainer.x_test.shape[0] if trainer.eval_index is None
                                  else len(trainer.eval_index)),
              "torch_threads": torch.get_num_threads(),
              "same_counts": counts["argmax"] == counts["class_by_sample"]}
    for name in ways:
        result[f"{name}_eval_s"] = statistics.median(evals[name])
        result[f"{name}_round_s"] = statistics.median(rounds[name])
    result["eval_speedup"] = result["argmax_eval_s"] / result["class_by_sample_eval_s"]
    result["round_speedup"] = result["argmax_round_s"] / result["class_by_sample_round_s"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
