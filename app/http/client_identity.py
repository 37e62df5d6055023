"""Who a request comes from: the one place the app reads a request's client address.

The address is the TCP peer's, unless the peer is one of ``trusted_proxies``: only then has uvicorn's
``ProxyHeadersMiddleware`` (configured by ``server.uvicorn_config``; Ray Serve's proxy through
``FORWARDED_ALLOW_IPS``, set by ``scale.launch``) replaced it with the address the proxy put in
``X-Forwarded-For``. The app itself never reads a forwarded header: a client that sends one directly is
still its own address, so it cannot pass as many clients (the per-client body bound) nor write someone
else's address into the access log. ``tests/unit/app/http/test_client_identity.py`` checks that no other
module reads ``scope["client"]`` or a forwarded header.
"""

from __future__ import annotations

import ipaddress

from starlette.types import Scope


def client_host(scope: Scope) -> str | None:
    """The request's client address as the server established it (None: none, e.g. a test transport)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def client_key(scope: Scope) -> str:
    """Whom a request counts against: its client address; IPv6 addresses by their /64 (one host's block)."""
    host = client_host(scope) or ""
    if ":" not in host:  # IPv4 (or a unix socket's name): as is, without the cost of parsing it
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return host
