"""SQL surface: the AirPlan dialect (DuckDB + EXPLAIN/TRAIN/ANALYZE WORKLOAD) and its binder."""

from .binder import BoundAnalyze, BoundTrain, ExplainOptions, bind
from .dialect import AirPlan
from .expressions import AnalyzeWorkload, ExplainTrain, Train
from .parser import PassThrough, Statement, normalize, parse, parse_one, render

__all__ = [
    "AirPlan",
    "AnalyzeWorkload",
    "BoundAnalyze",
    "BoundTrain",
    "ExplainOptions",
    "ExplainTrain",
    "PassThrough",
    "Statement",
    "Train",
    "bind",
    "normalize",
    "parse",
    "parse_one",
    "render",
]
