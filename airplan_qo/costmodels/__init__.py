"""Cost models of the planner: one module per model behind one small interface.

Each model predicts, for a physical plan, the rounds to the SLA target and the accuracy; resource
costs (channel uses, energy, ...) follow from the rounds the same way for every model
(:mod:`airplan_qo.plans.plan`). A model declares named constants with documented priors; the
planner passes the catalog's current calibration (falling back to the priors) and every estimate
records which calibration rows it used. Anything with the :class:`CostEstimator` shape can be
registered in ``ESTIMATORS``.

* ``dsgd`` (:mod:`.dsgd`): error floor and linear rate shaped by decentralized-SGD theory.
* ``ttt`` (:mod:`.time_to_target`): the distribution of log rounds-to-target relative to the
  fully connected reference, fitted by censored regression; chance-constrained SLAs.
* ``paper`` (:mod:`.paper`): the AirPlan paper's C_ours, for reproduction (over-the-air
  D-SGD/CHOCO plans only: it refuses other transports and algorithms, :func:`refusal`).

Digital plans enter ``dsgd`` and ``ttt`` through their quantisation noise in place of the
channel noise, gradient tracking through a heterogeneity of 0; ``ttt`` flags plans whose
transport or algorithm its runs never used and widens their rounds interval.

Shared plan quantities (heterogeneity, channel noise, p of the random mixing matrix) are in
:mod:`.features`; fitting constants to the catalog's executions is driven by :mod:`.calibration`
(each estimator's own fit in :mod:`.dsgd_fit`, :mod:`.paper_fit`, :mod:`.ttt_fit`).
"""

from __future__ import annotations

from .interface import (DEFAULT_ESTIMATOR, ESTIMATORS, RANGE_MARK, BatchEstimator,
                        CostEstimator, EstimationContext, estimate_many, plans_mixing_tails,
                        recorded_range, refusal, refuser, resolve_constants)


def _register() -> None:
    from .dsgd import DSGDEstimator
    from .paper import PaperEstimator
    from .time_to_target import TimeToTargetEstimator

    ESTIMATORS.register("dsgd", DSGDEstimator())
    ESTIMATORS.register("paper", PaperEstimator())
    ESTIMATORS.register("ttt", TimeToTargetEstimator())


_register()

__all__ = ["BatchEstimator", "CostEstimator", "DEFAULT_ESTIMATOR", "ESTIMATORS",
           "EstimationContext", "RANGE_MARK", "estimate_many", "plans_mixing_tails",
           "recorded_range", "refusal",
           "refuser", "resolve_constants"]
