"""The ``dsgd`` cost model: error floor and linear rate of D-SGD / CHOCO gossip in terms of p of
the applied mixing matrix, heterogeneity, channel noise and compression."""

from __future__ import annotations

import math

import attrs

from ..plans.plan import Estimate, PhysicalPlan
from ..plans.topology import TopologyStats
from .interface import EstimationContext
from .features import channel_noise, plan_heterogeneity, survival_factor


@attrs.frozen
class DSGDEstimator:
    """Error floor and rounds of D-SGD / CHOCO gossip, in terms of the applied W.

    p_random = p of the random mixing matrix under client dropout and link truncation
    (:func:`random_mixing_p`; p itself when every link always delivers), p_eff = p_random k^beta_k.
    floor = f0 + f1 (1/p_eff - 1) + f2 zeta^2 (1/p_eff^2 - 1) + f3 sigma_c^2 / p_eff
    e(t)  = floor + (E0 - floor) exp(-t / tau),  tau = tau0 + tau1 (1/p_eff - 1),  E0 = 1 - 1/C
    T     = tau ln((E0 - floor) / (eps - floor)) for a target error eps; "never" if floor >= eps.
    The interval is T e^{+-u}, accuracy 1 - floor e^{+-u}, with u the calibration's log-error.

    ``notes`` (:meth:`notes`) say where the estimate extrapolates: constants that are still the
    priors, or a plan outside what the executions behind the calibration spanned.
    """

    name: str = "dsgd"
    description: str = "D-SGD theory: error floor and linear rate in p of the applied W"
    priors: dict[str, float] = attrs.field(factory=lambda: {
        "f0": 0.05,      # error floor of the fully connected, uncompressed, noiseless plan
        "f1": 5e-4,      # consensus (topology) floor per unit of 1/p
        "f2": 1e-4,      # heterogeneity floor: eta^2 zeta^2 / p^2 in D-SGD bounds
        "f3": 5e-3,      # channel-noise floor per unit sigma_c^2 / p
        "tau0": 10.0,    # rounds per e-fold of the error on a perfectly mixing graph
        "tau1": 0.05,    # extra rounds per e-fold per unit of 1/p
        "beta_k": 0.5,   # compression exponent: p_eff ~ p k^beta_k
        "u": 0.35,       # log-space uncertainty of rounds and floor (interval half-width)
    })

    # calibration (interface.CurveFitted): least squares on the log error curves, dsgd_fit.py
    calibration_scopes = ("global", "dataset", "dataset_family")
    observation_kind = "finished executions with rounds feedback"

    def observation_reader(self, catalog):
        from .dsgd_fit import observation_reader

        return observation_reader(catalog)

    def fit(self, observations, priors=None, *, min_obs: int = 3, **options):
        from .dsgd_fit import fit_dsgd

        return fit_dsgd(observations, priors, min_obs=min_obs, **options)

    def predict_observation(self, observation, constants, rounds):
        from .dsgd_fit import predict

        return predict(observation, constants, rounds)

    def refit(self, observations, before, *, min_obs: int, **options):
        from .calibration import curve_refit

        return curve_refit(self, "log-curve least squares", observations, before,
                           min_obs=min_obs, **options)

    def terms(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats
              ) -> dict[str, float]:
        c = ctx.constants
        p = max(stats.spectra.mixing_p, 1e-12)
        p_random = max(p * survival_factor(plan, stats), 1e-12)
        p_eff = max(min(1.0, p_random * plan.k_ratio ** c["beta_k"]), 1e-12)
        zeta2 = plan_heterogeneity(ctx.alpha, ctx.n_classes, plan)
        sigma_c2 = channel_noise(plan, stats, ctx.d)
        inv = 1.0 / p_eff - 1.0
        floor = (c["f0"] + c["f1"] * inv + c["f2"] * zeta2 * (1.0 / p_eff**2 - 1.0)
                 + c["f3"] * sigma_c2 / p_eff)
        return {"p": p, "p_random": p_random, "p_eff": p_eff, "zeta2": zeta2,
                "sigma_c2": sigma_c2,
                "error_floor": floor, "tau": c["tau0"] + c["tau1"] * inv,
                "e0": 1.0 - 1.0 / ctx.n_classes}

    def accuracy_at(self, ctx, plan, stats, rounds):
        t = self.terms(ctx, plan, stats)
        return self._accuracy(t, rounds)

    def notes(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats
              ) -> tuple[str, ...]:
        """Where this estimate extrapolates. With no calibration rows in use the constants are
        the priors, fitted to no run. Otherwise the plan's k, N (clients), family and dataset
        are checked against the range the calibration rows in use record
        (``ctx.fitted_range``: what the executions they were fitted on spanned)."""
        ops = []
        if plan.transport != "ota":
            ops.append(f"transport {plan.transport} (b = {plan.bits}): its quantisation "
                       f"enters as channel noise, never measured")
        if plan.effective_algorithm not in ("dsgd", "choco"):
            ops.append(f"algorithm {plan.effective_algorithm}: D-SGD's floor and rate "
                       + ("without the heterogeneity term"
                          if plan.effective_algorithm == "gradient_tracking" else
                          "on the same graph"))
        if not ctx.calibration_ids:
            return ("dsgd constants are the priors, not fitted to any run: airplan calibrate "
                    "fits them to this catalog's executions planned with COST MODEL dsgd",
                    *ops)
        r = ctx.fitted_range or {}
        out = ops
        k = plan.k_ratio
        ks = r.get("k")
        if ks and not ks[0] - 1e-12 <= k <= ks[1] + 1e-12:
            out.append(f"k = {k:g} outside the fitted {ks[0]:g}..{ks[1]:g}")
        n = stats.spectra.n_nodes
        ns = r.get("clients")
        if ns and not ns[0] <= n <= ns[1]:
            out.append(f"N = {n} outside the fitted {ns[0]:g}..{ns[1]:g}")
        fams = r.get("families")
        if fams and plan.topology.family not in fams:
            out.append(f"family {plan.topology.family} not among the fitted "
                       f"{', '.join(fams)}")
        ds = r.get("datasets")
        if ds and ctx.dataset and ctx.dataset not in ds:
            out.append(f"dataset {ctx.dataset} not among the fitted {', '.join(ds)}")
        missing = r.get("unrecorded") if ctx.fitted_range is not None else ctx.calibration_ids
        if missing:
            out.append(f"calibration row{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(map(str, missing))} record{'' if len(missing) > 1 else 's'} "
                       "no fitted range (written by hand or before ranges were recorded): "
                       "airplan calibrate records it")
        return tuple(out)

    def accuracy_band_at(self, ctx: EstimationContext, plan: PhysicalPlan, stats: TopologyStats,
                         rounds: float) -> tuple[float, float]:
        """(lower, upper) predicted accuracy after ``rounds``: the error floor and the time
        constant both scaled by e^{+-u}, the estimate's interval (rounds and floor) as a curve.
        The run monitor compares observed progress with the lower one."""
        t = self.terms(ctx, plan, stats)
        wide = math.exp(ctx.constants["u"])
        return (self._accuracy(t, rounds, wide, wide),
                self._accuracy(t, rounds, 1.0 / wide, 1.0 / wide))

    @staticmethod
    def _accuracy(t: dict[str, float], rounds: float, floor_scale: float = 1.0,
                  tau_scale: float = 1.0) -> float:
        floor = min(t["error_floor"] * floor_scale, t["e0"])
        err = floor + (t["e0"] - floor) * math.exp(-rounds / (t["tau"] * tau_scale))
        return max(0.0, 1.0 - err)

    def estimate(self, ctx, plan, stats, target_accuracy):
        t = self.terms(ctx, plan, stats)
        u = ctx.constants["u"]
        eps = 1.0 - target_accuracy
        budget = ctx.round_budget
        acc = self._accuracy(t, budget)
        acc_lo = self._accuracy(t, budget, math.exp(u))
        acc_hi = self._accuracy(t, budget, math.exp(-u))
        floor = t["error_floor"]
        rounds = model_term = None
        if floor < eps and t["e0"] > eps:
            model_term = math.log((t["e0"] - floor) / (eps - floor))
            rounds = float(max(1, math.ceil(t["tau"] * model_term)))
        elif t["e0"] <= eps:
            rounds, model_term = 1.0, 0.0
        t = dict(t, privacy_epsilon=ctx.privacy_epsilon) if ctx.privacy_epsilon else t
        return Estimate(
            rounds=rounds, accuracy=acc, accuracy_lo=acc_lo, accuracy_hi=acc_hi,
            rounds_lo=None if rounds is None else rounds * math.exp(-u),
            rounds_hi=None if rounds is None else rounds * math.exp(u),
            terms=t, model_term=model_term, calibration_ids=ctx.calibration_ids,
            notes=self.notes(ctx, plan, stats))
