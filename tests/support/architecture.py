"""The checkout read as a static tool reads it: files, classes, route handlers and imports, from source alone.

``python -m tests.support.architecture`` prints the figures issue 32 asks for;
``tests/unit/test_architecture.py`` holds them to their bounds. Nothing here imports lnserve: what a type
checker, an IDE or a dependency grapher sees of the checkout is what is measured (relative imports resolved
on the file system; an absolute ``lnserve.app.*`` import cannot be followed, because the folders are mapped
into ``lnserve`` only at install).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("lnserve", "models", "converters", "app")
FAMILY_NAMES = frozenset({"order-embedding", "skip-thoughts"})
HTTP_METHODS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "api_route"})

# Layers, lowest first: a file may import its own layer or lower ones, never a higher one. The root modules
# (lnserve/*.py) sit below everything; lnserve/eval is the facade outside tools import, above all.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("root", ("lnserve/",)),
    ("models", ("models/",)),
    ("converters", ("converters/",)),
    (
        "runtime",
        ("app/runtime/", "app/demo_model/", "app/settings.py", "app/log_setup.py", "app/__init__.py"),
    ),
    ("galleries", ("app/galleries/",)),
    ("producers", ("app/training/", "app/pull/", "app/evaluation/")),
    ("serving", ("app/serving/",)),
    ("http", ("app/http/",)),
    ("scale", ("app/scale/",)),
    ("cli", ("app/commands/", "app/cli.py")),
    ("facade", ("lnserve/eval/",)),
)


def python_files() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def layer_of(path: str) -> int:
    """The highest-ranked layer whose prefix matches (lnserve/eval/ over lnserve/)."""
    best = -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(path == p or path.startswith(p) for p in prefixes):
            best = rank
    if best < 0:
        raise ValueError(f"{path}: in no layer")
    return best


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# -- model-family comparisons ------------------------------------------------------------------------------
def _is_family_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in FAMILY_NAMES:
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_family_literal(e) for e in node.elts)
    return False


def family_comparisons() -> list[str]:
    """Comparisons (==, !=, in, match cases) with a family's name as a literal: 'file:line'."""
    found: list[str] = []
    for path in python_files():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Compare) and any(
                _is_family_literal(n) for n in (node.left, *node.comparators)
            ):
                found.append(f"{rel(path)}:{node.lineno}")
            elif isinstance(node, ast.MatchValue) and _is_family_literal(node.value):
                found.append(f"{rel(path)}:{node.value.lineno}")
    return found


# -- imports -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    source: str  # the importing file
    module: str  # as written, dots for the level
    names: tuple[str, ...]  # for ``from m import a, b``; empty for ``import m``
    target: str | None  # the file it resolves to on the file system, None when it cannot be followed
    line: int


def _resolve_module(base: Path, parts: list[str]) -> Path | None:
    here = base.joinpath(*parts)
    if here.with_suffix(".py").is_file():
        return here.with_suffix(".py")
    if (here / "__init__.py").is_file():
        return here / "__init__.py"
    return None


def _imports_of(path: Path) -> Iterator[Import]:
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lnserve":
                    target = _resolve_module(ROOT, alias.name.split("."))
                    yield Import(rel(path), alias.name, (), rel(target) if target else None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.split(".")[0] != "lnserve":
                continue
            base = ROOT if node.level == 0 else path.parents[node.level - 1]
            parts = [p for p in module.split(".") if p]
            written = "." * node.level + module
            names = tuple(a.name for a in node.names)
            package = _resolve_module(base, parts) if parts else base / "__init__.py"
            for name in names:
                sub = _resolve_module(base, [*parts, name])  # ``from pkg import submodule``
                target = sub or (package if package and package.is_file() else None)
                yield Import(rel(path), written, (name,), rel(target) if target else None, node.lineno)


def all_imports() -> list[Import]:
    return [imp for path in python_files() for imp in _imports_of(path)]


def unfollowable_imports(imports: list[Import]) -> list[str]:
    """lnserve imports a static reader of the checkout cannot follow to a file."""
    return sorted({f"{i.source}:{i.line} {i.module}" for i in imports if i.target is None})


def private_imports(imports: list[Import]) -> list[str]:
    """``from m import _name`` across modules (a dunder is not private)."""
    return sorted(
        f"{i.source}:{i.line} {i.module}.{n}"
        for i in imports
        for n in i.names
        if n.startswith("_") and not n.startswith("__")
    )


def private_attribute_uses() -> list[str]:
    """``alias._name`` where ``alias`` is an imported lnserve module: a private reached across modules."""
    found: list[str] = []
    for path in python_files():
        tree = _parse(path)
        modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {
                    (a.asname or a.name.split(".")[0]) for a in node.names if a.name.startswith("lnserve")
                }
            elif isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("lnserve")
            ):
                for a in node.names:
                    base = ROOT if node.level == 0 else path.parents[node.level - 1]
                    parts = [p for p in (node.module or "").split(".") if p]
                    if _resolve_module(base, [*parts, a.name]) is not None:
                        modules.add(a.asname or a.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{rel(path)}:{node.lineno} {node.value.id}.{node.attr}")
    return sorted(found)


def upward_edges(imports: list[Import]) -> list[str]:
    return sorted(
        f"{i.source} -> {i.target}"
        for i in imports
        if i.target is not None and layer_of(i.target) > layer_of(i.source)
    )


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.target is not None and i.target != i.source:
            graph.setdefault(i.source, set()).add(i.target)
            graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


# -- classes -----------------------------------------------------------------------------------------------
@dataclass
class ClassInfo:
    file: str
    name: str
    methods: set[str]
    bases: list[str] = field(default_factory=list)


def classes() -> list[ClassInfo]:
    found: list[ClassInfo] = []
    for path in python_files():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                bases = [
                    b.id if isinstance(b, ast.Name) else ast.unparse(b).split(".")[-1] for b in node.bases
                ]
                found.append(ClassInfo(rel(path), node.name, methods, bases))
    return found


def method_counts() -> dict[str, int]:
    """'file:Class' -> methods, its own and those of its bases defined in the checkout (by name)."""
    all_classes = classes()
    by_name: dict[str, list[ClassInfo]] = {}
    for c in all_classes:
        by_name.setdefault(c.name, []).append(c)

    def gather(c: ClassInfo, seen: set[int]) -> set[str]:
        if id(c) in seen:
            return set()
        seen.add(id(c))
        names = set(c.methods)
        for base in c.bases:
            for b in by_name.get(base, []):
                names |= gather(b, seen)
        return names

    return {f"{c.file}:{c.name}": len(gather(c, set())) for c in all_classes}


# -- route handlers ----------------------------------------------------------------------------------------
def route_handler_lengths() -> dict[str, int]:
    """'file:handler' -> lines from ``def`` to its end (decorators not counted) for each route handler."""
    found: dict[str, int] = {}
    for path in python_files():
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for deco in node.decorator_list:
                call = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(call, ast.Attribute) and call.attr in HTTP_METHODS:
                    found[f"{rel(path)}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
                    break
    return found


def figures() -> dict[str, object]:
    imports = all_imports()
    counts = method_counts()
    lengths = route_handler_lengths()
    return {
        "family comparisons": family_comparisons(),
        "private names imported across modules": private_imports(imports) + private_attribute_uses(),
        "classes over 30 methods": {k: v for k, v in counts.items() if v > 30},
        "largest class": max(counts.items(), key=lambda kv: kv[1]),
        "route handlers over 20 lines": {k: v for k, v in lengths.items() if v > 20},
        "longest route handler": max(lengths.items(), key=lambda kv: kv[1]),
        "files": len(python_files()),
        "import edges followed": sum(1 for i in imports if i.target is not None),
        "imports a static reader cannot follow": unfollowable_imports(imports),
        "edges running up": upward_edges(imports),
        "import cycles": import_cycles(imports),
    }


def main() -> None:
    for name, value in figures().items():
        if isinstance(value, list | dict) and value and not isinstance(value, tuple):
            print(f"{name}: {len(value)}")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                print(f"    {k}: {v}" if isinstance(value, dict) else f"    {v}")
        elif isinstance(value, list | dict):
            print(f"{name}: 0")
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    sys.exit(main())
