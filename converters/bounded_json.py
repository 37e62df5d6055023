"""JSON that someone else may have written (an artifact's ``manifest.json`` and ``vocab.json``, a gallery's
stored description and payloads, a payloads file, a settings value), parsed within bounds.

``json.loads`` recurses once per nesting level: 200,000 nested ``[`` raised ``RecursionError``, which no
caller expected (a reload answered 500, ``lnserve serve`` and ``lnserve info`` said "internal error"), and a
structure nested just under the interpreter's limit parsed, then broke whatever walked it next. A file is
read only if it is a regular file (never a FIFO that blocks or a device that never ends) and at most
``max_bytes`` long. Every refusal is a ``ValueError`` (``JsonBoundsError``), which the callers already turn
into their own clear error.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import JsonBoundsError

MAX_DEPTH = 32  # the project's own files nest 6 levels at most (manifest: files -> name -> sha256)
MANIFEST_MAX_BYTES = 4 << 20  # a manifest lists a few files and options: kilobytes
TABLE_MAX_BYTES = 256 << 20  # vocab.json / dictionary.json: a published dictionary is ~20 MB


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` whose value nests at most ``max_depth`` containers.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, bad UTF-8), or ``JsonBoundsError``.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonBoundsError(f"JSON nested deeper than {max_depth} levels") from None
    check_depth(value, max_depth)
    return value


def check_depth(value: Any, max_depth: int) -> None:
    """``JsonBoundsError`` if ``value`` (parsed JSON) nests more than ``max_depth`` lists and objects.
    Iterative: walking a hostile value must not recurse either."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > max_depth:
            raise JsonBoundsError(f"JSON nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def read_json_file(path: Path, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in the regular file ``path``, at most ``max_bytes`` long and ``max_depth`` deep.

    Raises:
        OSError: the file cannot be opened or read.
        ValueError: not JSON, or ``JsonBoundsError`` (not a regular file, too large, too deep).
    """
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JsonBoundsError(f"{Path(path).name} is not a regular file")
        os.set_blocking(fd, True)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JsonBoundsError(f"{Path(path).name} is larger than {max_bytes >> 10} KiB")
    return loads(data.decode("utf-8"), max_depth=max_depth)
