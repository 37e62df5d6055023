"""Whom a body still arriving counts against (``max_body_reads_per_client``)."""

from __future__ import annotations

import pytest

from lnserve.app.http.client_identity import client_key


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("127.0.0.2", "127.0.0.2"),
        ("2001:db8::1", "2001:db8::/64"),  # one host's IPv6 block, not each of its addresses
        ("2001:db8::ffff:1", "2001:db8::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # an IPv4 client on a dual-stack socket
    ],
)
def test_client_key(host: str, key: str) -> None:
    assert client_key({"client": (host, 1234)}) == key


def test_no_client_address_is_one_key() -> None:
    assert client_key({"client": None}) == client_key({}) == ""
