"""docs/sql.md stays in step with the registries and the parser."""

from __future__ import annotations

import re
from pathlib import Path

from airplan_qo.data.datasets import DATASETS
from airplan_qo.plans.families import FAMILIES
from airplan_qo.plans.mixing import WEIGHTS
from airplan_qo.plans.workload import WORKLOAD_PARAMS
from airplan_qo.sql import PassThrough, bind, parse

DOC = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()


def test_every_workload_parameter_is_documented():
    rows = set(re.findall(r"^\| `(\w+)` \| (?:float|int|string|bool) \|", DOC, re.M))
    assert rows == set(WORKLOAD_PARAMS)


def test_every_registered_name_is_documented():
    for name in list(FAMILIES) + list(WEIGHTS) + list(DATASETS):
        assert f"`{name}`" in DOC, name


def test_sql_examples_parse_and_bind():
    blocks = re.findall(r"```sql\n(.*?)```", DOC, re.S)
    assert blocks
    for block in blocks:
        for stmt in parse(block):
            if not isinstance(stmt, PassThrough):
                bind(stmt)
