"""``GalleryStoreAPI`` is what the served app uses from ``app.state.galleries``; both engines' stores must
provide all of it with the same signatures (``serve --ray`` failed at start-up when the app began calling
``clean_leftovers`` and ``verify_all``, which the Ray facade lacked), and the app must use nothing else."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import lnserve.app
from lnserve.app.galleries.protocol import GalleryStoreAPI
from lnserve.app.galleries.store import GalleryStore
from lnserve.app.scale.galleries import ShardedGalleries

APP = Path(lnserve.app.__file__).parent
# the stores themselves, and the CLI (it opens a ``GalleryStore`` of its own, never the served one)
NOT_THE_APP = ("galleries/store.py", "galleries/protocol.py", "scale/", "commands/")
MEMBERS = sorted(n for n in vars(GalleryStoreAPI) if not n.startswith("_"))
METHODS = [n for n in MEMBERS if not isinstance(vars(GalleryStoreAPI)[n], property)]


def _shape(fn: object) -> list[tuple[str, object, object]]:
    """Parameter names, kinds and defaults (annotations are strings: compared by the type checker)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


@pytest.mark.parametrize("store_type", [GalleryStore, ShardedGalleries])
def test_each_engine_provides_every_member_of_the_protocol(store_type: type, tmp_path: Path) -> None:
    assert {"clean_leftovers", "verify_all", "list", "search", "root", "scorer"} <= set(MEMBERS)
    store = GalleryStore(tmp_path) if store_type is GalleryStore else ShardedGalleries([])
    missing = [n for n in MEMBERS if not hasattr(store, n)]
    assert not missing, f"{store_type.__name__} lacks {missing}"
    assert isinstance(store, GalleryStoreAPI)
    for name in METHODS:
        assert _shape(getattr(store_type, name)) == _shape(getattr(GalleryStoreAPI, name)), name


def _store_uses(path: Path) -> set[str]:
    """Attributes the module reads off the gallery store: ``store.X`` and ``<...>.state.galleries.X``."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        is_store = isinstance(base, ast.Name) and base.id == "store"
        is_state = (
            isinstance(base, ast.Attribute)
            and base.attr == "galleries"
            and isinstance(base.value, ast.Attribute)
            and base.value.attr == "state"
        )
        if is_store or is_state:
            used.add(node.attr)
    return used


def test_the_app_uses_only_the_protocol() -> None:
    """A method the app starts calling on its store must be declared in the protocol (and so be provided
    by the Ray facade, by the test above)."""
    used: dict[str, set[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP).as_posix()
        if not rel.startswith(NOT_THE_APP):
            for attr in _store_uses(path):
                used.setdefault(attr, set()).add(rel)
    # the scan sees the uses this fix is about (the lifespan's and the routes'): it is not vacuous
    assert {"clean_leftovers", "verify_all", "list", "get", "search", "add"} <= set(used), used
    undeclared = {attr: sorted(where) for attr, where in used.items() if attr not in MEMBERS}
    assert not undeclared, f"the app uses store members missing from GalleryStoreAPI: {undeclared}"
