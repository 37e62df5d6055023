"""Rules stated once: each rule below has one definition in the source, which every caller uses.

A second copy (a route restating the store's rule, a test restating a formula) would drift; these checks
read the source, because behaviour alone cannot tell one definition from two identical ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import lnserve.app

APP = Path(lnserve.app.__file__).parent


def _sources() -> dict[str, str]:
    return {p.relative_to(APP).as_posix(): p.read_text(encoding="utf-8") for p in APP.rglob("*.py")}


def _where(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return sorted(name for name, text in _sources().items() if rx.search(text))


def test_the_image_query_rule_is_stated_once() -> None:
    assert _where(r"holds images: query it with captions") == ["galleries/rules.py"]
    assert _where(r"check_image_query\(info\)") == ["galleries/rules.py", "serving/retrieval.py"]


def test_random_item_ids_come_from_one_function() -> None:
    assert _where(r"uuid4\(\)\.hex for") == []  # no list of fresh ids outside new_item_id
    assert "galleries/rules.py" in _where(r"def new_item_id\(")
    assert "http/routes/galleries.py" in _where(r"new_item_id\(\)")


def test_the_gallery_name_pattern_is_defined_once() -> None:
    assert _where(r"\[A-Za-z0-9\]\[A-Za-z0-9\._-\]") == ["galleries/rules.py"]


def test_the_order_violation_formula_has_one_numpy_definition() -> None:
    """The kernels in runtime/retrieval.py are tuned restatements, tested against scoring.order_violation."""
    assert _where(r"def order_violation\(captions") == ["runtime/scoring.py"]
    assert _where(r"np\.maximum\(.*\*\* ?2") == []


def test_the_scoring_method_names_are_listed_once() -> None:
    import lnserve.models

    models = Path(lnserve.models.__file__).parent
    sources = {
        p.as_posix(): p.read_text(encoding="utf-8") for root in (APP, models) for p in root.rglob("*.py")
    }
    listed = sorted(p for p, text in sources.items() if re.search(r'\(\s*"order",\s*"cosine"\s*\)', text))
    assert [Path(p).name for p in listed] == ["methods.py"]


def test_sentences_reach_vectors_by_one_path() -> None:
    """``Engine.encode_sentences`` is ``encode`` less its counts, not a second copy of its steps."""
    engine = _sources()["runtime/engine.py"]
    assert len(re.findall(r"self\.token_ids\(sentences", engine)) == 1


def test_the_graph_cells_share_one_norm() -> None:
    assert _where(r"def norm\(self, g: GraphBuilder") == ["runtime/onnx_graph/norms.py"]


def test_files_named_to_the_cli_are_read_through_one_reader() -> None:
    """Every data file a command or an evaluation set names goes through ``lnserve.input_files`` (regular
    files only, bounded in size and per line): a direct read would take a FIFO, /dev/zero or one endless
    line. ``load_matrix`` hands numpy the descriptor ``open_regular`` checked."""
    direct = r"\.read_bytes\(|\.read_text\(|with open\(|\.open\([\"']r|np\.load\(|np\.fromfile\("
    readers = [name for name in _where(direct) if name.startswith(("commands/", "evaluation/"))]
    assert readers == ["commands/common.py"]
    assert _where(r"read_bounded\(") == ["commands/common.py", "evaluation/datasets.py"]
