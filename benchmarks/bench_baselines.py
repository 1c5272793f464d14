"""The update rules and transports side by side on one small workload.

Digits, N clients (Dirichlet alpha), the mlp, one local step of momentum SGD (gradient tracking
takes one gradient per round), over the complete graph and a ring, one seed. Each rule runs on
the channel named in its row (``ota``: Rayleigh fading with truncation at g_th, receiver noise
at ``--snr-db`` for the over-the-air transport; digital runs use the same fading draws and
lose truncated packets, with no noise). Prints one table row per (rule, topology): the
clients' mean accuracy at the end, and the run's total channel uses and bits. A rule the runtime
refuses on a topology (e.g. MATCHA on one that changes every round) is skipped with the reason;
DLLR-OA runs on its own topology only.

DLLR-OA runs on its own schedule, ``resample_er`` (a fresh G(n, 1/2) every round, Metropolis
weights; the same draws for every rule of the table): ``faithful`` is its code's channel (exact
inversion, fixed noise sigma = 0.01, power-estimate noise 0.01), ``snr`` our channel (fading,
truncation, noise at ``--snr-db``); k is the fraction of the model's tensors each receiver mixes.

    python benchmarks/bench_baselines.py [--clients 20 --alpha 0.5 --rounds 40 --seed 0]
    python benchmarks/bench_baselines.py --clients 12 --topologies resample_er --only dsgd dllr
"""

from __future__ import annotations

import argparse
import time

import torch

from airplan_qo.data import load, partition
from airplan_qo.errors import AirPlanError
from airplan_qo.plans.operators import DLLR_OA_FAMILY
from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime import RunConfig, Trainer

#: (label, RunConfig options) of every row.
RULES = (
    ("dsgd, ideal channel", dict(algorithm="dsgd", channel="ideal")),
    ("dsgd, ota", dict(algorithm="dsgd", channel="ota")),
    ("dsgd, digital b=32", dict(algorithm="dsgd", channel="ota", transport="digital", bits=32)),
    ("dsgd, digital b=8", dict(algorithm="dsgd", channel="ota", transport="digital", bits=8)),
    ("gradient_tracking, ideal", dict(algorithm="gradient_tracking", channel="ideal")),
    ("gradient_tracking, digital b=8", dict(algorithm="gradient_tracking", channel="ota",
                                            transport="digital", bits=8)),
    ("fedavg, ota uplink", dict(algorithm="fedavg", channel="ota")),
    ("fedavg, digital b=8 uplink", dict(algorithm="fedavg", channel="ota", transport="digital",
                                        bits=8)),
    ("push_sum, ota", dict(algorithm="push_sum", channel="ota")),
    ("matcha C_b=0.5, ota", dict(algorithm="matcha", matcha_budget=0.5, channel="ota")),
    ("dllr_oa faithful k=1", dict(algorithm="dllr_oa", channel="ideal", dllr_sigma=0.01)),
    ("dllr_oa faithful k=0.5", dict(algorithm="dllr_oa", k_ratio=0.5, channel="ideal",
                                    dllr_sigma=0.01)),
    ("dllr_oa snr k=1", dict(algorithm="dllr_oa", channel="ota", dllr_sigma=None)),
    ("dllr_oa snr k=0.5", dict(algorithm="dllr_oa", k_ratio=0.5, channel="ota",
                               dllr_sigma=None)),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snr-db", type=float, default=10.0)
    ap.add_argument("--topologies", nargs="+", default=["complete", "ring"])
    ap.add_argument("--local-steps", type=int, default=1,
                    help="local steps of every rule but gradient tracking (one gradient)")
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only the rules whose label contains one of these words")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load("digits", seed=args.seed)
    part = partition("dirichlet", ds.y_train, args.clients, seed=args.seed, alpha=args.alpha)
    print(f"digits, N = {args.clients}, alpha = {args.alpha}, {args.rounds} rounds, seed "
          f"{args.seed}, {args.snr_db:g} dB, mlp, {args.local_steps} local step(s)")
    print(f"{'rule':34s} {'topology':11s} {'acc':>6s} {'channel uses':>13s} {'bits':>10s} "
          f"{'s':>5s}")
    for family in args.topologies:
        topo = build(TopologySpec.create(family, args.clients, seed=args.seed))
        for label, kw in RULES:
            if (args.only and not any(w in label for w in args.only)) \
                    or (kw["algorithm"] == "dllr_oa" and family != DLLR_OA_FAMILY):
                continue
            steps = 1 if kw["algorithm"] == "gradient_tracking" else args.local_steps
            cfg = RunConfig.from_dict(dict(
                model="mlp", rounds=args.rounds, local_steps=steps, lr=0.05,
                snr_db=args.snr_db, eval_every=args.rounds, data_seed=args.seed,
                train_seed=args.seed, channel_seed=args.seed, **kw))
            start = time.perf_counter()
            try:
                trainer = Trainer(cfg, ds, part, topo)
            except AirPlanError as exc:
                print(f"{label:34s} {family:11s} skipped: {exc}")
                continue
            res = trainer.run()
            acc = res.client_acc_mean if res.client_acc_mean is not None else float("nan")
            print(f"{label:34s} {family:11s} {acc:6.3f} {res.total_channel_uses:13.4g} "
                  f"{res.total_bits:10.3g} {time.perf_counter() - start:5.1f}"
                  + ("" if res.status == "succeeded" else f"  {res.status}: {res.reason}"))


if __name__ == "__main__":
    main()
