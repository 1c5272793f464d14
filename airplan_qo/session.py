"""The Python API: a session on one catalog.

    import airplan_qo as aq
    db = aq.connect("airplan.duckdb")
    result = db.plan(aq.Workload(dataset="digits", clients=50, alpha=0.5, snr_db=10),
                     sla="accuracy >= 0.95 * fc")
    print(result.explain())

Catalog queries (``db.sql("SELECT ...")``) can read only the catalog and run under a time limit
and a memory limit; see the Security section of docs/sql.md.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from .catalog.sandbox import DEFAULT_TIMEOUT, SESSION_DEFAULT
from .catalog.store import Catalog
from .errors import ValidationError
from .plans.workload import Workload

def _topologies(items: Iterable[Any] | None):
    if items is None:
        return None
    from .plans.topology import as_graph, parse_topology

    out = []
    if isinstance(items, (str, Mapping)) or as_graph(items) is not None:
        items = [items]                          # one topology rather than a list of them
    for item in items:
        if isinstance(item, str) or isinstance(item, Mapping) or as_graph(item) is not None:
            out.append(parse_topology(item))     # "ring", "small_world(k=4)", a networkx graph
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], Mapping):
            out.append((str(item[0]), tuple(sorted(item[1].items()))))
        else:
            raise ValidationError(f"a topology is a family name, 'name(key=value, ...)', "
                                  f"(name, params dict) or a networkx graph (or scipy sparse "
                                  f"adjacency, planned as from_edges), got {item!r}; pass an "
                                  f"edge list as networkx.Graph(edges)")
    return tuple(out)


class Session:
    """Plans, analyses and runs workloads against one catalog file."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
                 allow_external_access: bool = False, timeout: float | None = DEFAULT_TIMEOUT,
                 memory_limit: int | str | None = None, threads: int | None = None,
                 adopt: bool = False, wait: float | None = None, device: str | None = None):
        from .runtime.device import check_device

        #: Where this session's trainings run unless a call or a statement says otherwise
        #: (None: ``cpu``; resume: the execution's own device).
        self.device = None if device is None else check_device(device)
        self.catalog = Catalog(path, read_only=read_only,
                               allow_external_access=allow_external_access,
                               memory_limit=memory_limit, threads=threads, timeout=timeout,
                               adopt=adopt, wait=wait)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.catalog.close()

    def analyze(self, workload: Workload):
        """ANALYZE WORKLOAD: sketch every client's labels and store the statistics."""
        from .catalog.analyze import analyze_workload

        return analyze_workload(self.catalog, workload)

    def plan(self, workload: Workload, *, sla: Any = None, topologies: Iterable[Any] | None = None,
             weights: Iterable[str] | None = None, sparsity: Iterable[float] | None = None,
             budgets: Mapping[str, float] | None = None, estimator: str | None = None,
             objective: str | None = None, statement: str = "",
             confidence: float | None = None, progress=None, fallback: str | None = None,
             transports: Iterable[Any] | None = None, algorithms: Iterable[str] | None = None,
             pilot: str | None = None, pilot_rounds: int | None = None,
             device: str | None = None, mix_rounds: str | int | None = None):
        """Enumerate, cost and choose a plan; returns a PlanResult (``.explain()``).

        ``fallback``: what happens when ``topologies``, ``weights`` or ``sparsity`` restrict
        the plan space and no plan in it meets the SLA: ``'error'`` (the default for a
        restricted request) raises a PlanningError naming the best plan of the restriction and
        the cheapest one outside it; ``'auto'`` plans the whole space instead and says so in
        the result's warnings; ``'complete'`` takes the fully connected uncompressed plan (the
        default, and only choice, for an unrestricted request).

        ``confidence`` (default 0.95): with an estimator that predicts a distribution of rounds
        (``ttt``), the chosen plan must meet the SLA with at least this probability (a chance
        constraint). Given with an estimator that does not (``dsgd``, ``paper``), it has no
        effect and the result says so in a warning.

        ``topologies``: restrict the plan space to these: family names (``"ring"``),
        ``"small_world(k=4)"``, ``(name, params dict)``, or your own graphs as networkx graphs
        (or scipy sparse adjacency matrices), each planned as a ``from_edges`` topology.

        ``transports``: restrict the transports: ``"ota"``, ``"digital"`` (8 and 32 bits per
        coordinate), ``"digital(bits=8)"`` or ``("digital", 8)``; ``algorithms``: restrict the
        algorithms (``"dsgd"``, ``"choco"``, ``"gradient_tracking"``, ``"push_sum"``,
        ``"fedavg"``, ``"fedprox"``). None (the default) is AUTO: the planner enumerates them
        (plans/operators.py). A combination an exclusion rule rules out (e.g. gradient tracking
        over the air) is refused with its reason.

        ``progress``: a callable given one line per step (``building topology 3/14: ...``,
        ``costing 7/14: ...``) once planning has run about a second (many clients); it may be
        called from a timer thread. None (the default): silent.

        ``pilot='fc'``: before the choice, train the fully connected reference for
        ``pilot_rounds`` rounds (default: half the round budget) and plan with what it measured
        (its accuracy ``fc`` and rounds to the target) instead of the ``ttt`` model's prediction
        of them; its traffic is counted in every plan's cost, EXPLAIN shows it as a ``Reference
        Pilot`` node, and the planning run records its execution (``pilot_exec_id``).
        docs/planner.md, "A pilot of the fully connected reference". ``device``: where the
        pilot trains (default: the session's device, else ``cpu``); nothing else trains here.

        ``mix_rounds``: *mixing-only tails*, the budget's last rounds spent mixing without
        training, which draw a sparse topology's clients to their average model: ``'auto'``
        (each plan that can run one is planned both without and with the tail its topology's
        mixing rate needs, and each D-SGD plan also with 2 rounds on the complete graph), a
        number of rounds (each plan that can is planned with that tail only), or ``'off'`` / 0
        (every round trains). None (the default): ``'auto'`` with an estimator that costs tails
        (``ttt``, the default one), else ``'off'``. docs/planner.md, "Mixing-only tails".
        """
        from .planner.optimizer import Optimizer
        from .plans.request import DEFAULT_CONFIDENCE, PlanRequest, check_confidence
        from .plans.sla import SLA, parse_sla, sla_with_target

        if not isinstance(workload, Workload):
            raise ValidationError("plan() expects an airplan_qo.Workload")
        sla_value = sla_with_target(sla if sla is None or isinstance(sla, SLA)
                                    else parse_sla(sla), workload.target_accuracy)
        measured = None
        if pilot is not None or pilot_rounds is not None:
            measured = self._reference_pilot(workload, sla_value, pilot, pilot_rounds,
                                             estimator, statement, device)
        request = PlanRequest(
            workload=workload, sla=sla_value, topologies=_topologies(topologies),
            weights=tuple(weights) if weights else None,
            sparsity=tuple(float(k) for k in sparsity) if sparsity else None,
            transports=([transports] if isinstance(transports, str) else list(transports))
            if transports else None,
            algorithms=([algorithms] if isinstance(algorithms, str) else list(algorithms))
            if algorithms else None,
            budgets=tuple(sorted((budgets or {}).items())), estimator=estimator,
            objective=objective, statement=statement,
            confidence=DEFAULT_CONFIDENCE if confidence is None else check_confidence(confidence),
            fallback=(fallback if fallback is not None
                      else "error" if any(x is not None for x in (topologies, weights,
                                                                   sparsity, transports,
                                                                   algorithms))
                      else "complete"),
            pilot=measured, mix_rounds=mix_rounds)
        result = Optimizer(self.catalog, progress=progress).plan(request)
        if confidence is not None and result.chosen.cost.estimate.p_meets is None:
            import attrs

            result = attrs.evolve(result, warnings=result.warnings + (
                f"CONFIDENCE {confidence:g} has no effect with the {result.estimator} "
                "estimator, which predicts no distribution of rounds (use COST MODEL ttt)",))
        return result

    def _reference_pilot(self, workload, sla, pilot, rounds, estimator, statement, device):
        """Check a pilot request, then run it (:func:`~airplan_qo.runtime.pilot.
        run_reference_pilot`); nothing is trained when the request is refused."""
        from .costmodels import DEFAULT_ESTIMATOR
        from .plans.pilot import check_pilot

        if pilot is None:
            raise ValidationError("pilot_rounds needs a pilot: pilot='fc'")
        _, rounds = check_pilot(pilot, rounds)
        name = (estimator or DEFAULT_ESTIMATOR).lower()
        if name != "ttt":
            raise ValidationError(f"a pilot of the fully connected reference feeds the ttt "
                                  f"estimator, which predicts rounds relative to it; the "
                                  f"{name} estimator does not use it (use COST MODEL ttt)")
        if self.catalog.read_only:
            raise ValidationError("a pilot trains and records an execution; this session's "
                                  "catalog is read-only")
        from .planner.feasibility import check_data_split
        from .runtime.pilot import run_reference_pilot

        check_data_split(workload)
        return run_reference_pilot(self, workload, rounds=rounds, sla=sla,
                                   statement=statement,
                                   device=self._device(device) or "cpu")

    def sql(self, text: str, *, format: str = "text", timeout: float | None = SESSION_DEFAULT,
            progress=None) -> list:
        """Run a script of statements (EXPLAIN/TRAIN/ANALYZE WORKLOAD or catalog queries).

        ``timeout``: seconds each catalog query of the script may run (None or 0: no limit);
        by default the session's. TRAIN and ANALYZE WORKLOAD are not timed. ``progress``: where
        the steps of a long planning call go, as for :meth:`plan`.
        """
        from .sql.executor import execute_script

        return execute_script(self, text, fmt=format, timeout=timeout, progress=progress)

    def execute(self, result, *, quiet: bool = True, stop_at_target: bool = True,
                reoptimize: bool | None = None, monitor=None, device: str | None = None):
        """Train the chosen plan of a PlanResult; returns an ExecutionReport.

        ``reoptimize`` monitors the run and re-plans on a trigger; the default is on for runs
        that stop at the target and off for whole-budget runs (pilots, evaluations).
        ``monitor`` (a ``runtime.monitor.MonitorConfig``) sets the thresholds. ``device``:
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (default: the session's, else ``cpu``); the
        device it resolves to is recorded with the execution (docs/runtime.md, Devices).
        """
        from .runtime.execution import execute

        return execute(self.catalog, result, quiet=quiet, stop_at_target=stop_at_target,
                       reoptimize=reoptimize, monitor=monitor,
                       device=self._device(device) or "cpu", planner=self._replanner())

    def _replanner(self):
        """What a monitored run re-plans with: this session's optimizer, silent."""
        from .planner.optimizer import Optimizer

        return Optimizer(self.catalog).plan

    def _device(self, device: str | None) -> str | None:
        from .runtime.device import check_device

        return check_device(device) if device is not None else self.device

    def calibrate(self, estimator: str | None = None, *, scope: str = "global",
                  scope_key: str = "", min_obs: int = 3):
        """Refit an estimator's constants from the feedback rows (new versioned rows); returns
        its ``CalibrationReport``. Without ``estimator``: every estimator that has enough
        observations (an execution leaves feedback for the estimator its plan was costed with,
        by default ``ttt``), as a ``CalibrationSummary`` that says which."""
        from .costmodels.calibration import calibrate, calibrate_observed

        if estimator is None:
            return calibrate_observed(self.catalog, scope=scope, scope_key=scope_key,
                                      min_obs=min_obs)
        return calibrate(self.catalog, estimator, scope=scope, scope_key=scope_key,
                         min_obs=min_obs)

    def plot(self, exec_ids, out: str | os.PathLike[str] = "airplan-executions.png"):
        """Measured accuracy and consensus distance of executions beside their predicted curve,
        interval, target and re-optimisation events (needs matplotlib: ``pip install
        matplotlib``); returns the PNG path."""
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValidationError("plotting needs matplotlib: pip install matplotlib") from None
        from .figures import execution_curves

        ids = [exec_ids] if isinstance(exec_ids, int) else list(exec_ids)
        return execution_curves(self.catalog, ids, out)

    def plot_plan(self, planning_run_id: int, out: str | os.PathLike[str] = "airplan-plan.png",
                  *, confidence: float | None = None):
        """Every candidate of a planning run: predicted cost against P(meets SLA), the chosen
        plan a labelled star (needs matplotlib); returns the PNG path."""
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValidationError("plotting needs matplotlib: pip install matplotlib") from None
        from .figures import plan_comparison

        return plan_comparison(self.catalog, int(planning_run_id), out, confidence)

    def resume(self, exec_id: int, *, quiet: bool = True, device: str | None = None):
        """Continue an aborted, interrupted or failed execution from its last checkpoint (from
        round 0 when it has none); returns an ExecutionReport. ``device``: where to continue
        (default: the session's, else the device the execution was asked to use)."""
        from .runtime.execution import resume

        return resume(self.catalog, int(exec_id), quiet=quiet, device=self._device(device),
                      planner=self._replanner())

    def abandon(self, exec_id: int, reason: str | None = None) -> dict[str, Any]:
        """Give up an execution that did not succeed (status ``abandoned``, its checkpoint
        deleted); returns ``exec_id``, ``status``, ``was``, ``reason``, ``checkpoint_removed``."""
        from .runtime.execution import abandon

        return abandon(self.catalog, int(exec_id), reason)


def connect(path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
            allow_external_access: bool = False, timeout: float | None = DEFAULT_TIMEOUT,
            memory_limit: int | str | None = None, threads: int | None = None,
            adopt: bool = False, wait: float | None = None,
            device: str | None = None) -> Session:
    """Open (or create) a catalog: ``path``, else ``$AIRPLAN_CATALOG``, else ./airplan.duckdb.

    Catalog queries are fenced (docs/sql.md, Security): they can read only the catalog unless
    ``allow_external_access=True`` (trusted local use: files, URLs, extensions); each may run
    ``timeout`` seconds (default 30; None or 0: no limit); the catalog's DuckDB database gets
    ``memory_limit`` (bytes or a size such as ``'2GB'``; default 1 GiB) and ``threads``
    (default min(4, CPUs)). A DuckDB file that holds other objects but no catalog is refused
    unless ``adopt=True`` (then the catalog's tables are added beside them). While another
    process holds the file, the open retries for up to ``wait`` seconds, then raises
    ``CatalogLockedError`` (default None: the process default, 0 unless the CLI's ``--wait``
    set it; 0 fails at once). ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``; default
    ``cpu``): where the session's trainings run unless a call or a TRAIN statement's
    ``WITH (device = ...)`` says otherwise (docs/runtime.md, Devices).
    """
    return Session(path, read_only=read_only, allow_external_access=allow_external_access,
                   timeout=timeout, memory_limit=memory_limit, threads=threads, adopt=adopt,
                   wait=wait, device=device)
