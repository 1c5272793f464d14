"""Cross-validation of a fitted estimator: hold out each group of observations (e.g. each
topology family), fit on the rest (:func:`.calibration.fit`) and predict the group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import ValidationError
from .calibration import evaluate, fit
from .interface import ESTIMATORS
from .observations import Observation, Prediction


@attrs.frozen
class HoldOutReport:
    """Rounds MAPE (percent) of each group when the constants are fitted without it."""

    key: str
    estimator: str
    per_group: dict[str, float | None]
    mape: float | None
    n_unpredicted: int
    predictions: tuple[Prediction, ...]
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [f"leave-one-{self.key}-out, {self.estimator} estimator (rounds MAPE)"]
        width = max([len(self.key)] + [len(str(g)) for g in self.per_group])
        for g, m in self.per_group.items():
            lines.append(f"  {str(g):<{width}}  {'n/a' if m is None else f'{m:.1f}%'}")
        lines.append(f"  {'all':<{width}}  {'n/a' if self.mape is None else f'{self.mape:.1f}%'}"
                     + (f"  ({self.n_unpredicted} run(s) predicted never to reach the target)"
                        if self.n_unpredicted else ""))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def leave_one_group_out(observations: Sequence[Observation], key: str = "family", *,
                        estimator: str = "dsgd", priors: Mapping[str, float] | None = None,
                        min_obs: int = 3, **options: Any) -> HoldOutReport:
    """Hold out each group (e.g. each topology family), fit on the rest, predict the group."""
    if not observations:
        raise ValidationError("leave_one_group_out needs observations; got none")
    if not hasattr(observations[0], key):
        raise ValidationError(f"observations have no field '{key}' to group by")
    name = ESTIMATORS.get(estimator).name
    groups = sorted({str(getattr(o, key)) for o in observations})
    if len(groups) < 2:
        raise ValidationError(f"leave-one-{key}-out needs at least two groups; all observations "
                              f"share {key} = {groups[0]!r}")
    per_group: dict[str, float | None] = {}
    preds: list[Prediction] = []
    notes: list[str] = []
    never = 0
    for g in groups:
        train = [o for o in observations if str(getattr(o, key)) != g]
        test = [o for o in observations if str(getattr(o, key)) == g]
        try:
            f = fit(train, name, priors, min_obs=min_obs, **options)
        except ValidationError as exc:
            per_group[g] = None
            notes.append(f"{key} {g}: not evaluated ({exc})")
            continue
        ev = evaluate(test, f.constants, name)
        per_group[g] = ev.rounds_mape
        never += ev.n_unpredicted
        preds.extend(ev.predictions)
    apes = [p.ape for p in preds if p.ape is not None]
    return HoldOutReport(key, name, per_group, float(np.mean(apes)) if apes else None, never,
                         tuple(preds), tuple(notes))


__all__ = ["HoldOutReport", "leave_one_group_out"]
