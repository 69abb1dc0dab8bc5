"""The import map of the product's code: every `bashgym.*` import, function-level ones included.

`python -m tests.support.import_map` prints its figures (modules per folder, arrows, circles, arrows
that point up a layer); tests/unit/test_layering.py asserts the rules on the same map.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("ledger", "daemon", "bot", "trainers", "client", "cli", "agents", "skills")


@dataclass(frozen=True)
class Arrow:
    source: str  # importing module, e.g. bashgym.daemon.api.app
    target: str  # imported module (the longest prefix that is a module of the tree)
    lazy: bool  # made inside a function
    line: int


@dataclass
class ImportMap:
    modules: dict[str, Path] = field(default_factory=dict)
    arrows: list[Arrow] = field(default_factory=list)

    def edges(self, *, lazy: bool = True) -> set[tuple[str, str]]:
        return {(a.source, a.target) for a in self.arrows if (lazy or not a.lazy) and a.source != a.target}

    def circles(self, *, lazy: bool = True) -> list[list[str]]:
        """Strongly connected groups of more than one module (Tarjan), each sorted."""
        graph: dict[str, set[str]] = {m: set() for m in self.modules}
        for source, target in self.edges(lazy=lazy):
            graph[source].add(target)
        return [sorted(group) for group in _components(graph) if len(group) > 1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["bashgym", *parts])


def build(root: Path = ROOT) -> ImportMap:
    found = ImportMap()
    for folder in TOP:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found.modules[module_name(path)] = path
    for name, path in found.modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for target, lazy, line in _imports(ast.parse(path.read_text()), package):
            resolved = _resolve(target, found.modules)
            if resolved is not None:
                found.arrows.append(Arrow(name, resolved, lazy, line))
    return found


def _imports(tree: ast.Module, package: str) -> Iterator[tuple[str, bool, int]]:
    def visit(node: ast.AST, lazy: bool) -> Iterator[tuple[str, bool, int]]:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, lazy, child.lineno
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in child.names:  # `from pkg import module` imports the module
                    yield f"{base}.{alias.name}", lazy, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, False)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name:
        if name in modules:
            return name
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return None


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(group)

    for node in graph:
        if node not in index:
            connect(node)
    return groups


def floors(found: ImportMap) -> dict[str, int]:
    """Each module's floor: 0 imports nothing of the tree, n imports something on n-1 (circles share a floor)."""
    graph: dict[str, set[str]] = {m: set() for m in found.modules}
    for source, target in found.edges():
        graph[source].add(target)
    level: dict[str, int] = {}

    def floor(node: str, seen: frozenset[str]) -> int:
        if node in level:
            return level[node]
        below = [floor(n, seen | {node}) + 1 for n in graph[node] if n not in seen and n != node]
        level[node] = max(below, default=0)
        return level[node]

    for node in graph:
        floor(node, frozenset())
    return level


def main() -> int:
    found = build()
    per_top: dict[str, int] = {}
    for name in found.modules:
        top = name.split(".")[1]
        per_top[top] = per_top.get(top, 0) + 1
    daemon_root = [m for m, p in found.modules.items() if p.parent == ROOT / "daemon"]
    print(f"modules: {len(found.modules)} ({', '.join(f'{k} {v}' for k, v in sorted(per_top.items()))})")
    print(f"daemon/ root modules: {len(daemon_root)}")
    print(f"arrows: {len(found.edges())} ({sum(a.lazy for a in found.arrows)} made inside functions)")
    print(f"floors: {max(floors(found).values()) + 1}")
    circles = found.circles()
    print(f"circles: {len(circles)}")
    for group in circles:
        print("  " + " <-> ".join(group))
    return 1 if circles else 0


if __name__ == "__main__":
    raise SystemExit(main())
