"""The ``paper`` cost model: the AirPlan paper's C_ours, reproduced faithfully."""

from __future__ import annotations

import math

import attrs

from ..errors import ValidationError
from ..plans.plan import Estimate


@attrs.frozen
class PaperEstimator:
    """The AirPlan paper's cost model, reproduced faithfully (its eq. C_ours and eps_eff).

    T(G) = kappa / lambda2(L);  R(SNR) = 1 + alpha_R exp(-beta_R SNR_dB);
    C_struct = 2|E| k (k = transmitted coordinates);  C_ours = T R C_struct;
    eps_eff = sqrt(1 - k/d) / (0.5 + lambda2)  (the paper's, with no derivation: a label only).
    Accuracy, our reading of "Acc(G, T) from the convergence bound": acc(t) = a_max (1 - e^{-3t/T}),
    i.e. 95% of a_max after T(G) rounds. Rounds = T R (epochs including retransmissions).
    """

    name: str = "paper"
    description: str = "the AirPlan paper's C_ours = T(G) R(SNR) C_struct(G, k), T = kappa/lambda2"
    priors: dict[str, float] = attrs.field(factory=lambda: {
        "kappa": 220.0,    # calibrated on Erdos-Renyi: ~70 rounds at lambda2 ~ 3.14 (N = 50)
        "alpha_r": 1.0,    # maximum retransmission overhead
        "beta_r": 0.2,     # per-dB decay of the retransmission overhead
        "a_max": 0.92,     # accuracy ceiling (the paper's FC accuracy on CIFAR-10)
        "eps_target": 1.0,  # eps_eff constraint (the paper's eps_tgt)
    })

    def refusal(self, plan) -> str | None:
        """Why this model cannot cost ``plan``: its C_ours counts over-the-air D-SGD/CHOCO
        links only (no rate, no server, no second vector)."""
        if plan.transport != "ota" or plan.effective_algorithm not in ("dsgd", "choco"):
            return (f"the paper estimator costs over-the-air D-SGD/CHOCO plans only (its C_ours "
                    f"has no rate, server or second vector), not "
                    f"{plan.effective_algorithm} over {plan.transport}; use COST MODEL ttt")
        return None

    # calibration (interface.CurveFitted): the paper's procedure, paper_fit.py
    calibration_scopes = ("global", "dataset", "dataset_family")
    observation_kind = "finished executions with rounds feedback"

    def observation_reader(self, catalog):
        from .paper_fit import observation_reader

        return observation_reader(catalog)

    def fit(self, observations, priors=None, *, min_obs: int = 1, **options):
        if options:
            raise ValidationError(f"the paper fit takes no options, got {', '.join(options)}")
        from .paper_fit import fit_paper

        return fit_paper(observations, priors, min_obs=min_obs)

    def predict_observation(self, observation, constants, rounds):
        from .paper_fit import predict

        return predict(observation, constants, rounds)

    def refit(self, observations, before, *, min_obs: int, **options):
        from .calibration import curve_refit

        return curve_refit(self, "paper procedure", observations, before, min_obs=min_obs,
                           **options)

    def terms(self, ctx, plan, stats):
        c = ctx.constants
        lam2 = max(stats.spectra.lambda2_laplacian, 1e-12)
        t_g = c["kappa"] / lam2
        reliability = 1.0 + c["alpha_r"] * math.exp(-c["beta_r"] * plan.channel.snr_db)
        coords = max(1, math.ceil(plan.k_ratio * ctx.d))
        c_struct = 2.0 * stats.spectra.n_edges * coords
        return {"lambda2": lam2, "t_g": t_g, "reliability": reliability, "c_struct": c_struct,
                "c_ours": t_g * reliability * c_struct,
                "eps_eff": math.sqrt(max(0.0, 1.0 - plan.k_ratio)) / (0.5 + lam2)}

    def accuracy_at(self, ctx, plan, stats, rounds):
        t = self.terms(ctx, plan, stats)
        return ctx.constants["a_max"] * (1.0 - math.exp(-3.0 * rounds / t["t_g"]))

    def estimate(self, ctx, plan, stats, target_accuracy):
        c = ctx.constants
        t = self.terms(ctx, plan, stats)
        acc = self.accuracy_at(ctx, plan, stats, ctx.round_budget)
        rounds = float(math.ceil(t["t_g"] * t["reliability"]))
        if acc < target_accuracy:
            rounds = None
        eps_ok = t["eps_eff"] <= c["eps_target"]
        if ctx.privacy_epsilon:
            t = dict(t, privacy_epsilon=ctx.privacy_epsilon)
        return Estimate(rounds=rounds, accuracy=acc, terms=t, model_term=1.0 / t["lambda2"],
                        calibration_ids=ctx.calibration_ids,
                        extra_constraints=(("eps_eff", eps_ok),))
