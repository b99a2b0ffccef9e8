"""No import cycle among the project's modules, counting imports inside functions too (a function-level
import is how a cycle hides), and the layering the docs promise (spec below everything)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"aiperf_runner": REPO / "runner" / "aiperf_runner", "leaderboard": REPO / "leaderboard",
            "server": REPO / "server"}


def _modules() -> dict[str, Path]:
    out = {}
    for top, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            module = resolve(target)
            # A package's __init__ reached as the parent of what is imported is not an edge of its own.
            if module is not None and module != name and not name.startswith(module + "."):
                found.add(module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_spec_imports_nothing_of_the_project_but_spec() -> None:
    graph = _graph()
    for name, imported in graph.items():
        if name.startswith("aiperf_runner.spec"):
            outside = {m for m in imported if not m.startswith("aiperf_runner.spec")}
            assert not outside, f"{name} imports {outside}: spec/ must stand alone"


def test_the_runner_does_not_import_the_service() -> None:
    for name, imported in _graph().items():
        if name.startswith("aiperf_runner"):
            assert not {m for m in imported if m.split(".")[0] in ("leaderboard", "server")}, name
