"""Evaluation grids: which workloads the advisor is judged on, read from a small TOML file.

A grid lists workloads (dataset, clients, heterogeneity, channel, model, training) and, for each,
the candidate plan space (topologies x mixing weights x sparsification ratios) and the SLA, plus
the seeds and the number of cross-validation folds. A list-valued workload parameter in a
``[[workloads]]`` entry expands into the cross product, so a 5 x 5 grid is one entry. A workload may
also name the physical operators its candidates are planned with: ``transports`` (``"ota"``,
``"digital(bits=8)"``, ...), ``algorithms`` (``"auto"``, ``"gradient_tracking"``, ...; the
paper's baselines) and, for FedAvg and FedProx, ``access_point = true``; a workload that names
none is planned as before, over the air with the default algorithm rule. The format is
documented in docs/evaluation.md; ``default`` and ``quick`` ship with the package.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ..costmodels import DEFAULT_ESTIMATOR
from ..errors import AirPlanError, ValidationError
from ..plans.request import check_confidence, check_mix_rounds
from ..plans.sla import DEFAULT_SLA, parse_sla
from ..plans.topology import TopologySpec, parse_topology
from ..plans.workload import WORKLOAD_PARAMS, Workload, coerce_param
from ..registry import suggest

DEFAULT_TOPOLOGIES = ("ring", "small_world(k=4)", "clustered", "complete")
GRID_SPARSITY = (0.1, 1.0)
GRID_WEIGHTS = ("metropolis_hastings",)
DEFAULT_SCALABILITY = (10, 20, 50, 100, 200, 500, 1000)

TOP_KEYS = ("name", "description", "seeds", "folds", "cv_seed", "estimator", "objective", "sla",
            "confidence", "baseline_k", "reference", "scalability_clients", "defaults",
            "workloads")
#: Keys of a workload entry besides the workload parameters (WORKLOAD_PARAMS).
PLAN_KEYS = ("name", "dataset", "clients", "topologies", "sparsity", "weights", "sla",
             "transports", "algorithms", "mix_rounds")
#: Plan-space keys whose list value is the candidate space, not a cross product of workloads.
_LIST_KEYS = ("topologies", "sparsity", "weights", "transports", "algorithms")
#: What a workload that names no transports or algorithms is planned with: over the air, the
#: default algorithm rule (D-SGD at k = 1, CHOCO below), as every grid before them.
DEFAULT_TRANSPORTS = ("ota",)
DEFAULT_ALGORITHMS = ("auto",)
_NOT_IN_WORKLOAD = ("seed",)


def builtin_grids() -> list[str]:
    """Names of the grids shipped in ``airplan_qo/grids``."""
    root = resources.files("airplan_qo") / "grids"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


@attrs.frozen
class WorkloadSpec:
    """One workload of a grid with its candidate plan space and SLA.

    ``workload`` carries the grid's first seed; :meth:`for_seed` gives the other replicates.
    ``topologies`` are ``(family, ((param, value), ...))`` pairs as :meth:`Session.plan` takes.
    """

    key: str
    index: int
    workload: Workload
    topologies: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    sparsity: tuple[float, ...]
    weights: tuple[str, ...]
    sla: str
    #: transports as the grid names them (``"ota"``, ``"digital(bits=8)"``); () = over the air
    transports: tuple[str, ...] = ()
    #: algorithms as the grid names them; () = the default rule (``auto``)
    algorithms: tuple[str, ...] = ()
    #: mixing-only tails planned beside each plan (``session.plan(mix_rounds=)``): 0 (none),
    #: ``auto`` or a number of rounds (plans/finish.py)
    mix_rounds: str | int = 0

    def plan_transports(self) -> tuple[str, ...]:
        """The transports the candidates are planned with (``session.plan(transports=)``)."""
        return self.transports or DEFAULT_TRANSPORTS

    def plan_algorithms(self) -> tuple[str, ...]:
        """The algorithms the candidates are planned with (``session.plan(algorithms=)``)."""
        return self.algorithms or DEFAULT_ALGORITHMS

    def operator_pairs(self) -> list[tuple[str, int]]:
        """(transport, bits) pairs of the plan space (a bare ``digital``: 8 and 32 bits)."""
        from ..plans.operators import DEFAULT_DIGITAL_BITS, EXACT_BITS, parse_transport

        out: list[tuple[str, int]] = []
        for text in self.plan_transports():
            name, bits = parse_transport(text)
            widths = (bits,) if bits is not None else (
                (EXACT_BITS,) if name == "ota" else DEFAULT_DIGITAL_BITS)
            out += [(name, b) for b in widths]
        return list(dict.fromkeys(out))

    def n_plans(self) -> int:
        """Candidate plans of the space: topologies x weights x k x algorithms x transports,
        less the combinations an exclusion rule refuses (plans/operators.py)."""
        from ..plans.families import FAMILIES
        from ..plans.operators import canonical, exclusion, resolve

        w = self.workload
        plans = set()
        for spec in self.specs():
            periodic = FAMILIES.get(spec.family).periodic
            for k in self.sparsity:
                for alg in self.plan_algorithms():
                    for transport, bits in self.operator_pairs():
                        if exclusion(resolve(alg, k), transport, bits=bits, k_ratio=k,
                                     family=spec.family, access_point=w.access_point,
                                     local_steps=w.local_steps, periodic=periodic) is None:
                            plans.add((spec, k, canonical(resolve(alg, k), k), transport,
                                       bits))
        return len(plans) + sum(self._tails(spec, k, alg) for spec, k, alg, _, _ in plans)

    def _tails(self, spec: TopologySpec, k: float, algorithm: str) -> int:
        """How many plans with a mixing-only tail a plan of ``spec`` running ``algorithm``
        is counted with (``auto``: every topology but the complete graph, which averages in one
        round, with its own tail and, for D-SGD, with one on the complete graph; the planner
        also leaves a tail out where a budget is too short for one, so this may count more than
        it plans)."""
        from ..plans.finish import complete_tail_rounds
        from ..plans.operators import MIXING_ONLY, resolve

        algorithm = resolve(algorithm, k)
        if not self.mix_rounds or algorithm not in MIXING_ONLY:
            return 0
        if self.mix_rounds == "auto":
            return 0 if spec.family == "complete" else 1 + bool(
                complete_tail_rounds(spec.family, algorithm, self.workload.rounds))
        return int(self.mix_rounds < self.workload.rounds)

    def for_seed(self, seed: int) -> Workload:
        return attrs.evolve(self.workload, seed=int(seed))

    def topology_args(self) -> list[tuple[str, dict[str, Any]]]:
        return [(f, dict(p)) for f, p in self.topologies]

    def specs(self) -> list[TopologySpec]:
        """The topology specs the planner enumerates for this workload (weights included)."""
        w = self.workload
        out: list[TopologySpec] = []
        for family, params in self.topologies:
            for rule in self.weights:
                spec = TopologySpec.create(family, w.clients, seed=w.topology_seed, weights=rule,
                                           **dict(params))
                if spec not in out:
                    out.append(spec)
        return out

    def describe(self) -> dict[str, Any]:
        w = self.workload
        return {"key": self.key, "dataset": w.dataset, "clients": w.clients, "alpha": w.alpha,
                "snr_db": w.snr_db, "dropout": w.dropout, "model": w.model, "rounds": w.rounds,
                "sla": self.sla, "sparsity": list(self.sparsity), "weights": list(self.weights),
                "topologies": [_topology_text(f, p) for f, p in self.topologies],
                **({"transports": list(self.transports)} if self.transports else {}),
                **({"algorithms": list(self.algorithms)} if self.algorithms else {}),
                **({"mix_rounds": self.mix_rounds} if self.mix_rounds else {}),
                **({"access_point": True} if w.access_point else {})}


@attrs.frozen
class Grid:
    """A parsed evaluation grid (see the module docstring and docs/evaluation.md)."""

    name: str
    source: str
    sha: str
    seeds: tuple[int, ...]
    folds: int
    workloads: tuple[WorkloadSpec, ...]
    estimator: str = DEFAULT_ESTIMATOR
    objective: str = "channel_uses"
    cv_seed: int = 0
    baseline_k: float | None = None
    reference: int = 0
    scalability_clients: tuple[int, ...] = DEFAULT_SCALABILITY
    description: str = ""
    #: the chance constraint's confidence the advisor plans with (None: the planner's default)
    confidence: float | None = None
    #: the SLA every workload is judged by instead of the grid's (``--sla``; None: the grid's)
    sla_override: str | None = None

    def with_seeds(self, n: int) -> "Grid":
        """The same grid with seeds 0..n-1 (the CLI's ``--seeds``)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError(f"--seeds must be a positive integer, got {n!r}")
        return attrs.evolve(self, seeds=tuple(range(n)))

    def with_confidence(self, p: float) -> "Grid":
        """The same grid planned with chance-constraint confidence ``p`` (``--confidence``)."""
        return attrs.evolve(self, confidence=check_confidence(p, "--confidence"))

    def with_sla(self, text: str) -> "Grid":
        """The same grid with every workload judged by the SLA ``text`` (``--sla``): the same
        runs, another accuracy metric or ratio. Refused where a workload is judged at
        several SLAs (the grid names them; one replaces one)."""
        sla = _sla(text, _Where("--sla"), "sla")
        seen = [w.workload for w in self.workloads]
        if len(set(seen)) != len(seen):
            raise ValidationError(f"grid {self.name} judges some workloads at several SLAs; "
                                  f"--sla replaces a single one: edit the grid's sla instead")
        return attrs.evolve(self, workloads=tuple(attrs.evolve(w, sla=sla)
                                                  for w in self.workloads), sla_override=sla)

    def with_folds(self, k: int) -> "Grid":
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ValidationError(f"--folds must be an integer >= 2, got {k!r}")
        return attrs.evolve(self, folds=k)

    @property
    def n_runs(self) -> int:
        """Training runs the grid needs (candidates x seeds, plus the fully connected reference
        where the candidates lack it)."""
        total = 0
        for ws in self.workloads:
            n = ws.n_plans()
            if not _has_reference(ws):
                n += 1
            total += n * len(self.seeds)
        return total


def _has_reference(ws: WorkloadSpec) -> bool:
    return (1.0 in ws.sparsity and ("ota", 32) in ws.operator_pairs()
            and any(a in ("auto", "dsgd") for a in ws.plan_algorithms())
            and any(s.family == "complete" and s.weights == "metropolis_hastings"
                    for s in ws.specs()))


def load_grid(name_or_file: str | os.PathLike[str]) -> Grid:
    """A grid from a TOML file, or a shipped grid by name (``default``, ``quick``)."""
    text = str(name_or_file)
    path = Path(text)
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValidationError(f"cannot read grid file {path}: {exc}") from None
        return parse_grid(data, source=str(path), default_name=path.stem)
    names = builtin_grids()
    if text in names:
        data = (resources.files("airplan_qo") / "grids" / f"{text}.toml").read_bytes()
        return parse_grid(data, source=f"builtin:{text}", default_name=text)
    if text.endswith(".toml") or os.sep in text:
        raise ValidationError(f"grid file {text} does not exist")
    raise ValidationError(f"unknown grid '{text}'{suggest(text, names)}; give a TOML file or one "
                          f"of the shipped grids: {', '.join(names)}")


def parse_grid(data: bytes | str, *, source: str = "<grid>", default_name: str = "grid") -> Grid:
    """Parse and validate grid TOML; every error names the file and the offending key."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{source}: not valid TOML: {exc}") from None
    where = _Where(source)
    for key in doc:
        if key not in TOP_KEYS:
            raise where.error(key, f"unknown key{suggest(key, list(TOP_KEYS))}; allowed: "
                                   f"{', '.join(TOP_KEYS)}")
    name = _string(doc.get("name", default_name), where, "name")
    seeds = _seeds(doc.get("seeds", 3), where)
    folds = _int(doc.get("folds", 5), where, "folds", lo=2)
    cv_seed = _int(doc.get("cv_seed", 0), where, "cv_seed", lo=0)
    estimator = _string(doc.get("estimator", DEFAULT_ESTIMATOR), where, "estimator").lower()
    objective = _string(doc.get("objective", "channel_uses"), where, "objective").lower()
    _check_estimator(estimator, objective, where)
    baseline_k = doc.get("baseline_k")
    if baseline_k is not None:
        baseline_k = _ratio(baseline_k, where, "baseline_k")
    grid_sla = _sla(doc.get("sla", DEFAULT_SLA.render()), where, "sla")
    confidence = doc.get("confidence")
    if confidence is not None:
        try:
            confidence = check_confidence(confidence)
        except ValidationError as exc:
            raise where.error("confidence", str(exc)) from None
    scal = doc.get("scalability_clients", list(DEFAULT_SCALABILITY))
    if not isinstance(scal, list) or not scal:
        raise where.error("scalability_clients", "must be a non-empty list of client counts")
    scalability = tuple(sorted({_int(v, where, "scalability_clients", lo=4) for v in scal}))
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise where.error("defaults", "must be a table of workload keys")
    _check_entry_keys(defaults, where, "defaults")
    entries = doc.get("workloads")
    if not isinstance(entries, list) or not entries:
        raise where.error("workloads", "the grid needs at least one [[workloads]] entry")
    workloads: list[WorkloadSpec] = []
    for i, entry in enumerate(entries):
        label = f"workloads[{i}]"
        if not isinstance(entry, dict):
            raise where.error(label, "must be a table")
        _check_entry_keys(entry, where, label)
        merged = {**defaults, **entry}
        for values in _expand(merged, where, label):
            workloads.append(_workload_spec(values, len(workloads), where, label, seeds[0],
                                            grid_sla))
    workloads = _name_workloads(workloads, where)
    metrics = sorted({parse_sla(w.sla).accuracy_metric for w in workloads})
    if len(metrics) > 1:
        raise where.error("sla", f"the workloads' SLAs bound {' and '.join(metrics)}; one grid "
                                 "judges (and fits) one accuracy metric: make a grid for each")
    reference = _int(doc.get("reference", 0), where, "reference", lo=0)
    if reference >= len(workloads):
        raise where.error("reference", f"must index a workload (0..{len(workloads) - 1}), got "
                                       f"{reference}")
    description = _string(doc.get("description", ""), where, "description")
    return Grid(name=name, source=source, sha=hashlib.sha256(raw).hexdigest(), seeds=seeds,
                folds=folds, workloads=tuple(workloads), estimator=estimator,
                objective=objective, cv_seed=cv_seed, baseline_k=baseline_k,
                reference=reference, scalability_clients=scalability, description=description,
                confidence=confidence)


class _Where:
    def __init__(self, source: str):
        self.source = source

    def error(self, key: str, message: str) -> ValidationError:
        return ValidationError(f"grid {self.source}: key '{key}': {message}")


def _string(value: Any, where: _Where, key: str) -> str:
    if not isinstance(value, str):
        raise where.error(key, f"must be a string, got {value!r}")
    return value


def _int(value: Any, where: _Where, key: str, *, lo: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(key, f"must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise where.error(key, f"must be >= {lo}, got {value}")
    return int(value)


def _ratio(value: Any, where: _Where, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"must be a number in (0, 1], got {value!r}")
    v = float(value)
    if not (0 < v <= 1) or not math.isfinite(v):
        raise where.error(key, f"must be in (0, 1], got {value!r}")
    return v


def _seeds(value: Any, where: _Where) -> tuple[int, ...]:
    if isinstance(value, list):
        if not value:
            raise where.error("seeds", "the list of seeds is empty")
        seeds = tuple(_int(v, where, "seeds", lo=0) for v in value)
        if len(set(seeds)) != len(seeds):
            raise where.error("seeds", f"seeds repeat: {list(seeds)}")
        return seeds
    return tuple(range(_int(value, where, "seeds", lo=1)))


def _sla(value: Any, where: _Where, key: str) -> str:
    text = _string(value, where, key)
    try:
        sla = parse_sla(text)
    except AirPlanError as exc:
        raise where.error(key, f"invalid SLA {text!r}: {exc}") from None
    if sla.accuracy_threshold(1.0) is None:
        raise where.error(key, f"the SLA {text!r} has no accuracy bound; the oracle needs one "
                               "(e.g. 'accuracy >= 0.95 * fc')")
    return sla.render()


def _check_estimator(estimator: str, objective: str, where: _Where) -> None:
    from ..costmodels import ESTIMATORS
    from ..plans.plan import OBJECTIVES

    try:
        ESTIMATORS.get(estimator)
    except AirPlanError as exc:
        raise where.error("estimator", str(exc)) from None
    if objective not in OBJECTIVES:
        raise where.error("objective", f"unknown objective{suggest(objective, list(OBJECTIVES))}"
                                       f"; use one of {', '.join(OBJECTIVES)}")


def _check_entry_keys(entry: dict[str, Any], where: _Where, label: str) -> None:
    allowed = list(PLAN_KEYS) + [k for k in WORKLOAD_PARAMS if k not in _NOT_IN_WORKLOAD]
    for key in entry:
        if key in _NOT_IN_WORKLOAD:
            raise where.error(f"{label}.{key}", "seeds are set by the top-level 'seeds' key")
        if key not in allowed:
            raise where.error(f"{label}.{key}", f"unknown workload key{suggest(key, allowed)}; "
                                                f"allowed: {', '.join(sorted(allowed))}")


def _expand(entry: dict[str, Any], where: _Where, label: str) -> list[dict[str, Any]]:
    """The cross product over list-valued workload parameters (plan-space keys stay lists)."""
    axes = [(k, v) for k, v in entry.items()
            if isinstance(v, list) and k not in _LIST_KEYS]
    for k, v in axes:
        if not v:
            raise where.error(f"{label}.{k}", "an empty list expands to no workload")
    if not axes:
        return [dict(entry)]
    names = [k for k, _ in axes]
    out = []
    for combo in itertools.product(*(v for _, v in axes)):
        values = dict(entry)
        values.update(zip(names, combo))
        out.append(values)
    return out


def _topology_text(family: str, params: tuple[tuple[str, Any], ...]) -> str:
    if not params:
        return family
    return f"{family}({', '.join(f'{k}={v}' for k, v in params)})"


def _workload_spec(values: dict[str, Any], index: int, where: _Where, label: str, seed: int,
                   grid_sla: str) -> WorkloadSpec:
    params = {k: v for k, v in values.items() if k in WORKLOAD_PARAMS}
    for key, value in params.items():
        try:
            coerce_param(key, value)
        except AirPlanError as exc:
            raise where.error(f"{label}.{key}", str(exc)) from None
    dataset = _string(values.get("dataset", "digits"), where, f"{label}.dataset").lower()
    try:
        from ..data import dataset_info

        dataset_info(dataset)
    except AirPlanError as exc:
        raise where.error(f"{label}.dataset", str(exc)) from None
    clients = values.get("clients", 10)
    _int(clients, where, f"{label}.clients", lo=2)
    try:
        workload = Workload.from_params(dataset, clients, {**params, "seed": seed})
    except AirPlanError as exc:
        raise where.error(label, str(exc)) from None
    topologies = values.get("topologies", list(DEFAULT_TOPOLOGIES))
    if not isinstance(topologies, list) or not topologies:
        raise where.error(f"{label}.topologies", "must be a non-empty list")
    topo: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for t in topologies:
        try:
            fam, p = parse_topology(t)
            spec = TopologySpec.create(fam, clients, seed=workload.topology_seed, **dict(p))
        except AirPlanError as exc:
            raise where.error(f"{label}.topologies", str(exc)) from None
        if (spec.family, p) not in topo:
            topo.append((spec.family, p))
    sparsity = values.get("sparsity", list(GRID_SPARSITY))
    if not isinstance(sparsity, list) or not sparsity:
        raise where.error(f"{label}.sparsity", "must be a non-empty list of ratios in (0, 1]")
    ks = tuple(sorted({_ratio(k, where, f"{label}.sparsity") for k in sparsity}))
    weights = values.get("weights", list(GRID_WEIGHTS))
    if not isinstance(weights, list) or not weights:
        raise where.error(f"{label}.weights", "must be a non-empty list of weights rules")
    from ..plans.mixing import WEIGHTS

    rules: list[str] = []
    for rule in weights:
        try:
            WEIGHTS.get(_string(rule, where, f"{label}.weights"))
        except AirPlanError as exc:
            raise where.error(f"{label}.weights", str(exc)) from None
        if rule.lower() not in rules:
            rules.append(rule.lower())
    sla = _sla(values["sla"], where, f"{label}.sla") if "sla" in values else grid_sla
    name = values.get("name")
    key = _string(name, where, f"{label}.name") if name is not None else ""
    transports = _transports(values.get("transports"), where, f"{label}.transports")
    algorithms = _algorithms(values.get("algorithms"), where, f"{label}.algorithms")
    try:
        # a grid plans no tails unless it says (not the planner's default)
        mix = check_mix_rounds(values.get("mix_rounds", 0))
    except AirPlanError as exc:
        raise where.error(f"{label}.mix_rounds", str(exc)) from None
    spec = WorkloadSpec(key=key, index=index, workload=workload, topologies=tuple(topo),
                        sparsity=ks, weights=tuple(rules), sla=sla, transports=transports,
                        algorithms=algorithms, mix_rounds=mix)
    _check_operators(spec, where, label)
    return spec


def _transports(value: Any, where: _Where, key: str) -> tuple[str, ...]:
    """The named transports, normalised (``"digital(bits=8)"``); () when the key is absent."""
    from ..plans.operators import parse_transport

    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise where.error(key, 'must be a non-empty list of transports, e.g. ["ota", '
                               '"digital(bits=8)"]')
    out: list[str] = []
    for t in value:
        if not isinstance(t, str):
            raise where.error(key, f"a transport is a string such as \"digital(bits=8)\", "
                                   f"got {t!r}")
        try:
            name, bits = parse_transport(t)
        except AirPlanError as exc:
            raise where.error(key, f"{t!r}: {exc}") from None
        text = name if bits is None else f"{name}(bits={bits})"
        if text not in out:
            out.append(text)
    return tuple(out)


def _algorithms(value: Any, where: _Where, key: str) -> tuple[str, ...]:
    """The named algorithms (``auto`` = the default rule); () when the key is absent."""
    from ..plans.operators import check_algorithm

    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise where.error(key, 'must be a non-empty list of algorithms, e.g. ["auto", '
                               '"gradient_tracking"]')
    out: list[str] = []
    for a in value:
        if not isinstance(a, str):
            raise where.error(key, f"an algorithm is a string, got {a!r}")
        try:
            name = check_algorithm(a)
        except AirPlanError as exc:
            raise where.error(key, str(exc)) from None
        if name not in out:
            out.append(name)
    return tuple(out)


def _check_operators(spec: WorkloadSpec, where: _Where, label: str) -> None:
    """Every named algorithm and transport must leave at least one plan of the workload's
    space (else the planner would refuse it): the error gives the exclusion rule's reason."""
    from ..plans.families import FAMILIES
    from ..plans.operators import exclusion, resolve

    w = spec.workload
    pairs = spec.operator_pairs()
    specs = spec.specs()

    def reason(alg: str, transport: str | None) -> str | None:
        """None when some plan of the space runs ``alg`` (over ``transport``), else every
        distinct reason the exclusion rules gave."""
        reasons: list[str] = []
        for s in specs:
            periodic = FAMILIES.get(s.family).periodic
            for k in spec.sparsity:
                run = resolve(alg, k)
                for t, bits in pairs:
                    if transport is not None and t != transport:
                        continue
                    why = exclusion(run, t, bits=bits, k_ratio=k, family=s.family,
                                    access_point=w.access_point, local_steps=w.local_steps,
                                    periodic=periodic)
                    if why is None:
                        return None
                    if why not in reasons:
                        reasons.append(why)
        return "; ".join(reasons) or "no plan to cost"

    for alg in spec.algorithms:
        why = reason(alg, None)
        if why is not None:
            raise where.error(f"{label}.algorithms", f"{alg!r} has no plan in this workload's "
                                                     f"space: {why}")
    for transport in dict.fromkeys(t for t, _ in pairs):
        if spec.transports and all(reason(a, transport) is not None
                                   for a in spec.plan_algorithms()):
            raise where.error(f"{label}.transports", f"{transport!r} has no plan in this "
                                                     f"workload's space: "
                                                     f"{reason(spec.plan_algorithms()[0], transport)}")


_KEY_PARAMS = (("alpha", "alpha"), ("snr_db", "snr"), ("dropout", "dropout"))


def _name_workloads(specs: list[WorkloadSpec], where: _Where) -> list[WorkloadSpec]:
    """Readable unique keys: dataset, N, alpha, SNR, dropout, plus any parameter that varies
    across the grid's workloads, and the SLA of a workload judged at several; explicit names
    are kept. Identical workloads are an error."""
    varying = [name for name in WORKLOAD_PARAMS
               if name not in ("alpha", "snr_db", "dropout", "seed")
               and len({getattr(s.workload, name) for s in specs}) > 1]
    out: list[WorkloadSpec] = []
    seen: dict[str, int] = {}
    identity: dict[tuple, int] = {}
    judged_at = {w: len({x.sla for x in specs if x.workload == w})
                 for w in {x.workload for x in specs}}
    for s in specs:
        ident = (s.workload, s.topologies, s.sparsity, s.weights, s.sla, s.transports,
                 s.algorithms)
        if ident in identity:
            raise where.error(f"workloads (#{s.index})", f"duplicates workload "
                                                          f"#{identity[ident]}")
        identity[ident] = s.index
        w = s.workload
        key = s.key
        if not key:
            parts = [w.dataset, f"N={w.clients}"]
            parts += [f"{short}={getattr(w, name):g}" for name, short in _KEY_PARAMS
                      if not (name == "dropout" and w.dropout == 0)]
            parts += [f"{name}={getattr(w, name)}" for name in varying]
            if judged_at[w] > 1:            # the same workload judged at several SLAs
                parts.append(f"sla={s.sla.replace(' ', '')}")
            key = " ".join(parts)
        if key in seen:
            key = f"{key} #{s.index}"
        seen[key] = s.index
        out.append(attrs.evolve(s, key=key))
    return out


__all__ = ["Grid", "WorkloadSpec", "load_grid", "parse_grid", "parse_topology", "builtin_grids"]
