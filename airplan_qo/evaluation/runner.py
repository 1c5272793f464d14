"""Measuring a grid: plan every (workload, seed), train every candidate plan, cache the runs.

Each (workload, seed) is analysed (``ANALYZE WORKLOAD``: the sketches the advisor reads) and
planned once over the grid's candidate space (its topologies, weights, k and, where the grid
names them, transports and algorithms: :meth:`~.grid.WorkloadSpec.plan_transports`); every candidate of that planning run is then
trained through the ordinary runtime (``Session.execute`` on the planning result with that
candidate as the chosen plan), for the whole round budget (``stop_at_target=False``) so final
accuracy and the whole curve are observed. Executions, ``round_stats`` and ``feedback`` are
recorded like any other run. With ``workers`` > 1 the runs are trained in ``workers - 1`` worker
processes (started before the first workload is planned) and in this process while it would
wait for them (:meth:`_Trainer._result`), with an ``executor`` (a Dask cluster, any
``concurrent.futures.Executor``; :mod:`.executors`) on its workers, and recorded by this
process, a workload's runs in one transaction, with the same rows (:class:`_Trainer`).

Caching: every evaluation run stores, in its execution's ``options`` JSON under
``evaluation``, a cache key (a hash of the workload with its seed, the plan's topology, weights,
k, algorithm, transport and bits (digital only), mask and channel, the round budget and
:data:`PROTOCOL`) and the per-client final
accuracies. A succeeded (or deterministically failed) execution with the same key is reused, so
re-evaluating a grid, or another grid sharing runs, trains nothing new.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..errors import ValidationError
from ..plans.plan import PhysicalPlan
from ..plans.sla import TARGET_METRICS, parse_sla
from .advisor import REFERENCE_OPERATORS, fc_plan
from .grid import Grid, WorkloadSpec

#: Version of the measurement protocol; part of every cache key.
PROTOCOL = 3
_REUSABLE = ("succeeded", "failed")


@attrs.frozen
class RunRecord:
    """One measured run: a plan of a workload at one seed, as read back from the catalog.
    ``final_accuracy`` and the per-round ``accuracy`` are the workload SLA's accuracy: the
    clients' mean for ``accuracy``, the average model's for ``avg_model_accuracy``."""

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
    params = workload.params()
    if not params.get("access_point"):   # keys of the runs cached before the parameter existed
        params.pop("access_point", None)
    doc = {"protocol": PROTOCOL, "dataset": workload.dataset, "clients": workload.clients,
           "workload": params,
           "topology": {"family": spec.family, "params": spec.params_json(),
                        "seed": spec.seed, "weights": spec.weights},
           "k_ratio": plan.k_ratio, "algorithm": plan.effective_algorithm, "mask": plan.mask,
           "channel": attrs.asdict(plan.channel), "rounds": int(rounds),
           "stop_at_target": False}
    if plan.transport != "ota":   # over-the-air keys stay those of the runs cached before
        doc.update(transport=plan.transport, bits=plan.bits)
    if plan.mix_rounds:
        doc.update(mix_rounds=plan.mix_rounds)
    if plan.mix_on:
        doc.update(mix_on=plan.mix_on)
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
        parameters = inspect.signature(session.execute).parameters
        if "reoptimize" in parameters:
            kwargs["reoptimize"] = False
        if "device" in parameters:
            # the cache identifies a run by what makes it bit-identical; only CPU runs are
            kwargs["device"] = "cpu"
    except (TypeError, ValueError):
        pass
    return session.execute(result, **kwargs)


def _evaluation_tag(key: str, grid: str, client_acc, wall_s: float) -> dict[str, Any]:
    """What an evaluation run stores under ``options.evaluation`` (the cache's contract)."""
    return {"cache_key": key, "protocol": PROTOCOL, "grid": grid,
            "client_accuracies": [float(a) for a in client_acc], "wall_s": float(wall_s)}


def _tag(catalog, exec_id: int, key: str, grid: str, client_acc, wall_s: float) -> None:
    row = catalog.query("SELECT options FROM airplan.executions WHERE exec_id = ?", [exec_id])
    options = row[0]["options"] if row else {}
    options = json.loads(options) if isinstance(options, str) else dict(options or {})
    options["evaluation"] = _evaluation_tag(key, grid, client_acc, wall_s)
    catalog.update_row("executions", exec_id, {"options": options})


#: Parameters the planner fills in from the catalog's statistics (d_cliques: the cliques and the
#: statistics version); a grid names the family without them.
_FILLED_BY_PLANNER = ("cliques", "stats", "residual")


def _matches(grid_spec, spec) -> bool:
    """Whether a planned topology is the one a grid names: the planner-filled parameters, and
    those the grid leaves to their data-dependent default (None), are not compared."""
    if (grid_spec.family, grid_spec.seed, grid_spec.weights) != (spec.family, spec.seed,
                                                                 spec.weights):
        return False
    planned = dict(spec.params)
    return all(v is None or k in _FILLED_BY_PLANNER or planned.get(k) == v
               for k, v in grid_spec.params)


def plan_seed(session, grid: Grid, ws: WorkloadSpec, seed: int) -> SeedPlan:
    """Analyse and plan one (workload, seed); find the fully connected reference candidate."""
    w = ws.for_seed(seed)
    stats = session.analyze(w)
    result = session.plan(w, sla=ws.sla, topologies=ws.topology_args(), weights=ws.weights,
                          sparsity=ws.sparsity, estimator=grid.estimator,
                          objective=grid.objective, confidence=grid.confidence,
                          fallback="complete", transports=ws.plan_transports(),
                          algorithms=ws.plan_algorithms(), mix_rounds=ws.mix_rounds,
                          statement=f"evaluate {grid.name}: {ws.key} (seed {seed})")
    specs = ws.specs()
    candidates = [c for c in result.candidates if c.plan.k_ratio in ws.sparsity
                  and any(_matches(s, c.plan.topology) for s in specs)]
    ref = fc_plan(result)
    fc_cand = next((c for c in result.candidates if c.plan == ref), None)
    fc_result = result
    if fc_cand is None:
        fc_result = session.plan(w, sla=ws.sla, topologies=["complete"],
                                 weights=["metropolis_hastings"], sparsity=[1.0],
                                 estimator=grid.estimator, objective=grid.objective,
                                 confidence=grid.confidence, fallback="complete",
                                 mix_rounds=0, **REFERENCE_OPERATORS,
                                 statement=f"evaluate {grid.name}: {ws.key} (seed {seed}, "
                                           "fully connected reference)")
        fc_cand = fc_result.chosen
    return SeedPlan(seed, w, result, candidates, fc_result, fc_cand, stats)


def train_here(job) -> tuple[Any, float]:
    """Train a run in this process as a worker would (:func:`~.executors.train_cached`: the
    same run bit for bit, the dataset kept for the runs that follow) with one torch thread,
    restoring this process's thread count afterwards."""
    import torch

    from .executors import train_cached

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_cached(job)
    finally:
        torch.set_num_threads(threads)


def default_workers() -> int:
    """The ``--workers`` default: the number of CPU cores."""
    return max(1, os.cpu_count() or 1)


class _Trainer:
    """Trains a grid's uncached runs: in this process (``workers == 1`` and no executor:
    ``Session.execute``, the ordinary runtime), in a pool of worker processes, or on an
    executor's workers (:mod:`.executors`: a Dask cluster, any ``concurrent.futures.Executor``).

    Workers never open the catalog: each receives a picklable
    :class:`~airplan_qo.runtime.execution.TrainJob` (workload with its seeds, topology spec,
    RunConfig) and returns the :class:`~airplan_qo.runtime.engine.RunResult`; this (parent)
    process records the runs with :func:`~airplan_qo.runtime.execution.record_trained_batch`, a
    workload's runs in one transaction once all of them are back, with the same rows as a serial
    execution. The parent records because DuckDB admits one writing process per catalog file:
    one writer means no lock contention, no retries, and an interrupted evaluation never leaves a
    half-written run or workload. Runs are recorded in submission order, so execution ids, and
    every catalog row of a run, equal a serial evaluation's.

    The local pool (``workers - 1`` processes, :func:`~.executors.start_pool`) is started when
    :meth:`start` is called (``measure`` does so before planning, unless the cache may already
    hold the whole grid) or else at the first run to train; this process trains the runs it
    would otherwise wait for (:meth:`_result`). ``times`` accumulates where this process spent
    its time (seconds): ``plan_s`` planning, ``train_s`` training (a serial run's streamed
    recording included), ``wait_s`` waiting for workers, ``record_s`` recording, ``read_s``
    reading the runs back, ``start_s`` starting the pool. ``spans`` holds each trained run's
    (start, end) in seconds since this object was made (the end is when its result reached
    this process; the start, the end less the run's own wall time), and ``submitted_s`` when
    the last run was submitted: :func:`occupancy` makes the timing's busy shares of them.
    """

    def __init__(self, session, workers: int, backend=None):
        from .executors import Backend

        self.session = session
        self.backend = backend or Backend(None, workers, f"{workers} local worker processes")
        self.serial = workers == 1 and not self.backend.remote
        self.slots = self.backend.slots        # runs trained at once (the time estimate)
        self.pool = None
        self.futures: set = set()               # submitted to an executor, not yet collected
        # local pool: workers - 1 processes, and this process trains runs it would otherwise
        # wait for (taken back from the pool's queue before a process starts them)
        self.queued: deque = deque()            # (job, future) sent to the local pool, in order
        self.here: dict = {}                    # pool future -> (run, wall) trained here
        self.cache = cached_runs(session.catalog)   # key -> exec_id of recorded runs
        self.submitted: set[str] = set()            # keys trained (or training) by this call
        self.walls: dict[str, float] = {}           # key -> training wall time (s)
        self.times = dict.fromkeys(("plan_s", "train_s", "wait_s", "record_s", "read_s",
                                    "start_s"), 0.0)
        self.t0 = time.perf_counter()
        self.spans: list[tuple[float, float]] = []
        self.submitted_s = 0.0

    @property
    def local_pool(self) -> bool:
        """Whether runs train in this machine's pool of worker processes."""
        return not self.serial and not self.backend.remote

    def start(self, warm: tuple = (), runs: int | None = None) -> None:
        """Start the local pool (nothing for a serial evaluation or an executor): with ``runs``
        (at most that many to train) its processes, no more than those runs need besides this
        process, start now and import torch and load the datasets of the workloads ``warm``
        meanwhile; without, they start as runs are submitted."""
        if self.local_pool and self.pool is None:
            from .executors import start_pool

            t0 = time.perf_counter()
            processes = max(1, self.slots - 1)
            if runs is not None:
                processes = max(1, min(processes, runs - 1))
            self.pool = start_pool(processes, warm, now=runs is not None)
            self.times["start_s"] += time.perf_counter() - t0

    def submit(self, result):
        """Start training (the pool) or train now (serial); ``collect`` records a serial run,
        ``result`` returns a submitted one."""
        self.submitted_s = time.perf_counter() - self.t0
        if self.serial:
            t0 = time.perf_counter()
            report = _execute(self.session, result)
            wall = time.perf_counter() - t0
            self.times["train_s"] += wall
            self._span(wall)
            return report, wall
        from ..runtime.execution import prepare
        from .executors import on_worker, train_cached

        job, options, _ = prepare(self.session.catalog, result, stop_at_target=False,
                                  reoptimize=False)
        if self.backend.remote:   # one torch thread per task, the dataset loaded on the worker
            future = self.backend.executor.submit(on_worker, train_cached, job)
            self.futures.add(future)
            return job, options, future
        self.start((job.workload,))
        future = self.pool.submit(train_cached, job)
        future.add_done_callback(self._pool_span)
        self.queued.append((job, future))
        return job, options, future

    def _span(self, wall: float) -> None:
        end = time.perf_counter() - self.t0
        self.spans.append((end - wall, end))

    def _pool_span(self, future) -> None:
        """A pool run's span, when its result arrives (not for one taken back: trained here)."""
        if not future.cancelled() and future.exception() is None:
            self._span(future.result()[1])

    def result(self, pending) -> tuple[Any, float]:
        """(run, wall seconds) of a submitted run, once it is back (this process trains queued
        runs meanwhile: :meth:`_result`). KeyboardInterrupt when Ctrl-C stopped it."""
        _job, _options, future = pending
        t0, trained = time.perf_counter(), self.times["train_s"]
        run, wall = future.result() if self.backend.remote else self._result(future)
        self.times["wait_s"] += (time.perf_counter() - t0) - (self.times["train_s"] - trained)
        self.futures.discard(future)
        if run.status == "aborted":   # Ctrl-C reached the worker: the evaluation is stopping
            raise KeyboardInterrupt
        return run, wall

    def _result(self, future):
        """(run, wall) of a local pool run: while it has not come back, this process trains
        runs no worker has started yet itself, the oldest first like the workers (so workloads
        complete, and are recorded, in order), the awaited one included; then it waits."""
        while future not in self.here and not future.done():
            if not self._train_one_here():
                break
        return self.here.pop(future) if future in self.here else future.result()

    def _train_one_here(self) -> bool:
        """Take back the oldest queued run no worker has started and train it in this process
        (one torch thread, like a worker); False when there is none. The runs before it have
        started (or are in the pool's hand-over queue) and are dropped from ``queued``."""
        while self.queued:
            job, future = self.queued.popleft()
            if future.cancel():   # not started by a worker: it is ours now
                t0 = time.perf_counter()
                self.here[future] = train_here(job)
                self.times["train_s"] += time.perf_counter() - t0
                self._span(self.here[future][1])
                if self.here[future][0].status == "aborted":
                    # Ctrl-C (or SIGTERM) stopped it: train no further run here
                    raise KeyboardInterrupt
                return True
        return False

    def collect(self, pending, key: str, grid: str) -> None:
        """Tag a run trained serially (``Session.execute`` recorded it) with its evaluation
        tag, in one transaction, so a recorded run is always a cached run."""
        report, wall = pending
        t0 = time.perf_counter()
        with self.session.catalog.transaction():
            exec_id = int(report.exec_id)
            _tag(self.session.catalog, exec_id, key, grid, report.result.client_accuracies,
                 wall)
            self._cached(exec_id, key, wall)
        self.times["record_s"] += time.perf_counter() - t0

    def record(self, done: list[tuple[Any, str, Any, float]], grid: str) -> None:
        """Record runs that came back, each ``(pending, key, run, wall)``, in order and in one
        transaction (:func:`~airplan_qo.runtime.execution.record_trained_batch`), each execution
        row tagged for the cache as it is inserted: the same rows as a serial evaluation's."""
        if not done:
            return
        from ..runtime.execution import record_trained_batch

        t0 = time.perf_counter()
        batch = [(job, {**options, "evaluation": _evaluation_tag(key, grid,
                                                                 run.client_accuracies, wall)},
                  run, wall)
                 for (job, options, _future), key, run, wall in done]
        reports = record_trained_batch(self.session.catalog, batch)
        for report, (_pending, key, _run, wall) in zip(reports, done):
            self._cached(int(report.exec_id), key, wall)
        self.times["record_s"] += time.perf_counter() - t0

    def _cached(self, exec_id: int, key: str, wall: float) -> None:
        self.cache[key] = exec_id
        self.walls[key] = wall

    def close(self, *, cancel: bool = False) -> None:
        """Stop the local pool and release the executor. At the end of a measurement every
        run is back and the worker processes exit in the background (the analysis need not
        wait for them); ``cancel`` (Ctrl-C, an error) cancels the runs not started and waits
        for the running ones to end."""
        if self.pool is not None:
            self.pool.shutdown(wait=cancel, cancel_futures=cancel)
            self.pool = None
        self.queued.clear()
        if cancel:   # the executor is not ours to shut down: cancel what this call submitted
            for future in self.futures:
                future.cancel()
        self.futures.clear()
        self.backend.close()


def _warm_workloads(grid: Grid) -> tuple:
    """The workloads whose datasets the first runs of ``grid`` train on, in order, one per
    (dataset, seed) and at most as many as a worker keeps loaded."""
    from .executors import _KEEP

    out, seen = [], set()
    for ws in grid.workloads:
        for seed in grid.seeds:
            w = ws.for_seed(seed)
            if (w.dataset, w.seed) not in seen:
                seen.add((w.dataset, w.seed))
                out.append(w)
            if len(out) == _KEEP:
                return tuple(out)
    return tuple(out)


def measure(session, grid: Grid, *, progress: Callable[[str], None] | None = None,
            workers: int = 1, executor: Any = None,
            times: dict[str, float] | None = None) -> list[Measured]:
    """Plan and train (or reuse) every run of the grid; returns the measurements per workload.

    ``workers`` > 1 trains uncached runs in that many worker processes while this process
    plans the following workloads and records finished runs (see :class:`_Trainer`); the catalog
    rows equal a serial evaluation's (wall times aside). The worker processes start before the
    first workload is planned (unless the cache may hold every run of the grid already).
    ``executor`` trains the runs elsewhere
    instead: ``"local"`` (the same as None), a Dask scheduler ``"dask://HOST:PORT"`` (connected
    here and closed at the end) or a ``concurrent.futures.Executor`` such as
    ``dask.distributed.Client(...).get_executor()`` (left open); the rows are the same (see
    :mod:`.executors`). Ctrl-C cancels the runs not yet started and waits for the running ones
    (with an executor: cancels every run it has not returned); recorded runs stay cached, so a
    re-run continues. ``times``, where given, receives where this process spent its time
    (seconds; the keys of :class:`_Trainer`'s ``times``).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValidationError(f"workers must be a positive integer, got {workers!r}")
    from .executors import resolve

    say = progress or (lambda _msg: None)
    trainer = _Trainer(session, workers, resolve(executor, workers))
    state = {"done": 0, "trained": 0, "train_s": 0.0}
    out: list[Measured] = []
    try:
        if trainer.backend.remote:
            say(f"runs that are not cached train on {trainer.backend.name} "
                f"({trainer.slots} at once)")
        if len(trainer.cache) < grid.n_runs:   # some run must train: start the workers now
            trainer.start(_warm_workloads(grid), runs=grid.n_runs)
        # plan (and submit) every workload as fast as planning goes, so the workers always have
        # runs queued; between two plannings, record the workloads whose runs have all come
        # back, in order (their progress lines, and a cache that survives Ctrl-C)
        queue: deque[_Pending] = deque()
        for wi, ws in enumerate(grid.workloads, 1):
            queue.append(_plan_workload(session, grid, ws, wi, trainer))
            while queue and queue[0].trained():
                out.append(_finish_workload(session, grid, queue.popleft(), trainer, state, say))
        while queue:
            out.append(_finish_workload(session, grid, queue.popleft(), trainer, state, say))
    except BaseException:
        trainer.close(cancel=True)
        raise
    finally:
        if times is not None:
            times.update(trainer.times)
            if trainer.spans:
                times.update(occupancy(trainer.spans, trainer.slots, trainer.submitted_s,
                                       time.perf_counter() - trainer.t0))
    trainer.close()
    return out


def occupancy(spans: list[tuple[float, float]], slots: int, submitted: float,
              end: float) -> dict[str, float]:
    """How busy the ``slots`` training slots were, from the runs' (start, end) spans, in four
    phases of a measurement that ends at ``end``: ``startup`` until the first run started,
    ``planning`` until the last run was submitted (``submitted``), ``queued`` until the last
    run started, and ``tail`` until the end. Returns each phase's end (``first_start_s``,
    ``submitted_s``, ``last_start_s``) and its busy share (``busy_startup`` ...: training
    seconds in it over slots x its length; 0 where it is empty)."""
    first = min(s for s, _ in spans)
    last = max(s for s, _ in spans)
    bounds = {"startup": (0.0, first), "planning": (first, max(first, submitted)),
              "queued": (max(first, submitted), max(first, submitted, last)),
              "tail": (max(first, submitted, last), max(end, first, submitted, last))}
    out = {"first_start_s": first, "submitted_s": submitted, "last_start_s": last}
    for name, (a, b) in bounds.items():
        busy = sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans)
        out[f"busy_{name}"] = busy / (slots * (b - a)) if b > a else 0.0
    return out


@attrs.define
class _Pending:
    """A planned workload whose uncached runs are training."""

    index: int
    spec: WorkloadSpec
    seeds: dict[int, SeedPlan]
    runs: list[tuple[int, str, bool, str, Any]]  # seed, label, candidate, key, submitted|None
    start: float

    def trained(self) -> bool:
        """Whether every run this workload submitted has come back (recording won't wait)."""
        return all(not isinstance(job, tuple) or job[-1].done() for *_, job in self.runs)


def _plan_workload(session, grid: Grid, ws: WorkloadSpec, wi: int, trainer: _Trainer
                   ) -> _Pending:
    """Plan every seed of a workload and submit its runs that are neither cached nor already
    submitted (the first submission of a key trains it; later ones reuse its execution)."""
    cache, submitted = trainer.cache, trainer.submitted
    start = time.perf_counter()
    seeds: dict[int, SeedPlan] = {}
    runs: list[tuple[int, str, bool, str, Any]] = []
    for seed in grid.seeds:
        t0 = time.perf_counter()
        sp = plan_seed(session, grid, ws, seed)
        trainer.times["plan_s"] += time.perf_counter() - t0
        seeds[seed] = sp
        todo = [(sp.result, c, True) for c in sp.candidates]
        if sp.fc_candidate not in sp.candidates:
            todo.append((sp.fc_result, sp.fc_candidate, False))
        for result, cand, is_candidate in todo:
            key = cache_key(sp.workload, cand.plan, result.context.round_budget)
            job = None
            if key not in cache and key not in submitted:
                job = trainer.submit(attrs.evolve(result, chosen=cand))
                submitted.add(key)
                if trainer.serial:   # trained already: tag it now, like before
                    trainer.collect(job, key, grid.name)
                    job = "recorded"
            runs.append((seed, cand.plan.label(), is_candidate, key, job))
    return _Pending(wi, ws, seeds, runs, start)


def _finish_workload(session, grid: Grid, p: _Pending, trainer: _Trainer, state: dict,
                     say: Callable[[str], None]) -> Measured:
    """Wait for the workload's runs (training queued ones meanwhile), record them in order in
    one transaction, read them back and print its progress line."""
    cache, walls = trainer.cache, trainer.walls
    todo: list[tuple[int, str, bool, int, bool, float | None]] = []
    w_trained = 0
    back = [(job, key, *trainer.result(job)) for *_, key, job in p.runs
            if isinstance(job, tuple)]
    trainer.record(back, grid.name)
    for seed, label, is_candidate, key, job in p.runs:
        trained = job is not None
        if trained:
            state["train_s"] += walls[key]
            state["trained"] += 1
            w_trained += 1
        state["done"] += 1
        todo.append((seed, label, is_candidate, cache[key], not trained,
                     walls[key] if trained else None))
    t0 = time.perf_counter()
    runs = load_runs(session.catalog, p.spec, p.seeds, todo)
    trainer.times["read_s"] += time.perf_counter() - t0
    total, done, n_trained = grid.n_runs, state["done"], state["trained"]
    eta = ""
    if n_trained and done < total:
        left = state["train_s"] / n_trained * (total - done) / trainer.slots
        eta = f", at most about {left:.0f} s of training left"
    # its time: since it was planned or since the workload before it was recorded, whichever
    # is later (workloads are planned ahead of their training)
    now = time.perf_counter()
    took = now - max(p.start, state.get("recorded_at", p.start))
    state["recorded_at"] = now
    say(f"workload {p.index}/{len(grid.workloads)} '{p.spec.key}': {len(runs)} runs "
        f"({w_trained} trained, {len(runs) - w_trained} cached) in {took:.1f} s{eta}")
    return Measured(p.spec, p.seeds, runs)


def load_runs(catalog, ws: WorkloadSpec, seeds: dict[int, SeedPlan],
              todo: list[tuple[int, str, bool, int, bool, float | None]]) -> list[RunRecord]:
    """Read the runs back from the catalog (fresh and cached alike, one code path). A run's
    accuracies are those of the workload's SLA: the clients' mean (``accuracy``) or the
    average model's (``avg_model_accuracy``), each round and at the end."""
    ids = [t[3] for t in todo]
    curve = TARGET_METRICS[parse_sla(ws.sla).accuracy_metric]
    final = {"client_acc_mean": "client_acc_mean", "test_accuracy": "final_accuracy"}[curve]
    rows = {int(r["exec_id"]): r for r in catalog.query(
        f"SELECT exec_id, status, {final} AS final_accuracy, options "
        "FROM airplan.executions "
        "WHERE list_contains(?, exec_id)", [ids])}
    table = catalog.query_arrow(
        f"SELECT exec_id, round, {curve} AS accuracy, channel_uses, energy_j "
        "FROM airplan.round_stats "
        "WHERE list_contains(?, exec_id) AND round >= 1 ORDER BY exec_id, round", [ids])
    curves: dict[int, tuple[list, list, list]] = {}
    if table.num_rows:
        cols = {n: table.column(n).to_pylist() for n in table.column_names}
        for eid, rnd, acc, uses, energy in zip(cols["exec_id"], cols["round"],
                                               cols["accuracy"], cols["channel_uses"],
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
           "measure", "default_workers", "plan_seed", "load_runs", "client_variance"]
