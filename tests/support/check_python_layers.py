#!/usr/bin/env python3
"""Fails on any import cycle inside the crown Python package.

Usage: check_python_layers.py SOURCE_ROOT

Reads python/crown/**.py with the standard library's ast (crown is never
imported), collects every intra-package import, those inside functions
included (a cycle hidden in a function is still a cycle), skips
`if TYPE_CHECKING:` blocks, and treats the extension modules (_crown,
_aten*) as leaves. Each strongly connected component of more than one
module, or a module importing itself, is listed with the file:line of each
edge inside it. Prints "python layers: ok" when there is none.

KNOWN_CYCLES lists the cycles not yet removed, each exactly: the check
still fails when one gains or loses a module (remove it from the list once
it is gone), and on any other cycle.
"""
import ast
import sys
from pathlib import Path

PACKAGE = "crown"

# The cycles not yet removed, each a set of module names (see the docstring).
# None now: the last, crown.tensor's recording layer, was layered through
# crown.tensor._hooks (issue 44, part 5).
KNOWN_CYCLES = []


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE] + parts)


def is_leaf(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "_crown" or last.startswith("_aten")


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, modules: set):
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.edges = []  # (target, line)

    def resolve(self, name: str) -> str | None:
        """The package module `name` is, or lives in; None outside crown."""
        while name and name not in self.modules:
            if "." not in name:
                return None
            name = name.rpartition(".")[0]
        return name or None

    def add(self, name: str | None, line: int):
        if not name or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            return
        if is_leaf(name):
            return
        target = self.resolve(name)
        if target and not is_leaf(target) and (target, line) not in self.edges:
            self.edges.append((target, line))

    def visit_If(self, node: ast.If):
        if is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import):
        for alias in node.names:
            self.add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if node.level:
            base = self.package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.module else base
        else:
            base = node.module or ""
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if is_leaf(full):
                continue
            # `from . import x` names a module when x is one.
            self.add(full if full in self.modules else base, node.lineno)


def strongly_connected(graph: dict) -> list:
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
            out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(sys.argv[1]) / "python"
    root = source / PACKAGE
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    edges = {}  # module -> [(target, file, line)]
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        visitor = Imports(name, path.name == "__init__.py", modules)
        visitor.visit(tree)
        edges[name] = [(t, path, line) for t, line in visitor.edges]
    graph = {m: sorted({t for t, _, _ in es}) for m, es in edges.items()}
    cycles = [c for c in strongly_connected(graph)
              if len(c) > 1 or c[0] in graph.get(c[0], ())]
    known = [c for c in cycles if set(c) in KNOWN_CYCLES]
    cycles = [c for c in cycles if set(c) not in KNOWN_CYCLES]
    for component in known:
        print(f"note: known import cycle, not yet removed: {', '.join(component)}")
    if not cycles:
        print(f"python layers: ok ({len(files)} modules, {len(known)} known cycle(s))")
        return 0
    for component in cycles:
        members = set(component)
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        for m in component:
            for target, path, line in sorted(edges[m], key=lambda e: e[2]):
                if target in members:
                    print(f"  {path.relative_to(source.parent)}:{line}: {m} -> {target}")
    print(f"python layers: {len(cycles)} import cycle(s)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
