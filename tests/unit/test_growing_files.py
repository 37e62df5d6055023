"""Tests read a server's log while the server writes it: a record cut at any byte is never parsed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.growing_files import complete_lines, json_records


def test_a_record_cut_anywhere_is_left_for_the_next_read(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    records = [{"ts": i, "msg": "request", "request_id": f"r{i}", "route": "/encode ü"} for i in range(3)]
    text = "".join("(ServeReplica pid=1) " + json.dumps(r) + "\n" for r in records).encode()
    for cut in range(len(text) + 1):  # the writer has written `cut` bytes so far
        log.write_bytes(text[:cut])
        whole = text[:cut].count(b"\n")
        assert json_records(log) == records[:whole], cut
        assert len(complete_lines(log)) == whole
