"""Generated request ids: the shape they always had (32 lowercase hex characters), unique within a process,
and a forked child never repeats its parent's."""

from __future__ import annotations

import multiprocessing
import re
from multiprocessing.connection import Connection

from lnserve.app.http.request_ids import RequestIds, new_request_id


def test_ids_are_32_hex_characters_and_unique() -> None:
    ids = [new_request_id() for _ in range(100_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_each_process_draws_its_own_prefix() -> None:
    a, b = RequestIds(), RequestIds()
    assert a.next()[:16] != b.next()[:16]  # 64 random bits each


def _child_id(conn: Connection) -> None:
    conn.send(new_request_id())
    conn.close()


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    parent = new_request_id()
    receiving, sending = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_child_id, args=(sending,))
    child.start()
    got = receiving.recv()
    child.join(30)
    assert re.fullmatch(r"[0-9a-f]{32}", got)
    assert got[:16] != parent[:16]
