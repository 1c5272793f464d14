"""The largest number of clients one device holds for a model, and the rounds per second there.

For each model, one run's state is built and trained for a few rounds at growing N (doubling
from ``--start``, then ``--refine`` bisection steps between the last N that fit and the first
that did not), on CIFAR-sized random data (``--train`` images of 3x32x32, 10 classes, split iid
over the clients: the data set's size does not grow with N, as a real one's would not). Each
trial builds :class:`airplan_qo.runtime.engine.Trainer` (D-SGD on a ring, batch 32, one local
step, the channel of ``--channel``), runs ``--warmup`` rounds and times ``--rounds`` more; a
trial that runs out of memory ends the doubling. No round evaluates (the per-client test pass
is not part of the state measured).

Per trial: seconds per round (median), rounds per second, the device's peak allocated memory
(``torch.cuda.max_memory_allocated``; on the CPU the process's peak resident memory) and that
peak per client. Prints one JSON document; per model ``largest_n`` is the largest N that ran.

    python benchmarks/bench_capacity.py --device cuda [--models cnn4 resnet18]
        [--start cnn4=1000 resnet18=100] [--max-clients 64000] [--refine 2]
    python benchmarks/bench_capacity.py --device cpu --models cnn4 --start cnn4=4 --max-clients 8
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from airplan_qo.data import Dataset, partition  # noqa: E402
from airplan_qo.plans.topology import TopologySpec, build  # noqa: E402
from airplan_qo.runtime.device import device_name, resolve_device  # noqa: E402
from airplan_qo.runtime.engine import RunConfig, Trainer  # noqa: E402

DEFAULT_START = {"cnn4": 1000, "resnet18": 100, "mlp": 1000}


def cifar_sized(n_train: int, n_test: int, seed: int) -> Dataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, 3, 32, 32, generator=gen).numpy()
    y = torch.randint(0, 10, (n_train + n_test,), generator=gen).numpy()
    return Dataset.from_arrays("random(3, 32, 32)", x[:n_train], y[:n_train], x[n_train:],
                               y[n_train:], n_classes=10, source="random benchmark data")


def out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc) or \
        "can't allocate memory" in str(exc)


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def trial(model: str, n: int, dataset: Dataset, args, device: torch.device) -> dict:
    """One N: build, warm up, time. Returns the trial's figures or ``{"oom": True}``."""
    release(device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    trainer = None
    try:
        part = partition("iid", dataset.y_train, n, seed=0)
        topo = build(TopologySpec.create("ring", n))
        config = RunConfig.from_dict(dict(
            model=model, rounds=10 ** 6, lr=0.01, batch_size=32, local_steps=1,
            eval_every=10 ** 6, threads=1, strategy=args.strategy, device=args.device,
            channel=args.channel))
        trainer = Trainer(config, dataset, part, topo)
        built_s = time.perf_counter() - start
        for _ in range(args.warmup):
            trainer.step()
        sync()
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            trainer.step()
            sync()
            times.append(time.perf_counter() - t0)
        per_round = statistics.median(times)
        peak = peak_bytes(device)
        return {"n": n, "d": trainer.d, "strategy": trainer.strategy,
                "s_per_round": round(per_round, 4), "rounds_per_s": round(1 / per_round, 2),
                "peak_gb": round(peak / 2 ** 30, 2),
                "mb_per_client": round(peak / 2 ** 20 / n, 2),
                "build_s": round(built_s, 2),
                "trial_s": round(time.perf_counter() - start, 1)}
    except (RuntimeError, MemoryError) as exc:
        if not out_of_memory(exc) and not isinstance(exc, MemoryError):
            raise
        return {"n": n, "oom": True, "trial_s": round(time.perf_counter() - start, 1)}
    finally:
        del trainer
        release(device)


def capacity(model: str, dataset: Dataset, args, device: torch.device) -> dict:
    start = time.perf_counter()
    trials: list[dict] = []
    fit, failed = None, None
    n = args.start.get(model, DEFAULT_START.get(model, 100))
    while n <= args.max_clients:
        result = trial(model, n, dataset, args, device)
        trials.append(result)
        print(json.dumps({"model": model, **result}), file=sys.stderr, flush=True)
        if result.get("oom"):
            failed = n
            break
        fit = n
        if time.perf_counter() - start > args.budget_s or \
                result["s_per_round"] * (args.rounds + args.warmup) > args.budget_s / 4:
            break
        n *= 2
    for _ in range(args.refine if fit and failed else 0):
        mid = (fit + failed) // 2
        if mid in (fit, failed) or time.perf_counter() - start > args.budget_s:
            break
        result = trial(model, mid, dataset, args, device)
        trials.append(result)
        print(json.dumps({"model": model, **result}), file=sys.stderr, flush=True)
        if result.get("oom"):
            failed = mid
        else:
            fit = mid
    best = next((t for t in trials if t["n"] == fit and not t.get("oom")), None)
    return {"largest_n": fit, "first_oom_n": failed,
            "at_largest": best, "trials": trials,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["cnn4", "resnet18"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--start", nargs="*", default=[], metavar="MODEL=N",
                        help="first N per model (defaults: cnn4=1000, resnet18=100)")
    parser.add_argument("--max-clients", type=int, default=64000)
    parser.add_argument("--refine", type=int, default=2, help="bisection steps after the doubling")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--channel", default="ota")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--budget-s", type=float, default=120.0,
                        help="stop growing N for a model once it has taken this long")
    args = parser.parse_args()
    try:
        args.start = {k: int(v) for k, v in (item.split("=", 1) for item in args.start)}
    except ValueError:
        parser.error("--start takes MODEL=N, e.g. --start cnn4=1000")
    device = resolve_device(args.device)
    dataset = cifar_sized(args.train, args.test, seed=0)
    doc = {"device": device_name(device),
           "card": torch.cuda.get_device_name(device) if device.type == "cuda" else
           platform.processor() or platform.machine(),
           "memory_gb": (round(torch.cuda.get_device_properties(device).total_memory / 2 ** 30, 1)
                         if device.type == "cuda" else None),
           "torch": torch.__version__, "channel": args.channel,
           "data": f"random 3x32x32, {args.train} train images, iid",
           "models": {}}
    for model in args.models:
        doc["models"][model] = capacity(model, dataset, args, device)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
