"""The ``airplan`` command.

Every user error (an ``AirPlanError``) prints one paragraph to stderr and exits with status 2;
argparse usage errors exit 2 as well. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from typing import Any, Sequence

from . import __version__
from .errors import AirPlanError, ValidationError

#: Seconds every command waits for a catalog another process holds (``--wait``).
DEFAULT_WAIT = 10.0


def _parse_params(items: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValidationError(f"--param expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _print_mapping(data: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(data, indent=2, sort_keys=False))
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        elif isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        print(f"{key:<{width}}  {value}")


def cmd_topology(args: argparse.Namespace) -> int:
    from .plans.families import read_edge_list
    from .plans.topology import TopologySpec, describe

    params = _parse_params(args.param)
    n = args.clients
    if args.family.lower() == "from_edges":
        if not args.edges:
            raise ValidationError("topology from_edges needs --edges FILE")
        graph = read_edge_list(args.edges)
        params["edges"] = graph
        n = graph.number_of_nodes() if n is None else n
    elif args.edges:
        raise ValidationError("--edges is only valid with the from_edges family")
    if n is None:
        raise ValidationError("--clients N is required")
    spec = TopologySpec.create(args.family, n, seed=args.seed, weights=args.weights, **params)
    _, stats = describe(spec)
    data = stats.as_dict()
    if args.edges:
        data["params"] = {"edges": str(args.edges)}
    _print_mapping(data, args.format)
    return 0


def _workload(args: argparse.Namespace):
    from .plans.workload import Workload

    return Workload.from_params(args.dataset, args.clients, _parse_params(args.param))


def cmd_analyze(args: argparse.Namespace) -> int:
    from .session import connect

    with connect(args.catalog) as db:
        stats = db.analyze(_workload(args))
    data = {k: v for k, v in attrs_dict(stats).items()}
    _print_mapping(data, args.format)
    return 0


def attrs_dict(value: Any) -> dict[str, Any]:
    import attrs

    return attrs.asdict(value)


def _parse_topology(text: str) -> tuple[str, dict[str, Any]]:
    name, sep, rest = text.partition("(")
    params: dict[str, Any] = {}
    if sep:
        if not rest.endswith(")"):
            raise ValidationError(f"topology {text!r}: expected NAME or NAME(key=value, ...)")
        params = _parse_params([p for p in rest[:-1].split(",") if p.strip()])
    return name.strip(), params


def _planning_progress(args: argparse.Namespace):
    """Where the steps of a long planning call go: stderr, when it is a terminal (unless
    --quiet) or --progress asks for them; else nowhere."""
    if not (getattr(args, "progress", False) or
            (sys.stderr.isatty() and not getattr(args, "quiet", False))):
        return None

    def say(message: str) -> None:
        print(f"planning: {message}", file=sys.stderr, flush=True)

    return say


def cmd_explain(args: argparse.Namespace) -> int:
    from .session import connect

    if args.statement:
        text = args.statement.strip()
        if not text.upper().startswith("EXPLAIN"):
            text = "EXPLAIN " + text
        return run_script(text, catalog=args.catalog, fmt=args.format, read_only=False,
                          quiet=True, progress=_planning_progress(args))
    if args.clients is None:
        raise ValidationError("airplan explain needs a statement (\"TRAIN ...\") or --clients N")
    budgets = {}
    if args.within_rounds:
        budgets["rounds"] = args.within_rounds
    with connect(args.catalog) as db:
        result = db.plan(
            _workload(args), sla=args.sla,
            topologies=[_parse_topology(t) for t in args.topology] if args.topology else None,
            weights=args.weights, sparsity=args.sparsity, budgets=budgets,
            estimator=args.estimator, objective=args.objective,
            progress=_planning_progress(args), fallback=args.fallback,
            transports=args.transport, algorithms=args.algorithm,
            mix_rounds=args.mix_rounds)
        print(result.explain(format=args.format, verbose=args.verbose,
                             alternatives=args.alternatives))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    if args.resume is not None:
        return cmd_resume(args)
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationError(f"cannot read SQL file {args.file}: {exc}") from None
    elif args.statements:
        text = args.statements
    else:
        raise ValidationError("airplan sql needs statements (\"...\") or -f FILE")
    return run_script(text, catalog=args.catalog, fmt=args.format, read_only=args.read_only,
                      quiet=args.quiet, progress=_planning_progress(args), device=args.device,
                      **_sql_limits(args))


def run_script(text: str, *, catalog: str | None, fmt: str = "text", read_only: bool = False,
               quiet: bool = False, progress=None, device: str | None = None,
               **limits: Any) -> int:
    """Run a script and print each result; returns the exit status.
    ``progress``: where the steps of a long planning call go (None: nowhere). ``device``: where
    its TRAIN statements train unless they say ``WITH (device = ...)`` (None: the CPU).
    ``limits``: the catalog SQL limits of :func:`airplan_qo.connect` (``timeout``, ...)."""
    from .session import connect
    from .sql.executor import aborted_note, format_result, iter_script

    with connect(catalog, read_only=read_only, device=device, **limits) as session:
        for result in iter_script(session, text, fmt=fmt, quiet=quiet, progress=progress):
            print(format_result(result, fmt), flush=True)
            note = aborted_note(result)
            if note is not None:  # Ctrl-C: stop the script, as the user asked
                print(f"airplan: {note}", file=sys.stderr, flush=True)
                return 130
    return 0


def _sql_limits(args: argparse.Namespace) -> dict[str, Any]:
    return {"allow_external_access": args.allow_external_access, "timeout": args.timeout,
            "memory_limit": args.memory_limit, "threads": args.threads}


def cmd_shell(args: argparse.Namespace) -> int:
    from .shell import Shell

    return Shell(args.catalog, read_only=args.read_only, fmt=args.format, device=args.device,
                 **_sql_limits(args)).run()


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .session import connect

    with connect(args.catalog) as db:
        if args.pilot:
            from .runtime.pilot import run_pilot

            if args.clients is None:
                raise ValidationError("--pilot needs --clients N")
            report = run_pilot(db, args.pilot, args.clients, rounds=args.rounds,
                               params=_parse_params(args.param),
                               estimator=args.estimator or "dsgd",
                               quiet=args.quiet)
        else:
            report = db.calibrate(args.estimator, scope=args.scope, scope_key=args.scope_key,
                                  min_obs=args.min_obs)
        print(report.render())
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from .session import connect

    exec_id = args.resume if getattr(args, "resume", None) is not None else args.exec_id
    with connect(args.catalog) as db:
        report = db.resume(exec_id, quiet=args.quiet, device=args.device)
    r = report.result
    print(f"execution {report.exec_id}: {r.status} after {r.rounds} rounds, "
          f"final accuracy {r.final_accuracy if r.final_accuracy is None else round(r.final_accuracy, 4)}"
          + (f" ({r.reason})" if r.reason else ""))
    if r.status == "aborted":
        print(f"airplan: resume with: airplan resume {report.exec_id}", file=sys.stderr)
        return 130
    return 0 if r.status == "succeeded" else 1


def cmd_abandon(args: argparse.Namespace) -> int:
    from .session import connect

    with connect(args.catalog) as db:
        out = db.abandon(args.exec_id, args.reason)
    removed = (f"; deleted checkpoint {out['checkpoint_removed']}"
               if out["checkpoint_removed"] else "")
    print(f"execution {out['exec_id']}: abandoned (was {out['was']}){removed}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import load_grid, run_evaluation
    from .evaluation.runner import default_workers
    from .session import connect

    if args.quick and args.grid:
        raise ValidationError("give --grid NAME_OR_FILE or --quick, not both")
    if not args.quick and not args.grid:
        raise ValidationError("airplan evaluate needs --grid NAME_OR_FILE (shipped: default, "
                              "quick) or --quick")
    grid = load_grid("quick" if args.quick else args.grid)
    if args.seeds is not None:
        grid = grid.with_seeds(args.seeds)
    if args.folds is not None:
        grid = grid.with_folds(args.folds)
    if args.confidence is not None:
        grid = grid.with_confidence(args.confidence)
    if args.sla is not None:
        grid = grid.with_sla(args.sla)
    out = args.out or f"evaluation-{grid.name}"
    executor = args.executor
    if executor != "local":
        from .evaluation.executors import dask_address

        dask_address(executor)   # a bad address fails before anything is recorded
        if args.workers is not None:
            raise ValidationError("--workers sets the local worker processes; with --executor "
                                  f"{executor} the cluster's workers train (drop --workers)")
    workers = 1 if executor != "local" else \
        default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise ValidationError(f"--workers must be at least 1, got {workers}")
    if workers > 1:
        from .evaluation.executors import start_fork_server

        # the worker processes' fork server imports torch while this process opens the
        # catalog and plans (if every run is cached, no worker process is ever forked)
        start_fork_server()

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with connect(args.catalog) as db:
        report = run_evaluation(db, grid, out_dir=out, figures=not args.no_figures,
                                progress=None if args.quiet else progress, workers=workers,
                                executor=executor)
    print(report.render())
    return 0


def _ranks_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=_positive_int, default=1, metavar="N",
                   help="train over N processes on this machine (torch.distributed: gloo on "
                        "CPUs, NCCL on GPUs); the same as starting the command under torchrun "
                        "--standalone --nproc-per-node N -m airplan_qo (default 1)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of processes >= 1, got {text!r}")
    return value


def _relaunch(argv: list[str], ranks: int) -> int:
    """Run ``argv`` (without ``--ranks``) as ``ranks`` processes under torch's launcher, as
    ``torchrun --standalone --nproc-per-node RANKS -m airplan_qo ...`` would, in this process,
    and return rank 0's exit status.

    The launcher starts each rank in a session of its own, so a terminal's Ctrl-C (or a SIGTERM
    to this process) reaches the ranks once, passed on by the launcher: they stop together at
    the end of the round, rank 0 records the execution ``aborted``, and this returns 130 once
    they are gone, quietly (the launcher's own report of the signal is left out; the ranks said
    what happened)."""
    rest, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--ranks":
            skip = True
        elif not token.startswith("--ranks="):
            rest.append(token)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    launcher = logging.getLogger("torch.distributed.elastic")
    level = launcher.level
    launcher.setLevel(logging.CRITICAL)
    try:
        run(parse_args(["--standalone", "--nproc-per-node", str(ranks), "-m", "airplan_qo",
                        *rest]))
        return 0
    except SignalException:
        return 130
    except ChildFailedError as exc:
        first = exc.failures.get(0) or next(iter(exc.failures.values()))
        code = int(first.exitcode)
        return code if code >= 0 else 128 - code     # killed by signal N: 128 + N
    finally:
        launcher.setLevel(level)


def _device_flag(p: argparse.ArgumentParser, text: str) -> None:
    # checked by the session, so a bad value is the usual one-line error naming the forms
    p.add_argument("--device", metavar="DEVICE", help=text)


#: One example per command, shown by ``airplan --help`` (and checked by the test suite to parse).
EXAMPLES = (
    ("topology", "airplan topology small_world --clients 50 --param k=6"),
    ("analyze", "airplan analyze digits --clients 20 --param alpha=0.5"),
    ("explain", 'airplan explain "TRAIN digits ON 20 CLIENTS WITH (alpha = 0.5)"'),
    ("sql", 'airplan sql "ANALYZE WORKLOAD digits ON 20 CLIENTS; '
            'EXPLAIN ANALYZE TRAIN digits ON 20 CLIENTS"'),
    ("shell", "airplan shell --catalog airplan.duckdb"),
    ("calibrate", "airplan calibrate --pilot digits --clients 20"),
    ("evaluate", "airplan evaluate --grid quick --out evaluation-quick"),
    ("resume", "airplan resume 3"),
    ("abandon", 'airplan abandon 3 --reason "wrong learning rate"'),
    ("plot", "airplan plot 1 2 --out curves.png"),
)
#: What ``airplan`` alone prints (on stderr, exit status 2).
NO_COMMAND_HINT = ('airplan: no command given; try: airplan explain "TRAIN digits ON 20 CLIENTS" '
                   "(airplan --help lists every command with an example)")


def _examples_epilog() -> str:
    width = max(len(name) for name, _ in EXAMPLES)
    lines = ["examples:"] + [f"  {name:<{width}}  {text}" for name, text in EXAMPLES]
    return "\n".join(lines + ["", "airplan COMMAND --help shows a command's options."])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airplan",
        description="AirPlan-QO: plan, explain and run over-the-air decentralized FL.",
        epilog=_examples_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"airplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("topology", help="build a topology and print its spectral statistics",
                       description="Build a topology of a family and print |E|, degrees, "
                                   "Laplacian and mixing spectra, and OTA slots per round.")
    p.add_argument("family", help="ring, erdos_renyi, small_world, clustered, complete, "
                                  "exponential, torus, k_regular, star, from_edges")
    p.add_argument("--clients", "-n", type=int, help="number of clients (nodes)")
    p.add_argument("--param", "-p", action="append", metavar="KEY=VALUE",
                   help="family parameter, repeatable (e.g. --param p=0.2)")
    p.add_argument("--seed", type=int, default=0, help="graph seed (default 0)")
    p.add_argument("--weights", default="metropolis_hastings",
                   help="mixing weights rule: metropolis_hastings (default), max_degree, "
                        "best_constant, fastest_mixing")
    p.add_argument("--edges", help="edge-list file for from_edges ('u v' per line)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_topology)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--catalog", help="catalog file (default $AIRPLAN_CATALOG or "
                                          "./airplan.duckdb; ':memory:' for a throwaway one)")
    common.add_argument("--wait", type=float, default=DEFAULT_WAIT, metavar="SECONDS",
                        help="while another process holds the catalog, retry opening it for up "
                             f"to SECONDS (default {DEFAULT_WAIT:g}; 0: fail at once)")

    limits = argparse.ArgumentParser(add_help=False)
    group = limits.add_argument_group(
        "catalog SQL limits", "Catalog queries can read only the catalog and are stopped at "
        "these limits (docs/sql.md, Security).")
    group.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                       help="time limit of each catalog query (default 30; 0: no limit)")
    group.add_argument("--memory-limit", metavar="SIZE",
                       help="DuckDB memory limit, e.g. 512MB or 2GiB (default 1GiB)")
    group.add_argument("--threads", type=int, metavar="N",
                       help="DuckDB threads (default min(4, CPUs))")
    group.add_argument("--allow-external-access", action="store_true",
                       help="trusted local use only: let queries read files and URLs and "
                            "autoload extensions")

    workload = argparse.ArgumentParser(add_help=False)
    workload.add_argument("--dataset", "-d", default="digits",
                          help="dataset (digits, synthetic, cifar10, cifar100, tiny_imagenet)")
    workload.add_argument("--clients", "-n", type=int, help="number of clients")
    workload.add_argument("--param", "-p", action="append", metavar="KEY=VALUE",
                          help="workload parameter, repeatable: alpha, snr_db, model, lr, "
                               "rounds, seed, ... (docs/sql.md lists them all)")

    p = sub.add_parser("analyze", parents=[common],
                       help="collect workload statistics (label sketches, heterogeneity)",
                       description="Partition a dataset as training will, sketch each "
                                   "client's labels (Count-Min, optionally DP-noised) and store "
                                   "the statistics in the catalog.")
    p.add_argument("dataset", help="dataset name")
    p.add_argument("--clients", "-n", type=int, required=True, help="number of clients")
    p.add_argument("--param", "-p", action="append", metavar="KEY=VALUE",
                   help="workload parameter (alpha, partition, seed, sketch_eps, sketch_delta, "
                        "dp_epsilon, dp_delta, model, ...)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("explain", parents=[common, workload],
                       help="plan a workload and print the EXPLAIN output",
                       description="Either a statement (airplan explain \"TRAIN digits ON 20 "
                                   "CLIENTS ...\") or a workload given by options.")
    p.add_argument("statement", nargs="?", help="a TRAIN statement (EXPLAIN is implied)")
    p.add_argument("--sla", help="SLA predicate (default 'accuracy >= 0.95 * fc')")
    p.add_argument("--topology", "-t", action="append", metavar="FAMILY[(k=v,...)]",
                   help="restrict to these topologies (repeatable)")
    p.add_argument("--weights", action="append", help="mixing weights rules to consider")
    p.add_argument("--sparsity", "-k", type=float, action="append",
                   help="sparsification ratios to consider (repeatable)")
    p.add_argument("--transport", action="append",
                   help="transports to consider (repeatable): ota, digital, digital(bits=8); "
                        "default: AUTO")
    p.add_argument("--algorithm", action="append",
                   help="algorithms to consider (repeatable): auto (the default rule: dsgd "
                        "at k = 1, choco below), dsgd, choco, gradient_tracking, push_sum, "
                        "matcha, fedavg, fedprox; default: every one of them (AUTO)")
    p.add_argument("--fallback", choices=["error", "auto", "complete"],
                   help="when nothing in the --topology/--weights/--sparsity restriction meets "
                        "the SLA: error (the default), auto (plan the whole space instead) or "
                        "complete (the fully connected plan)")
    p.add_argument("--mix-rounds", metavar="auto|M|off",
                   help="mixing-only tails: auto (each plan that can also with the tail its "
                        "topology needs, and each D-SGD plan also with 2 rounds on the "
                        "complete graph; the default with the ttt estimator), M rounds (each "
                        "such plan with that tail), off (the default with the others); "
                        "docs/planner.md, Mixing-only tails")
    p.add_argument("--within-rounds", type=int, help="round budget")
    p.add_argument("--estimator", help="cost model: ttt (default), dsgd or paper")
    p.add_argument("--objective", help="channel_uses (default), energy_j, airtime_s, c_ours")
    p.add_argument("--verbose", action="store_true", help="show the estimator's terms")
    p.add_argument("--alternatives", type=int, default=0, help="list the best N rejected plans")
    p.add_argument("--progress", action="store_true",
                   help="report each planning step on stderr once planning runs about a second "
                        "(on by default when stderr is a terminal)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("sql", parents=[common, limits],
                       help="run statements (TRAIN, EXPLAIN, ANALYZE WORKLOAD, catalog queries)",
                       description="Run a script of statements separated by ';'. See docs/sql.md.")
    p.add_argument("statements", nargs="?", help="statements, e.g. \"EXPLAIN TRAIN digits ON 20 "
                                                 "CLIENTS; SELECT * FROM airplan.plans\"")
    p.add_argument("-f", "--file", help="read statements from FILE")
    p.add_argument("--format", choices=["text", "json", "csv"], default="text")
    p.add_argument("--read-only", action="store_true",
                   help="open the catalog read-only (queries and EXPLAIN without recording)")
    p.add_argument("--quiet", action="store_true",
                   help="no training progress bar nor planning steps (both are shown only on a "
                        "terminal anyway)")
    p.add_argument("--progress", action="store_true",
                   help="report each planning step on stderr once planning runs about a second "
                        "(on by default when stderr is a terminal)")
    p.add_argument("--resume", type=int, metavar="EXEC_ID", dest="resume",
                   help="continue an aborted execution from its last checkpoint instead")
    _device_flag(p, "where TRAIN statements train unless they say WITH (device = ...): "
                    "cpu (default), cuda, cuda:N, or auto (CUDA when present)")
    _ranks_flag(p)
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("shell", parents=[common, limits], help="interactive SQL shell",
                       description="Statements end with ';'. Dot commands: .help .tables "
                                   ".format text|json|csv .quit")
    p.add_argument("--format", choices=["text", "json", "csv"], default="text")
    p.add_argument("--read-only", action="store_true")
    _device_flag(p, "where TRAIN statements train unless they say WITH (device = ...): "
                    "cpu (default), cuda, cuda:N, or auto (CUDA when present)")
    p.set_defaults(func=cmd_shell)

    p = sub.add_parser("calibrate", parents=[common],
                       help="refit estimator constants from recorded executions",
                       description="Refit an estimator's constants from the feedback rows "
                                   "(new versioned calibration rows), or run a pilot design "
                                   "first with --pilot DATASET --clients N. See docs/feedback.md.")
    p.add_argument("--estimator",
                   help="ttt, dsgd or paper (default: every estimator that has enough "
                        "observations, and the report says which; pilots: dsgd)")
    p.add_argument("--scope", default="global", choices=["global", "dataset", "dataset_family"])
    p.add_argument("--scope-key", default="",
                   help="dataset name, or DATASET:FAMILY for the dataset_family scope")
    p.add_argument("--min-obs", type=int, default=3, help="minimum executions to fit (3)")
    p.add_argument("--pilot", metavar="DATASET", help="run pilot executions on DATASET first")
    p.add_argument("--clients", "-n", type=int, help="clients of the pilot runs")
    p.add_argument("--rounds", type=int, default=30, help="rounds of each pilot run (30)")
    p.add_argument("--param", "-p", action="append", metavar="KEY=VALUE",
                   help="workload parameter for the pilot runs (model, lr, ...)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("evaluate", parents=[common],
                       help="judge the advisor against the measured oracle on a grid",
                       description="Train every candidate plan of every workload of a grid "
                                   "over the seeds (runs are cached in the catalog), find the "
                                   "oracle (cheapest measured plan meeting the SLA) and compare "
                                   "the advisor's pick before and after cross-validated "
                                   "calibration. Writes report.md, summary.json and PNG figures "
                                   "to --out and evaluations rows to the catalog. See "
                                   "docs/evaluation.md.")
    p.add_argument("--grid", metavar="NAME_OR_FILE",
                   help="a grid TOML file, or a shipped grid: default, quick")
    p.add_argument("--quick", action="store_true", help="the quick smoke-test grid")
    p.add_argument("--seeds", type=int, help="use seeds 0..S-1 instead of the grid's seeds")
    p.add_argument("--folds", type=int, help="cross-validation folds (default: the grid's)")
    p.add_argument("--confidence", type=float, metavar="P",
                   help="plan with the chance constraint P(meets SLA) >= P (default: the "
                        "grid's, else the planner's 0.95); estimators with a distribution only")
    p.add_argument("--sla", metavar="PREDICATE",
                   help="judge every workload by this SLA instead of the grid's (e.g. "
                        "'avg_model_accuracy >= 0.95 * fc': the runs are the same, cached)")
    p.add_argument("--out", metavar="DIR", help="output directory (default evaluation-GRID)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--workers", type=int, metavar="N",
                   help="train uncached runs in N worker processes (default: the number of CPU "
                        "cores; 1 trains in this process)")
    p.add_argument("--executor", metavar="local|dask://HOST:PORT", default="local",
                   help="where uncached runs train: 'local' (default: --workers processes) or "
                        "the Dask scheduler at HOST:PORT (needs airplan-qo[dask]; this process "
                        "still records every run)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("resume", parents=[common],
                       help="continue an aborted, interrupted or failed execution",
                       description="Continue an aborted, interrupted or failed execution from "
                                   "its last checkpoint, or from round 0 when it has none; the "
                                   "result equals an uninterrupted run with the same seeds.")
    p.add_argument("exec_id", type=int)
    p.add_argument("--quiet", action="store_true")
    _device_flag(p, "where to continue: cpu, cuda, cuda:N or auto (default: the device the "
                    "execution was asked to use)")
    _ranks_flag(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("abandon", parents=[common],
                       help="give up an execution that did not succeed",
                       description="Mark an aborted, interrupted or failed execution "
                                   "'abandoned' (it can no longer be resumed) and delete its "
                                   "checkpoint. See docs/runtime.md, Recovery.")
    p.add_argument("exec_id", type=int)
    p.add_argument("--reason", help="why (kept in executions.reason)")
    p.set_defaults(func=cmd_abandon)

    p = sub.add_parser("plot", parents=[common],
                       help="plot executions' curves beside their predictions",
                       description="Write a PNG of each execution's measured accuracy (the "
                                   "clients' own models and the average model) and consensus "
                                   "distance per round beside the predicted curve, its 90% "
                                   "rounds interval, the target and re-optimisation events. "
                                   "Needs matplotlib.")
    p.add_argument("exec_ids", type=int, nargs="*", metavar="EXEC_ID")
    p.add_argument("--planning-run", type=int, metavar="ID",
                   help="instead: every candidate of a planning run, predicted cost against "
                        "P(meets SLA), the chosen plan a labelled star")
    p.add_argument("--confidence", type=float, help="with --planning-run: draw this level")
    p.add_argument("--out", help="PNG file to write (default airplan-executions.png, or "
                                 "airplan-plan.png with --planning-run)")
    p.set_defaults(func=cmd_plot)
    parser.set_defaults(commands=tuple(sub.choices))
    return parser


def cmd_plot(args: argparse.Namespace) -> int:
    from .session import connect

    if bool(args.exec_ids) == (args.planning_run is not None):
        raise ValidationError("plot takes execution ids or --planning-run ID (one of them)")
    with connect(args.catalog, read_only=True) as db:
        if args.planning_run is not None:
            path = db.plot_plan(args.planning_run, args.out or "airplan-plan.png",
                                confidence=args.confidence)
        else:
            path = db.plot(args.exec_ids, args.out or "airplan-executions.png")
    print(f"wrote {path}")
    return 0


def _globals_after_command(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Let options come before the command too (``airplan --read-only sql ...``): whatever
    precedes the first command name is moved after it, where the command's parser reads it."""
    commands = set(parser.get_default("commands") or ())
    for i, tok in enumerate(argv):
        if tok in commands:
            before = [t for t in argv[:i] if t not in ("-h", "--help", "--version")]
            if len(before) == i:
                return [tok, *before, *argv[i + 1:]]
            return argv
    return argv


class _Notes(logging.Handler):
    """Prints the library's notes (``airplan_qo`` loggers, warnings and above) on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"airplan: note: {record.getMessage()}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    logger = logging.getLogger("airplan_qo")
    notes = _Notes(logging.WARNING)
    logger.addHandler(notes)
    try:
        from .termination import terminate_as_interrupt

        with terminate_as_interrupt():
            from .runtime import distributed_launch

            if distributed_launch():
                # started by torchrun as one of several processes: rank 0 runs the command,
                # the others train their share of the clients (docs/runtime.md, Several
                # processes)
                return _distributed(argv)
            return _main(argv)
    finally:
        logger.removeHandler(notes)


def _distributed(argv: Sequence[str] | None) -> int:
    try:
        from .runtime import distributed
    except ImportError as exc:
        print(f"airplan: error: a distributed run needs torch: {exc}", file=sys.stderr)
        return 2
    try:
        return distributed.main(lambda: _main(argv))
    except AirPlanError as exc:
        print(f"airplan: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_globals_after_command(parser, argv))
    if not getattr(args, "func", None):
        print(NO_COMMAND_HINT, file=sys.stderr)
        return 2
    if getattr(args, "ranks", 1) > 1:
        from .runtime import distributed_launch

        if not distributed_launch():
            return _relaunch(argv, args.ranks)
    from .catalog.store import default_wait, set_default_wait

    previous = default_wait()
    try:
        if getattr(args, "wait", None) is not None:
            set_default_wait(args.wait)
        return int(args.func(args) or 0)
    except AirPlanError as exc:
        print(f"airplan: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        exec_id = getattr(exc, "exec_id", None)
        if exec_id is None:
            print("airplan: interrupted", file=sys.stderr)
        else:  # a second Ctrl-C: stopped mid-round, recorded aborted
            print(f"airplan: interrupted; execution {exec_id} recorded aborted; resume with: "
                  f"airplan resume {exec_id}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`airplan sql ... | head -1`): stop quietly, and keep Python
        # from failing again when it flushes stdout at exit
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        set_default_wait(previous)


if __name__ == "__main__":
    sys.exit(main())
