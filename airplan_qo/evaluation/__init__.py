"""Advisor-quality evaluation: does the planner pick the plan an oracle would?

``airplan evaluate --grid quick`` (or :func:`run_evaluation`) trains every candidate plan of
every workload of a grid over several seeds, finds the oracle (the cheapest measured plan that
meets the SLA), and compares the advisor's pick with it, before calibration and after k-fold
cross-validated calibration. See docs/evaluation.md.
"""

from __future__ import annotations

from .grid import Grid, WorkloadSpec, builtin_grids, load_grid, parse_grid
from .harness import EvaluationReport, run_evaluation

__all__ = ["Grid", "WorkloadSpec", "EvaluationReport", "builtin_grids", "load_grid",
           "parse_grid", "run_evaluation"]
