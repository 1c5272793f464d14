"""What releasing the catalog between writes costs a training run.

Measures (1) one write cycle as training does it: reopen the released catalog file, insert a
batch of ``round_stats`` rows and the execution's progress in one transaction, release the file
again; and (2) the wall time of the same whole-budget run with writes every ``FLUSH_SECONDS``
(the default, 2 s) and with writes only at the first checkpoint and the end (``FLUSH_SECONDS``
= infinity), in alternation, each in a fresh catalog. Prints one JSON object.

    python benchmarks/bench_flush.py                    # 1000 rounds, 3 repeats
    python benchmarks/bench_flush.py --rounds 2000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _cycles(folder: Path, n: int) -> list[float]:
    from airplan_qo.catalog.store import Catalog

    rows = {"exec_id": [1] * 10, "round": list(range(10)), "test_accuracy": [0.5] * 10}
    times = []
    with Catalog(folder / "cycle.duckdb") as cat:
        cat.insert_row("executions", {"plan_id": 1, "status": "running", "data_seed": 1,
                                      "train_seed": 1, "channel_seed": 1})
        cat.release()
        for i in range(n):
            rows["round"] = list(range(10 * i + 1, 10 * i + 11))
            start = time.perf_counter()
            cat.reacquire(2.0)
            with cat.transaction():
                cat.insert_rows("round_stats", rows)
                cat.update_row("executions", 1, {"actual_rounds": 10 * i + 10})
            cat.release()
            times.append(time.perf_counter() - start)
    return times


def _train(folder: Path, rounds: int, flush_seconds: float, tag: str) -> float:
    import airplan_qo as aq
    from airplan_qo.runtime import execution

    execution.FLUSH_SECONDS = flush_seconds
    with aq.connect(folder / f"{tag}.duckdb") as db:
        plan = db.plan(aq.Workload(dataset="digits", clients=10, rounds=rounds, seed=1,
                                   model="logistic"),
                       topologies=["ring"], sparsity=[1.0], estimator="dsgd")
        start = time.perf_counter()
        report = db.execute(plan, stop_at_target=False)
        wall = time.perf_counter() - start
        assert report.result.rounds == rounds
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=50)
    args = parser.parse_args()
    import torch

    from airplan_qo.runtime import execution

    torch.set_num_threads(1)
    cadence = execution.FLUSH_SECONDS
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cycles = _cycles(folder, args.cycles)
        _train(folder, 20, cadence, "warmup")
        every, ends = [], []
        for r in range(args.repeats):
            every.append(_train(folder, args.rounds, cadence, f"every-{r}"))
            ends.append(_train(folder, args.rounds, math.inf, f"ends-{r}"))
    med_every, med_ends = statistics.median(every), statistics.median(ends)
    print(json.dumps({
        "write_cycle_ms": {"median": round(1e3 * statistics.median(cycles), 2),
                           "max": round(1e3 * max(cycles), 2), "n": len(cycles)},
        "run": {"rounds": args.rounds, "clients": 10, "model": "logistic"},
        "flush_seconds": cadence,
        "wall_s_flush_every_flush_seconds": [round(w, 3) for w in every],
        "wall_s_flush_at_checkpoint_and_end": [round(w, 3) for w in ends],
        "overhead_pct_median": round(100 * (med_every / med_ends - 1), 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_avg": [round(x, 2) for x in os.getloadavg()]},
    }, indent=1))


if __name__ == "__main__":
    main()
