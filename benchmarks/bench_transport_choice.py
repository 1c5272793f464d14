"""Does the planner pick the transport that training then finds cheaper?

For each workload and objective: the planner (``ttt``, the shipped fit) chooses between D-SGD
over the air and as 8-bit digital packets on the same topology; then both plans train on each
seed as a TRAIN would (stopping at the planner's target) and their measured totals to the
target are compared. A pick is confirmed when it is the plan that reached the target in more
seeds, or, both reaching it as often, the one with the lower mean measured total of the
objective. Prints one JSON line per (workload, objective, seed, plan), then a Markdown table.

    OMP_NUM_THREADS=1 python benchmarks/bench_transport_choice.py --seeds 0 1 2

The default workloads are on either side of a cross-over of the measured map of
docs/results.md: the complete graph at 20 dB with N = 50 (over the air wins channel uses, digital
wins energy: over the air a client transmits once per neighbour, a digital broadcast once) and at
10 dB with N = 20 (over the air wins both: the packets' rate falls with the SNR).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import attrs

import airplan_qo as aq

#: (label, dataset, clients, snr_db, topology) of the default workloads; the rest as the
#: physical-operator workloads of the default grid (alpha 0.5, 60 rounds, lr 0.1, 1 local step)
WORKLOADS = (("complete, N = 50, 20 dB", "digits", 50, 20.0, "complete"),
             ("complete, N = 20, 10 dB", "digits", 20, 10.0, "complete"))
OBJECTIVES = ("channel_uses", "energy_j")
TOTALS = {"channel_uses": "total_channel_uses", "energy_j": "total_energy_j"}


def run(db, w, topology: str, objective: str, transport: str | None = None):
    """Plan ``w`` on ``topology`` over the air and digital (or only ``transport``)."""
    return db.plan(w, topologies=[topology], sparsity=[1.0], weights=["metropolis_hastings"],
                   transports=[transport] if transport else ["ota", "digital(bits=8)"],
                   algorithms=["dsgd"], objective=objective, fallback="complete")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)
    table = []
    with tempfile.TemporaryDirectory() as tmp, aq.connect(Path(tmp) / "b.duckdb") as db:
        for label, dataset, n, snr, topology in WORKLOADS:
            base = aq.Workload(dataset=dataset, clients=n, alpha=0.5, snr_db=snr, rounds=60,
                               lr=0.1, local_steps=1)
            for objective in OBJECTIVES:
                outcomes = {"ota": [], "digital(bits=8)": []}
                picks = []
                for seed in args.seeds:
                    w = attrs.evolve(base, seed=seed)
                    db.analyze(w)
                    chosen = run(db, w, topology, objective)
                    pick = "ota" if chosen.chosen.plan.transport == "ota" else "digital(bits=8)"
                    picks.append(pick)
                    for transport in outcomes:
                        # trained as a TRAIN would, to its target (the workload's: the same)
                        result = run(db, w, topology, objective, transport)
                        r = db.execute(result, reoptimize=False).result
                        row = {"workload": label, "objective": objective, "seed": seed,
                               "plan": transport, "picked": transport == pick,
                               "p_meets_sla": result.chosen.cost.estimate.p_meets,
                               "predicted": result.chosen.cost.total(objective),
                               "reached": r.rounds_to_target is not None,
                               "rounds": r.rounds,
                               "measured": float(getattr(r, TOTALS[objective]))}
                        outcomes[transport].append(row)
                        print(json.dumps(row), flush=True)
                measured = {t: (sum(o["reached"] for o in rows),
                                statistics.mean(o["measured"] for o in rows))
                            for t, rows in outcomes.items()}
                best = max(measured, key=lambda t: (measured[t][0], -measured[t][1]))
                pick = max(set(picks), key=picks.count)
                table.append((label, objective, pick, picks.count(pick), len(picks), best,
                              measured))
    print("\n| workload | objective | planner's pick (seeds) | measured cheaper | reached o / d "
          "| measured mean total o / d | confirmed |")
    print("|---|---|---|---|---|---|---|")
    for label, objective, pick, k, n, best, m in table:
        o, d = m["ota"], m["digital(bits=8)"]
        print(f"| {label} | {objective} | {pick} ({k}/{n}) | {best} | {o[0]}/{n} / {d[0]}/{n} "
              f"| {o[1]:.3g} / {d[1]:.3g} | {'yes' if pick == best else 'no'} |")


if __name__ == "__main__":
    main()
