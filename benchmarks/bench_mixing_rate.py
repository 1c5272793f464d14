"""How fast each planned topology really mixes, against the p_random the planner costs it with.

For every topology the planner builds for a workload (its weights rules included), the clients'
models are set to a random spread around the initial model and only mixed (`Trainer.step(
train=False)`: the plan's channel, its fading, truncation and noise) for ``--rounds`` rounds.
The consensus distance d (a root-mean-square, docs/runtime.md) falls by 1 - p per round in
its square where p is the plan's mixing rate, so the measured rate over rounds a..b is
``1 - (d_b / d_a)^(2 / (b - a))``: over the first ``--window`` rounds (every mode) and the next
``--window`` (the slower modes that are left), each only while the distance is at least 1% of
its start (a fast mixer reaches the noise floor within rounds: its first window is cut short
and its second left out, null). Beside it the planner's ``p_random`` (the
spectral p times the survival factor of dropout and truncation: the p of the `ttt` fits). The
default SNR (40 dB) keeps the channel's noise floor below what the window measures; ``--snr-db``
takes the workload's. ``rounds_to_1pct``: per seed, the mixing-only rounds that took the distance
under 1% of its start (null: not within ``2 --window`` rounds). ``p_horizon_ideal``: the
rate computed from the mixing matrices themselves over the first ``--window`` rounds with every
link up (:func:`horizon_p`), the candidate statistic the measured rates are held against.

    python benchmarks/bench_mixing_rate.py [--clients 80] [--snr-db 40]
        [--topologies "small_world(k=4)" one_peer_exponential "base_k(k=1)" "erdos_renyi(p=0.3)"]
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import torch

import airplan_qo as aq
from airplan_qo.data import load, partition_dataset
from airplan_qo.plans.topology import build
from airplan_qo.runtime.engine import RunConfig, Trainer
from airplan_qo.runtime.metrics import consensus_distance


#: A window is measured while the consensus distance is at least this share of its start.
FLOOR = 0.01


def horizon_p(topology, rounds: int) -> float:
    """The per-round rate a random spread of the models is contracted by, on average over the
    first ``rounds`` rounds, every link up: ``1 - (||Phi (I - J/n)||_F^2 / (n - 1))^(1/rounds)``
    with Phi the product of the rounds' W (static: W^rounds). A candidate for the rate the
    fits cost plans with (the table in docs/results.md); computed, not measured."""
    n = topology.graph.number_of_nodes()
    centred = np.eye(n) - np.full((n, n), 1.0 / n)
    phi = centred
    for t in range(rounds):
        phi = np.asarray(topology.at(t).weights.todense()) @ phi
    spread = float((phi ** 2).sum()) / (n - 1)
    return 1.0 - spread ** (1.0 / rounds) if spread > 0 else 1.0


def rate(d: list[float], a: int, b: int) -> float | None:
    if d[a] <= 0 or d[b] <= 0:
        return None
    return 1.0 - (d[b] / d[a]) ** (2.0 / (b - a))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist1d")
    parser.add_argument("--clients", type=int, default=80)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--snr-db", type=float, default=40.0)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--topologies", nargs="+", default=[
        "small_world(k=4)", "one_peer_exponential", "base_k(k=1)", "erdos_renyi(p=0.3)", "ring"])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    data = load(args.dataset, seed=0)
    part = partition_dataset(data, "dirichlet", args.clients, seed=0, alpha=args.alpha)
    with aq.connect(":memory:") as db:
        result = db.plan(aq.Workload(args.dataset, args.clients, alpha=args.alpha,
                                     snr_db=args.snr_db),
                         topologies=args.topologies, sparsity=[1.0], transports=["ota"],
                         algorithms=["dsgd"], fallback="complete")   # every candidate is costed
    rows, seen = [], set()
    for cand in result.candidates:
        spec = cand.plan.topology
        if spec in seen:
            continue
        seen.add(spec)
        topology = build(spec)
        first, second, to_floor = [], [], []
        for seed in range(args.seeds):
            config = RunConfig.from_dict(dict(model="mlp", rounds=10 ** 6, eval_every=10 ** 6,
                                              channel="ota", snr_db=args.snr_db,
                                              channel_seed=seed))
            trainer = Trainer(config, data, part, topology)
            gen = torch.Generator().manual_seed(seed)
            trainer.x += 0.1 * torch.randn(trainer.x.shape, generator=gen)
            d = [consensus_distance(trainer.x)]
            for _ in range(2 * args.window):
                d.append(trainer.step(train=False)["consensus_distance"])
            # a window is measured only while the distance is well above the channel's noise
            # floor (at least FLOOR of where it started): the fast mixers get there in rounds
            k = next((i for i in range(1, args.window + 1) if d[i] < FLOOR * d[0]), None)
            to_floor.append(k if k is not None else next(
                (i for i in range(args.window + 1, 2 * args.window + 1) if d[i] < FLOOR * d[0]),
                None))
            first.append(rate(d, 0, k - 1) if k and k > 1 else
                         rate(d, 0, args.window) if k is None else None)
            second.append(rate(d, args.window, 2 * args.window)
                          if d[2 * args.window] >= FLOOR * d[0] else None)

        def mean(v):
            v = [x for x in v if x is not None]
            return round(sum(v) / len(v), 3) if v else None
        rows.append({"plan": f"{spec.label()} [{spec.weights}]",
                     "p_horizon_ideal": round(horizon_p(topology, args.window), 3),
                     "p_random": round(cand.cost.estimate.terms.get("p_random", float("nan")), 3),
                     "p_measured_first": mean(first), "p_measured_next": mean(second),
                     "rounds_to_1pct": [r for r in to_floor]})
    for r in rows:
        for part in ("first", "next"):
            m = r[f"p_measured_{part}"]
            r[f"{part}_over_planned"] = round(m / r["p_random"], 2) if m and r["p_random"] else None
    print(json.dumps({"workload": f"{args.dataset} N={args.clients} alpha={args.alpha} "
                                  f"{args.snr_db:g} dB", "window": args.window,
                      "seeds": args.seeds, "plans": rows}, indent=1))


if __name__ == "__main__":
    main()
