"""The ``airplan`` command.

Every user error (an ``AirPlanError``) prints one paragraph to stderr and exits with status 2;
argparse usage errors exit 2 as well. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from . import __version__
from .errors import AirPlanError, ValidationError


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airplan",
        description="AirPlan-QO: plan, explain and run over-the-air decentralized FL.")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AirPlanError as exc:
        print(f"airplan: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("airplan: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
