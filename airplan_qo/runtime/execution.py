"""Execute a chosen plan and record it: the glue between the planner, the engine and the catalog.

``execute(catalog, result)`` builds the plan's topology, the workload's dataset and partition (the
same seeds as ANALYZE WORKLOAD), trains with :class:`~.engine.Trainer`, streams per-round
statistics to ``round_stats`` in batches, checkpoints every few rounds, and finally writes the
execution's outcome and its ``feedback`` rows (estimate vs actual) in one transaction. Ctrl-C
stops cleanly with status ``aborted`` and a checkpoint; ``resume(catalog, exec_id)`` continues
from the last checkpoint and gives the same result as an uninterrupted run.

While it trains, the run holds the catalog file only to write: every :data:`FLUSH_SECONDS` (and
at its first checkpoint, on a re-optimisation and at the end) it reopens the file, writes the
rounds since the last write with the execution row's progress in one short transaction, and
releases the file again (:meth:`~airplan_qo.catalog.store.Catalog.release`), so that readers and
other trainings can open it in between. A write that finds the file held by another process
waits up to :data:`FLUSH_WAIT` seconds, then keeps its rows for the next write; the final record
waits up to :data:`RECORD_WAIT` seconds.

With re-optimisation on (:mod:`.monitor`), a monitor compares every round with the plan's
prediction; on a trigger the run is re-planned with the observed statistics and rewired, and the
event is recorded in ``reoptimizations`` and shown by EXPLAIN ANALYZE. A rewired execution writes
no ``feedback`` rows: its curve mixes plans, and calibration would attribute it to the first.

Training and recording are separable for runs trained in another process (``airplan evaluate
--workers``): :func:`prepare` builds a picklable :class:`TrainJob`, :func:`train` trains it
without a catalog, and :func:`record_trained` records the returned run through the same
outcome-recording code (:func:`_record_outcome`) that ends every :func:`execute`;
:func:`record_trained_batch` records many such runs in one transaction and three inserts, with
the same rows.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import attrs
import numpy as np

from ..catalog.owners import describe_owner, owner_alive, this_owner
from ..catalog.store import Catalog, now_utc
from ..errors import CatalogLockedError, ExecutionError
from ..plans.operators import MATCHA_BUDGET
from ..plans.topology import TopologySpec
from .device import DEFAULT_DEVICE, available_bytes, check_device, device_name, resolve_device
from .engine import ROUND_KEYS, RunConfig, RunResult, Trainer
from .feedback import feedback_basis
from .inputs import trainer_inputs
from ..plans.sla import TARGET_METRICS, first_crossing
from .monitor import MonitorConfig, Reoptimizer, plan_mixing_p, request_from_json, \
    request_to_json, spec_from_plan_row

#: Seconds between writes of round statistics (and the execution's progress) during a run:
#: each costs a reopen and a release of the file (tens of ms, benchmarks/bench_flush.py).
FLUSH_SECONDS = 2.0
#: Seconds a write during a run waits for another process's lock before it keeps its rows for
#: the next write.
FLUSH_WAIT = 2.0
#: Seconds the final record of a run waits for another process's lock (at least the catalog's
#: own wait).
RECORD_WAIT = 120.0
CHECKPOINT_EVERY = 10


def derive_seeds(seed: int) -> dict[str, int]:
    """Independent data, training and channel seeds from the workload's master seed."""
    children = np.random.SeedSequence(seed).spawn(3)
    return {name: int(c.generate_state(1, dtype=np.uint32)[0])
            for name, c in zip(("data_seed", "train_seed", "channel_seed"), children)}


def run_config(workload, plan, rounds: int, target: float | None, seeds: dict[str, int],
               target_metric: str = "accuracy", device: str = DEFAULT_DEVICE) -> RunConfig:
    return RunConfig(
        model=workload.model, lr=workload.lr, momentum=workload.momentum,
        batch_size=workload.batch_size, local_steps=workload.local_steps, rounds=rounds,
        k_ratio=plan.k_ratio, algorithm=plan.algorithm, mask=plan.mask, channel=plan.channel,
        ota_payload=getattr(workload, "ota_payload", "difference"), target_accuracy=target,
        target_metric=target_metric, device=device, transport=plan.transport, bits=plan.bits,
        matcha_budget=MATCHA_BUDGET, mix_rounds=getattr(plan, "mix_rounds", 0),
        mix_on=getattr(plan, "mix_on", None), **seeds)


@attrs.frozen
class ExecutionReport:
    """What an execution measured, with the ``actual_*`` fields EXPLAIN ANALYZE shows."""

    exec_id: int
    plan_id: int | None
    result: RunResult
    feedback: tuple[dict[str, Any], ...]
    execution_time_ms: float
    events: tuple[str, ...] = ()

    def analyze_fields(self) -> dict[str, Any]:
        r = self.result
        history = r.history
        drops = [h["link_drop_rate"] for h in history if h.get("link_drop_rate") is not None]
        extra = {"events": list(self.events)} if self.events else {}
        return {
            "status": r.status,
            "actual_rounds": r.rounds_to_target if r.rounds_to_target is not None else r.rounds,
            "actual_rounds_run": r.rounds,
            "actual_accuracy": r.client_acc_mean,
            "actual_avg_model_accuracy": r.final_accuracy,
            "actual_channel_uses": r.total_channel_uses,
            "actual_link_drop_rate": float(np.mean(drops)) if drops else None,
            "execution_time_ms": self.execution_time_ms,
            "feedback": list(self.feedback),
            "exec_id": self.exec_id,
            "reason": r.reason,
            "device": r.device,
            **extra,
        }


class _Progress:
    """A one-line progress bar with ETA on stderr (only on a terminal, unless quiet)."""

    def __init__(self, total: int, quiet: bool):
        self.total = total
        self.on = not quiet and sys.stderr.isatty()
        self.start = time.perf_counter()

    def update(self, row: dict[str, Any]) -> None:
        if not self.on:
            return
        done = row["round"]
        elapsed = time.perf_counter() - self.start
        eta = elapsed / max(done, 1) * (self.total - done)
        width = 30
        filled = int(width * done / max(self.total, 1))
        acc = row.get("client_acc_mean")
        acc_text = f" acc={acc:.3f}" if acc is not None else ""
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"rounds{acc_text} ETA {eta:5.1f}s ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\n")


def checkpoint_dir(catalog: Catalog) -> Path:
    """Where the catalog's checkpoints go: ``airplan-checkpoints/<catalog id>/`` beside the
    catalog file (in the temporary folder for ``:memory:``), so catalogs sharing a folder never
    share a checkpoint."""
    base = (Path(tempfile.gettempdir()) if catalog.path == ":memory:"
            else Path(catalog.path).resolve().parent)
    return base / "airplan-checkpoints" / catalog.catalog_id



def _round_rows(exec_id: int, rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {"exec_id": [exec_id] * len(rows)}
    for name in ROUND_KEYS:
        cols[name] = [_finite(r.get(name)) for r in rows]
    return cols


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def execute(catalog: Catalog, result, *, quiet: bool = False, stop_at_target: bool = True,
            reoptimize: bool | None = None, monitor: MonitorConfig | None = None,
            device: str = DEFAULT_DEVICE,
            planner: Callable[[Any], Any] | None = None, keep_state: bool = False,
            continue_pilot: bool = True) -> ExecutionReport:
    """Train the chosen plan of a PlanResult and record everything in the catalog.

    By default training stops once the average model reaches the SLA's accuracy target (the
    plan's cost assumes it); ``stop_at_target=False`` runs the whole round budget, which
    calibration pilots use to observe the error floor.

    ``reoptimize``: monitor the run and re-plan on a trigger (:mod:`.monitor`, thresholds in
    ``monitor``). ``None`` means on for runs that stop at the target (TRAIN) and off for
    whole-budget runs (pilots, evaluations), whose curve must come from one plan. ``planner``
    re-plans a PlanRequest into a recorded PlanResult (the session's optimizer); without it a
    monitored run records its triggers but keeps its plan.

    ``device``: where to train (``cpu``, ``cuda``, ``cuda:N`` or ``auto``; :mod:`.device`); the
    device it resolves to is recorded in the execution's ``options`` (``$.device``).

    ``keep_state``: write a checkpoint after the last round too (a reference pilot keeps the
    state its plan's run may continue from). When the chosen plan is the one a reference pilot
    of the request trained (:meth:`~airplan_qo.plans.pilot.ReferencePilot.continues`), the run
    starts from the pilot's last round (``continue_pilot=False``: from round 0): its history
    holds the pilot's rounds, so its totals count them once, and a target the pilot already
    reached ends it at once. ``options.continues_pilot`` records the pilot's execution.
    """
    job, options, reopt_request = prepare(catalog, result, stop_at_target=stop_at_target,
                                          reoptimize=reoptimize, monitor=monitor, device=device)
    pilot = result.request.pilot
    start = None
    if continue_pilot and pilot is not None and pilot.continues(result.chosen.plan) \
            and os.path.exists(pilot.checkpoint) and pilot.rounds <= job.config.rounds:
        start = pilot
        options["continues_pilot"] = int(pilot.exec_id)
    monitor = monitor or MonitorConfig()
    exec_id = _insert_execution(catalog, job, options)
    reopt = None
    if reopt_request:
        chosen = result.chosen
        reopt = Reoptimizer(catalog, exec_id, result.request, plan_id=chosen.plan_id,
                            spec=chosen.plan.topology, k_ratio=chosen.plan.k_ratio,
                            mixing_p=chosen.stats.spectra.mixing_p,
                            basis=options["feedback_basis"], config=monitor, planner=planner)
    return _run(catalog, exec_id, job.plan_id, job.workload, job.spec, job.config,
                options["feedback_basis"], quiet=quiet, reopt=reopt,
                resume_from=start.checkpoint if start is not None else None,
                load_owner=start.owner if start is not None else None, keep_state=keep_state)


@attrs.frozen
class TrainJob:
    """Everything needed to train one plan without a catalog (picklable, so a worker process
    can train it): the workload (dataset, partition and their seeds), the plan's topology spec,
    the :class:`~.engine.RunConfig`, and the plan id the parent records it under."""

    plan_id: int
    workload: Any
    spec: TopologySpec
    config: RunConfig


def prepare(catalog: Catalog, result, *, stop_at_target: bool = True,
            reoptimize: bool | None = None, monitor: MonitorConfig | None = None,
            device: str = DEFAULT_DEVICE) -> tuple[TrainJob, dict[str, Any], bool]:
    """Check a PlanResult and build its :class:`TrainJob` and the execution's ``options``
    (nothing is written). Returns (job, options, whether the run is re-optimised). The run
    configuration keeps ``device`` as asked (``auto`` resolves again on resume); ``options``
    records the device it resolves to here (a device this machine lacks fails now)."""
    if catalog.read_only:
        raise ExecutionError("training needs a writable catalog (it records the execution); "
                             "drop --read-only")
    if result.chosen.plan_id is None:
        raise ExecutionError("the plan was not recorded; cannot execute it")
    device = check_device(device)
    resolved = resolve_device(device)
    w = result.request.workload
    seeds = derive_seeds(w.seed)
    config = run_config(w, result.chosen.plan, result.context.round_budget,
                        result.target_accuracy if stop_at_target else None, seeds,
                        result.request.sla.accuracy_metric, device=device)
    _check_training_memory(w.clients, result.context.d, config, resolved)
    options = {"dataset": w.dataset, "clients": w.clients, "workload": w.params(),
               "run_config": config.as_dict(), "planning_run_id": result.planning_run_id,
               "feedback_basis": feedback_basis(result), "device": device_name(resolved),
               "processes": _processes()}
    if reoptimize is None:
        reoptimize = stop_at_target
    if reoptimize:
        options["reoptimization"] = {"config": (monitor or MonitorConfig()).as_dict(),
                                     "request": request_to_json(result.request), "bases": {}}
    job = TrainJob(int(result.chosen.plan_id), w, result.chosen.plan.topology, config)
    return job, options, bool(reoptimize)


def _insert_execution(catalog: Catalog, job: TrainJob, options: dict[str, Any]) -> int:
    return int(catalog.insert_row("executions", {**_execution_values(job, options),
                                                 **this_owner()}))


def _execution_values(job: TrainJob, options: dict[str, Any]) -> dict[str, Any]:
    """The columns of a new execution row (its owner aside): status ``running`` until its
    outcome is written."""
    seeds = {k: getattr(job.config, k) for k in ("data_seed", "train_seed", "channel_seed")}
    return {"plan_id": job.plan_id, "status": "running", **seeds, "heartbeat_at": _now(),
            "options": json.dumps(options, sort_keys=True, default=str)}


def train(job: TrainJob) -> tuple[RunResult, float]:
    """Train a :class:`TrainJob` to the end without touching any catalog (no checkpoints, no
    streaming): the worker-process half of :func:`record_trained`. Returns the run and its wall
    time in seconds. The same seeds give the same run as :func:`execute`, bit for bit."""
    start = time.perf_counter()
    trainer = _trainer(job.workload, job.spec, job.config)
    run = trainer.run(None)
    return run, time.perf_counter() - start


def init_worker() -> None:
    """Set-up of a process that runs :func:`train` for another: one torch thread (several
    processes each using every core over-subscribe the machine, 30-45x slower on 2 cores), and
    SIGINT ignored while idle (the parent stops the pool; a run in progress still sees Ctrl-C
    through the trainer's guard and returns ``aborted``, which the parent does not record)."""
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:   # already set in this process
        pass


def record_trained(catalog: Catalog, job: TrainJob, options: dict[str, Any], run: RunResult,
                   elapsed_s: float) -> ExecutionReport:
    """Record a run trained by :func:`train` elsewhere: its execution row, every
    ``round_stats`` row, its outcome and ``feedback``, in one transaction (so an interrupted
    recording leaves nothing), through the same code as :func:`execute`."""
    with catalog.transaction():
        exec_id = _insert_execution(catalog, job, options)
        feedback = _record_outcome(catalog, exec_id, job.plan_id, run, options["feedback_basis"],
                                   written=set(), ckpt=None, rewired=False)
    return ExecutionReport(exec_id, job.plan_id, run, tuple(feedback), elapsed_s * 1e3)


def record_trained_batch(catalog: Catalog,
                         runs: list[tuple[TrainJob, dict[str, Any], RunResult, float]]
                         ) -> list[ExecutionReport]:
    """Record several runs trained elsewhere, each ``(job, options, run, wall seconds)``, in one
    transaction and three inserts (their execution rows, every ``round_stats`` row, every
    ``feedback`` row) instead of four statements per run. The rows equal those of
    :func:`record_trained` called for each run in turn: execution ids drawn in the given order,
    each execution row inserted with its outcome (the values :func:`_record_outcome` writes) and
    the feedback rows of :func:`_feedback`. An aborted run is refused (it is never recorded as
    trained elsewhere)."""
    if not runs:
        return []
    if any(run.status == "aborted" for _, _, run, _ in runs):
        raise ExecutionError("an aborted run cannot be recorded as trained: it did not finish")
    execs: dict[str, list[Any]] = {}
    rounds: dict[str, list[Any]] = {}
    feedback_cols: dict[str, list[Any]] = {}
    reports: list[ExecutionReport] = []
    owner = this_owner()
    with catalog.transaction():
        ids = catalog.next_ids("executions", len(runs))
        for exec_id, (job, options, run, wall) in zip((int(i) for i in ids), runs):
            row = {"exec_id": exec_id, **_execution_values(job, options), **owner,
                   **_outcome_values(run, None)}
            for k, v in row.items():
                execs.setdefault(k, []).append(v)
            for k, v in _round_rows(exec_id, run.history).items():
                rounds.setdefault(k, []).extend(v)
            feedback = _feedback(options["feedback_basis"], run, exec_id, job.plan_id)
            for f in feedback:
                for k, v in f.items():
                    feedback_cols.setdefault(k, []).append(v)
            reports.append(ExecutionReport(exec_id, job.plan_id, run, tuple(feedback),
                                           wall * 1e3))
        catalog.insert_rows("executions", execs)
        if rounds.get("exec_id"):
            catalog.insert_rows("round_stats", rounds)
        if feedback_cols:
            catalog.insert_rows("feedback", feedback_cols)
    return reports


def _processes() -> int:
    """How many processes train a run started here: the torch.distributed group's size, else 1."""
    from . import distributed

    group = distributed.active()
    return group.world if group is not None else 1


def _trainer(w, spec: TopologySpec, config: RunConfig) -> Trainer:
    """The trainer of a plan: in a process group started by ``torchrun``
    (:mod:`.distributed`), one that shards the clients over the group's processes."""
    from . import distributed

    if distributed.active() is not None:
        return distributed.lead(w, spec, config)
    return Trainer(config, *trainer_inputs(w, spec))


def _check_training_memory(n: int, d: int, config: RunConfig, device=None) -> None:
    """Refuse, before anything is recorded, a run whose stacked state cannot fit in memory
    (the GPU's free memory for a CUDA device). A run over several processes is checked
    instead by its processes for the rows each holds, when they build their trainers, after
    the execution is recorded (:meth:`.distributed.DistributedTrainer._check_memory`)."""
    from ..plans.footprint import MEMORY_SHARE, gib, training_bytes
    from . import distributed

    group = distributed.active()
    if group is not None and group.world > 1:
        return

    algorithm = config.resolved_algorithm
    need = training_bytes(n, d, algorithm, config.transport, config.bits)
    where = f" on {device_name(device)}" if device is not None and device.type == "cuda" else ""
    available = available_bytes(device)
    if available is not None and need > MEMORY_SHARE * available:
        raise ExecutionError(
            f"training {n} clients of a {d}-parameter model with {algorithm} needs ~{gib(need)} "
            f"for the stacked models and buffers, but only {gib(MEMORY_SHARE * available)} is "
            f"available{where}: use fewer clients or a smaller model")


def _run(catalog: Catalog, exec_id: int, plan_id: int, w, spec: TopologySpec, config: RunConfig,
         basis: dict[str, Any], *, quiet: bool, resume_from: str | None = None,
         reopt: Reoptimizer | None = None, bases: dict[str, Any] | None = None,
         load_owner: dict[str, Any] | None = None, keep_state: bool = False
         ) -> ExecutionReport:
    start = time.perf_counter()
    ckpt = checkpoint_dir(catalog) / f"exec-{exec_id}.pt"
    owner = {"catalog_id": catalog.catalog_id, "exec_id": int(exec_id)}
    try:  # a setup failure (data that cannot be partitioned, ...) is recorded, not left running
        trainer = _trainer(w, spec, config)
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        if resume_from:
            trainer.checkpoint_owner = load_owner or owner
            if reopt is not None:
                reopt.restore(trainer, _checkpoint_state(resume_from, trainer.checkpoint_owner),
                              bases)
            trainer.load(resume_from)
        trainer.checkpoint_owner = owner
    except BaseException as exc:
        _finish_failed(catalog, exec_id, exc)
        raise
    written = {r["round"] for r in catalog.query(
        "SELECT round FROM airplan.round_stats WHERE exec_id = ?", [exec_id])}
    pending: list[dict[str, Any]] = []
    progress = _Progress(config.rounds, quiet)
    state = {"last": time.monotonic(), "ckpt_recorded": False, "ckpt_saved": False}

    def flush(force: bool = False) -> None:
        """Write the pending rounds and the run's progress in one short transaction; when
        another process holds the file past FLUSH_WAIT, keep them for the next write."""
        if not force:
            try:
                catalog.reacquire(FLUSH_WAIT)
            except CatalogLockedError:
                state["last"] = time.monotonic()
                return
        rows = [r for r in pending if r["round"] not in written]
        record_ckpt = state["ckpt_saved"] and not state["ckpt_recorded"]
        with catalog.transaction():
            if rows:
                catalog.insert_rows("round_stats", _round_rows(exec_id, rows))
            _claim(catalog, exec_id, {
                "actual_rounds": trainer.round,
                **({"checkpoint_path": str(ckpt)} if record_ckpt else {})})
        written.update(r["round"] for r in rows)
        pending.clear()
        state["ckpt_recorded"] = state["ckpt_recorded"] or record_ckpt
        state["last"] = time.monotonic()

    def on_round(row: dict[str, Any]) -> None:
        pending.append(row)
        progress.update(row)
        try:
            event = reopt.after_round(row, trainer) if reopt is not None else None
            if event is not None and not quiet:
                sys.stderr.write(f"\nre-optimisation: {event.text}\n")
            if row["round"] % CHECKPOINT_EVERY == 0 or event is not None:
                trainer.save(ckpt)  # after a rewiring: a resumed run must start on the new topology
                state["ckpt_saved"] = True
            if (event is not None or (state["ckpt_saved"] and not state["ckpt_recorded"])
                    or time.monotonic() - state["last"] >= FLUSH_SECONDS):
                flush(force=event is not None)
        finally:
            catalog.release()   # between writes, other processes may open the file

    catalog.release()
    try:
        run = trainer.run(on_round, checkpoint_path=ckpt)
    except BaseException as exc:
        progress.close()
        _finish_failed(catalog, exec_id, exc)
        raise
    progress.close()
    if keep_state and run.status == "succeeded":
        try:
            trainer.save(ckpt)
        except BaseException as exc:
            _finish_failed(catalog, exec_id, exc)
            raise
    elapsed_ms = (time.perf_counter() - start) * 1e3
    rewired = reopt is not None and reopt.rewired
    catalog.reacquire(max(RECORD_WAIT, catalog.wait), quiet=False)
    feedback = _record_outcome(catalog, exec_id, plan_id, run, basis, written=written,
                               ckpt=ckpt, rewired=rewired, claim=True)
    events = tuple(e.text for e in reopt.events) if reopt is not None else ()
    return ExecutionReport(exec_id, plan_id, run, tuple(feedback), elapsed_ms, events)


def _claim(catalog: Catalog, exec_id: int, values: dict[str, Any]) -> None:
    """Write ``values`` and a heartbeat to the execution row, inside the caller's transaction,
    provided this process still owns the row; a row another open took for abandoned
    (``interrupted``) is taken back. ExecutionError when another process has resumed or given
    up the execution since."""
    owner = this_owner()
    names = list(values)
    assign = "".join(f", \"{n}\" = ?" for n in names)
    found = catalog.query(
        f"UPDATE airplan.executions SET status = 'running', reason = NULL, heartbeat_at = ?"
        f"{assign} WHERE exec_id = ? AND owner_pid = ? AND owner_host = ? "
        f"AND status IN ('running', 'interrupted') RETURNING exec_id",
        [_now(), *(values[n] for n in names), int(exec_id), owner["owner_pid"],
         owner["owner_host"]])
    if not found:
        raise ExecutionError(
            f"execution {exec_id} is no longer this process's to record: another process "
            "resumed or gave it up while it ran; this run stops without writing more")


def _record_outcome(catalog: Catalog, exec_id: int, plan_id: int, run: RunResult,
                    basis: dict[str, Any], *, written: set[int], ckpt: Path | None,
                    rewired: bool, claim: bool = False) -> list[dict[str, Any]]:
    """The end of every execution, in one transaction: the ``round_stats`` rows not yet
    ``written``, the execution's outcome, and its ``feedback`` rows (none for an aborted or
    rewired run). With ``claim``, only if this process still owns the execution row (see
    :func:`_claim`). Returns the feedback rows."""
    rows = [r for r in run.history if r["round"] not in written]
    feedback = [] if rewired else _feedback(basis, run, exec_id, plan_id)
    with catalog.transaction():
        if claim:
            _claim(catalog, exec_id, {})
        if rows:
            catalog.insert_rows("round_stats", _round_rows(exec_id, rows))
            written.update(r["round"] for r in rows)
        catalog.update_row("executions", exec_id, _outcome_values(run, ckpt))
        if feedback and run.status != "aborted":
            catalog.insert_rows("feedback", {k: [f[k] for f in feedback] for k in feedback[0]})
    return feedback


def _outcome_values(run: RunResult, ckpt: Path | None) -> dict[str, Any]:
    """The columns of an execution row that record its outcome."""
    return {"status": run.status, "finished_at": _now(), "reason": run.reason,
            "actual_rounds": run.rounds, "final_accuracy": _finite(run.final_accuracy),
            "final_loss": _finite(run.final_loss), "client_acc_mean": run.client_acc_mean,
            "client_acc_var": run.client_acc_var, "jain_fairness": run.jain_fairness,
            "checkpoint_path": run.checkpoint_path or (
                str(ckpt) if ckpt is not None and ckpt.exists() else None)}


_now = now_utc


def _checkpoint_state(path: str, owner: dict[str, Any]) -> dict[str, Any]:
    from .checkpoint import check_owner, read

    state = read(path)
    check_owner(state, path, owner)
    return state


def _finish_failed(catalog: Catalog, exec_id: int, exc: BaseException) -> None:
    """Record a run that stopped on an exception: ``aborted`` for Ctrl-C, else ``failed``; left
    alone when the row is not this process's any more, or the catalog stays locked (then the
    next open finds it running without its process and marks it ``interrupted``)."""
    status = "aborted" if isinstance(exc, KeyboardInterrupt) else "failed"
    if status == "aborted":
        exc.exec_id = exec_id  # type: ignore[attr-defined]  # so the CLI can name it
    owner = this_owner()
    try:
        with catalog.transaction():
            catalog.query(
                "UPDATE airplan.executions SET status = ?, finished_at = ?, reason = ? "
                "WHERE exec_id = ? AND owner_pid = ? AND owner_host = ? "
                "AND status IN ('running', 'interrupted') RETURNING exec_id",
                [status, _now(), f"{type(exc).__name__}: {exc}"[:500], int(exec_id),
                 owner["owner_pid"], owner["owner_host"]])
    except Exception:  # the original error matters more than a failed status update
        pass


def _feedback(basis: dict[str, Any], run: RunResult, exec_id: int, plan_id: int
              ) -> list[dict[str, Any]]:
    """Estimate-vs-actual rows: rounds to the target (censored when the budget ended first),
    accuracy at the rounds actually run, and the resources those rounds used."""
    rounds_run = run.rounds
    target = basis["target_accuracy"]
    key = TARGET_METRICS[basis.get("target_metric", "accuracy")]
    reached = first_crossing([(h["round"], h.get(key)) for h in run.history], target)
    curve = basis["accuracy_curve"]
    acc_est = curve[min(rounds_run, len(curve)) - 1] if rounds_run and curve else None
    rows = [
        ("rounds", basis["rounds"], reached if reached is not None else rounds_run,
         basis["model_term"], reached is None),
        ("accuracy", acc_est, run.client_acc_mean if key == "client_acc_mean"
         else run.final_accuracy, None, False),
        ("channel_uses", _resource(basis, "channel_uses", rounds_run), run.total_channel_uses,
         None, False),
        ("energy_j", _resource(basis, "energy_j", rounds_run), run.total_energy_j, None, False),
    ]
    return [{"exec_id": exec_id, "plan_id": plan_id, "estimator": basis["estimator"],
             "metric": m, "estimated": _finite(e), "actual": _finite(a), "model_term": t,
             "censored": bool(c)} for m, e, a, t, c in rows]


def _resource(basis: dict[str, Any], what: str, rounds_run: int) -> float:
    """The planned ``what`` over ``rounds_run`` rounds: the plan's per-round figure, and for
    the rounds of a tail on another topology (``tail_from_round`` on) that topology's."""
    start = basis.get("tail_from_round")
    if start is None:
        return basis[f"per_round_{what}"] * rounds_run
    own = min(rounds_run, int(start))
    return (basis[f"per_round_{what}"] * own
            + basis[f"tail_per_round_{what}"] * (rounds_run - own))


#: Statuses an execution can be resumed from.
RESUMABLE = ("aborted", "interrupted", "failed")


def _execution_row(catalog: Catalog, exec_id: int) -> dict[str, Any]:
    catalog.recover()   # a row whose process died since the catalog was opened: interrupted
    rows = catalog.query("SELECT * FROM airplan.executions WHERE exec_id = ?", [exec_id])
    if not rows:
        raise ExecutionError(f"no execution {exec_id} in catalog {catalog.path}")
    ex = rows[0]
    if ex["status"] == "running" and owner_alive(ex):
        if ex["owner_pid"] == os.getpid() and ex["owner_host"] == this_owner()["owner_host"]:
            raise ExecutionError(f"execution {exec_id} is running in this process; wait for it "
                                 "to finish or interrupt it first")
        raise ExecutionError(
            f"execution {exec_id} is running in {describe_owner(ex['owner_pid'], ex['owner_host'])}"
            "; wait for it to finish, or stop that process (Ctrl-C records it aborted) and "
            "then resume or abandon it")
    return ex


def resume(catalog: Catalog, exec_id: int, *, quiet: bool = False,
           device: str | None = None,
           planner: Callable[[Any], Any] | None = None) -> ExecutionReport:
    """Continue an aborted, interrupted or failed execution from its last checkpoint, or from
    round 0 when it has none (a run killed before its first checkpoint). Either way the result
    equals an uninterrupted run with the same seeds (on the same device).

    ``device``: where to continue; by default the device the execution was asked to use
    (``auto`` resolves again). Another device continues the run, not bit for bit
    (docs/runtime.md, Devices); ``options`` then records the new device, and every device the
    execution trained on under ``$.devices``. ``planner``: as for :func:`execute`."""
    if catalog.read_only:
        raise ExecutionError("resuming needs a writable catalog (it records the execution); "
                             "drop --read-only")
    ex = _execution_row(catalog, exec_id)
    if ex["status"] == "succeeded":
        raise ExecutionError(f"execution {exec_id} already succeeded; nothing to resume")
    if ex["status"] == "abandoned":
        raise ExecutionError(f"execution {exec_id} was abandoned and cannot be resumed; run the "
                             "statement again for a new execution")
    path = ex["checkpoint_path"]
    if path and not os.path.exists(path):
        path = None  # deleted (pruned, or never written): start again from round 0
    options = json.loads(ex["options"]) if isinstance(ex["options"], str) else ex["options"]
    load_owner = {"catalog_id": catalog.catalog_id, "exec_id": exec_id}
    if path:  # refuse another catalog's, execution's or configuration's checkpoint up front
        from .checkpoint import check_config, check_owner, read

        state = read(path)
        saved = str((state.get("owner") or {}).get("catalog_id"))
        if saved in catalog.ancestors:
            # written for this execution before the catalog was copied: the same run
            load_owner["catalog_id"] = saved
        check_owner(state, path, load_owner)
        check_config(state, path, RunConfig.from_dict(options["run_config"]).as_dict())
    from ..plans.workload import Workload

    w = Workload.from_params(options["dataset"], options["clients"], options["workload"])
    plan_row = catalog.query("SELECT * FROM airplan.plans WHERE plan_id = ?", [ex["plan_id"]])[0]
    spec = spec_from_plan_row(plan_row, w.clients)
    config = RunConfig.from_dict(options["run_config"])
    if device is not None:
        config = attrs.evolve(config, device=check_device(device))
    resolved = device_name(resolve_device(
        config.device, hint=f"resume it on the CPU with: airplan resume {exec_id} --device cpu"))
    previous = options.get("devices") or [options.get("device", "cpu")]
    options["run_config"] = config.as_dict()
    options["device"] = resolved
    if resolved != previous[-1]:
        options["devices"] = [*previous, resolved]
    before = options.get("processes_history") or [options.get("processes", 1)]
    options["processes"] = _processes()
    if options["processes"] != before[-1]:
        options["processes_history"] = [*before, options["processes"]]
    reopt, bases = _resumed_reoptimizer(catalog, exec_id, options, w, plan_row, spec, planner)
    catalog.update_row("executions", exec_id, {"status": "running", "reason": None,
                                               "finished_at": None, "heartbeat_at": _now(),
                                               "options": json.dumps(options, sort_keys=True,
                                                                     default=str),
                                               **this_owner()})
    return _run(catalog, exec_id, ex["plan_id"], w, spec, config, options["feedback_basis"],
                quiet=quiet, resume_from=path, reopt=reopt, bases=bases, load_owner=load_owner)


def _resumed_reoptimizer(catalog: Catalog, exec_id: int, options: dict[str, Any], w,
                         plan_row: dict[str, Any], spec: TopologySpec,
                         planner: Callable[[Any], Any] | None):
    """The re-optimiser of a resumed execution (None when the run had none), planning like
    the original request when it could be stored."""
    section = options.get("reoptimization")
    if not section:
        return None, None
    request = (request_from_json(section["request"], w) if section.get("request") is not None
               else None)
    mixing_p = plan_mixing_p(catalog, plan_row, spec)
    reopt = Reoptimizer(catalog, exec_id, request, plan_id=plan_row["plan_id"], spec=spec,
                        k_ratio=plan_row["k_ratio"], mixing_p=mixing_p,
                        basis=options["feedback_basis"],
                        config=MonitorConfig.from_dict(section.get("config") or {}),
                        planner=planner)
    return reopt, section.get("bases") or {}


def abandon(catalog: Catalog, exec_id: int, reason: str | None = None) -> dict[str, Any]:
    """Give up an execution that did not succeed: status ``abandoned`` with ``reason``, and its
    checkpoint deleted when it lies in this catalog's checkpoint folder. Returns the updated
    row's ``exec_id``, ``status``, previous ``was`` status and ``reason``."""
    if catalog.read_only:
        raise ExecutionError("abandoning an execution needs a writable catalog; drop --read-only")
    ex = _execution_row(catalog, exec_id)
    if ex["status"] == "succeeded":
        raise ExecutionError(f"execution {exec_id} succeeded; only an unfinished or failed "
                             "execution can be abandoned")
    if ex["status"] == "abandoned":
        raise ExecutionError(f"execution {exec_id} is already abandoned")
    text = f"abandoned: {reason.strip()}" if reason and reason.strip() else \
        "abandoned by the user"
    if ex["reason"]:
        text += f" (was {ex['status']}: {ex['reason']})"
    else:
        text += f" (was {ex['status']})"
    path = ex["checkpoint_path"]
    removed = None
    if path and _owned_checkpoint(catalog, path):
        try:
            os.remove(path)
            removed = path
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ExecutionError(f"cannot delete checkpoint {path} of execution {exec_id}: "
                                 f"{exc.strerror or exc}") from None
    catalog.update_row("executions", exec_id, {
        "status": "abandoned", "reason": text[:2000],
        "finished_at": ex["finished_at"] or _now(),
        "checkpoint_path": None if removed or not path or not os.path.exists(path) else path})
    return {"exec_id": exec_id, "status": "abandoned", "was": ex["status"], "reason": text,
            "checkpoint_removed": removed}


def _owned_checkpoint(catalog: Catalog, path: str) -> bool:
    """Whether ``path`` lies in this catalog's own checkpoint folder."""
    try:
        return Path(path).resolve().parent == checkpoint_dir(catalog).resolve()
    except OSError:
        return False
