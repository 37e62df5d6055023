"""Reading a file that another process is still writing (a server's log): only its complete lines count.

A writer's last line may be cut anywhere until its newline arrives, so a parser that reads the whole text
can meet half a JSON record (a flake on loaded machines). Every test that reads such a file goes through
here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` that end in a newline; a last line without one is still being written."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    return text.split("\n")[:-1]


def json_records(path: Path, marker: str = '{"ts"') -> list[dict[str, Any]]:
    """The JSON log records among the complete lines, each read from ``marker`` on (Ray prefixes every line
    of a replica with its name)."""
    return [json.loads(line[line.index(marker) :]) for line in complete_lines(path) if marker in line]
