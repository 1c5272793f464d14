"""Where over the air wins and where digital wins, from the planner's cost model.

For each (N, degree, SNR, bits per coordinate) it costs one D-SGD round (k = 1) of the same
topology over the air and as digital packets (`airplan_qo.plans.plan.round_cost`), and, with
``--rounds``, plans both with the ``ttt`` estimator on the digits workload so that the totals
include the rounds each needs (digital has no channel noise; its estimate is an extrapolation,
flagged by the planner). It prints Markdown tables of digital / over-the-air ratios (< 1: digital
is cheaper) and the cross-over: the smallest SNR at which digital costs less energy.

    python benchmarks/bench_transport_crossover.py                 # per-round map (seconds)
    python benchmarks/bench_transport_crossover.py --rounds        # totals with ttt rounds

Degrees: 2 is the ring, N - 1 the complete graph, others ``k_regular(d=...)``. The model
dimension cancels (both costs are linear in d), so the per-round map holds for any model.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from airplan_qo.plans.plan import ChannelConfig, PhysicalPlan, round_cost
from airplan_qo.plans.topology import TopologySpec, describe

D = 4810            # the digits MLP (cancels in the per-round ratios)


def spec(n: int, degree: int) -> TopologySpec:
    if degree >= n - 1:
        return TopologySpec.create("complete", n)
    if degree == 2:
        return TopologySpec.create("ring", n)
    return TopologySpec.create("k_regular", n, d=degree)


def per_round(n: int, degree: int, snr_db: float, bits: int, g_th: float = 0.1):
    stats = describe(spec(n, degree))[1]
    ch = ChannelConfig(snr_db=snr_db, g_th=g_th)
    ota = round_cost(PhysicalPlan(stats.spec, 1.0, ch), stats, D)
    dig = round_cost(PhysicalPlan(stats.spec, 1.0, ch, transport="digital", bits=bits), stats, D)
    return (dig.channel_uses / ota.channel_uses, dig.energy_j / ota.energy_j, dig.rate)


def totals(db, n: int, degree: int, snr_db: float, bits: int):
    import airplan_qo as aq

    s = spec(n, degree)
    topo = s.family if not s.params else f"{s.family}(d={degree})"
    w = aq.Workload(dataset="digits", clients=n, alpha=0.5, snr_db=snr_db)
    r = db.plan(w, topologies=[topo], sparsity=[1.0], weights=["metropolis_hastings"],
                transports=["ota", f"digital(bits={bits})"], fallback="complete")
    by = {c.plan.transport: c for c in r.candidates if c.plan.topology.family == s.family}
    o, d = by["ota"], by["digital"]
    if not (o.cost.rounds and d.cost.rounds):
        return None
    return (d.cost.total("channel_uses") / o.cost.total("channel_uses"),
            d.cost.total("energy_j") / o.cost.total("energy_j"), d.cost.rounds / o.cost.rounds)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 20, 50])
    ap.add_argument("--degrees", type=int, nargs="+", default=[2, 4, 8, 0],
                    help="0 = complete graph")
    ap.add_argument("--snr", type=float, nargs="+", default=[0.0, 10.0, 20.0, 30.0])
    ap.add_argument("--bits", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--rounds", action="store_true",
                    help="totals with the ttt estimator's rounds (digits workload)")
    args = ap.parse_args(argv)
    db = None
    if args.rounds:
        import airplan_qo as aq

        db = aq.connect(Path(tempfile.mkdtemp()) / "crossover.duckdb")
    what = "total" if args.rounds else "per round"
    print(f"digital / over-the-air, {what}: channel uses | energy"
          + (" | rounds" if args.rounds else " | rate R (bit/cu)")
          + "; < 1 means digital is cheaper\n")
    print("| N | degree | b | " + " | ".join(f"{s:g} dB" for s in args.snr)
          + " | digital cheaper in energy from |")
    print("|---|---|---|" + "---|" * len(args.snr) + "---|")
    for n in args.clients:
        for deg in args.degrees:
            degree = n - 1 if deg == 0 or deg >= n - 1 else deg
            for bits in args.bits:
                cells, first = [], None
                for snr in args.snr:
                    got = (totals(db, n, degree, snr, bits) if args.rounds
                           else per_round(n, degree, snr, bits))
                    if got is None:
                        cells.append("never")
                        continue
                    cu, en, third = got
                    cells.append(f"{cu:.3g} / {en:.3g} / {third:.3g}")
                    if en < 1 and first is None:
                        first = snr
                label = "N-1" if degree == n - 1 else str(degree)
                print(f"| {n} | {label} | {bits} | " + " | ".join(cells) + " | "
                      + ("not in range" if first is None else f"{first:g} dB") + " |")
    if db is not None:
        db.close()


if __name__ == "__main__":
    main()
