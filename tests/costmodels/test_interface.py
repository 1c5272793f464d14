"""The estimator interface: its optional parts are protocols, and an estimator without them
gets the documented defaults."""

import math

import attrs
import pytest

from airplan_qo.catalog.store import Catalog
from airplan_qo.costmodels import ESTIMATORS, resolve_constants
from airplan_qo.costmodels.calibration import calibrate, evaluate, fit
from airplan_qo.costmodels.interface import (AccuracyBand, Calibratable, CurveFitted,
                                             OpenConstants, open_prefixes)
from airplan_qo.errors import ValidationError
from airplan_qo.plans.plan import Estimate


@attrs.frozen
class Plain:
    """Only the required members: no band, no open constants, no calibration."""

    name: str = "plain"
    description: str = "a constant curve"
    priors: dict = attrs.field(factory=lambda: {"a": 0.5})

    def accuracy_at(self, ctx, plan, stats, rounds):
        return ctx.constants["a"] * (1 - math.exp(-rounds / 10))

    def estimate(self, ctx, plan, stats, target_accuracy):
        return Estimate(rounds=10.0, accuracy=ctx.constants["a"])


@pytest.fixture
def plain():
    ESTIMATORS.register("plain", Plain())
    try:
        yield ESTIMATORS.get("plain")
    finally:
        ESTIMATORS._items.pop("plain")


def test_the_built_ins_declare_their_optional_parts():
    dsgd, paper, ttt = (ESTIMATORS.get(n) for n in ("dsgd", "paper", "ttt"))
    assert isinstance(dsgd, CurveFitted) and isinstance(paper, CurveFitted)
    assert isinstance(ttt, Calibratable) and not isinstance(ttt, CurveFitted)
    assert isinstance(dsgd, AccuracyBand) and not isinstance(paper, AccuracyBand)
    assert isinstance(ttt, OpenConstants) and open_prefixes(ttt) == ("fc.dataset:",)
    assert open_prefixes(dsgd) == ()
    assert ttt.calibration_scopes == ("global", "dataset")


def test_an_estimator_without_optional_parts_gets_the_defaults(plain, tmp_path):
    assert not isinstance(plain, (AccuracyBand, OpenConstants, Calibratable))
    rows = [{"scope": "global", "scope_key": "", "constant_name": "a", "value": 0.7,
             "calibration_id": 1},
            {"scope": "global", "scope_key": "", "constant_name": "b.new", "value": 1.0,
             "calibration_id": 2}]
    # only the priors' names are constants without open prefixes
    assert resolve_constants(plain, rows, "digits") == ({"a": 0.7}, (1,))
    with Catalog(str(tmp_path / "c.duckdb")) as cat:
        with pytest.raises(ValidationError, match="no calibration procedure for estimator "
                                                  "'plain'; calibratable: dsgd, paper, ttt"):
            calibrate(cat, "plain")
    with pytest.raises(ValidationError, match="'plain'; calibratable: dsgd, paper$"):
        fit([], "plain")
    with pytest.raises(ValidationError, match="'ttt'; calibratable: dsgd, paper$"):
        evaluate([], {}, "ttt")
