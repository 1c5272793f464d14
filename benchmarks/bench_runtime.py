"""Seconds per training round of the stacked runtime vs a naive baseline and a lower bound.

For each model and N, three ways to run the same D-SGD round (``local_steps`` momentum-SGD
steps of ``batch_size`` samples per client, then one mixing step on a ring):

- ``engine``: :class:`airplan_qo.runtime.engine.Trainer` (stacked (N x d) parameters, strategy
  chosen by ``--strategy``, default the documented auto rule);
- ``naive``: N separate ``nn.Module`` s, each with its own ``torch.optim.SGD(momentum=0.9)``,
  mixing by looping over their state dicts;
- ``lower_bound``: one model trained on the concatenated batch (N x batch_size samples, the
  same FLOPs), one step per local step, no mixing.

The three take turns in blocks of rounds (medians reported), so load changes hit them alike.

Prints one JSON document with the load average seen before and after, and both ratios
(engine / lower_bound and naive / engine). ``--micro`` adds the top-k, noise and mixing
kernels at N = 100, d = 95k.

``--device`` (``cpu`` default, ``cuda``, ``cuda:N``, ``auto``) runs all three on that device (the
engine through ``RunConfig.device``; the naive models, their data and the lower bound's model
moved there); on a GPU every timed call ends with ``torch.cuda.synchronize()``. On a CUDA device
the defaults become N in {10, 100, 1000} on random 3x32x32 data:

    python benchmarks/bench_runtime.py [--sizes 10 50 100] [--models mlp cnn4] [--shape 3 32 32]
    python benchmarks/bench_runtime.py --device cuda [--strategy batched]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from airplan_qo.data import Dataset, load, partition  # noqa: E402
from airplan_qo.errors import AirPlanError  # noqa: E402
from airplan_qo.plans.topology import TopologySpec, build  # noqa: E402
from airplan_qo.runtime.device import device_name, resolve_device  # noqa: E402
from airplan_qo.runtime.engine import RunConfig, Trainer  # noqa: E402
from airplan_qo.model_size import build_model  # noqa: E402


def loadavg() -> list[float]:
    try:
        with open("/proc/loadavg") as handle:
            return [float(v) for v in handle.read().split()[:3]]
    except OSError:
        return []


def dataset_for(shape: list[int] | None, seed: int) -> Dataset:
    if not shape:
        return load("digits", seed=seed)
    rng = np.random.default_rng(seed)
    n_train, n_test = 5000, 500
    return Dataset.from_arrays(
        f"random{tuple(shape)}", rng.standard_normal((n_train, *shape)).astype(np.float32),
        rng.integers(0, 10, n_train), rng.standard_normal((n_test, *shape)).astype(np.float32),
        rng.integers(0, 10, n_test), n_classes=10, source="random benchmark data")


#: Waits for the device's queued work (set in main for a CUDA device): a GPU call returns before
#: its kernels finish, so every timed call ends with it.
SYNC = lambda: None  # noqa: E731


def median_time(fn, rounds: int, warmup: int) -> float:
    return interleaved({"fn": fn}, rounds, warmup)["fn"]


def interleaved(fns: dict, rounds: int, warmup: int, block: int = 5) -> dict[str, float]:
    """Median seconds per call of each function. The functions take turns in blocks of
    ``block`` calls (the first call of a block is a warm-up and not timed), so a change in
    machine load hits all of them alike while each block runs with its own data in cache."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        SYNC()
    while min(len(v) for v in times.values()) < rounds:
        for name, fn in fns.items():
            fn()
            SYNC()
            for _ in range(block):
                start = time.perf_counter()
                fn()
                SYNC()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def sampler(part, batch: int, seed: int):
    """The engine's minibatch sampler: (N, batch) indices, uniform with replacement."""
    sizes = np.array([len(ix) for ix in part.indices])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(part.indices)
    rng = np.random.default_rng(seed)

    def draw() -> np.ndarray:
        pos = np.floor(rng.random((sizes.size, batch)) * sizes[:, None]).astype(np.int64)
        return flat[offsets[:, None] + pos]
    return draw


VARIANTS = {
    "dsgd_ideal": {},
    "dsgd_ota": {"channel": "ota"},
    "choco_randk0.1_ota": {"k_ratio": 0.1, "channel": "ota"},
    "choco_topk0.1_ota": {"k_ratio": 0.1, "mask": "topk", "channel": "ota"},
    "choco_randk0.1_ota_dropout0.1": {"k_ratio": 0.1, "channel": "ota", "dropout": 0.1},
}


def engine_round(ds, part, topo, model: str, args, **options):
    cfg = RunConfig.from_dict(dict(model=model, rounds=10 ** 6, lr=0.01,
                                   batch_size=args.batch_size, local_steps=args.local_steps,
                                   eval_every=10 ** 6, threads=args.threads,
                                   strategy=args.strategy, device=args.device, **options))
    trainer = Trainer(cfg, ds, part, topo)
    return trainer.step, trainer.strategy


def naive_round(ds, part, topo, model: str, args):
    n = topo.graph.number_of_nodes()
    device = args.torch_device
    torch.manual_seed(0)
    first = build_model(model, ds.input_shape, ds.n_classes)
    models = [build_model(model, ds.input_shape, ds.n_classes).to(device) for _ in range(n)]
    for m in models:
        m.load_state_dict(first.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in models]
    w = topo.weights.tocsr()
    x_train = torch.from_numpy(np.array(ds.x_train)).to(device)
    y_train = torch.from_numpy(ds.y_train).to(device)
    draw = sampler(part, args.batch_size, 0)

    def round_() -> None:
        for _ in range(args.local_steps):
            idx = torch.from_numpy(draw()).to(device)
            for i, (m, opt) in enumerate(zip(models, opts)):
                opt.zero_grad()
                F.cross_entropy(m(x_train[idx[i]]), y_train[idx[i]]).backward()
                opt.step()
        states = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
        with torch.no_grad():
            for i, m in enumerate(models):
                row = slice(w.indptr[i], w.indptr[i + 1])
                mixed = {k: sum(float(wij) * states[j][k]
                                for j, wij in zip(w.indices[row], w.data[row]))
                         for k in states[i]}
                m.load_state_dict(mixed)
    return round_


def lower_bound_round(ds, part, model: str, args):
    device = args.torch_device
    torch.manual_seed(0)
    m = build_model(model, ds.input_shape, ds.n_classes).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x_train = torch.from_numpy(np.array(ds.x_train)).to(device)
    y_train = torch.from_numpy(ds.y_train).to(device)
    draw = sampler(part, args.batch_size, 0)

    def round_() -> None:
        for _ in range(args.local_steps):
            idx = torch.from_numpy(draw().reshape(-1)).to(device)
            opt.zero_grad()
            F.cross_entropy(m(x_train.index_select(0, idx)),
                            y_train.index_select(0, idx)).backward()
            opt.step()
    return round_


def micro(args) -> dict:
    """Kernels at N = 100, d = 95k: top-k variants, noise generation, mixing."""
    n, d = 100, 95_000
    device = args.torch_device
    gen = torch.Generator(device=device).manual_seed(0)
    v = torch.randn(n, d, generator=gen, device=device)
    ring = build(TopologySpec.create("ring", n)).weights
    from airplan_qo.runtime.gossip import Operator, LinkSet

    links = LinkSet(build(TopologySpec.create("ring", n)), device)
    sparse = Operator(n, links.recv, links.send, links.w, links.diag, device=device)
    dense = torch.from_numpy(ring.toarray().astype(np.float32)).to(device)
    out = {}
    for ratio in (0.01, 0.1):
        k = int(ratio * d)
        a = v.abs()
        out[f"topk_k{ratio}_ms"] = 1e3 * median_time(
            lambda: torch.topk(v.abs(), k, dim=1, sorted=False), 3, 1)
        out[f"kthvalue_k{ratio}_ms"] = 1e3 * median_time(
            lambda: a >= torch.kthvalue(a, d - k + 1, dim=1, keepdim=True).values, 3, 1)
        out[f"noise_on_k_coords_k{ratio}_ms"] = 1e3 * median_time(
            lambda: torch.randn(n, k, generator=gen, device=device), 3, 1)
    out["noise_full_nxd_ms"] = 1e3 * median_time(
        lambda: torch.randn(n, d, generator=gen, device=device), 3, 1)
    out["sort_ms"] = 1e3 * median_time(lambda: torch.sort(v.abs(), dim=1), 1, 0)
    out["mix_ring_dense_ms"] = 1e3 * median_time(lambda: dense @ v, 3, 1)
    out["mix_ring_sparse_ms"] = 1e3 * median_time(lambda: sparse.apply(v), 3, 1)
    out["mix_complete_mean_ms"] = 1e3 * median_time(lambda: v.mean(dim=0), 3, 1)
    return {k: round(val, 2) for k, val in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="numbers of clients (default 10 50 100; 10 100 1000 on CUDA)")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn4"])
    parser.add_argument("--shape", type=int, nargs="+", default=None,
                        help="random data of this sample shape instead of digits (1x8x8; "
                             "default 3 32 32 on CUDA)")
    parser.add_argument("--device", default="cpu",
                        help="cpu (default), cuda, cuda:N or auto: where all three run")
    parser.add_argument("--topology", default="ring")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--local-steps", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--micro", action="store_true", help="also time the kernels")
    parser.add_argument("--variants", action="store_true",
                        help="also time OTA/CHOCO/top-k rounds at the largest N")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global SYNC
    try:
        args.torch_device = device = resolve_device(args.device)
    except AirPlanError as exc:
        sys.exit(f"bench_runtime.py: {exc}")
    on_gpu = device.type == "cuda"
    if on_gpu:
        SYNC = functools.partial(torch.cuda.synchronize, device)
    if args.sizes is None:
        args.sizes = [10, 100, 1000] if on_gpu else [10, 50, 100]
    if args.shape is None and on_gpu:
        args.shape = [3, 32, 32]

    ds = dataset_for(args.shape, args.seed)
    report = {
        "benchmark": "runtime_seconds_per_round",
        "device": device_name(device),
        "device_model": torch.cuda.get_device_name(device) if on_gpu else platform.processor()
        or platform.machine(),
        "python": sys.version.split()[0], "torch": torch.__version__,
        "machine": platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "dataset": ds.name, "input_shape": list(ds.input_shape), "topology": args.topology,
        "batch_size": args.batch_size, "local_steps": args.local_steps,
        "loadavg_before": loadavg(), "results": [],
    }
    for model in args.models:
        for n in args.sizes:
            part = partition("iid", ds.y_train, n, seed=args.seed)
            topo = build(TopologySpec.create(args.topology, n, seed=args.seed))
            engine_fn, strategy = engine_round(ds, part, topo, model, args)
            times = interleaved({"engine": engine_fn,
                                 "naive": naive_round(ds, part, topo, model, args),
                                 "lower": lower_bound_round(ds, part, model, args)},
                                args.rounds, args.warmup)
            engine, naive, lower = times["engine"], times["naive"], times["lower"]
            row = {"model": model, "n": n, "strategy": strategy,
                   "engine_s": round(engine, 5), "naive_s": round(naive, 5),
                   "lower_bound_s": round(lower, 5),
                   "engine_over_lower_bound": round(engine / lower, 2),
                   "naive_over_engine": round(naive / engine, 2),
                   "loadavg": loadavg()}
            report["results"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.variants:
        n = max(args.sizes)
        part = partition("iid", ds.y_train, n, seed=args.seed)
        topo = build(TopologySpec.create(args.topology, n, seed=args.seed))
        report["variants"] = []
        for model in args.models:
            for name, options in VARIANTS.items():
                step, _ = engine_round(ds, part, topo, model, args, **options)
                seconds = median_time(step, args.rounds, args.warmup)
                row = {"model": model, "n": n, "variant": name, "engine_s": round(seconds, 5)}
                report["variants"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    if args.micro:
        report["micro_n100_d95k"] = micro(args)
    report["loadavg_after"] = loadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
