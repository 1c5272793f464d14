"""Measuring a grid: plan every (workload, seed), train every candidate plan, cache the runs.

Each (workload, seed) is analysed (``ANALYZE WORKLOAD``: the sketches the advisor reads) and
planned once over the grid's candidate space; every candidate of that planning run is then
trained through the ordinary runtime (``Session.execute`` on the planning result with that
candidate as the chosen plan), for the whole round budget (``stop_at_target=False``) so final
accuracy and the whole curve are observed. Executions, ``round_stats`` and ``feedback`` are
recorded like any other run.

Caching: every evaluation run stores, in its execution's ``options`` JSON under
``evaluation``, a cache key (a hash of the workload with its seed, the plan's topology, weights,
k, algorithm, mask and channel, the round budget and :data:`PROTOCOL`) and the per-client final
accuracies. A succeeded (or deterministically failed) execution with the same key is reused, so
re-evaluating a grid, or another grid sharing runs, trains nothing new.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..plans.plan import PhysicalPlan
from .advisor import fc_plan
from .grid import Grid, WorkloadSpec

#: Version of the measurement protocol; part of every cache key.
PROTOCOL = 2
_REUSABLE = ("succeeded", "failed")


@attrs.frozen
class RunRecord:
    """One measured run: a plan of a workload at one seed, as read back from the catalog."""

    workload: str
    seed: int
    plan: str
    family: str
    k_ratio: float
    exec_id: int
    status: str
    cached: bool
    candidate: bool
    final_accuracy: float
    accuracy: tuple[float | None, ...]
    channel_uses: tuple[float, ...]
    energy_j: tuple[float, ...]
    startup: float
    client_accuracies: tuple[float, ...]
    wall_s: float | None


@attrs.define
class SeedPlan:
    """The planning artefacts of one (workload, seed)."""

    seed: int
    workload: Any
    result: Any
    candidates: list[Any]
    fc_result: Any
    fc_candidate: Any
    stats: Any


@attrs.define
class Measured:
    """Everything measured for one workload of the grid."""

    spec: WorkloadSpec
    seeds: dict[int, SeedPlan]
    runs: list[RunRecord]

    def candidate(self, seed: int, label: str):
        """(planning result, candidate) of a plan label at one seed."""
        sp = self.seeds[seed]
        for c in sp.candidates:
            if c.plan.label() == label:
                return sp.result, c
        if sp.fc_candidate.plan.label() == label:
            return sp.fc_result, sp.fc_candidate
        raise KeyError(label)


def cache_key(workload, plan: PhysicalPlan, rounds: int) -> str:
    """Identity of a measurement run: equal keys give identical training (same seeds)."""
    spec = plan.topology
    doc = {"protocol": PROTOCOL, "dataset": workload.dataset, "clients": workload.clients,
           "workload": workload.params(),
           "topology": {"family": spec.family, "params": spec.params_json(),
                        "seed": spec.seed, "weights": spec.weights},
           "k_ratio": plan.k_ratio, "algorithm": plan.effective_algorithm, "mask": plan.mask,
           "channel": attrs.asdict(plan.channel), "rounds": int(rounds),
           "stop_at_target": False}
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def cached_runs(catalog) -> dict[str, int]:
    """Cache key -> newest reusable execution id."""
    rows = catalog.query(
        "SELECT exec_id, json_extract_string(options, '$.evaluation.cache_key') AS k "
        "FROM airplan.executions WHERE status IN ('succeeded', 'failed') "
        "AND json_extract_string(options, '$.evaluation.cache_key') IS NOT NULL "
        "ORDER BY exec_id")
    return {r["k"]: int(r["exec_id"]) for r in rows}


def _execute(session, result):
    kwargs: dict[str, Any] = {"quiet": True, "stop_at_target": False}
    try:
        if "reoptimize" in inspect.signature(session.execute).parameters:
            kwargs["reoptimize"] = False
    except (TypeError, ValueError):
        pass
    return session.execute(result, **kwargs)


def _tag(catalog, exec_id: int, key: str, grid: str, client_acc, wall_s: float) -> None:
    row = catalog.query("SELECT options FROM airplan.executions WHERE exec_id = ?", [exec_id])
    options = row[0]["options"] if row else {}
    options = json.loads(options) if isinstance(options, str) else dict(options or {})
    options["evaluation"] = {"cache_key": key, "protocol": PROTOCOL, "grid": grid,
                             "client_accuracies": [float(a) for a in client_acc],
                             "wall_s": float(wall_s)}
    catalog.update_row("executions", exec_id, {"options": options})


def plan_seed(session, grid: Grid, ws: WorkloadSpec, seed: int) -> SeedPlan:
    """Analyse and plan one (workload, seed); find the fully connected reference candidate."""
    w = ws.for_seed(seed)
    stats = session.analyze(w)
    result = session.plan(w, sla=ws.sla, topologies=ws.topology_args(), weights=ws.weights,
                          sparsity=ws.sparsity, estimator=grid.estimator,
                          objective=grid.objective,
                          statement=f"evaluate {grid.name}: {ws.key} (seed {seed})")
    wanted = {(s, k) for s in ws.specs() for k in ws.sparsity}
    candidates = [c for c in result.candidates if (c.plan.topology, c.plan.k_ratio) in wanted]
    ref = fc_plan(result)
    fc_cand = next((c for c in result.candidates if c.plan == ref), None)
    fc_result = result
    if fc_cand is None:
        fc_result = session.plan(w, sla=ws.sla, topologies=["complete"],
                                 weights=["metropolis_hastings"], sparsity=[1.0],
                                 estimator=grid.estimator, objective=grid.objective,
                                 statement=f"evaluate {grid.name}: {ws.key} (seed {seed}, "
                                           "fully connected reference)")
        fc_cand = fc_result.chosen
    return SeedPlan(seed, w, result, candidates, fc_result, fc_cand, stats)


def measure(session, grid: Grid, *, progress: Callable[[str], None] | None = None
            ) -> list[Measured]:
    """Plan and train (or reuse) every run of the grid; returns the measurements per workload."""
    say = progress or (lambda _msg: None)
    catalog = session.catalog
    cache = cached_runs(catalog)
    out: list[Measured] = []
    total = grid.n_runs
    done = trained = 0
    train_s = 0.0
    for wi, ws in enumerate(grid.workloads, 1):
        seeds: dict[int, SeedPlan] = {}
        todo: list[tuple[int, str, bool, int, bool, float | None]] = []
        w_start = time.perf_counter()
        w_trained = 0
        for seed in grid.seeds:
            sp = plan_seed(session, grid, ws, seed)
            seeds[seed] = sp
            runs = [(sp.result, c, True) for c in sp.candidates]
            if sp.fc_candidate not in sp.candidates:
                runs.append((sp.fc_result, sp.fc_candidate, False))
            for result, cand, is_candidate in runs:
                key = cache_key(sp.workload, cand.plan, result.context.round_budget)
                exec_id = cache.get(key)
                wall = None
                hit = exec_id is not None
                if not hit:
                    t0 = time.perf_counter()
                    report = _execute(session, attrs.evolve(result, chosen=cand))
                    wall = time.perf_counter() - t0
                    train_s += wall
                    exec_id = int(report.exec_id)
                    _tag(catalog, exec_id, key, grid.name, report.result.client_accuracies, wall)
                    cache[key] = exec_id
                    trained += 1
                    w_trained += 1
                done += 1
                todo.append((seed, cand.plan.label(), is_candidate, exec_id, hit, wall))
        runs = load_runs(catalog, ws, seeds, todo)
        out.append(Measured(ws, seeds, runs))
        eta = ""
        if trained and done < total:
            eta = (f", at most about {train_s / trained * (total - done):.0f} s of training "
                   "left")
        say(f"workload {wi}/{len(grid.workloads)} '{ws.key}': {len(runs)} runs "
            f"({w_trained} trained, {len(runs) - w_trained} cached) in "
            f"{time.perf_counter() - w_start:.1f} s{eta}")
    return out


def load_runs(catalog, ws: WorkloadSpec, seeds: dict[int, SeedPlan],
              todo: list[tuple[int, str, bool, int, bool, float | None]]) -> list[RunRecord]:
    """Read the runs back from the catalog (fresh and cached alike, one code path)."""
    ids = [t[3] for t in todo]
    rows = {int(r["exec_id"]): r for r in catalog.query(
        "SELECT exec_id, status, client_acc_mean AS final_accuracy, options "
        "FROM airplan.executions "
        "WHERE list_contains(?, exec_id)", [ids])}
    table = catalog.query_arrow(
        "SELECT exec_id, round, client_acc_mean, channel_uses, energy_j FROM airplan.round_stats "
        "WHERE list_contains(?, exec_id) AND round >= 1 ORDER BY exec_id, round", [ids])
    curves: dict[int, tuple[list, list, list]] = {}
    if table.num_rows:
        cols = {n: table.column(n).to_pylist() for n in table.column_names}
        for eid, rnd, acc, uses, energy in zip(cols["exec_id"], cols["round"],
                                               cols["client_acc_mean"], cols["channel_uses"],
                                               cols["energy_j"]):
            a, u, e = curves.setdefault(int(eid), ([], [], []))
            while len(a) < rnd - 1:
                a.append(None), u.append(0.0), e.append(0.0)
            a.append(acc), u.append(float(uses or 0.0)), e.append(float(energy or 0.0))
    out = []
    for seed, label, is_candidate, exec_id, hit, wall in todo:
        row = rows[exec_id]
        options = row["options"]
        options = json.loads(options) if isinstance(options, str) else (options or {})
        ev = options.get("evaluation", {})
        acc, uses, energy = curves.get(exec_id, ([], [], []))
        final = row["final_accuracy"]
        if final is None or not math.isfinite(final):
            finite = [a for a in acc if a is not None and math.isfinite(a)]
            final = finite[-1] if finite else 0.0
        _, cand = Measured(ws, seeds, []).candidate(seed, label)
        out.append(RunRecord(
            workload=ws.key, seed=seed, plan=label, family=cand.plan.topology.family,
            k_ratio=float(cand.plan.k_ratio), exec_id=exec_id, status=row["status"],
            cached=hit, candidate=is_candidate, final_accuracy=float(final),
            accuracy=tuple(acc), channel_uses=tuple(uses), energy_j=tuple(energy),
            startup=float(cand.cost.startup),
            client_accuracies=tuple(float(a) for a in ev.get("client_accuracies", ())),
            wall_s=wall if wall is not None else ev.get("wall_s")))
    return out


def client_variance(run: RunRecord) -> float | None:
    """Variance of the per-client final accuracies (the paper's fairness variance)."""
    if len(run.client_accuracies) < 2:
        return None
    return float(np.var(np.array(run.client_accuracies)))


__all__ = ["RunRecord", "SeedPlan", "Measured", "PROTOCOL", "cache_key", "cached_runs",
           "measure", "plan_seed", "load_runs", "client_variance"]
