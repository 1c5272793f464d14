"""Scaling of one run over several processes (torch.distributed, gloo on loopback), and what
each process receives.

For each workload, the same run (D-SGD on a ring unless ``--topology`` says otherwise, digits,
one local step unless given; CHOCO with the common rand-k mask for ``--k-ratio`` below 1;
evaluated at its last round only) is timed with 1 process (the plain single-process Trainer)
and with R processes (:class:`~airplan_qo.runtime.distributed.DistributedTrainer`), each
process with one torch thread, once per exchange: ``auto`` (each rank receives the rows its
clients mix with, point to point) and ``all`` (one all_gather of every block). Prints one JSON
object: per workload, process count and exchange the median seconds per round (rank 0's round
time after ``--warmup`` rounds), the share of it spent exchanging (models, losses and the
consensus distance's reductions, waiting for the slower rank included), speedup = t(1) / t(R)
and efficiency = speedup / R against the 1-process run of the same invocation, and per rank
the median over the timed rounds of the bytes it received per round (all of them, and the
models' share) and of the model rows. The runs are checked to end with the same models.

Memory, per process: ``peak_rss_mb``, the peak resident memory (``getrusage`` maxrss) over the
run, taken before the models are gathered for the check; ``start_rss_mb``, the resident memory
before the trainer is built (the interpreter, torch, the dataset); ``held_mb``, the trainer's
own tensors after the run (the models' table, its scratch buffer, the momentum, gradients and
batch buffers, the rule's state); ``table_rows``, the rows of the table (N in one process and
with exchange ``all``; a run split by rows holds its block and halo, ``auto`` where it applies).

    python benchmarks/bench_distributed.py [--ranks 1 2] [--rounds 12 --warmup 2]
        [--workloads mlp:100 cnn4:40] [--local-steps 1] [--exchanges auto all] [--k-ratio 1]
        [--topology ring]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _workload(model: str, n: int, rounds: int, local_steps: int, k_ratio: float = 1.0,
              topology: str = "ring"):
    from airplan_qo.data import load, partition
    from airplan_qo.plans.topology import TopologySpec, build
    from airplan_qo.runtime.engine import RunConfig

    dataset = load("digits", seed=0)
    # at least 10 samples per client where digits has enough (1438), else what it has
    part = partition("dirichlet", dataset.y_train, n, seed=0, alpha=0.5,
                     min_per_client=min(10, dataset.n_train // n))
    config = RunConfig(model=model, rounds=rounds, local_steps=local_steps, batch_size=32,
                       eval_every=rounds, data_seed=1, train_seed=2, channel_seed=3,
                       k_ratio=k_ratio)
    return config, dataset, part, build(TopologySpec.create(topology, n))


def worker(out: Path, model: str, n: int, rounds: int, warmup: int, local_steps: int,
           exchange: str, k_ratio: float = 1.0, topology: str = "ring") -> None:
    """One process of a timed run (rank 0 writes the timings, every rank what it received);
    WORLD_SIZE 1 runs the plain Trainer."""
    import torch

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = _workload(model, n, rounds, local_steps, k_ratio, topology)
    start_rss = _rss_mb()
    spent, depth = [0.0], [0]
    if world == 1:
        from airplan_qo.runtime.engine import Trainer

        trainer, rank = Trainer(*args), 0
    else:
        from airplan_qo.runtime import distributed

        group = distributed.init("gloo")
        trainer = distributed.DistributedTrainer(*args, exchange=exchange)
        rank = group.rank
        for name in ("_gather_rows", "_pass_rows", "_consensus"):
            inner = getattr(trainer, name)

            def timed(*a, _inner=inner, **kw):
                start = time.perf_counter()
                depth[0] += 1
                try:
                    return _inner(*a, **kw)
                finally:
                    depth[0] -= 1
                    if not depth[0]:          # the outermost exchange call counts
                        spent[0] += time.perf_counter() - start
            setattr(trainer, name, timed)
    times, shares = [], []
    for r in range(rounds):
        spent[0] = 0.0
        start = time.perf_counter()
        trainer.step()
        took = time.perf_counter() - start
        if r >= warmup:
            times.append(took)
            shares.append(spent[0] / took)
    memory = {"start_rss_mb": round(start_rss, 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "held_mb": round(_held_bytes(trainer) / 2 ** 20, 2),
              "table_rows": int(trainer.x.shape[0])}
    received, models = [], trainer.x
    if world > 1:
        received = [t.as_dict() for t in trainer.traffic_log[warmup:]]
        models = trainer.models()
    torch.save({"times": times, "exchange_share": shares, "x": models,
                "received": received, "memory": memory}, out.with_suffix(f".rank{rank}.pt"))
    if world > 1:
        distributed.shutdown()


def _rss_mb() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _held_bytes(trainer) -> int:
    """Bytes of the trainer's per-client tensors: the models' table, its scratch buffer, the
    momentum, gradients, batch buffers and the rule's state."""
    import torch

    tensors = [trainer.x, trainer._scratch, trainer.m, trainer._g, trainer._batch_x,
               trainer._batch_y]
    tensors += [v for v in trainer.rule.state().values() if isinstance(v, torch.Tensor)]
    seen, total = set(), 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_run(world: int, model: str, n: int, exchange: str, args: argparse.Namespace,
              tmp: Path) -> list[dict]:
    """Every rank's record of one run (rank 0's first)."""
    out = tmp / f"{model}-{n}-{world}-{exchange}.pt"
    port = str(_free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
               WORLD_SIZE=str(world),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, __file__, "--worker", str(out), model, str(n), str(args.rounds),
           str(args.warmup), str(args.local_steps), exchange, str(args.k_ratio),
           args.topology]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(world)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a process of the {world}-process run exited with {codes}")
    import torch

    return [torch.load(out.with_suffix(f".rank{r}.pt"), weights_only=True)
            for r in range(world)]


def _received(record: dict) -> dict:
    """A rank's median bytes (all, models) and model rows received per timed round."""
    rows = record["received"]
    return {"bytes": statistics.median(r["bytes"] for r in rows),
            "model_bytes": statistics.median(r["model_bytes"] for r in rows),
            "rows": statistics.median(r["rows"] for r in rows),
            "bytes_evaluated_round": rows[-1]["bytes"]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        out, model, n, rounds, warmup, steps, exchange, k_ratio, topology = sys.argv[2:11]
        worker(Path(out), model, int(n), int(rounds), int(warmup), int(steps), exchange,
               float(k_ratio), topology)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workloads", nargs="+", default=["mlp:100", "cnn4:40"],
                        help="MODEL:N pairs (digits, ring)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--local-steps", type=int, default=1)
    parser.add_argument("--topology", default="ring",
                        help="the topology family (ring, one_peer_exponential, ...)")
    parser.add_argument("--k-ratio", type=float, default=1.0,
                        help="below 1: CHOCO with the common rand-k mask instead of D-SGD")
    parser.add_argument("--exchanges", nargs="+", default=["auto", "all"],
                        choices=["auto", "all"])
    args = parser.parse_args()
    ranks = sorted(set([1, *args.ranks]))
    report = {"cpus": os.cpu_count(), "load_average_before": list(os.getloadavg()),
              "rounds": args.rounds, "warmup": args.warmup, "local_steps": args.local_steps,
              "k_ratio": args.k_ratio, "topology": args.topology,
              "runs": []}
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.workloads:
            model, n = spec.split(":")
            base = None
            for world in ranks:
                for exchange in (["-"] if world == 1 else args.exchanges):
                    records = timed_run(world, model, int(n), exchange, args, Path(tmp))
                    median = statistics.median(records[0]["times"])
                    if base is None:
                        base, base_x = median, records[0]["x"]
                    speedup = base / median
                    run = {
                        "model": model, "clients": int(n), "processes": world,
                        "exchange": exchange, "s_per_round": round(median, 5),
                        "speedup": round(speedup, 3), "efficiency": round(speedup / world, 3),
                        "same_models_as_1": bool(torch.equal(records[0]["x"], base_x)),
                        "memory": [r["memory"] for r in records]}
                    if world > 1:
                        run["exchange_share"] = round(
                            statistics.median(records[0]["exchange_share"]), 3)
                        run["received_per_round"] = [_received(r) for r in records]
                    report["runs"].append(run)
    report["load_average_after"] = list(os.getloadavg())
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
