"""The layers docs/ARCHITECTURE.md names, checked on the source.

1. No import circle anywhere in roseprof or roseinfer (every package and subpackage): every Import and ImportFrom of
   a module counts, at its top or hidden inside a function (a circle a lazy import hides still ties the modules
   together: neither can be understood, tested or moved without the other).
2. The layers: the store (run/) and the drivers never import each other or capture/ (which sits above both);
   none of them imports analysis/; renderers and exporters take views as data (render/view.py), so they import
   neither analysis/ nor the store (run/)."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
PACKAGES = ("roseprof", "roseinfer")
ROOT = REPO / "roseprof"
FORBIDDEN = {
    "run": ("roseprof.drivers", "roseprof.capture", "roseprof.analysis"),
    "drivers": ("roseprof.run", "roseprof.capture", "roseprof.analysis"),
    "capture": ("roseprof.analysis",),
    "render": ("roseprof.analysis", "roseprof.run"),
    "export": ("roseprof.analysis", "roseprof.run"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imported(path: Path, name: str | None = None) -> set[str]:
    """Every name an import anywhere in the file names: `import a.b` -> a.b; `from a.b import c` -> a.b.c (c is a
    module, or a name in the module a.b: import_graph tells which); `from a.b import *` -> a.b. Relative imports
    are resolved against the module's package."""
    out = set()
    package = None
    if name is not None:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and package is not None:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base:
                out.update(base if a.name == "*" else f"{base}.{a.name}" for a in node.names)
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of roseprof and roseinfer it imports: `from pkg import mod` is an edge to pkg.mod,
    `from pkg.mod import NAME` one to pkg.mod (as `import pkg.mod` is: the packages above a module are not its
    edges, or every module would sit in a circle with its package's __init__); a module is not its own edge."""
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in imported(path, name):
            if target in modules:
                edges.add(target)
            elif target.rpartition(".")[0] in modules:
                edges.add(target.rpartition(".")[0])  # `from pkg.mod import NAME`: pkg.mod itself
        edges.discard(name)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as one circle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        # iterative: the graph is deep enough to make recursion a worry in CI's Pythons
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_circle(graph, c) for c in components]


def _one_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle from the component's first module back to it (breadth first inside the component)."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return component


def test_no_import_circle_in_any_package():
    found = [" -> ".join(c) for c in circles(import_graph(all_modules()))]
    assert not found, "import circles (imports inside functions count):\n" + "\n".join(found)


def test_the_circle_finder_sees_a_circle_hidden_in_a_function(tmp_path):
    """The checker itself: a lazy import inside a function closes a circle as much as one at the top."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n    return x\n")
    (tmp_path / "c.py").write_text("import a\n")
    graph = import_graph({m: tmp_path / f"{m}.py" for m in "abc"})
    assert circles(graph) == [["a", "b", "a"]]


def test_relative_imports_resolve(tmp_path):
    pkg = tmp_path / "roseprof" / "x"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text("from . import n\nfrom ..y import z\n")
    assert imported(pkg / "m.py", "roseprof.x.m") == {"roseprof.x.n", "roseprof.y.z"}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports(layer):
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for name in imported(path, module_name(path))
        if name.startswith(FORBIDDEN[layer])
    ]
    assert not wrong, wrong


def test_no_module_over_400_lines_in_the_capture_layers():
    for layer in ("capture", "drivers", "run"):
        for path in (ROOT / layer).rglob("*.py"):
            assert len(path.read_text().splitlines()) <= 400, path
