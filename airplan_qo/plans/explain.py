"""EXPLAIN: the chosen plan as a PostgreSQL-style tree, in text or JSON.

Plan nodes declare their own attributes (:class:`Node`); one renderer formats them as text
(``->`` children, ``(cost=startup..total rounds=.. acc=..)``, footer lines) or as JSON (a
one-element array with ``format_version``, ``plan`` and nested ``plans``, snake_case keys,
estimates and ``actual_*`` side by side) that can be stored and queried in DuckDB.
Output is deterministic apart from the timing lines.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import attrs

from .operators import SERVER_ALGORITHMS, extra_reals, payload_vectors, transport_label
from .plan import clique_exchange_cost

FORMAT_VERSION = 1
#: Where every name EXPLAIN prints is explained (the footer's last line before the timing).
GLOSSARY = "docs/glossary.md"


@attrs.frozen
class Node:
    """One plan node: its type, declared attributes, optional costs and actuals, children."""

    node_type: str
    attributes: dict[str, Any] = attrs.field(factory=dict)
    startup_cost: float | None = None
    total_cost: float | None = None
    rounds: float | None = None
    accuracy: float | None = None
    actual: dict[str, Any] = attrs.field(factory=dict)
    children: tuple["Node", ...] = ()


def _num(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "never" if v > 0 else str(v)
        if v != 0 and (abs(v) >= 1e7 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 10 else f"{v:.2f}"
    return str(v)


def _rounds(v: float | None) -> str:
    return "never" if v is None else str(int(math.ceil(v)))


def _cost(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.2f}"


def build_tree(result, analyze: dict[str, Any] | None = None) -> Node:
    """The plan tree of a :class:`~airplan_qo.plans.request.PlanResult`."""
    c = result.chosen
    plan, stats, cost, est = c.plan, c.stats, c.cost, c.cost.estimate
    s = stats.spectra
    w = result.request.workload
    pr = cost.per_round
    act = analyze or {}
    pilot = result.request.pilot
    startup = ((cost.startup if result.objective == "channel_uses" else 0.0)
               + (pilot.total(result.objective) if pilot is not None else 0.0))
    total = cost.total()
    per_round_obj = (getattr(pr, result.objective) if result.objective != "c_ours" else None)
    setup = Node("Topology Setup", {
        "family": plan.topology.family, "params": plan.topology.label(),
        "seed": plan.topology.seed, "weights": plan.topology.weights, "n": s.n_nodes,
        "edges": s.n_edges, "max_degree": s.max_degree,
        "lambda2": s.lambda2_laplacian, "lambda2_normalized": s.lambda2_normalized,
        "mixing_gap": s.mixing_gap, "p": s.mixing_p, "slots_per_round": stats.slots_per_round,
        **_period(stats),
        "statistics": "sketch broadcast " + _num(cost.startup) + " channel uses",
        **getattr(c, "topology_details", {})},
        startup_cost=0.0, total_cost=startup)
    local = Node("Local SGD", {
        "model": w.model, "d": result.context.d, "local_steps": w.local_steps, "lr": w.lr,
        "momentum": w.momentum, "batch_size": w.batch_size})
    children = [local]
    if plan.effective_algorithm == "dllr_oa":
        children.append(Node("Layer Mask", {
            "k": plan.k_ratio, "coords": pr.coords,
            "mask": "each receiver draws its own k of the model's tensors (layers) every round "
                    "and mixes only them; its neighbours send those tensors, two coordinates "
                    "per channel use",
            "order": "receivers one after the other, in place (later ones hear mixed models)",
            "residual": "unmasked tensors are not mixed that round"}))
    elif plan.k_ratio < 1:
        children.append(Node("Rand-k Sparsify", {
            "k": plan.k_ratio, "coords": pr.coords,
            "mask": "the same random coordinates for every client (shared seed), new each round; "
                    "two per channel use",
            "residual": "unsent coordinates are sent in later rounds (CHOCO)"}))
    exchange = clique_exchange_cost(plan, result.context.d)
    if exchange is not None:
        children.append(Node("Clique Averaging", {
            "cliques": exchange.cliques, "payload": f"full update, {result.context.d} coords",
            "slots": exchange.slots, "channel_uses_per_round": exchange.channel_uses,
            "residual_heterogeneity": plan.topology.param_dict.get("residual")}))
    ota_attrs = {"channel": plan.channel.kind, "algorithm": plan.effective_algorithm,
                 "weights": plan.topology.weights, "slots": stats.slots_per_round,
                 "channel_uses_per_round": pr.channel_uses - (exchange.channel_uses
                                                              if exchange else 0.0)}
    server = plan.effective_algorithm in SERVER_ALGORITHMS
    if server:
        ota_attrs.pop("weights")
        ota_attrs["slots"] = pr.slots
    if plan.transport != "ota" or server or payload_vectors(plan.effective_algorithm) > 1 \
            or extra_reals(plan.effective_algorithm, plan.transport,
                           plan.channel.kind != "ideal"):
        ota_attrs = {**dict(list(ota_attrs.items())[:2]), "transport": plan.transport,
                     **operator_terms(plan, pr, result.context.d),
                     **dict(list(ota_attrs.items())[2:])}
    if plan.channel.kind == "ota":
        ota_attrs.update({"snr_db": plan.channel.snr_db, "g_th": plan.channel.g_th,
                          "truncation": 1 - plan.channel.active_probability,
                          "tx_power_dbm": plan.channel.tx_power_dbm})
    if plan.channel.dropout:
        ota_attrs["dropout"] = plan.channel.dropout
    children.append(Node(consensus_node(plan), ota_attrs,
                         actual={k: act[k] for k in ("actual_link_drop_rate",) if k in act}))
    loop_attrs = {"per_round_cost": per_round_obj,
                  "rounds_interval": _interval(est.rounds_lo, est.rounds_hi)}
    if plan.mix_rounds:   # the budget's last rounds only mix (plans/finish.py)
        budget = result.context.round_budget
        loop_attrs["mixing_only_rounds"] = (f"{plan.mix_rounds} (rounds "
                                            f"{budget - plan.mix_rounds + 1}..{budget})"
                                            + (f" on the {plan.mix_on} graph"
                                               if plan.mix_on else ""))
        tail = cost.tail
        if tail is not None:   # the tail's rounds cost a round of the graph it mixes on
            loop_attrs["tail_per_round_channel_uses"] = tail.channel_uses
    loop = Node("Gossip Loop", loop_attrs,
                startup_cost=startup, total_cost=total, rounds=est.rounds,
                actual={k: act[k] for k in ("actual_rounds_run", "actual_channel_uses")
                        if k in act},
                children=tuple(children))
    top_attrs = {"plan": plan.label(), "estimator": result.estimator,
                 "objective": result.objective}
    if est.p_meets is not None:
        top_attrs["p_meets_sla"] = est.p_meets
        top_attrs["confidence"] = result.request.confidence
        top_attrs["rounds_90"] = _interval(est.rounds_lo, est.rounds_hi)
    if est.accuracy_lo is not None:
        top_attrs["accuracy_interval"] = _interval(est.accuracy_lo, est.accuracy_hi)
    return Node("Decentralized Train", top_attrs, startup_cost=startup, total_cost=total,
                rounds=est.rounds, accuracy=est.accuracy,
                actual={k: v for k, v in act.items() if k in (
                    "actual_rounds", "actual_accuracy", "actual_total_cost", "status")},
                children=(loop, setup) + ((pilot_node(result),) if pilot is not None else ()))


def pilot_node(result) -> Node:
    """The ``Reference Pilot`` node: the fully connected plan trained before the choice, what
    the planner read from it and its measured traffic (part of every plan's cost)."""
    pilot = result.request.pilot
    terms = result.chosen.cost.estimate.terms
    crossed = terms.get("reference_crossed")
    how = ("reached within the pilot" if crossed else "read from an approach fitted to the "
           "pilot's curve") if crossed is not None else None
    log_t = terms.get("log_t_fc_measured")
    return Node("Reference Pilot", {
        "plan": "complete [metropolis_hastings] k=1", "exec_id": pilot.exec_id,
        "pilot_rounds": f"{pilot.rounds} of {pilot.budget}", "fc": result.fc_accuracy,
        "fc_rounds_to_target": None if log_t is None else math.exp(log_t),
        "measured": how, "channel_uses": pilot.channel_uses, "energy_j": pilot.energy_j,
        "airtime_s": pilot.airtime_s, "bits": pilot.bits,
        **({"continued": "by the chosen plan, from its last round"}
           if result.chosen.cost.continues_pilot else {})},
        startup_cost=0.0, total_cost=pilot.total(result.objective), rounds=pilot.rounds)


def consensus_node(plan) -> str:
    """The node that names how a round's messages travel: over the air, as packets, through a
    server, or noiselessly (the ideal channel)."""
    if plan.effective_algorithm in SERVER_ALGORITHMS:
        return "Server Averaging"
    if plan.transport == "digital":
        return "Digital Consensus"
    return "OTA Consensus" if plan.channel.kind == "ota" else "Noiseless Consensus"


def operator_terms(plan, pr, d: int) -> dict[str, Any]:
    """The cost terms of a plan's transport and algorithm: the reals a message carries, and for
    a digital plan its bits per coordinate, message bits and rate (bits per channel use)."""
    alg = plan.effective_algorithm
    out: dict[str, Any] = {}
    extra = extra_reals(alg, plan.transport, plan.channel.kind != "ideal")
    if payload_vectors(alg) > 1 or extra:
        out["payload_reals"] = payload_vectors(alg) * pr.coords + extra
    if alg in SERVER_ALGORITHMS:
        out["uplink"] = ("one slot for all clients (over the air)" if plan.transport == "ota"
                         else "one slot per client (TDMA)")
    if plan.transport == "digital":
        out.update({"bits_per_coord": plan.bits, "message_bits": pr.message_bits,
                    "rate_bits_per_use": pr.rate})
    return out


def operator_difference(chosen, other) -> str | None:
    """How ``other`` differs from ``chosen`` in transport and algorithm, with the per-round
    channel uses and the rounds it trades (None when both use the same operators)."""
    a, b = chosen.plan, other.plan
    parts = []
    if (a.transport, a.bits) != (b.transport, b.bits):
        parts.append(f"transport {transport_label(b.transport, b.bits)} instead of "
                     f"{transport_label(a.transport, a.bits)}")
    if a.effective_algorithm != b.effective_algorithm:
        parts.append(f"algorithm {b.effective_algorithm} instead of {a.effective_algorithm}")
    if not parts:
        return None
    text = " and ".join(parts)
    ratios = []
    if chosen.cost.per_round.channel_uses:
        ratios.append(f"{other.cost.per_round.channel_uses / chosen.cost.per_round.channel_uses:.3g}"
                      "x the channel uses per round")
    if chosen.cost.rounds and other.cost.rounds:
        ratios.append(f"{other.cost.rounds / chosen.cost.rounds:.3g}x the rounds")
    return text + (": " + ", ".join(ratios) if ratios else "")


#: The rounds of a period whose slots EXPLAIN lists (a drawn sequence has hundreds).
SHOWN_ROUNDS = 32


def _period(stats) -> dict[str, Any]:
    """The period of a time-varying topology (nothing for a static one): its rounds, how much
    one period contracts the disagreement, and the slots of each round."""
    if stats.period <= 1:
        return {}
    rho = stats.spectra.period_rho
    return {"period": stats.period,
            "period_contraction": ("exact averaging" if rho is not None and rho < 1e-12
                                   else rho),
            "slots_by_round": " ".join(str(ph.slots) for ph in stats.phases[:SHOWN_ROUNDS])
            + (f" ... ({stats.period} rounds)" if stats.period > SHOWN_ROUNDS else "")}


def _interval(lo, hi):
    if lo is None or hi is None:
        return None
    return [lo, hi]


def render(result, *, format: str = "text", verbose: bool = False, costs: bool = True,
           alternatives: int = 0, analyze: dict[str, Any] | None = None) -> str:
    fmt = format.lower()
    if fmt not in ("text", "json"):
        from ..errors import ValidationError

        raise ValidationError(f"EXPLAIN format must be TEXT or JSON, got {format!r}")
    tree = build_tree(result, analyze)
    if fmt == "json":
        return json.dumps([_json_doc(result, tree, verbose, alternatives, analyze)], indent=2)
    return _text(result, tree, verbose, costs, alternatives, analyze)


# ---- text ------------------------------------------------------------------------------------

def _text_node(node: Node, depth: int, costs: bool, verbose: bool, lines: list[str]) -> None:
    head = node.node_type
    parts = []
    if costs and node.total_cost is not None or (costs and node.startup_cost is not None):
        parts.append(f"cost={_cost(node.startup_cost)}..{_cost(node.total_cost)}")
    if node.rounds is not None or node.node_type in ("Decentralized Train", "Gossip Loop"):
        parts.append(f"rounds={_rounds(node.rounds)}")
    if node.accuracy is not None:
        parts.append(f"acc={node.accuracy:.3f}")
    if parts:
        head += "  (" + " ".join(parts) + ")"
    if node.actual:
        shown = []
        for k, v in node.actual.items():
            name = k.replace("actual_", "")
            shown.append(f"{name}={_rounds(v) if name == 'rounds' else _num(v)}")
        head += " (actual " + " ".join(shown) + ")"
    pad = "  " + "      " * (depth - 1) if depth else ""
    lines.append((pad + "->  " if depth else "") + head)
    inner = "  " + "      " * depth if depth else "  "
    shown_attrs = node.attributes if verbose else {
        k: v for k, v in node.attributes.items() if k not in _VERBOSE_ONLY}
    attr_text = " ".join(f"{k}={_fmt_attr(v)}" for k, v in shown_attrs.items() if v is not None)
    if attr_text:
        lines.append(inner + "  " + attr_text)
    for child in node.children:
        _text_node(child, depth + 1, costs, verbose, lines)


_VERBOSE_ONLY = {"lambda2_normalized", "momentum", "rounds_interval", "accuracy_interval",
                 "seed", "max_degree", "statistics", "tx_power_dbm", "estimator", "objective",
                 "cliques", "clique_size", "clique_tv_mean", "random_tv_mean"}


def _fmt_attr(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    text = _num(v)
    return f'"{text}"' if isinstance(v, str) and " " in text else text


def _text(result, tree: Node, verbose, costs, alternatives, analyze) -> str:
    lines: list[str] = []
    _text_node(tree, 0, costs, verbose, lines)
    sla = result.request.sla
    lines.append(f"SLA: {sla.render()}  => {sla.accuracy_metric} >= {result.target_accuracy:.4f} "
                 f"(fc = {result.fc_accuracy:.4f} after {result.context.round_budget} rounds, "
                 f"{fc_source(result)})")
    lines.append(f"Figures: {figures_legend(result, bool(analyze))}")
    bd = result.chosen.cost.breakdown()
    lines.append("Cost Breakdown: " + " ".join(
        f"{k}={_rounds(v) if k == 'rounds' else _num(v)}" for k, v in bd.items()
        if k not in ("startup_channel_uses", "per_round_channel_uses",
                      "tail_per_round_channel_uses")))
    ctx = result.context
    lines.append(f"Workload: {result.request.workload.dataset} on "
                 f"{result.request.workload.clients} clients, {alpha_text(result)}, d={ctx.d}")
    cand = _candidates(result)
    pruned = ", ".join(f"{k}: {v}" for k, v in cand["pruned"].items()) or "none"
    line = f"Candidates: {cand['considered']} considered, {cand['pruned_total']} pruned ({pruned})"
    ru = cand["runner_up"]
    if ru:
        line += f"; runner-up {ru['plan']} {ru['gap_pct']:+.1f}%"
    if cand.get("by_transport"):
        line += "; by transport: " + ", ".join(
            f"{transport_label(x['transport'], x['bits_per_coord'])} {x['count']}"
            for x in cand["by_transport"])
    lines.append(line)
    lines.append(f"Why chosen: {why_chosen(result)}")
    if verbose:
        terms = result.chosen.cost.estimate.terms
        lines.append("Estimator Terms: " + " ".join(f"{k}={_num(v)}" for k, v in terms.items()))
        consts = " ".join(f"{k}={_num(v)}" for k, v in ctx.constants.items())
        ids = ", ".join(map(str, ctx.calibration_ids)) or "none (priors)"
        lines.append(f"Calibration: {result.estimator} {consts}; calibration ids: {ids}")
    for alt in _alternatives(result, alternatives):
        chance = ""
        if alt.get("p_meets_sla") is not None:
            chance = (f" p_meets_sla={_num(alt['p_meets_sla'])} "
                      f"rounds_90={_fmt_attr(alt['rounds_90'])}")
        lines.append(f"Alternative {alt['rank']}: {alt['plan']} rounds={_rounds(alt['rounds'])} "
                     f"acc={_num(alt['accuracy'])} total_cost={_cost(alt['total_cost'])}{chance}"
                     f" lost: {alt['lost']}")
    for warn in result.warnings:
        lines.append(f"WARNING: {warn}")
    lines.append(f"Glossary: {GLOSSARY} explains every name above")
    lines.append(f"Planning Time: {result.planning_time_ms:.3f} ms")
    if analyze:
        for fb in analyze.get("feedback", []):
            lines.append(f"Feedback: {fb['metric']} estimated={_num(fb['estimated'])} "
                         f"actual={_num(fb['actual'])}"
                         + (" (censored)" if fb.get("censored") else ""))
        if analyze.get("calibration"):
            lines.extend(f"Calibration: {line}" for line in analyze["calibration"].splitlines())
        for ev in analyze.get("events", []):
            lines.append(f"Event: {ev}")
        if analyze.get("device"):
            lines.append(f"Device: {analyze['device']}")
        if analyze.get("exec_id") is not None:
            lines.append(execution_line(analyze))
        if "execution_time_ms" in analyze:
            lines.append(f"Execution Time: {analyze['execution_time_ms']:.3f} ms")
    return "\n".join(lines)


# ---- shared pieces ---------------------------------------------------------------------------

def _reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def _candidates(result) -> dict[str, Any]:
    pruned = Counter(_reason_kind(c.pruned_reason) for c in result.candidates
                     if c.pruned_reason)
    ru = result.runner_up()
    chosen_total = result.chosen.cost.total()
    runner = None
    if ru is not None:
        gap = (ru.cost.total() / chosen_total - 1) * 100 if chosen_total else 0.0
        runner = {"plan": ru.plan.label(), "total_cost": ru.cost.total(), "gap_pct": gap}
        diff = operator_difference(result.chosen, ru)
        if diff is not None:
            runner["differs"] = diff
    out = {"considered": len(result.candidates), "pruned_total": sum(pruned.values()),
           "pruned": dict(sorted(pruned.items())), "runner_up": runner}
    transports = Counter((c.plan.transport, c.plan.bits) for c in result.candidates)
    if len(transports) > 1:
        out["by_transport"] = [{"transport": t, "bits_per_coord": b, "count": n}
                               for (t, b), n in transports.items()]
    return out


def _alternatives(result, n: int) -> list[dict[str, Any]]:
    out = []
    for c in [c for c in result.candidates if c is not result.chosen][:max(0, n)]:
        e = c.cost.estimate
        item = {"rank": c.rank, "plan": c.plan.label(), "rounds": c.cost.rounds,
                "accuracy": e.accuracy, "total_cost": c.cost.total(),
                "pruned_reason": c.pruned_reason, "lost": _lost(result, c)}
        if e.p_meets is not None:
            item["p_meets_sla"] = e.p_meets
            item["rounds_90"] = _interval(e.rounds_lo, e.rounds_hi)
        out.append(item)
    return out


def _lost(result, c) -> str:
    """Why a candidate was not chosen: pruned (its reason) or dearer than the chosen plan."""
    if c.pruned_reason:
        return c.pruned_reason
    chosen = result.chosen.cost.total()
    total = c.cost.total()
    diff = operator_difference(result.chosen, c)
    if chosen and total is not None:
        return (f"dearer by {100.0 * (total / chosen - 1.0):+.1f}% ({result.objective})"
                + (f"; {diff}" if diff else ""))
    return "ranked lower" + (f"; {diff}" if diff else "")


def fc_source(result) -> str:
    """Where the SLA's fc came from: the estimator's prediction or a pilot's measurement."""
    pilot = result.request.pilot
    if pilot is None:
        return f"predicted by the {result.estimator} model, not measured"
    if pilot.rounds >= pilot.budget:
        return f"measured by the reference pilot, execution {pilot.exec_id}"
    return (f"extrapolated from the reference pilot's {pilot.rounds} rounds, execution "
            f"{pilot.exec_id}")


def figures_legend(result, analyze: bool = False) -> str:
    """What the numbers on the plan nodes are (and, under ANALYZE, the actual ones)."""
    est = result.chosen.cost.estimate
    rounds = ("expected rounds paid, E[min(T, budget)], T the rounds to the target"
              if est.p_meets is not None else "predicted rounds to the target")
    paid = ("the statistics broadcast" if result.request.pilot is None
            else "the statistics broadcast and the reference pilot")
    text = (f"cost=startup..total {result.objective} (startup = {paid}); "
            f"rounds = {rounds}; acc = predicted accuracy of the clients' own models after "
            f"the {result.context.round_budget}-round budget")
    if analyze:
        text += ("; actual: rounds = the round the target was reached (rounds count from 1; "
                 "no round 0 is evaluated), rounds_run = rounds trained (the run stops one "
                 "round after the crossing, which the smoothed curve confirms), channel_uses "
                 "over rounds_run, accuracy = the clients' own models at the last round run "
                 "(Feedback: accuracy compares it with the prediction for that round)")
    return text


def alpha_text(result) -> str:
    """The requested label skew beside the one the planner used (estimated or given)."""
    ctx = result.context
    asked = result.request.workload.alpha
    used = f"{_num(ctx.alpha)} ({ctx.alpha_source})"
    if result.request.workload.partition != "dirichlet":
        return f"alpha={used}"
    if ctx.alpha is not None and math.isclose(float(ctx.alpha), float(asked), rel_tol=1e-9):
        return f"alpha={used}"
    return f"alpha requested={_num(asked)}, planned with {used}"


def execution_line(analyze: dict[str, Any]) -> str:
    """The ``Execution:`` line of EXPLAIN ANALYZE: which execution, its outcome, and its
    figures under their ``executions`` column names."""
    line = f"Execution: exec_id={analyze['exec_id']} status={analyze['status']}"
    if analyze.get("actual_rounds_run") is not None:
        line += f" rounds_run={analyze['actual_rounds_run']} (executions.actual_rounds)"
    if analyze.get("actual_accuracy") is not None:
        line += f" accuracy={_num(analyze['actual_accuracy'])} (executions.client_acc_mean)"
    if analyze.get("actual_avg_model_accuracy") is not None:
        line += (f" avg_model_accuracy={_num(analyze['actual_avg_model_accuracy'])} "
                 "(executions.final_accuracy)")
    if analyze.get("reason"):
        line += f" reason={json.dumps(analyze['reason'])}"
    return line


def why_chosen(result) -> str:
    """One line: the binding rule and the margin to the runner-up."""
    chosen = result.chosen
    est = chosen.cost.estimate
    if result.fallback:
        return ("no candidate met every constraint; the fully connected, uncompressed plan is "
                "the fallback")
    text = f"cheapest plan by {result.objective} that passed every check"
    if est.p_meets is not None:
        text += (f" (p_meets_sla={_num(est.p_meets)} >= confidence "
                 f"{result.request.confidence:g})")
    total = chosen.cost.total()
    cheaper = Counter(_reason_kind(c.pruned_reason) for c in result.candidates
                      if c.pruned_reason and total is not None
                      and (c.cost.total() or math.inf) < total)
    if cheaper:
        pruned = sum(1 for c in result.candidates if c.pruned_reason)
        text += (f"; {sum(cheaper.values())} of the {pruned} pruned plans were cheaper ("
                 + ", ".join(f"{k}: {v}" for k, v in sorted(cheaper.items())) + ")")
    ru = result.runner_up()
    if ru is not None and total:
        text += f"; runner-up {ru.plan.label()} costs {100 * (ru.cost.total() / total - 1):+.1f}%"
        if ru.cost.estimate.p_meets is not None:
            text += f" (p_meets_sla={_num(ru.cost.estimate.p_meets)})"
        diff = operator_difference(chosen, ru)
        if diff is not None:
            text += f"; it differs in {diff}"
    return text


# ---- JSON ------------------------------------------------------------------------------------

def _json_node(node: Node) -> dict[str, Any]:
    out: dict[str, Any] = {"node_type": node.node_type}
    if node.total_cost is not None or node.startup_cost is not None:
        out["startup_cost"] = node.startup_cost
        out["total_cost"] = node.total_cost
    if node.node_type in ("Decentralized Train", "Gossip Loop"):
        out["plan_rounds"] = node.rounds
    if node.accuracy is not None:
        out["plan_accuracy"] = node.accuracy
    out.update({k: _clean(v) for k, v in node.attributes.items()})
    out.update({k: _clean(v) for k, v in node.actual.items()})
    if node.children:
        out["plans"] = [_json_node(ch) for ch in node.children]
    return out


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def _json_doc(result, tree: Node, verbose, alternatives, analyze) -> dict[str, Any]:
    ctx = result.context
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "planning_time_ms": result.planning_time_ms,
        "planning_run_id": result.planning_run_id,
        "plan_id": result.chosen.plan_id,
        "estimator": result.estimator,
        "objective": result.objective,
        "plan": _json_node(tree),
        "sla": {"text": result.request.sla.render(), "accuracy_threshold": result.target_accuracy,
                "fc_accuracy": result.fc_accuracy, "round_budget": ctx.round_budget,
                **({"fc_source": fc_source(result)} if result.request.pilot else {})},
        "cost_breakdown": _clean(result.chosen.cost.breakdown()),
        "candidates": _clean(_candidates(result)),
        "why_chosen": why_chosen(result),
        "figures": figures_legend(result, bool(analyze)),
        "workload": {"dataset": result.request.workload.dataset,
                     "clients": result.request.workload.clients, "alpha": _clean(ctx.alpha),
                     "alpha_requested": result.request.workload.alpha,
                     "alpha_source": ctx.alpha_source, "d": ctx.d},
        "fallback": result.fallback,
        "warnings": list(result.warnings),
        "glossary": GLOSSARY,
    }
    if verbose:
        doc["estimator_terms"] = _clean(result.chosen.cost.estimate.terms)
        doc["calibration"] = {"constants": ctx.constants,
                              "calibration_ids": list(ctx.calibration_ids)}
    if alternatives:
        doc["alternatives"] = _clean(_alternatives(result, alternatives))
    if analyze:
        doc["execution_time_ms"] = analyze.get("execution_time_ms")
        if analyze.get("device"):
            doc["device"] = analyze["device"]
        doc["feedback"] = _clean(analyze.get("feedback", []))
        if analyze.get("events"):
            doc["events"] = list(analyze["events"])
        if analyze.get("calibration"):
            doc["calibration_refit"] = analyze["calibration"]
        if analyze.get("exec_id") is not None:
            doc["execution"] = {"exec_id": analyze["exec_id"], "status": analyze["status"],
                                "reason": analyze.get("reason")}
    return doc
