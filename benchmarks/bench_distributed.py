"""Scaling of one run over several processes (torch.distributed, gloo on loopback).

For each workload, the same run (D-SGD on a ring, digits, one local step unless given) is timed
with 1 process (the plain single-process Trainer) and with R processes
(:class:`~airplan_qo.runtime.distributed.DistributedTrainer`), each process with one torch
thread. Prints one JSON object: per workload and process count the median seconds per round
(rank 0's round time after ``--warmup`` rounds), the share of it spent in the all_gather of
models and losses, and speedup = t(1) / t(R) and efficiency = speedup / R against the 1-process
run of the same invocation. The runs are checked to end with the same models.

    python benchmarks/bench_distributed.py [--ranks 1 2] [--rounds 12 --warmup 2]
        [--workloads mlp:100 cnn4:40] [--local-steps 1]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _workload(model: str, n: int, rounds: int, local_steps: int):
    from airplan_qo.data import load, partition
    from airplan_qo.plans.topology import TopologySpec, build
    from airplan_qo.runtime.engine import RunConfig

    dataset = load("digits", seed=0)
    part = partition("dirichlet", dataset.y_train, n, seed=0, alpha=0.5)
    config = RunConfig(model=model, rounds=rounds, local_steps=local_steps, batch_size=32,
                       eval_every=rounds, data_seed=1, train_seed=2, channel_seed=3)
    return config, dataset, part, build(TopologySpec.create("ring", n))


def worker(out: Path, model: str, n: int, rounds: int, warmup: int, local_steps: int) -> None:
    """One process of a timed run (rank 0 writes the timings); WORLD_SIZE 1 runs the plain
    Trainer."""
    import torch

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = _workload(model, n, rounds, local_steps)
    gather = [0.0]
    if world == 1:
        from airplan_qo.runtime.engine import Trainer

        trainer, rank = Trainer(*args), 0
    else:
        from airplan_qo.runtime import distributed

        group = distributed.init("gloo")
        trainer, rank = distributed.DistributedTrainer(*args), group.rank
        inner = trainer._gather_rows

        def timed(full, mine):
            start = time.perf_counter()
            inner(full, mine)
            gather[0] += time.perf_counter() - start
        trainer._gather_rows = timed
    times, shares = [], []
    for r in range(rounds):
        gather[0] = 0.0
        start = time.perf_counter()
        trainer.step()
        took = time.perf_counter() - start
        if r >= warmup:
            times.append(took)
            shares.append(gather[0] / took)
    if rank == 0:
        torch.save({"times": times, "gather_share": shares, "x": trainer.x}, out)
    if world > 1:
        distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_run(world: int, model: str, n: int, args: argparse.Namespace, tmp: Path) -> dict:
    out = tmp / f"{model}-{n}-{world}.pt"
    port = str(_free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
               WORLD_SIZE=str(world),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, __file__, "--worker", str(out), model, str(n), str(args.rounds),
           str(args.warmup), str(args.local_steps)]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(world)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a process of the {world}-process run exited with {codes}")
    import torch

    return torch.load(out, weights_only=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        out, model, n, rounds, warmup, steps = sys.argv[2:8]
        worker(Path(out), model, int(n), int(rounds), int(warmup), int(steps))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workloads", nargs="+", default=["mlp:100", "cnn4:40"],
                        help="MODEL:N pairs (digits, ring)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--local-steps", type=int, default=1)
    args = parser.parse_args()
    ranks = sorted(set([1, *args.ranks]))
    report = {"cpus": os.cpu_count(), "load_average_before": list(os.getloadavg()),
              "rounds": args.rounds, "warmup": args.warmup, "local_steps": args.local_steps,
              "runs": []}
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.workloads:
            model, n = spec.split(":")
            base = None
            for world in ranks:
                got = timed_run(world, model, int(n), args, Path(tmp))
                median = statistics.median(got["times"])
                if base is None:
                    base, base_x = median, got["x"]
                speedup = base / median
                report["runs"].append({
                    "model": model, "clients": int(n), "processes": world,
                    "s_per_round": round(median, 5),
                    "gather_share": round(statistics.median(got["gather_share"]), 3),
                    "speedup": round(speedup, 3), "efficiency": round(speedup / world, 3),
                    "same_models_as_1": bool(torch.equal(got["x"], base_x))})
    report["load_average_after"] = list(os.getloadavg())
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
