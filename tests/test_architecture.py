"""The import structure of the package: no circles between modules, and layers import downward.

Imports are read from the source (``ast``): module-level and function-level ones alike, a
package's ``__init__`` included, so a circle hidden in a function body still counts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "airplan_qo"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> nx.DiGraph:
    """Module -> module it imports, for every module of ``airplan_qo``. ``from a import b``
    counts as importing ``a`` and, when ``a.b`` is a module, ``a.b``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and target != name:
                    graph.add_edge(name, target)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_cycles_reports_a_circle_once_closed():
    graph = nx.DiGraph([("a", "b"), ("b", "c")])
    assert cycles(graph) == []
    graph.add_edge("c", "a")
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_walker_reads_function_level_and_package_imports():
    graph = import_graph()
    assert graph.has_edge("airplan_qo", "airplan_qo.session")
    # session.py imports the runtime's execution only inside its methods
    assert graph.has_edge("airplan_qo.session", "airplan_qo.runtime.execution")


def test_no_import_circles():
    assert cycles(import_graph()) == []


#: The planner: statistics, enumeration, pruning, the choice of a plan and its recording, above
#: the cost models.
PLANNER = "airplan_qo.planner"

#: Layers below the planner: plan values, the cost models, the catalog, the data and the runtime.
BELOW_PLANNER = ("airplan_qo.catalog", "airplan_qo.costmodels", "airplan_qo.data",
                 "airplan_qo.runtime", "airplan_qo.plans", "airplan_qo.model_size",
                 "airplan_qo.errors", "airplan_qo.registry")

def _in(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def _below_planner(module: str) -> bool:
    return any(_in(module, layer) for layer in BELOW_PLANNER)


def test_nothing_below_the_planner_imports_it():
    graph = import_graph()
    # the runtime re-plans mid-run with a planner the session hands it, not by importing one
    upward = {(a, b) for a, b in graph.edges if _below_planner(a) and _in(b, PLANNER)}
    assert upward == set()


def test_the_cost_models_lie_below_the_planner_and_plan_values_below_both():
    graph = import_graph()
    costmodels = "airplan_qo.costmodels"
    assert any(_in(a, PLANNER) and _in(b, costmodels) for a, b in graph.edges)
    assert not any(_in(a, costmodels) and _in(b, PLANNER) for a, b in graph.edges)
    assert not any(_in(a, "airplan_qo.plans") and (_in(b, costmodels) or _in(b, PLANNER))
                   for a, b in graph.edges)


def test_the_layers_name_modules_that_exist():
    graph = import_graph()
    assert f"{PLANNER}.optimizer" in graph.nodes
    assert all(any(_below_planner(m) for m in graph.nodes if m.startswith(layer))
               for layer in BELOW_PLANNER)


def test_every_file_the_architecture_table_names_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Where each concept lives"):]
    table = table[:table.index("\n## ", 1)]
    rows = [line.split("|")[2] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| concept")]
    named = [p for row in rows for p in re.findall(r"`([\w/]+\.(?:py|json))`", row)]
    assert len(named) > 40
    missing = [p for p in named if not (PACKAGE / p).is_file()]
    assert missing == []
