"""``airplan evaluate``: measure a grid, judge the advisor, record and report the results.

One call records an ``evaluations`` row (status ``running`` until it ends), measures the grid
(reusing cached runs), analyses it, writes one ``evaluation_results`` row per workload and
calibration state (priors / cross-validated), the Markdown report, a JSON summary and the
figures, and finally marks the evaluation ``succeeded`` with its summary. An error marks it
``failed`` (Ctrl-C: ``aborted``) and is re-raised. The row records its owner process and a
heartbeat refreshed after each workload; an evaluation whose process was killed is marked
``interrupted`` by the next read-write open of the catalog (docs/catalog.md, Recovery).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ..catalog.owners import this_owner
from ..errors import ValidationError
from .analysis import Analysis, analyze
from .grid import Grid
from .report import render
from .executors import resolve
from .runner import measure


@attrs.frozen
class EvaluationReport:
    """What an evaluation produced (the CLI prints :meth:`render`)."""

    evaluation_id: int
    grid: str
    out_dir: Path
    report_path: Path
    summary_path: Path
    figures: tuple[Path, ...]
    summary: dict[str, Any]
    wall_s: float
    analysis: Analysis = attrs.field(repr=False)

    def render(self) -> str:
        s = self.summary
        b, c = s["uncalibrated"], s["calibrated"]

        def pct(v):
            return "n/a" if v is None else f"{100 * v:.1f}%"

        def mape(block):
            return "n/a" if block is None or block["rounds_mape_pct"] is None \
                else f"{block['rounds_mape_pct']:.1f}%"

        ov = s["overhead"]["broadcast_share_of_advisor_training_pct"]
        lines = [
            f"evaluation {self.evaluation_id} of grid '{self.grid}': {s['workloads']} workloads, "
            f"{s['runs']} runs ({s['trained']} trained, {s['cached']} cached), "
            f"{self.wall_s:.1f} s",
            f"  plan match rate    priors {pct(b['match_rate'])}   calibrated "
            f"{pct(c['match_rate']) if c else 'n/a'}",
            f"  family match rate  priors {pct(b['family_match_rate'])}   calibrated "
            f"{pct(c['family_match_rate']) if c else 'n/a'}",
            f"  rounds MAPE        priors {mape(b)}   calibrated {mape(c)}",
            "  broadcast share of training cost (median) "
            + ("n/a" if ov["n"] == 0 else f"{ov['median']:.3f}%"),
            f"  report: {self.report_path}"]
        return "\n".join(lines)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def run_evaluation(session, grid: Grid, *, out_dir: str | Path, figures: bool = True,
                   scalability: bool = True, progress: Callable[[str], None] | None = None,
                   command: str | None = None, workers: int = 1,
                   executor: Any = None) -> EvaluationReport:
    """Evaluate the advisor on ``grid`` against the catalog of ``session``; see the module
    docstring. ``out_dir`` receives ``report.md``, ``summary.json`` and the PNG figures.
    ``workers`` > 1 trains the uncached runs in that many worker processes; ``executor``
    trains them elsewhere: ``"local"`` (the default), a Dask scheduler ``"dask://HOST:PORT"``
    or a ``concurrent.futures.Executor`` (e.g. ``dask.distributed.Client(...).get_executor()``).
    This process still records every run (:func:`~.runner.measure`, :mod:`.executors`)."""
    start = time.perf_counter()
    if figures:
        _require_matplotlib()
    # a bad executor or an unreachable scheduler fails before anything is recorded
    backend = resolve(executor, workers)
    try:
        return _evaluate(session, grid, out_dir=out_dir, figures=figures,
                         scalability=scalability, progress=progress, command=command,
                         workers=workers, executor=backend, start=start)
    finally:
        backend.close()


def _evaluate(session, grid: Grid, *, out_dir, figures, scalability, progress, command,
              workers, executor, start) -> EvaluationReport:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    catalog = session.catalog
    seeds = (f"--seeds {len(grid.seeds)} " if grid.seeds == tuple(range(len(grid.seeds)))
             else "")
    executor_arg = executor.address
    command = command or (f"airplan evaluate --grid {grid.source.removeprefix('builtin:')} "
                          f"{seeds}--folds {grid.folds} --out {out} --catalog {catalog.path}"
                          + (f" --confidence {grid.confidence:g}" if grid.confidence else "")
                          + (f" --sla '{grid.sla_override}'" if grid.sla_override else "")
                          + (f" --executor {executor_arg}" if executor_arg else ""))
    eval_id = int(catalog.insert_row("evaluations", {
        "grid": grid.name, "grid_sha": grid.sha, "seeds": len(grid.seeds), "folds": grid.folds,
        "status": "running", "summary": {"source": grid.source, "seeds": list(grid.seeds)},
        "heartbeat_at": _now(), **this_owner()}))

    def beat(message: str) -> None:   # after each workload: the evaluation is alive
        catalog.update_row("evaluations", eval_id, {"heartbeat_at": _now()})
        if progress:
            progress(message)

    try:
        times: dict[str, float] = {}
        measure_start = time.perf_counter()
        measured = measure(session, grid, progress=beat, workers=workers,
                           executor=executor, times=times)
        measure_s = time.perf_counter() - start   # planning, training and recording
        times["measure_s"] = time.perf_counter() - measure_start
        if progress:
            progress("analysing: cross-validated fits, picks, statistics")
        analysis_start = time.perf_counter()
        analysis = analyze(session, grid, measured, scalability=scalability)
        times["analysis_s"] = time.perf_counter() - analysis_start
        paths: list[Path] = []
        if figures:
            from ..figures import write_figures

            paths = write_figures(analysis, out)
        wall = time.perf_counter() - start
        text = render(analysis, figures=paths, wall_s=wall, command=command,
                      evaluation_id=eval_id)
        report_path = (out / "report.md").resolve()
        report_path.write_text(text + "\n", encoding="utf-8")
        timing = {k: round(v, 4) for k, v in times.items()}
        summary = _clean(dict(analysis.summary, wall_s=wall, measure_s=measure_s,
                              timing=timing, report=str(report_path),
                              figures=[str(p) for p in paths]))
        summary_path = (out / "summary.json").resolve()
        summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                encoding="utf-8")
        ttt = analysis.summary.get("time_to_target")
        if ttt:     # the time-to-target constants fitted on the whole grid (docs/planner.md)
            (out / "time_to_target.json").write_text(
                json.dumps(_clean(ttt["reference"]), indent=1, sort_keys=True) + "\n",
                encoding="utf-8")
        with catalog.transaction():
            _write_results(catalog, eval_id, analysis)
            catalog.update_row("evaluations", eval_id, {
                "status": "succeeded", "report_path": str(report_path), "summary": summary,
                "folds": analysis.summary["folds"] or None, "finished_at": _now()})
    except BaseException as exc:
        status = "aborted" if isinstance(exc, KeyboardInterrupt) else "failed"
        error = f"{type(exc).__name__}: {exc}"[:500]
        try:
            catalog.update_row("evaluations", eval_id, {
                "status": status, "finished_at": _now(), "reason": error,
                "summary": {"source": grid.source, "error": error}})
        except Exception:  # the original error matters more than the status update
            pass
        raise
    return EvaluationReport(eval_id, grid.name, out.resolve(), report_path, summary_path,
                            tuple(paths), summary, wall, analysis)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValidationError("the figures need matplotlib: pip install 'airplan-qo[eval]' "
                              "(or run without figures: --no-figures)") from None


def _write_results(catalog, eval_id: int, analysis: Analysis) -> None:
    cols: dict[str, list[Any]] = {k: [] for k in (
        "evaluation_id", "workload_key", "calibrated", "fold", "advisor_family", "advisor_plan",
        "oracle_family", "oracle_plan", "match", "regret_acc_pts", "regret_cost_pct",
        "predicted_rounds", "actual_rounds", "detail")}
    for w in analysis.workloads:
        for calibrated, cmp, pick, predicted, consts in (
                (False, w.before, w.pick_before, w.predicted_before, None),
                (True, w.after, w.pick_after, w.predicted_after, w.constants_after)):
            if cmp is None:
                continue
            adv = w.summaries[cmp.advisor_plan]
            orc = w.oracle
            detail = {
                "family_match": cmp.family_match, "advisor_meets_sla": cmp.advisor_meets_sla,
                "target_measured": w.target, "fc_measured": w.fc_measured,
                "target_planned": pick.target, "fc_predicted": pick.fc_accuracy,
                "advisor_fallback": pick.fallback, "planner_pick": w.planner_pick,
                "advisor_accuracy": adv.accuracy, "advisor_cost": adv.cost,
                "advisor_seeds_reached": adv.n_reached, "seeds": adv.n_seeds,
                "oracle_accuracy": orc.accuracy if orc else None,
                "oracle_cost": orc.cost if orc else None,
                "exec_ids": sorted(r.exec_id for r in analysis.runs if r.workload == w.key),
                "workload": w.spec.describe()}
            if consts is not None:
                detail["constants"] = consts
            values = {
                "evaluation_id": eval_id, "workload_key": w.key, "calibrated": calibrated,
                "fold": w.fold if calibrated else None, "advisor_family": cmp.advisor_family,
                "advisor_plan": cmp.advisor_plan, "oracle_family": cmp.oracle_family,
                "oracle_plan": cmp.oracle_plan, "match": cmp.match,
                "regret_acc_pts": cmp.regret_acc_pts, "regret_cost_pct": cmp.regret_cost_pct,
                "predicted_rounds": predicted, "actual_rounds": adv.rounds,
                "detail": json.dumps(_clean(detail), sort_keys=True)}
            for k, v in values.items():
                cols[k].append(v)
    if cols["evaluation_id"]:
        catalog.insert_rows("evaluation_results", cols)


__all__ = ["EvaluationReport", "run_evaluation"]
