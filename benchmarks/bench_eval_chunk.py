"""The clients' evaluation on the CPU: one grouped convolution over many clients against a plain
convolution per client.

Every evaluated round measures each client's model on the evaluation samples (2000 on mnist1d).
For a model with convolutions the runtime evaluates one client at a time on the CPU
(``engine._EVAL_CLIENTS_CPU_CONV``) and in chunks of ``engine._EVAL_CLIENTS`` elsewhere. This
times ``Trainer.client_accuracies`` both ways in the same process, after a few training rounds,
and checks they count the same correct predictions; then one whole training round each way.

    OMP_NUM_THREADS=1 python benchmarks/bench_eval_chunk.py [--model cnn1d] [--clients 40]
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


def timed(fn, repeats: int) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="cnn1d")
    ap.add_argument("--dataset", default="mnist1d")
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load(args.dataset, seed=0)
    part = partition("dirichlet", ds.y_train, args.clients, seed=0, alpha=0.5)
    cfg = RunConfig.from_dict({"rounds": 1000, "model": args.model, "lr": 0.05,
                               "local_steps": 5})
    trainer = Trainer(cfg, ds, part, build(TopologySpec.create("ring", args.clients)))
    for _ in range(3):
        trainer.step()
    shipped = engine._EVAL_CLIENTS_CPU_CONV
    result = {"model": args.model, "dataset": args.dataset, "clients": args.clients,
              "eval_samples": int(trainer.x_test.shape[0] if trainer.eval_index is None
                                  else len(trainer.eval_index)),
              "torch_threads": torch.get_num_threads()}
    ways = (("grouped", engine._EVAL_CLIENTS), ("per_client", 1))
    counts = {}
    for name, chunk in ways:     # the same models both ways
        engine._EVAL_CLIENTS_CPU_CONV = chunk
        counts[name] = trainer.client_accuracies()
        result[f"eval_s_{name}"] = timed(trainer.client_accuracies, args.repeats)
    for name, chunk in ways:
        engine._EVAL_CLIENTS_CPU_CONV = chunk
        result[f"round_s_{name}"] = timed(trainer.step, args.repeats)
    engine._EVAL_CLIENTS_CPU_CONV = shipped
    result["eval_ratio_grouped_over_per_client"] = (result["eval_s_grouped"]
                                                    / result["eval_s_per_client"])
    result["round_ratio_grouped_over_per_client"] = (result["round_s_grouped"]
                                                     / result["round_s_per_client"])
    result["same_accuracies"] = bool((counts["grouped"] == counts["per_client"]).all())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
