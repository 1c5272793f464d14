"""Pilots: short trainings that measure what the planner would otherwise predict.

**The fully connected reference** (:func:`run_reference_pilot`, ``WITH (pilot = 'fc')`` in SQL,
``Session.plan(..., pilot='fc')``): before a choice, the fully connected, uncompressed plan of
the workload trains for a bounded number of rounds; its measured curve gives the reference the
``ttt`` estimator predicts every plan relative to (its final accuracy ``fc`` and its rounds to
the target), and its traffic is counted in the chosen plan's cost (plans/pilot.py).

**Pilot calibration** (:func:`run_pilot`): a few short runs over a small design, then a refit of
the estimator.

The design spans the quantities the dsgd estimator depends on: three topologies that span the
mixing parameter p (ring, small-world, complete), two heterogeneity levels, two SNRs and three
sparsity levels across the planner's range (1, 0.1, 0.01; so the compression exponent beta_k is
fitted too): 36 distinct runs. Each pilot trains exactly its design point (the topology and k
are fixed, and the design point is trained even when the planner would reject it, so no two
pilots repeat one plan) for a short budget without stopping at the target (so the whole error
curve is observed), and records feedback like any execution. The fit then reports in-sample and
leave-one-topology-out errors, and the report says which range the calibration covers.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

import attrs

from ..costmodels.calibration import calibrate
from ..costmodels.calibration_report import CalibrationReport
from ..costmodels.cross_validation import HoldOutReport, leave_one_group_out
from ..costmodels.observation_loader import load_observations
from ..errors import ExecutionError
from ..plans.pilot import ReferencePilot, pilot_rounds
from ..plans.sla import TARGET_METRICS
from ..plans.workload import Workload
from .execution import execute

PILOT_TOPOLOGIES = (("ring", ()), ("small_world", (("k", 4),)), ("complete", ()))
PILOT_ALPHAS = (0.1, 1.0)
PILOT_SNRS = (0.0, 20.0)
PILOT_SPARSITY = (1.0, 0.1, 0.01)


@attrs.frozen
class PilotReport:
    runs: tuple[dict[str, Any], ...]
    calibration: CalibrationReport
    hold_out: HoldOutReport | None

    def covers(self) -> str:
        """The range of the design the calibration was fitted on."""
        if not self.runs:
            return "no runs"

        def values(key: str) -> str:
            return ", ".join(f"{v:g}" for v in sorted({r[key] for r in self.runs}))

        families = ", ".join(sorted({r["family"] for r in self.runs}))
        return (f"calibration covers: topologies {families}; k in {{{values('k')}}}; alpha in "
                f"{{{values('alpha')}}}; SNR in {{{values('snr_db')}}} dB; "
                f"{self.runs[0]['clients']} clients")

    def render(self) -> str:
        lines = [f"pilot: {len(self.runs)} runs", self.covers()]
        for r in self.runs:
            acc = r["final_accuracy"]
            shown = acc if acc is None else round(acc, 3)
            lines.append(f"  exec {r['exec_id']:>4}  {r['plan']:<40} alpha={r['alpha']:<4} "
                         f"snr_db={r['snr_db']:<5} final_acc={shown}")
        lines.append(self.calibration.render())
        if self.hold_out is not None:
            lines.append(self.hold_out.render())
        return "\n".join(lines)


def run_pilot(session, dataset: str, clients: int, *, rounds: int = 30,
              params: dict[str, Any] | None = None, estimator: str = "dsgd",
              quiet: bool = True) -> PilotReport:
    """Run the pilot design on ``dataset`` with ``clients`` clients and refit ``estimator``."""
    runs = []
    design = list(itertools.product(PILOT_TOPOLOGIES, PILOT_ALPHAS, PILOT_SNRS, PILOT_SPARSITY))
    for i, ((family, tparams), alpha, snr, k) in enumerate(design, 1):
        values = dict(params or {})
        values.update({"alpha": alpha, "snr_db": snr, "rounds": rounds})
        w = Workload.from_params(dataset, clients, values)
        plan = session.plan(w, topologies=[(family, dict(tparams))], sparsity=[k],
                            weights=["metropolis_hastings"], estimator=estimator,
                            fallback="complete", transports=["ota"], algorithms=["auto"],
                            mix_rounds=0, statement=f"pilot {i}/{len(design)}")
        # the design point itself, even when the planner would fall back to another plan
        point = next(c for c in plan.candidates
                     if c.plan.topology.family == family and c.plan.k_ratio == k)
        report = session.execute(attrs.evolve(plan, chosen=point), quiet=quiet,
                                 stop_at_target=False)
        runs.append({"exec_id": report.exec_id, "plan": point.plan.label(), "alpha": alpha,
                     "snr_db": snr, "final_accuracy": report.result.final_accuracy,
                     "family": family, "k": k, "clients": clients})
        if not quiet:
            print(f"pilot run {i}/{len(design)} done", file=sys.stderr)
    options = {"fixed": ()} if estimator == "dsgd" else {}
    cal = calibrate(session.catalog, estimator, scope="dataset", scope_key=dataset, **options)
    hold = None
    observations = load_observations(session.catalog, estimator, scope="dataset",
                                     scope_key=dataset)
    if len({o.family for o in observations}) >= 2:
        hold = leave_one_group_out(observations, "family", estimator=estimator,
                                   priors=cal.before, **options)
    return PilotReport(tuple(runs), cal, hold)


def run_reference_pilot(session, workload: Workload, *, rounds: int | None = None,
                        sla=None, statement: str = "", device: str | None = None,
                        quiet: bool = True) -> ReferencePilot:
    """Train the fully connected, uncompressed plan of ``workload`` (``complete`` with
    Metropolis-Hastings weights, k = 1, the workload's channel) for ``rounds`` rounds
    (:func:`~airplan_qo.plans.pilot.pilot_rounds`: by default half the round budget), the whole
    pilot without stopping at a target and without re-planning; returns its measured curve and
    traffic. The pilot is an ordinary planning run and execution in the catalog (its statement
    says ``pilot fc ...``)."""
    budget = int(workload.rounds)
    r = pilot_rounds(rounds, budget)
    pilot_workload = attrs.evolve(workload, rounds=r)
    what = statement or f"{workload.dataset} on {workload.clients} clients"
    plan = session.plan(pilot_workload, sla=sla, topologies=["complete"], sparsity=[1.0],
                        weights=["metropolis_hastings"], estimator="ttt", fallback="complete",
                        transports=["ota"], algorithms=["auto"],   # the reference: OTA D-SGD
                        mix_rounds=0, statement=f"pilot fc ({r} of {budget} rounds) for: {what}")
    report = execute(session.catalog, plan, quiet=quiet, stop_at_target=False,
                     reoptimize=False, device=device or session.device or "cpu",
                     keep_state=True)
    result = report.result
    if result.status != "succeeded":
        raise ExecutionError(f"the pilot of the fully connected reference (execution "
                             f"{report.exec_id}) ended {result.status}: {result.reason}; "
                             f"nothing was planned with it")
    key = TARGET_METRICS[(sla or plan.request.sla).accuracy_metric]
    history = result.history
    bandwidth = plan.chosen.plan.channel.bandwidth_hz
    return ReferencePilot(
        exec_id=int(report.exec_id), rounds=int(result.rounds), budget=budget,
        accuracy=tuple(h.get("test_accuracy") for h in history),
        metric=tuple(h.get(key) for h in history), n_classes=int(plan.context.n_classes),
        channel_uses=float(result.total_channel_uses), energy_j=float(result.total_energy_j),
        airtime_s=float(result.total_channel_uses) / bandwidth, bits=float(result.total_bits),
        slots=float(result.total_slots), planning_run_id=plan.planning_run_id,
        checkpoint=result.checkpoint_path or _kept_state(session.catalog, report.exec_id),
        plan_label=plan.chosen.plan.label(), catalog_id=session.catalog.catalog_id)


def _kept_state(catalog, exec_id: int) -> str | None:
    """The checkpoint the pilot's execution kept after its last round (None: none)."""
    rows = catalog.query("SELECT checkpoint_path FROM airplan.executions WHERE exec_id = ?",
                         [int(exec_id)])
    return rows[0]["checkpoint_path"] if rows else None
