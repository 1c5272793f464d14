"""Loading calibration observations from the catalog: the latest rounds feedback of each
execution an estimator planned, with the plan's recorded terms, the SLA target and the
execution's ``round_stats`` curve, as :class:`~.observations.Observation` values. What an
estimator reads from its plan's terms is its own (its ``observation_reader``,
:class:`~.interface.Calibratable`).
"""

from __future__ import annotations

import json

import numpy as np

from ..catalog.store import Catalog
from ..errors import ValidationError
from .interface import ESTIMATORS, calibratable
from .observations import Observation

#: Feedback metrics written by the runtime for every finished execution.
FEEDBACK_METRICS = ("rounds", "accuracy", "channel_uses", "energy_j")
SCOPES = ("global", "dataset", "dataset_family")


def check_scope(scope: str, scope_key: str) -> tuple[str | None, str | None]:
    """(dataset, family) that the scope selects."""
    if scope not in SCOPES:
        raise ValidationError(f"unknown calibration scope '{scope}'; use one of "
                              f"{', '.join(SCOPES)}")
    if scope == "global":
        if scope_key:
            raise ValidationError(f"the global scope takes no scope key, got '{scope_key}'")
        return None, None
    if scope == "dataset":
        if not scope_key:
            raise ValidationError("the dataset scope needs a scope key: the dataset name")
        return scope_key, None
    dataset, sep, family = scope_key.rpartition(":")
    if not sep or not dataset or not family:
        raise ValidationError(f"the dataset_family scope needs a key 'dataset:family', got "
                              f"'{scope_key}'")
    return dataset, family


_LOAD_SQL = """
SELECT * FROM (
SELECT f.feedback_id, f.exec_id, f.plan_id, f.actual, f.censored,
       p.family, p.k_ratio, p.snr_db, p.g_th, p.terms::VARCHAR AS terms, p.mix_rounds,
       p.calibration_ids, pr.planning_run_id, pr.sla_threshold,
       coalesce(w.dataset, json_extract_string(e.options, '$.dataset'), '') AS dataset,
       e.actual_rounds, t.mixing_p AS topo_p, t.lambda2_laplacian AS topo_lambda2,
       json_extract_string(e.options, '$.run_config.target_metric') AS target_metric,
       coalesce(t.n_nodes, w.n_clients,
                TRY_CAST(json_extract_string(e.options, '$.clients') AS INTEGER)) AS n_clients
FROM airplan.feedback AS f
JOIN airplan.plans AS p ON p.plan_id = f.plan_id
JOIN airplan.planning_runs AS pr ON pr.planning_run_id = p.planning_run_id
LEFT JOIN airplan.workloads AS w ON w.workload_id = pr.workload_id
LEFT JOIN airplan.executions AS e ON e.exec_id = f.exec_id
LEFT JOIN airplan.topologies AS t ON t.topology_id = p.topology_id
WHERE f.metric = 'rounds' AND f.estimator = $estimator
  AND (e.status IS NULL OR e.status NOT IN ('failed', 'running'))
QUALIFY row_number() OVER (PARTITION BY f.exec_id ORDER BY f.feedback_id DESC) = 1
)
WHERE ($dataset IS NULL OR dataset = $dataset) AND ($family IS NULL OR family = $family)
ORDER BY exec_id
"""


def load(catalog: Catalog, estimator: str, scope: str, scope_key: str
         ) -> tuple[list[Observation], list[str]]:
    """The observations of ``estimator`` in the scope, and why each other row was left out."""
    est = calibratable(ESTIMATORS.get(estimator))
    dataset, family = check_scope(scope, scope_key)
    rows = catalog.query(_LOAD_SQL, {"estimator": est.name, "dataset": dataset,
                                     "family": family})
    skipped: list[str] = []
    if not rows:
        return [], skipped
    curves = _curves(catalog, [int(r["exec_id"]) for r in rows])
    read = est.observation_reader(catalog)
    out: list[Observation] = []
    for r in rows:
        exec_id = int(r["exec_id"])
        terms = json.loads(r["terms"] or "{}")
        actual = r["actual"] if r["actual"] is not None else r["actual_rounds"]
        if r["sla_threshold"] is None or not 0 < r["sla_threshold"] < 1:
            skipped.append(f"execution {exec_id}: its planning run "
                           f"{r['planning_run_id']} has no accuracy target in (0, 1)")
            continue
        if actual is None:
            skipped.append(f"execution {exec_id}: no actual rounds")
            continue
        if r["target_metric"] not in (None, "accuracy"):
            skipped.append(f"execution {exec_id}: its SLA bounds {r['target_metric']}, and the "
                           "estimators are fitted on the clients' accuracy")
            continue
        if r["mix_rounds"]:
            skipped.append(f"execution {exec_id}: its plan ends with {r['mix_rounds']} "
                           "mixing-only rounds, which the fitted curves of training do not "
                           "describe")
            continue
        t, e, drop = curves.get(exec_id, (np.empty(0), np.empty(0), None))
        common = dict(estimator=est.name, family=r["family"], dataset=r["dataset"],
                      target_error=1.0 - float(r["sla_threshold"]),
                      rounds_actual=float(actual), censored=bool(r["censored"]), rounds=t,
                      errors=e, k_ratio=float(r["k_ratio"]), snr_db=r["snr_db"],
                      g_th=r["g_th"], link_drop_rate=drop, exec_id=exec_id,
                      plan_id=int(r["plan_id"]),
                      clients=None if r["n_clients"] is None else int(r["n_clients"]))
        try:
            got = read(r, terms, common)
        except ValidationError as exc:
            got = str(exc)
        if isinstance(got, str):
            skipped.append(f"execution {exec_id}: {got}")
        else:
            out.append(got)
    return out, skipped


def _curves(catalog: Catalog, exec_ids: list[int]
            ) -> dict[int, tuple[np.ndarray, np.ndarray, float | None]]:
    """Per execution: rounds, errors (1 - mean client-model accuracy, the SLA's ``accuracy``) and
    the mean link drop rate."""
    table = catalog.query_arrow(
        "SELECT exec_id, round, client_acc_mean, link_drop_rate FROM airplan.round_stats "
        "WHERE list_contains(?, exec_id) ORDER BY exec_id, round", [exec_ids])
    if table.num_rows == 0:
        return {}
    ids = table.column("exec_id").to_numpy()
    rnd = table.column("round").to_numpy().astype(float)
    acc = np.array(table.column("client_acc_mean").to_numpy(zero_copy_only=False), dtype=float)
    drop = np.array(table.column("link_drop_rate").to_numpy(zero_copy_only=False), dtype=float)
    uniq, starts = np.unique(ids, return_index=True)
    ends = np.append(starts[1:], ids.size)
    out = {}
    for eid, a, b in zip(uniq.tolist(), starts.tolist(), ends.tolist()):
        ok = np.isfinite(acc[a:b])
        d = drop[a:b][np.isfinite(drop[a:b])]
        out[int(eid)] = (rnd[a:b][ok], 1.0 - acc[a:b][ok], float(d.mean()) if d.size else None)
    return out


def load_observations(catalog: Catalog, estimator: str, *, scope: str = "global",
                      scope_key: str = "") -> list[Observation]:
    """Observations of ``estimator`` from the catalog: the latest rounds feedback of each
    execution it planned, with the plan's terms, the SLA target and the round_stats curve.

    Scope ``dataset`` keeps one dataset (``scope_key``), ``dataset_family`` one dataset and
    family (``"dataset:family"``). The dataset is the planning run's workload, else the
    execution's ``options.dataset``. Rows without a target, an actual value or the estimator's
    terms are left out.
    """
    return load(catalog, estimator, scope, scope_key)[0]


__all__ = ["FEEDBACK_METRICS", "SCOPES", "check_scope", "load", "load_observations"]
