"""Checks that a workload's data can be split among its clients, made before any topology is
built: a workload that training would refuse fails planning at once with the settings the user
can change, instead of after minutes of planning (or a plan for a run that cannot start)."""

from __future__ import annotations

import inspect

from ..errors import AirPlanError, PlanningError
from ..plans.footprint import TRAIN_RECORDS
from ..plans.workload import Workload

#: Samples every client must hold under each partition scheme when the workload gives no other
#: setting (the partitioners' defaults, read from their signatures so the two never disagree).
_PER_CLIENT_PARAM = {"dirichlet": "min_per_client", "shards": "shards_per_client"}


def train_records(dataset: str) -> int | None:
    """Training records of ``dataset`` with its default options: the shipped datasets' known
    sizes, else the size of the loaded train split (None when it cannot be loaded: planning
    does not need the data itself, only training does)."""
    name = str(dataset).lower()
    if name in TRAIN_RECORDS:
        return TRAIN_RECORDS[name]
    from ..data.datasets import load

    try:
        return int(load(name).y_train.size)
    except (AirPlanError, OSError):
        return None


def samples_per_client(scheme: str) -> int:
    """The fewest training samples each client needs under partition ``scheme``."""
    from ..data.partition import PARTITIONERS

    param = _PER_CLIENT_PARAM.get(scheme)
    if param is None:
        return 1
    default = inspect.signature(PARTITIONERS.get(scheme)).parameters[param].default
    return max(1, int(default))


def check_data_split(w: Workload) -> None:
    """Raise :class:`PlanningError` when ``w``'s training data cannot be split among its
    clients (too few records for the partition scheme), naming what would work: fewer clients,
    or the ``iid`` partition, which needs one record per client."""
    records = train_records(w.dataset)
    if records is None:
        return
    need = samples_per_client(w.partition)
    if w.clients * need <= records:
        return
    most = records // need
    what = ("one training record" if need == 1 else
            f"at least {need} training records under the {w.partition} partition")
    fixes = [f"use at most {most} clients (ON {most} CLIENTS)"]
    if need > 1:
        fixes.append(f"WITH (partition = 'iid') (one record per client, up to {records} "
                     "clients)" if w.clients <= records else "")
    fixes = [f for f in fixes if f] + ["a larger dataset"]
    raise PlanningError(
        f"{w.dataset} has {records} training records, too few for {w.clients} clients: each "
        f"client needs {what}; {', '.join(fixes[:-1])} or {fixes[-1]}")

__all__ = ["check_data_split", "samples_per_client", "train_records"]
