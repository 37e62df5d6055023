"""Each layer keeps its error classes in its own ``errors.py`` (docs/errors.md draws them all from there):
an exception class defined in any other module of the package is a finding, unless it is private (a
``_Name`` raised and caught inside its module for control flow, never part of the tree)."""

from __future__ import annotations

import ast
import builtins

from tests.support.error_tree import PACKAGE_DIRS, ROOT

BUILTIN_EXCEPTIONS = frozenset(
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
)


def _classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for top in PACKAGE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(ROOT).as_posix()
            found += [(rel, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return found


def _base_names(node: ast.ClassDef) -> set[str]:
    return {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}


def test_every_exception_class_is_in_its_layers_errors_module() -> None:
    classes = _classes()
    exceptions = set(BUILTIN_EXCEPTIONS)
    changed = True
    while changed:  # subclasses of subclasses, whatever order the files come in
        before = len(exceptions)
        exceptions |= {node.name for _, node in classes if _base_names(node) & exceptions}
        changed = len(exceptions) != before
    stray = sorted(
        f"{rel}:{node.lineno} {node.name}"
        for rel, node in classes
        if _base_names(node) & exceptions and not rel.endswith("/errors.py") and not node.name.startswith("_")
    )
    assert stray == []
    assert {"LnserveError", "QueueFullError", "ShardUnavailableError", "JsonBoundsError"} <= exceptions
