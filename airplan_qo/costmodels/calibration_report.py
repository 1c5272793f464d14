"""What a calibration reports: :class:`CalibrationReport` (one estimator's constants before and
after, and its errors on the same observations) and :class:`CalibrationSummary` (every
estimator ``airplan calibrate`` refitted, and why the others were left alone). Their
``render()`` is what ``airplan calibrate`` prints.
"""

from __future__ import annotations

import attrs

from .observations import Fit


@attrs.frozen
class CalibrationReport:
    """What a calibration changed: constants before and after, errors on the same observations,
    and the ids of the new calibration rows."""

    estimator: str
    scope: str
    scope_key: str
    n_obs: int
    before: dict[str, float]
    after: dict[str, float]
    fitted: tuple[str, ...]
    mape_before: float | None
    mape_after: float | None
    curve_log_rmse_before: float | None
    curve_log_rmse_after: float | None
    unpredicted_before: int
    unpredicted_after: int
    calibration_ids: dict[str, int]
    fit: Fit
    skipped: tuple[str, ...] = ()

    def render(self) -> str:
        where = self.scope + (f" '{self.scope_key}'" if self.scope_key else "")
        lines = [f"calibration of the {self.estimator} estimator, scope {where}, "
                 f"{self.n_obs} observations"]
        share = self.fit.prior_share
        rows = [(n, f"{self.before[n]:.6g}", f"{self.after[n]:.6g}",
                 _change(self.before[n], self.after[n]), str(self.calibration_ids.get(n, "")),
                 f"{share[n]:.2f}" if n in share else "")
                for n in self.fitted]
        head = ("constant", "old", "new", "change", "calibration_id",
                "prior share" if share else "")
        w = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

        def line(r: tuple[str, ...], arrow: str) -> str:
            return (f"  {r[0]:<{w[0]}}  {r[1]:>{w[1]}} {arrow} {r[2]:<{w[2]}}  {r[3]:>{w[3]}}"
                    f"  {r[4]:>{w[4]}}  {r[5]:>{w[5]}}").rstrip()

        lines.append(line(head, "  "))
        lines += [line(r, "->") for r in rows]
        lines.append(f"  rounds MAPE (uncensored, same observations): "
                     f"{_pct(self.mape_before)} -> {_pct(self.mape_after)}")
        if self.unpredicted_before or self.unpredicted_after:
            lines.append(f"  runs predicted never to reach the target although they did: "
                         f"{self.unpredicted_before} -> {self.unpredicted_after}")
        if self.curve_log_rmse_before is not None or self.curve_log_rmse_after is not None:
            lines.append(f"  error-curve log-RMSE: {_num(self.curve_log_rmse_before)} -> "
                         f"{_num(self.curve_log_rmse_after)}")
        lines += [f"  note: {n}" for n in self.fit.notes]
        lines += [f"  skipped: {s}" for s in self.skipped]
        return "\n".join(lines)


def _change(old: float, new: float) -> str:
    if old == 0:
        return "n/a"
    pct = 100.0 * (new - old) / abs(old)
    return f"{pct:+.1f}%" if abs(pct) < 10 else f"{pct:+.0f}%"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"



@attrs.frozen
class CalibrationSummary:
    """What ``calibrate`` without an estimator did: one report per estimator it refitted, and
    why each other estimator with feedback rows was left alone."""

    reports: tuple[CalibrationReport, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def estimators(self) -> tuple[str, ...]:
        return tuple(r.estimator for r in self.reports)

    def render(self) -> str:
        head = [f"calibrated: {', '.join(self.estimators)} (the estimators with enough "
                f"observations)"]
        head += [f"not calibrated: {name}: {why}" for name, why in self.skipped]
        return "\n\n".join(["\n".join(head)] + [r.render() for r in self.reports])


__all__ = ["CalibrationReport", "CalibrationSummary"]
