"""Figures of an advisor evaluation (matplotlib PNG files, imported only when drawing).

Each function draws one figure from an :class:`~airplan_qo.evaluation.analysis.Analysis` and
returns the path written. The object-oriented matplotlib API is used (no pyplot state), so
drawing needs no display and leaves the caller's backend alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
import numpy as np

FAMILY_ORDER = ("ring", "exponential", "torus", "k_regular", "small_world", "erdos_renyi",
                "clustered", "star", "complete")
_MARKERS = {1.0: "o"}


def _figure(w: float, h: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def _short_power(x: float, _pos: int = 0) -> str:
    """A log-axis tick as ``2e5`` (``1e5`` for powers of ten): short enough not to overlap."""
    if x <= 0:
        return ""
    exp = int(math.floor(math.log10(x) + 1e-9))
    mant = x / 10 ** exp
    return f"{mant:.0f}e{exp}" if abs(mant - round(mant)) < 1e-6 else f"{x:.2g}"


def _log(ax, which: str = "x") -> None:
    """A log scale whose labels do not overlap: ticks at 1, 2 and 5 times the powers of ten,
    labelled ``2e5``, and unlabelled minor ticks (matplotlib labels the minor ticks of a
    short log range as ``3 x 10^4`` and they run into each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_short_power))
    axis.set_minor_formatter(NullFormatter())


def _order(families) -> list[str]:
    fams = set(f for f in families if f is not None)
    known = [f for f in FAMILY_ORDER if f in fams]
    return known + sorted(fams - set(known))


def _colours(families) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {f: cmap(i % 10) for i, f in enumerate(_order(families))}


def write_figures(analysis, out_dir: str | Path) -> list[Path]:
    """Draw every figure into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [confusion_matrix(analysis, out / "confusion_matrix.png"),
             predicted_vs_actual(analysis, out / "predicted_vs_actual_rounds.png"),
             pareto_fronts(analysis, out / "pareto_fronts.png"),
             fairness_cdf(analysis, out / "fairness_cdf.png"),
             accuracy_vs_dropout(analysis, out / "accuracy_vs_dropout.png"),
             scalability(analysis, out / "scalability.png")]
    return [p for p in paths if p is not None]


def confusion_matrix(analysis, path: Path) -> Path:
    """Advisor family (columns) against oracle family (rows), before and after calibration;
    colour = fraction of the row, text = count."""
    panels = [("priors", [(w.before.oracle_family, w.before.advisor_family)
                          for w in analysis.workloads])]
    if any(w.after is not None for w in analysis.workloads):
        panels.append(("calibrated (cross-validated)",
                       [(w.after.oracle_family, w.after.advisor_family)
                        for w in analysis.workloads if w.after is not None]))
    fams = _order({f for _, pairs in panels for p in pairs for f in p})
    rows = fams + (["none"] if any(o is None for _, pairs in panels for o, _ in pairs) else [])
    fig = _figure(4.6 * len(panels) + 0.6, 4.4)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, pairs) in zip(axes, panels):
        counts = np.zeros((len(rows), len(fams)))
        for o, a in pairs:
            counts[rows.index(o if o is not None else "none"), fams.index(a)] += 1
        frac = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        im = ax.imshow(frac, cmap="Blues", vmin=0, vmax=1)
        for i in range(len(rows)):
            for j in range(len(fams)):
                if counts[i, j]:
                    ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center",
                            color="white" if frac[i, j] > 0.5 else "black", fontsize=9)
        hits = sum(1 for o, a in pairs if o is not None and o == a)
        n = sum(1 for o, _ in pairs if o is not None)
        ax.set_title(f"{title}: family match {hits}/{n}", fontsize=10)
        ax.set_xticks(range(len(fams)), fams, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xlabel("advisor's family")
        ax.set_ylabel("oracle's family")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="fraction of the oracle's row")
    fig.savefig(path)
    return path


def predicted_vs_actual(analysis, path: Path) -> Path:
    """Predicted against measured rounds to the target, uncensored runs, log-log."""
    panels = [("priors", "before")]
    if any(p.after is not None for p in analysis.predictions):
        panels.append(("calibrated (cross-validated)", "after"))
    colours = _colours(p.family for p in analysis.predictions)
    fig = _figure(4.8 * len(panels), 4.4)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, attr) in zip(axes, panels):
        pts = [(p.family, getattr(p, attr), p.actual) for p in analysis.predictions
               if not p.censored and getattr(p, attr) is not None]
        never = sum(1 for p in analysis.predictions
                    if not p.censored and getattr(p, attr) is None)
        for fam in _order({f for f, _, _ in pts}):
            xs = [a for f, _, a in pts if f == fam]
            ys = [e for f, e, _ in pts if f == fam]
            ax.scatter(xs, ys, s=14, alpha=0.7, color=colours[fam], label=fam)
        if pts:
            lo = min(min(a for _, _, a in pts), min(e for _, e, _ in pts))
            hi = max(max(a for _, _, a in pts), max(e for _, e, _ in pts))
            ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--")
            ape = [abs(e - a) / a * 100 for _, e, a in pts]
            title += f": MAPE {np.mean(ape):.1f}% (n={len(pts)})"
        if never:
            title += f", {never} 'never'"
        _log(ax, "x")
        _log(ax, "y")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("measured rounds to the target")
        ax.set_ylabel("predicted rounds")
        ax.legend(fontsize=7)
    fig.savefig(path)
    return path


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated points (lower cost, higher accuracy), sorted by cost."""
    front, best = [], -math.inf
    for c, a in sorted(points, key=lambda p: (p[0], -p[1])):
        if a > best:
            front.append((c, a))
            best = a
    return front


def pareto_fronts(analysis, path: Path, max_panels: int = 6) -> Path:
    """Accuracy against channel uses to the target per candidate (seed means), coloured by
    topology family, with the Pareto front, the target, the oracle and the advisor's picks."""
    ws = list(analysis.workloads)
    ref = analysis.grid.reference
    order = [ref] + [i for i in np.linspace(0, len(ws) - 1, max_panels).round().astype(int)
                     if i != ref]
    chosen = list(dict.fromkeys(order))[:max_panels]
    colours = _colours(s.family for w in ws for s in w.summaries.values())
    cols = min(3, len(chosen))
    rows = math.ceil(len(chosen) / cols)
    fig = _figure(4.4 * cols, 3.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(chosen):]:
        ax.set_visible(False)
    for ax, i in zip(axes, chosen):
        w = ws[i]
        cands = [w.summaries[p] for p in w.candidates]
        for s in cands:
            ax.scatter(s.cost, 100 * s.accuracy, color=colours[s.family],
                       marker="o" if _k_of(s.plan) >= 1 else "^", s=28,
                       edgecolor="black" if s.meets_sla else "none", linewidth=0.6)
        front = _pareto([(s.cost, 100 * s.accuracy) for s in cands])
        ax.plot([c for c, _ in front], [a for _, a in front], color="grey", lw=1, ls="-")
        ax.axhline(100 * w.target, color="red", lw=0.8, ls=":")
        if w.oracle is not None:
            ax.scatter(w.oracle.cost, 100 * w.oracle.accuracy, marker="*", s=180,
                       facecolor="none", edgecolor="red", linewidth=1.2, label="oracle")
        b = w.summaries[w.before.advisor_plan]
        ax.scatter(b.cost, 100 * b.accuracy, marker="x", s=70, color="black",
                   label="advisor (priors)")
        if w.after is not None:
            a = w.summaries[w.after.advisor_plan]
            ax.scatter(a.cost, 100 * a.accuracy, marker="+", s=110, color="purple",
                       label="advisor (calibrated)")
        _log(ax, "x")
        ax.set_title(w.key, fontsize=8)
        ax.set_xlabel("channel uses to the target (mean over seeds)", fontsize=8)
        ax.set_ylabel("final accuracy (%)", fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [_proxy(colours[f], "o") for f in colours]
    fig.legend(handles, list(colours), loc="outside lower center", ncol=min(6, len(colours)),
               fontsize=8, title="circle: k = 1, triangle: k < 1; outlined: meets the SLA; "
                                 "dotted: target", title_fontsize=7)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.savefig(path)
    return path


def _k_of(label: str) -> float:
    try:
        return float(label.rsplit("k=", 1)[1])
    except (IndexError, ValueError):
        return 1.0


def _proxy(colour, marker):
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, marker=marker, ls="")


def fairness_cdf(analysis, path: Path) -> Path:
    """CDF of per-client final accuracy (pooled over seeds) per topology family, for the
    reference workload's fixed-topology plans."""
    ref = analysis.workloads[analysis.grid.reference]
    fixed = analysis.fixed_plans.get(ref.key, {})
    colours = _colours(fixed)
    fig = _figure(5.6, 4.2)
    ax = fig.subplots()
    for fam in _order(fixed):
        accs = sorted(100 * a for r in analysis.runs if r.workload == ref.key
                      and r.plan == fixed[fam] for a in r.client_accuracies)
        if not accs:
            continue
        y = np.arange(1, len(accs) + 1) / len(accs)
        ax.step(accs, y, where="post", color=colours[fam],
                label=f"{fam} (var {np.var(np.array(accs) / 100) * 1e3:.1f}e-3)")
    ax.set_xlabel("per-client final test accuracy (%)")
    ax.set_ylabel("fraction of clients")
    ax.set_title(f"fairness: {ref.key}", fontsize=9)
    ax.legend(fontsize=7)
    fig.savefig(path)
    return path


def dropout_groups(analysis) -> dict[Any, list[Any]]:
    """Workloads that differ only in dropout, grouped (groups with one level included)."""
    groups: dict[Any, list[Any]] = defaultdict(list)
    for w in analysis.workloads:
        s = w.spec
        key = (attrs.evolve(s.workload, dropout=0.0), s.topologies, s.sparsity, s.weights, s.sla)
        groups[key].append(w)
    return groups


def accuracy_vs_dropout(analysis, path: Path) -> Path:
    """Mean final accuracy of each family's fixed-topology plan against the client dropout
    rate (averaged over the groups of workloads that differ only in dropout)."""
    groups = [g for g in dropout_groups(analysis).values() if len(g) > 1]
    single = not groups
    if single:
        groups = list(dropout_groups(analysis).values())
    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    picks: dict[float, list[str]] = defaultdict(list)
    for g in groups:
        for w in g:
            d = w.spec.workload.dropout
            for fam, plan in analysis.fixed_plans.get(w.key, {}).items():
                series[fam][d].append(100 * w.summaries[plan].accuracy)
            picks[d].append(w.before.advisor_family)
    colours = _colours(series)
    fig = _figure(5.6, 4.2)
    ax = fig.subplots()
    for fam in _order(series):
        ds = sorted(series[fam])
        ax.plot([100 * d for d in ds], [np.mean(series[fam][d]) for d in ds], marker="o",
                color=colours[fam], label=fam)
    title = "accuracy vs client dropout (fixed-topology plans)"
    if single:
        title += "\nthe grid has no workloads that differ only in dropout"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("client dropout per round (%)")
    ax.set_ylabel("final accuracy (%), mean over workloads and seeds")
    ax.legend(fontsize=7)
    fig.savefig(path)
    return path


def scalability(analysis, path: Path) -> Path | None:
    """Cost-model extrapolation of the reference workload to more clients: predicted rounds
    and channel uses to the target per family (calibrated constants where fitted, priors
    dashed), measured points at the grid's client count."""
    rows = list(analysis.scalability)
    if not rows:
        return None
    colours = _colours(r["family"] for r in rows)
    fig = _figure(10.0, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    styles = {"calibrated": "-", "priors": "--"}
    for which in ("priors", "calibrated"):
        for fam in _order({r["family"] for r in rows}):
            pts = sorted((r["clients"], r["rounds"], r["channel_uses"]) for r in rows
                         if r["family"] == fam and r["constants"] == which)
            pts = [p for p in pts if p[1] is not None]
            if not pts:
                continue
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], ls=styles[which],
                     color=colours[fam], marker=".")
            ax2.plot([p[0] for p in pts], [p[2] for p in pts], ls=styles[which],
                     color=colours[fam], marker=".")
    ref = analysis.workloads[analysis.grid.reference]
    n = ref.spec.workload.clients
    for fam, plan in analysis.fixed_plans.get(ref.key, {}).items():
        s = ref.summaries[plan]
        if fam in colours:
            ax1.scatter([n], [s.rounds], color=colours[fam], marker="s", s=40,
                        edgecolor="black", zorder=3)
            ax2.scatter([n], [s.cost], color=colours[fam], marker="s", s=40, edgecolor="black",
                        zorder=3)
    for ax in (ax1, ax2):
        _log(ax, "x")
        _log(ax, "y")
        ax.axvline(n, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("clients N")
    ax1.set_ylabel("predicted rounds to the target")
    ax2.set_ylabel("predicted channel uses to the target")
    ax1.set_title("solid: calibrated, dashed: priors, squares: measured", fontsize=8)
    ax2.set_title(f"extrapolated from {ref.key}", fontsize=8)
    ax1.legend([_proxy(colours[f], "s") for f in colours], list(colours), fontsize=7)
    fig.savefig(path)
    return path


__all__ = ["write_figures", "confusion_matrix", "predicted_vs_actual", "pareto_fronts",
           "fairness_cdf", "accuracy_vs_dropout", "scalability", "dropout_groups"]


# ---- executions ------------------------------------------------------------------------------

def execution_curves(catalog, exec_ids, path: str | Path) -> Path:
    """Measured curves of executions beside their predictions, one column per execution.

    Top: the mean accuracy of the clients' own models (the SLA's ``accuracy``) and the
    average model's accuracy per round, the planner's predicted curve (and its lower band where
    the estimator gives one), the target line, the predicted rounds-to-target interval (shaded)
    and re-optimisation events (vertical lines). Bottom: the consensus distance. Raises
    :class:`~airplan_qo.errors.ValidationError` for an unknown execution id."""
    import json

    from .errors import ValidationError

    ids = [int(i) for i in exec_ids]
    if not ids:
        raise ValidationError("plot needs at least one execution id")
    fig = _figure(4.2 * len(ids), 5.6)
    axes = fig.subplots(2, len(ids), squeeze=False, sharex="col",
                        gridspec_kw={"height_ratios": [2, 1]})
    for col, eid in enumerate(ids):
        rows = catalog.query("SELECT e.exec_id, e.options, e.status, p.family, p.k_ratio, "
                             "p.terms::VARCHAR AS terms FROM airplan.executions e "
                             "LEFT JOIN airplan.plans p ON p.plan_id = e.plan_id "
                             "WHERE e.exec_id = ?", [eid])
        if not rows:
            raise ValidationError(f"no execution {eid} in catalog {catalog.path}")
        ex = rows[0]
        options = ex["options"]
        options = json.loads(options) if isinstance(options, str) else (options or {})
        basis = options.get("feedback_basis") or {}
        stats = catalog.query("SELECT round, client_acc_mean, test_accuracy, consensus_distance "
                              "FROM airplan.round_stats WHERE exec_id = ? AND round >= 1 "
                              "ORDER BY round", [eid])
        events = catalog.query("SELECT round, trigger FROM airplan.reoptimizations "
                               "WHERE exec_id = ? ORDER BY round", [eid])
        top, bottom = axes[0][col], axes[1][col]
        acc = [(r["round"], r["client_acc_mean"]) for r in stats
               if r["client_acc_mean"] is not None]
        avg = [(r["round"], r["test_accuracy"]) for r in stats if r["test_accuracy"] is not None]
        if acc:
            top.plot(*zip(*acc), color="C0", label="clients' own models (SLA accuracy)")
        if avg:
            top.plot(*zip(*avg), color="C0", alpha=0.4, linestyle=":", label="average model")
        curve = basis.get("accuracy_curve") or []
        if curve:
            top.plot(range(1, len(curve) + 1), curve, color="C1", linestyle="--",
                     label="predicted")
        lo = basis.get("accuracy_curve_lo") or []
        if lo:
            top.plot(range(1, len(lo) + 1), lo, color="C1", alpha=0.4, linestyle="-.",
                     label="predicted, lower band")
        target = basis.get("target_accuracy")
        if target is not None:
            top.axhline(target, color="C3", linewidth=0.8, label=f"target {target:.3f}")
        terms = json.loads(ex["terms"] or "{}")
        if terms.get("mu") is not None and terms.get("sd") is not None:   # ttt: 90% interval
            half = 1.6448536269514722 * float(terms["sd"])
            top.axvspan(math.exp(min(terms["mu"] - half, 50.0)),
                        math.exp(min(terms["mu"] + half, 50.0)), color="C1", alpha=0.08,
                        label="predicted rounds, 90% interval")
        for ev in events:
            for ax in (top, bottom):
                ax.axvline(ev["round"], color="C2", linewidth=0.8)
        cd = [(r["round"], r["consensus_distance"]) for r in stats
              if r["consensus_distance"] is not None]
        if cd:
            bottom.plot(*zip(*cd), color="C4")
        top.set_title(f"execution {eid}: {ex['family']} k={ex['k_ratio']:g} ({ex['status']})",
                      fontsize=9)
        top.set_ylabel("accuracy")
        top.set_ylim(0, 1)
        last = max([r["round"] for r in stats] + [ev["round"] for ev in events] + [2])
        top.set_xlim(1, last + 0.02 * last)   # the axis ends where the run did, not at the budget
        bottom.set_ylabel("consensus distance")
        bottom.set_xlabel("round")
        if col == 0:
            top.legend(fontsize=7, loc="lower right")
    out = Path(path)
    fig.savefig(out)
    return out


def plan_comparison(catalog, planning_run_id: int, path: str | Path,
                    confidence: float | None = None) -> Path:
    """Every candidate of a planning run: predicted cost (its objective total) against the
    predicted probability of meeting the SLA (estimators with a distribution of rounds; for the
    others, 1 when the plan is predicted to reach the target and 0 when not), coloured by family,
    k as the marker size, the chosen plan a labelled star and ``confidence`` (when given) drawn."""
    import json

    from .errors import ValidationError

    rows = catalog.query("SELECT plan_id, chosen, family, k_ratio, total_cost, pruned_reason, "
                         "terms::VARCHAR AS terms, est_rounds FROM airplan.plans "
                         "WHERE planning_run_id = ? ORDER BY plan_id", [int(planning_run_id)])
    if not rows:
        raise ValidationError(f"no planning run {planning_run_id} in catalog {catalog.path}")
    colours = _colours([r["family"] for r in rows])
    fig = _figure(6.4, 4.4)
    ax = fig.subplots()
    chosen = None
    for r in rows:
        terms = json.loads(r["terms"] or "{}")
        p = terms.get("p_meets")
        if p is None:
            p = 1.0 if r["est_rounds"] is not None else 0.0
        cost = r["total_cost"]
        if cost is None or not math.isfinite(cost):
            continue
        if r["chosen"]:
            chosen = (cost, p, r)
            continue
        ax.scatter(cost, p, s=20 + 60 * float(r["k_ratio"]), color=colours[r["family"]],
                   alpha=0.35 if r["pruned_reason"] else 0.8, edgecolors="none")
    if chosen is not None:   # drawn last, large and outlined, with its name beside it
        cost, p, r = chosen
        ax.scatter(cost, p, s=320, marker="*", color=colours[r["family"]], edgecolors="black",
                   linewidths=1.2, zorder=5, label="chosen plan")
        ax.annotate(f"chosen: {r['family']} k={float(r['k_ratio']):g}", (cost, p),
                    xytext=(8, -14 if p > 0.5 else 10), textcoords="offset points", fontsize=8,
                    fontweight="bold", zorder=6)
    if confidence is not None:
        ax.axhline(float(confidence), color="C3", linewidth=0.8, label=f"confidence {confidence}")
    for fam, col in colours.items():
        ax.scatter([], [], color=col, label=fam)
    _log(ax, "x")
    ax.set_xlabel("predicted cost (objective total)")
    ax.set_ylabel("P(meets SLA)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"planning run {planning_run_id}: candidates (chosen: the star; size ~ k; "
                 "faded: rejected)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    out = Path(path)
    fig.savefig(out)
    return out
