"""The package's import graph: layers import only downward, no module imports another in a cycle, and no module
hides an import of the package inside a function (the usual escape from a cycle) — except of a module that imports
a heavy optional extra (matplotlib, Ray) at its top, which stays lazy so that the core imports fast.

Read from the source with :mod:`ast`, nothing imported. An import of ``simulator.a.b`` also runs the ``__init__`` of
``simulator.a``, so it counts as an edge to that package too (except a package its importer sits in: Python is
already initialising it). ``if TYPE_CHECKING:`` imports never run and are checked for direction only.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "simulator"

# Lowest first: a module may import its own layer's package and any layer below it, never one above.
LAYERS = (
    ("errors", "dtypes", "registry", "request"),
    ("catalog",),
    ("config",),
    ("kv",),
    ("cost",),
    ("workload",),
    ("schedulers",),
    ("results",),
    ("cluster",),
    ("api",),
    ("studies",),
    ("fidelity",),
    ("report",),
    ("cli",),
    ("",),  # simulator/__init__.py: the public names
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
HEAVY_EXTRAS = ("matplotlib", "ray")
MAX_ROOT_MODULES = 6


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: its sub-package, or the root module's own name ('' for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules an import statement names (resolving relative imports and ``from pkg import module``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if MODULES[module].name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source for alias in node.names]
    found = []
    for name in names:
        if name != "simulator" and not name.startswith("simulator."):
            continue
        while name not in MODULES:
            name = name.rpartition(".")[0]
        found.append(name)
    return found


def imports(module: str) -> tuple[set[str], set[str], list[tuple[str, int]]]:
    """(modules imported when ``module`` runs, modules imported for type checking only, function-local imports)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    runtime: set[str] = set()
    typing_only: set[str] = set()
    local: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt], into: set[str]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                into.update(_targets(module, node))
            elif isinstance(node, ast.If):
                visit(node.body, typing_only if _is_type_checking(node) else into)
                visit(node.orelse, into)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block, into)
            else:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        local.extend((target, inner.lineno) for target in _targets(module, inner))

    visit(tree.body, runtime)
    return runtime, typing_only, local


def _with_packages(importer: str, targets: set[str]) -> set[str]:
    """``targets`` plus the package ``__init__`` each import runs (not the importer's own packages)."""
    own = {importer.rsplit(".", depth)[0] for depth in range(importer.count(".") + 1)}
    edges = set()
    for target in targets:
        parts = target.split(".")
        edges.update(name for name in (".".join(parts[:n]) for n in range(2, len(parts) + 1)) if name not in own)
    return edges - {importer}


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_has_a_layer():
    assert {unit_of(module) for module in MODULES} <= set(RANK), "add the new package to LAYERS"


def test_no_import_climbs_a_layer():
    upward = [
        f"{module} -> {target}"
        for module, (runtime, typing_only, _) in GRAPH.items()
        for target in runtime | typing_only
        if RANK[unit_of(target)] > RANK[unit_of(module)]
    ]
    assert upward == []


def test_no_import_cycles():
    edges = {module: _with_packages(module, runtime) for module, (runtime, _, _) in GRAPH.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                walk(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            walk(module, [module])
    assert cycles == []


def imports_heavy_extra(module: str) -> bool:
    """Whether ``module`` imports matplotlib or Ray when it is imported."""
    tree = ast.parse(MODULES[module].read_text())
    names = [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)]
    return any(name.partition(".")[0] in HEAVY_EXTRAS for name in names)


def test_no_function_local_imports_of_the_package():
    hidden = [f"{module}:{line} imports {target}" for module, (_, _, local) in GRAPH.items() for target, line in local
              if not imports_heavy_extra(target)]
    assert hidden == []


def test_few_modules_at_the_root():
    root = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(root) <= MAX_ROOT_MODULES - 1, root  # the sixth is __init__.py


def test_the_graph_reader_sees_a_cycle_and_a_climb():
    """The reader on a hand-made pair: a relative import is resolved and its package ``__init__`` counted."""
    assert _targets("simulator.kv.paged", ast.parse("from .base import KVAllocator").body[0]) == ["simulator.kv.base"]
    assert _with_packages("simulator.cost.gemm", {"simulator.catalog.hardware"}) == {
        "simulator.catalog", "simulator.catalog.hardware"}
    assert RANK[unit_of("simulator.cli.run")] > RANK[unit_of("simulator.api")] > RANK[unit_of("simulator.kv.paged")]
