"""How long a paper-sized study takes on one device, with W worker processes sharing it.

The AirPlan paper's evaluation is about 150 workloads x 30 seeds of one CNN on CIFAR-10 at
N = 50 for 100 rounds: 4500 runs. This script trains ``--sample`` such runs (cnn4, D-SGD, the
channel of ``--channel``, a topology from ``--topologies`` taken in turn, random CIFAR-sized
3x32x32 data split by Dirichlet(``--alpha``), the average model and the clients evaluated every
``--eval-every`` rounds, every seed different) with each worker count of ``--workers``, each
worker a process of its own with its own data on the device. It reports the wall time of the
sample, runs per hour and the projection to ``--study-runs`` runs; the first run of each worker
(start-up, cuDNN's autotuning) is timed apart and not counted.

What it leaves out of the projection: planning and recording in the catalog (a few ms per run
each, docs/evaluation.md) and the analysis; the projection assumes the sample's throughput
holds for the whole study.

``--profile R`` first profiles R rounds of one such run in this process (torch.profiler, after
10 warm-up rounds): wall and device-busy milliseconds per round, kernel launches per round and
the operators that took the most device time (what a faster round would have to cut).

    python benchmarks/bench_study.py --device cuda [--workers 1 4 8 16] [--sample 64]
    python benchmarks/bench_study.py --device cuda --profile 20 --workers
    python benchmarks/bench_study.py --device cpu --workers 1 2 --sample 4 --rounds 5 --clients 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _trainers(args: dict, index: int):
    """A function seed -> a Trainer of one study run, on this worker's own random data."""
    import torch

    from airplan_qo.data import Dataset, partition
    from airplan_qo.plans.topology import TopologySpec, build
    from airplan_qo.runtime.engine import RunConfig, Trainer

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1000 + index)
    n_train, n_test = args["train"], args["test"]
    x = torch.randn(n_train + n_test, 3, 32, 32, generator=gen).numpy()
    y = torch.randint(0, 10, (n_train + n_test,), generator=gen).numpy()
    dataset = Dataset.from_arrays("random(3, 32, 32)", x[:n_train], y[:n_train], x[n_train:],
                                  y[n_train:], n_classes=10, source="random benchmark data")
    topologies = [build(TopologySpec.create(family, args["clients"]))
                  for family in args["topologies"]]

    def trainer(seed: int) -> Trainer:
        part = partition("dirichlet", dataset.y_train, args["clients"], seed=seed,
                         alpha=args["alpha"])
        config = RunConfig.from_dict(dict(
            model=args["model"], rounds=args["rounds"], lr=0.01, batch_size=32, local_steps=1,
            eval_every=args["eval_every"], threads=1, device=args["device"],
            channel=args["channel"], data_seed=seed, train_seed=seed + 1,
            channel_seed=seed + 2))
        return Trainer(config, dataset, part, topologies[seed % len(topologies)])
    return trainer


def _worker(args: dict, index: int, queue, ready, go, results) -> None:
    import torch

    trainer = _trainers(args, index)

    def one(seed: int) -> float:
        start = time.perf_counter()
        trainer(seed).run()
        if args["device"].startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = one(10 ** 6 + index)            # start-up and autotuning, not counted
    ready.put(first)
    go.wait()
    times = []
    while True:
        seed = queue.get()
        if seed is None:
            break
        times.append(one(seed))
    results.put(times)


def profile(args: argparse.Namespace) -> dict:
    """Where one run's rounds spend their time (torch.profiler over ``args.profile`` rounds)."""
    import torch
    from torch.profiler import ProfilerActivity

    shared = {k: getattr(args, k) for k in SHARED}
    trainer = _trainers(shared, 0)(0)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(10):
        trainer.step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.profile):
            trainer.step()
        sync()
    wall = time.perf_counter() - start
    events = prof.key_averages()

    def device_us(event) -> float:
        return float(getattr(event, "self_device_time_total", 0.0) or 0.0)

    kernel = torch.autograd.DeviceType.CUDA
    # kernels are events of their own; an operator's self device time is its kernels'
    busy = sum(device_us(e) for e in events if e.device_type == kernel)
    ops = [e for e in events if e.device_type != kernel]
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                        "cudaLaunchKernelExC"))
    top = sorted(ops, key=device_us if cuda else (lambda e: e.self_cpu_time_total),
                 reverse=True)[:12]
    rounds = args.profile
    return {"rounds": rounds, "wall_ms_per_round": round(1e3 * wall / rounds, 2),
            "device_busy_ms_per_round": round(busy / 1e3 / rounds, 2),
            "device_busy_share": round(busy / 1e6 / wall, 3) if wall else None,
            "kernel_launches_per_round": round(launches / rounds, 1),
            "top": [{"op": e.key[:60], "calls_per_round": round(e.count / rounds, 1),
                     "device_ms_per_round": round(device_us(e) / 1e3 / rounds, 3),
                     "cpu_ms_per_round": round(e.self_cpu_time_total / 1e3 / rounds, 3)}
                    for e in top]}


SHARED = ("train", "test", "clients", "topologies", "alpha", "model", "rounds", "eval_every",
          "device", "channel")


def sample(args: argparse.Namespace, workers: int) -> dict:
    ctx = mp.get_context("spawn")
    queue, ready, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    shared = {k: getattr(args, k) for k in SHARED}
    procs = [ctx.Process(target=_worker, args=(shared, i, queue, ready, go, results))
             for i in range(workers)]
    setup = time.perf_counter()
    for proc in procs:
        proc.start()
    firsts = [ready.get() for _ in procs]
    setup_s = time.perf_counter() - setup
    for seed in range(args.sample):
        queue.put(seed * 10)
    for _ in procs:
        queue.put(None)
    start = time.perf_counter()
    go.set()
    per_run = [t for _ in procs for t in results.get()]
    wall = time.perf_counter() - start
    for proc in procs:
        proc.join()
    rate = args.sample / wall
    return {"workers": workers, "sample_runs": args.sample, "wall_s": round(wall, 1),
            "runs_per_hour": round(rate * 3600), "run_s_median": round(statistics.median(per_run), 2),
            "first_run_s": round(max(firsts), 1), "setup_s": round(setup_s, 1),
            "projected_study_hours": round(args.study_runs / rate / 3600, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 4, 8, 16])
    parser.add_argument("--profile", type=int, default=0, metavar="R",
                        help="first profile R rounds of one run in this process")
    parser.add_argument("--sample", type=int, default=64, help="runs timed per worker count")
    parser.add_argument("--study-runs", type=int, default=4500)
    parser.add_argument("--model", default="cnn4")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--channel", default="ota")
    parser.add_argument("--topologies", nargs="+", default=["ring", "erdos_renyi", "complete"])
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--test", type=int, default=1000)
    args = parser.parse_args()
    import torch

    cuda = args.device.startswith("cuda")
    doc = {"device": args.device,
           "card": torch.cuda.get_device_name() if cuda else platform.machine(),
           "cpus": os.cpu_count(), "torch": torch.__version__,
           "run": f"{args.model}, N = {args.clients}, {args.rounds} rounds, eval every "
                  f"{args.eval_every}, channel {args.channel}, random 3x32x32 "
                  f"({args.train} train images)",
           "samples": []}
    if args.profile:
        doc["profile"] = profile(args)
        print(json.dumps(doc["profile"]), flush=True)
    for workers in args.workers:
        doc["samples"].append(sample(args, workers))
        print(json.dumps(doc["samples"][-1]), flush=True)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
