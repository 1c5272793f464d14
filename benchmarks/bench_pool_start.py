"""How long until the evaluation's N worker processes are ready: spawned, or forked from the
fork server that has imported the training code once (``executors.pool_context``).

Starts a pool of N processes each way (the evaluation's set-up: one torch thread, the package
imported, the digits data set loaded as a grid's first workload would have it), gives each a
task that sleeps 1 s, and reports when the first and the last of them began it (seconds since
the pool was made): what a grid's first runs wait for. The fork server is started by the first
forked pool; ``--methods forkserver spawn`` times it cold, as an evaluation's first pool is.

    python benchmarks/bench_pool_start.py [--workers 2 8 16] [--methods forkserver spawn]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, wait
from types import SimpleNamespace


def _task(_):
    time.sleep(1.0)
    return os.getpid(), time.time()


def ready(method: str, n: int) -> dict:
    from airplan_qo.evaluation import executors

    ctx = (executors.pool_context() if method == "forkserver"
           else multiprocessing.get_context(method))
    warm = (SimpleNamespace(dataset="digits", seed=0),)
    start = time.time()
    pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=executors.init_pool_worker,
                               initargs=(warm,))
    futures = [pool.submit(_task, i) for i in range(n)]
    wait(futures)
    began = sorted(t - 1.0 - start for _, t in (f.result() for f in futures))
    processes = len({pid for pid, _ in (f.result() for f in futures)})
    pool.shutdown()
    return {"method": method, "workers": n, "processes": processes,
            "first_ready_s": round(began[0], 2), "last_ready_s": round(began[-1], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--methods", nargs="+", default=["forkserver", "spawn"])
    args = parser.parse_args()
    rows = [ready(m, n) for n in args.workers for m in args.methods]
    print(json.dumps({"cpu_count": os.cpu_count(), "load_avg": os.getloadavg(), "pools": rows},
                     indent=1))


if __name__ == "__main__":
    main()
